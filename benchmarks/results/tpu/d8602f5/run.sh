set -u
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=smoke
t0=$SECONDS
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
  --index-url file:///opt/pypi/simple --target /tmp/site flax optax tqdm keras pytest-timeout > /dev/null 2>&1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
echo "setup $((SECONDS-t0)) s" >> $OUT/steps.txt
cp .tpu/commit.txt $OUT/commit.txt
t=$SECONDS; timeout -s INT 230 python3 -m pytest tests/test_attention_tpu.py -o "addopts=-p no:cacheprovider" \
  -p no:warnings -m "not cpu" -k "not export" -q -rs --timeout 150 --durations=10 --junitxml $OUT/attention_tpu.xml > $OUT/attention_tpu.txt 2>&1; echo "attention_tpu rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -25 $OUT/attention_tpu.txt
t=$SECONDS; timeout -s INT 100 python3 .tpu/sweep.py 12 > $OUT/sweep.txt 2>&1; echo "sweep rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
tail -3 $OUT/steps.txt; grep -v "^{" $OUT/sweep.txt | tail -5

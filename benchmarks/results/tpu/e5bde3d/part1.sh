set -u
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=smoke
t0=$SECONDS
if [ ! -d /tmp/site/flax ]; then
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
  --index-url file:///opt/pypi/simple --target /tmp/site flax optax tqdm keras pytest-timeout > /dev/null 2>&1
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --target /tmp/site .whl-tpu/*.whl > /dev/null 2>&1
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
echo "setup $((SECONDS-t0)) s" >> $OUT/steps.txt
cp .tpu/commit.txt $OUT/commit.txt
t=$SECONDS; timeout -s INT 500 python3 -m pytest tests/test_attention_tpu.py tests/test_low_precision.py --tier tpu -o "addopts=-p no:cacheprovider" \
  -p no:warnings -q -rs --timeout 150 --durations=30 --junitxml $OUT/tier_part1.xml > $OUT/tier_part1.txt 2>&1; echo "tier part 1 rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -25 $OUT/tier_part1.txt

set -u
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=smoke
t0=$SECONDS
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
  --index-url file:///opt/pypi/simple --target /tmp/site flax optax tqdm keras pytest-timeout > /dev/null 2>&1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
echo "setup $((SECONDS-t0)) s" >> $OUT/steps.txt
cp .tpu/commit.txt $OUT/commit.txt
t=$SECONDS; timeout -s INT 380 python3 -m pytest tests/test_attention_tpu.py -o "addopts=-p no:cacheprovider" \
  -p no:warnings -m "not cpu" -q -rs --timeout 150 --durations=10 --junitxml $OUT/attention_tpu.xml > $OUT/attention_tpu.txt 2>&1; echo "attention_tpu rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -25 $OUT/attention_tpu.txt
# the second call, on the same machine: the export tests with flatbuffers installed
export PYTHONPATH=/tmp/site:$PWD; PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --target /tmp/site .whl-tpu/*.whl > /dev/null 2>&1; timeout 200 python3 -m pytest tests/test_attention_tpu.py -o "addopts=-p no:cacheprovider" -p no:warnings -m "not cpu" -q -k export --junitxml $OUT/attention_tpu_export.xml

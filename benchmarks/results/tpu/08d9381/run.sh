set -u
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=smoke
t0=$SECONDS
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
  --index-url file:///opt/pypi/simple --target /tmp/site flax optax tqdm keras pytest-timeout jaxtyping wadler-lindig > /dev/null 2>&1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
echo "setup $((SECONDS-t0)) s" >> $OUT/steps.txt
cp .tpu/commit.txt $OUT/commit.txt
t=$SECONDS; timeout -s INT 250 python3 -m benchmarks.packed_attention --out-dir $OUT --budget-s 190 > $OUT/packed.txt 2>&1; echo "packed rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
t=$SECONDS; timeout -s INT 150 python3 -m pytest -o "addopts=-p no:cacheprovider" -p no:warnings -m "not cpu" -q tests/test_attention_packing.py --junitxml=$OUT/packing_tests.xml > $OUT/packing_tests.txt 2>&1; echo "packing tests rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
t=$SECONDS; timeout -s INT 120 python3 .tpu/probe.py $OUT/heads_parts.json parts > $OUT/parts.txt 2>&1; echo "parts rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -4 $OUT/packed.txt; tail -5 $OUT/packing_tests.txt; tail -14 $OUT/parts.txt
# the second call: the implementations the first left out for time
export PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
t=$SECONDS; timeout -s INT 280 python3 -m benchmarks.packed_attention --out-dir $OUT --budget-s 230 --impls auto,route_256,route_512,route_1024,splash_dynamic_1024 > $OUT/packed.txt 2>&1; echo "packed rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -3 $OUT/packed.txt

set -u
export PYTHONUNBUFFERED=1
t0=$SECONDS
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
  --index-url file:///opt/pypi/simple --target /tmp/site flax optax tqdm keras pytest-timeout > /dev/null 2>&1
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --target /tmp/site .whl-tpu/*.whl > /dev/null 2>&1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
echo "setup $((SECONDS-t0)) s" >> $OUT/steps.txt
cp .tpu/commit.txt $OUT/commit.txt
t=$SECONDS; timeout -s INT 440 python3 -m benchmarks.routing_grid $OUT/grid_attention_seed11.json --ops attention --seed 11 --n 48 --budget 380 > $OUT/grid_attention_seed11.log 2>&1; echo "attention grid rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
t=$SECONDS; timeout -s INT 100 python3 -m benchmarks.routing_grid $OUT/grid_recurrent_seed11.json --ops recurrent --seed 11 --n 48 --budget 70 > $OUT/grid_recurrent_seed11.log 2>&1; echo "recurrent grid rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -3 $OUT/grid_attention_seed11.log $OUT/grid_recurrent_seed11.log

set -u
export PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
cp .tpu/commit.txt $OUT/commit.txt
t=$SECONDS; timeout -s INT 545 python3 -m benchmarks.routing_grid $OUT/grid_attention_seed11_again.json --ops attention --seed 11 --n 48 --budget 470 > $OUT/grid_attention_seed11_again.log 2>&1; echo "attention grid again rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -3 $OUT/grid_attention_seed11_again.log

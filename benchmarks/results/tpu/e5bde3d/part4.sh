set -u
export PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
cp .tpu/commit.txt $OUT/commit.txt
t=$SECONDS; timeout -s INT 470 python3 -m benchmarks.routing_grid $OUT/grid_recurrent_seed11_more.json --ops recurrent --seed 11 --n 48 --budget 400 > $OUT/grid_recurrent_seed11_more.log 2>&1; echo "recurrent grid rc $? $((SECONDS-t)) s" >> $OUT/steps.txt
cat $OUT/steps.txt; tail -3 $OUT/grid_recurrent_seed11_more.log

#!/usr/bin/env bash
# The GPU checks of portable_rnn's own cuDNN call (the cudnn_ffi route), in one run, each step
# bounded by a timeout (under 10 minutes in all; a step that runs out is reported and the rest
# go on):
#   build     compile and load the native library, print the versions and the device
#   compile   tests/test_native_build.py's real compile (the toolchain as found here)
#   gpu       pytest -m gpu tests/test_gpu_cudnn_ffi.py: the FFI custom calls in the compiled
#             HLO, agreement with the scan path
#   selftest  python -m portable_rnn selftest (every route, the cudnn_ffi rows included)
#   bench     benchmarks.gpu's torch family: PyTorch's cuDNN RNNs, the scan path and cudnn_ffi
# Run from anywhere: bash benchmarks/gpu_cudnn_ffi_check.sh. Logs, the self-test's JSON and the
# benchmark's JSON go to $OUT (default /tmp/cudnn_ffi_check); the library is cached there too.
# PYTHON picks the interpreter (default python3); the checkout is put on PYTHONPATH, so the
# interpreter needs jax with its CUDA plugin (jax[cuda12] or jax[cuda13]), flax, pytest,
# pytest-xdist and hypothesis, and torch for the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cudnn_ffi_check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PORTABLE_RNN_CACHE_DIR=$out/cache
failed=()

step() {  # step NAME SECONDS COMMAND...: runs it under a timeout, logs to $out/NAME.log
    local name=$1 limit=$2 rc
    shift 2
    echo "=== $name (limit ${limit} s): $*"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    tail -n 25 "$out/$name.log"
    echo "=== $name: exit $rc$( [ "$rc" -eq 124 ] && echo ' (timed out)')"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

step build 60 "$py" -c "
from portable_rnn._src.recurrent.routes.cudnn_ffi import call
b = call.backend()
print('built against cuDNN, loaded cuDNN, CUDA runtime:', b.versions())
print('device:', b.device())
import portable_rnn; print(portable_rnn.capabilities())"
step compile 45 "$py" -m pytest -q tests/test_native_build.py -k compiles -rs
step gpu 180 "$py" -m pytest -q -m gpu -s tests/test_gpu_cudnn_ffi.py -rs
step selftest 120 "$py" -m portable_rnn selftest --repeats 1 --json "$out/selftest.json"
step bench 150 "$py" -m benchmarks.gpu --only torch --torch-budget 100 --rounds 10 \
    --out "$out/gpu_torch.json"

echo "=== logs and JSON in $out"
if [ ${#failed[@]} -gt 0 ]; then
    echo "=== failed: ${failed[*]}"
    exit 1
fi
echo "=== every step passed"

#!/usr/bin/env bash
# Every check of portable_rnn on a TPU machine, each step under its own timeout:
#
#   benchmarks/tpu_check.sh [RESULTS_DIR] [STEPS]
#
# RESULTS_DIR (default benchmarks/results/tpu) receives, per step: doctor.txt (`python -m
# portable_rnn`), selftest.json/.txt, suite_tpu.xml/.txt and suite_cpu.xml/.txt (the test
# suite), example.txt/.json (a short bfloat16 run of the README's example), tpu_recurrent.json
# (bench: `python -m benchmarks.tpu`), tpu_attention_blocks.json (attention: `python -m
# benchmarks.tpu_attention --resume`), tpu_recurrent_kernel.json (kernel: `python -m
# benchmarks.tpu_recurrent_kernel --resume`; both resume: a second run in the same RESULTS_DIR
# measures the cases the first did not reach), then summary.md and summary.json. STEPS is a
# comma-separated subset of doctor,float32,selftest,suite,suite_tpu,suite_cpu,example,bench,
# attention,kernel (default: all but suite_tpu and suite_cpu, which `suite` runs at once).
# float32 measures the
# chip's float32 accuracy against float64 (benchmarks/float32_accuracy.py). Each step's
# time limit in seconds can be set as LIMIT_<STEP> (e.g. LIMIT_SUITE_TPU=300); EXAMPLE_STEPS
# (default 300) sets the example's training steps, and EXAMPLE_IMPLEMENTATIONS (default auto)
# the routes it runs under, one run each (e.g. "auto scan pallas": example_scan.json ...);
# ATTENTION_CASES (default core,shapes,memory) the attention benchmark's groups or cases.
# SUITE_TPU_TESTS (default: tests portable_rnn) narrows the TPU process to some test files, and
# SUITE_TPU_NAME (default suite_tpu) names its results, so that a suite longer than one command
# may run in parts (e.g. SUITE_TPU_NAME=suite_tpu_2 SUITE_TPU_TESTS="tests/test_[l-z]*.py"), or
# SUITE_TPU_RESUME=DIR leaves out the tests that the parts whose suite_tpu*.xml lie in DIR passed or
# skipped: each part then takes up where the last one stopped at its time limit, and reruns the
# tests that failed there. The TPU process reports each test on its own line (-vv), so that a
# process that aborts (XLA aborts on what a TPU lacks, e.g. complex128) still records what passed.
#
# RESULTS_ARCHIVE=FILE.tgz also packs RESULTS_DIR into one archive after every step (for a machine
# that hands back few files, or stops without warning).
#
# Set-up: the packages the machine's own index offers are installed into /tmp/site (appended to
# PYTHONPATH, so that the machine's JAX stays first), and wheels in .whl-tpu/ too, if present
# (what that index lacks: equinox, pytest-xdist and execnet, flatbuffers for jax.export's
# serialization; `pip download --no-deps -d .whl-tpu equinox==0.13.1 pytest-xdist execnet
# flatbuffers`). Without xdist both suite processes run one test at a time. A machine that kept
# /tmp/site from an earlier run skips the set-up.
#
# The suite runs as two processes at once: the TPU process runs every test not marked `cpu`
# (the chip can be held by one process only); a second process with JAX_PLATFORMS=cpu runs the
# tests marked `cpu` (the cuDNN emulation, the 8-device sharding tests, the package's own
# checks, the checks that are the same on every platform), which a TPU process would run on the
# host's CPU anyway. The TPU process compiles every test's programs for the chip: about 3 s a
# test on a TPU v5e, so its 450 tests take about 20 minutes (run them in parts). Both use the `smoke`
# hypothesis profile and skip the tests marked slow; a test running over 120 s fails.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-benchmarks/results/tpu}")
steps=",${2:-doctor,float32,selftest,suite,example,bench,attention,kernel},"
mkdir -p "$out"
# The commit checked: PORTABLE_RNN_COMMIT where the checkout travelled without its history.
echo "${PORTABLE_RNN_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null)}" > "$out/commit.txt"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=smoke

start=$SECONDS
if [ ! -d /tmp/site/flax ]; then
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
        --index-url file:///opt/pypi/simple --target /tmp/site \
        flax optax tqdm keras orbax-checkpoint matplotlib pytest-timeout jaxtyping wadler-lindig \
        > "$out/setup.txt" 2>&1
    if compgen -G ".whl-tpu/*.whl" > /dev/null; then
        PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
            --no-compile --upgrade --target /tmp/site .whl-tpu/*.whl >> "$out/setup.txt" 2>&1
    fi
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
echo "setup: $((SECONDS - start)) s" | tee -a "$out/setup.txt"

has() { [[ $steps == *",$1,"* ]]; }
timed() {  # timed NAME SECONDS COMMAND...: runs it, logs its status and time
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    timeout -s INT -k 15 "$limit" "$@"
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - t0)) s (limit $limit s)" | tee -a "$out/steps.txt"
    pack
}
pack() {  # RESULTS_ARCHIVE: the results so far as one .tgz, rewritten after every step
    if [ -n "${RESULTS_ARCHIVE:-}" ]; then
        tar czf "$RESULTS_ARCHIVE.part" -C "$out" . && mv "$RESULTS_ARCHIVE.part" "$RESULTS_ARCHIVE"
    fi
}
if [ -z "${SUITE_TPU_RESUME:-}" ]; then
    : > "$out/steps.txt"  # a resumed run appends to the steps of the parts before it
fi

if has doctor; then
    timed doctor "${LIMIT_DOCTOR:-120}" python3 -m portable_rnn > "$out/doctor.txt" 2>&1
fi
if has float32; then
    timed float32 "${LIMIT_FLOAT32:-60}" python3 -m benchmarks.float32_accuracy \
        "$out/float32_accuracy.json" > "$out/float32_accuracy.txt" 2>&1
fi
if has selftest; then
    timed selftest "${LIMIT_SELFTEST:-240}" python3 -m portable_rnn selftest \
        --json "$out/selftest.json" > "$out/selftest.txt" 2>&1
fi
pytest=(python3 -m pytest -o "addopts=--doctest-modules -p no:cacheprovider" -p no:warnings -q
        -rs --timeout 120 --durations 25)
if has suite || has suite_cpu; then
    workers=()
    if python3 -c "import xdist" 2> /dev/null; then
        workers=(-n 6 --dist loadfile)
    fi
    JAX_PLATFORMS=cpu timed suite_cpu "${LIMIT_SUITE_CPU:-560}" "${pytest[@]}" tests portable_rnn \
        "${workers[@]}" -m "cpu and not slow" --junitxml "$out/suite_cpu.xml" \
        > "$out/suite_cpu.txt" 2>&1 &
    cpu_suite=$!
fi
if has suite || has suite_tpu; then
    name=${SUITE_TPU_NAME:-suite_tpu}
    resume=()
    if [ -n "${SUITE_TPU_RESUME:-}" ]; then
        while read -r test; do [ -n "$test" ] && resume+=(--deselect "$test"); done \
            < <(python3 -m benchmarks.tpu_summary --done "$SUITE_TPU_RESUME")
    fi
    # shellcheck disable=SC2086
    timed "$name" "${LIMIT_SUITE_TPU:-560}" "${pytest[@]}" ${SUITE_TPU_TESTS:-tests portable_rnn} \
        "${resume[@]}" -m "not cpu and not slow" -vv --junitxml "$out/$name.xml" \
        > "$out/$name.txt" 2>&1
fi
if has suite || has suite_cpu; then
    wait "$cpu_suite"
fi
if has example; then
    for impl in ${EXAMPLE_IMPLEMENTATIONS:-auto}; do
        name=example arg=()
        if [ "$impl" != auto ]; then
            name=example_$impl arg=(--implementation "$impl")
        fi
        timed "$name" "${LIMIT_EXAMPLE:-240}" python3 examples/train_char_lstm.py \
            --steps "${EXAMPLE_STEPS:-300}" "${arg[@]}" --no-progress --out-dir "/tmp/char_$impl" \
            > "$out/$name.txt" 2>&1
        cp "/tmp/char_$impl/losses.json" "$out/$name.json" 2> /dev/null
    done
fi
if has bench; then
    timed bench "${LIMIT_BENCH:-420}" python3 -m benchmarks.tpu --out-dir "$out" > "$out/bench.txt" 2>&1
fi
if has attention; then
    timed attention "${LIMIT_ATTENTION:-300}" python3 -m benchmarks.tpu_attention --out-dir "$out" --resume \
        --only "${ATTENTION_CASES:-core,shapes,memory}" \
        --budget-s "$(( ${LIMIT_ATTENTION:-300} * 3 / 4 ))" >> "$out/attention.txt" 2>&1
fi
if has kernel; then
    timed kernel "${LIMIT_KERNEL:-240}" python3 -m benchmarks.tpu_recurrent_kernel "$out" --resume \
        --budget "$(( ${LIMIT_KERNEL:-240} * 3 / 4 ))" >> "$out/kernel.txt" 2>&1
fi
python3 -m benchmarks.tpu_summary "$out"
pack

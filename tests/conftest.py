"""Test configuration: fast-compiling XLA flags on CPU-only machines, 8 CPU devices, strict
dtype promotion, hypothesis profiles (`ci`, the default; `thorough`; `deeper`; `smoke`) and one
random seed per run, `gpu` and `cpu` markers.

On a machine whose default backend is an accelerator (a TPU), the suite runs there with two
adjustments (docs/development.md, "Running the suite on a TPU"):

- float32 matrix products run at ``jax_default_matmul_precision="highest"``: a TPU's default
  multiplies float32 operands in one bfloat16 pass (about 3 digits), and the float32 equivalence
  tests hold every path to float32 rounding;
- tests marked `cpu` run on the host's CPU devices (`jax.default_device`) at the default matmul
  precision, deciding their routes for a CPU: they are about the CPU's own behaviour, the
  test-only cuDNN emulation (which lowers for the CPU only), the 8 CPU devices of the sharding
  tests, or checks that are the same on every platform (argument checks, weight layouts,
  decisions for given capabilities, tracing counts).

Tiers (`tests/tiers.py`): each test is put in the ``default`` tier (the README's command) or the
``full`` tier (what CI adds), and the chip-specific ones are marked ``tpu`` too; ``--tier`` (or
``PORTABLE_RNN_TIER``) selects ``default``, ``full``, ``all`` or ``tpu``. Each test's tier is
also recorded in the JUnit XML report (property ``tier``), which the mutation runner reads.
"""

import gc
import importlib.metadata
import importlib.util
import itertools
import os
import secrets

import pytest
import tiers
from hypothesis import HealthCheck, settings


def _fast_compile_flags() -> list[str]:
    """XLA:CPU flags that make compiles faster, for the jaxlib installed (an unknown flag is
    fatal). The suite compiles thousands of small programs and runs each a few times: LLVM at
    level 0 and, on jaxlib 0.10, the fast-compile preset and the older non-MLIR fusion code
    generator cut the suite's time (jaxlib 0.10.2: 1094 s -> 686 s; jaxlib 0.12, level 0 only:
    662-726 s, where the preset measured slower over the whole suite) and change no result beyond
    float32 rounding. On jaxlib 0.10, one LLVM module per program instead of XLA's split into
    parallel parts (`--xla_cpu_parallel_codegen_split_count=1`) cut a compile-bound test's CPU
    time by 15-19% more (the same instructions, so the same results; measured on 2 shared cores;
    jaxlib 0.12 measured no difference). Benchmarks and library code keep XLA's defaults."""
    flags = ["--xla_backend_optimization_level=0"]
    major_minor = tuple(int(p) for p in importlib.metadata.version("jaxlib").split(".")[:2])
    if major_minor < (0, 11):
        flags += ["--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE",
                  "--xla_cpu_use_fusion_emitters=false",
                  "--xla_cpu_parallel_codegen_split_count=1"]
    return flags


# A user-set level wins; a machine with a CUDA plugin keeps XLA's defaults.
if ("--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")
        and not any(importlib.util.find_spec(f"jax_cuda{v}_plugin") for v in (12, 13))):
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *_fast_compile_flags()]
                                       ).strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")

ACCELERATOR = jax.default_backend() != "cpu"
if ACCELERATOR:
    jax.config.update("jax_default_matmul_precision", "highest")

# Examples are drawn at random from one seed per test run (see `_hypothesis_seed`), so every run
# draws new cases; the hard ones are pinned with `@example` next to each property. A failure
# prints the seed that replays the run and the failing example.
_COMMON = dict(deadline=None, derandomize=False, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=6, **_COMMON)
settings.register_profile("thorough", max_examples=200, **_COMMON)
# CI's deeper run of one property per run (`.ci/run`), beside its docs build and wheel check.
settings.register_profile("deeper", max_examples=60, **_COMMON)
# Every property a few times: CI's second leg (other Python and JAX versions), a quick local run.
settings.register_profile("smoke", max_examples=2, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_SEED_VAR = "PORTABLE_RNN_HYPOTHESIS_SEED"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    _hypothesis_seed(config)


def _hypothesis_seed(config):
    """One seed for every property of the run: `--hypothesis-seed` if given, else one drawn by
    the run's first process and handed to the xdist workers through the environment. It runs
    before Hypothesis's own pytest plugin reads the option."""
    seed = config.getoption("hypothesis_seed", None)
    if seed is None:
        seed = os.environ.get(_SEED_VAR) or str(secrets.randbelow(2**32))
        config.option.hypothesis_seed = seed
    os.environ[_SEED_VAR] = str(seed)


def pytest_report_header(config):
    seed = config.getoption("hypothesis_seed", None)
    return [f"hypothesis seed {seed} (replay this run's examples with --hypothesis-seed={seed})",
            f"test tier {_tier(config)} (--tier default, full, all or tpu: tests/tiers.py)"]


def pytest_addoption(parser):
    parser.addoption("--tier", choices=tiers.CHOICES, default=None,
                     help="the tests to run: default (the README's command), full (what CI adds), "
                          "all (both) or tpu (the chip-specific tests); default: "
                          f"${tiers.ENV}, else `default` for a run of the configured test paths "
                          "and `all` for a run of named files or tests (tests/tiers.py)")


def _tier(config) -> str:
    return tiers.chosen(config.getoption("tier", None),
                        config.args_source == pytest.Config.ArgsSource.TESTPATHS)


# XLA:CPU maps each compiled program's code into memory of its own (about 100 mappings for a
# recurrent layer's forward and backward at one shape), and JAX keeps every program it compiled
# while its caches hold it. A test process that compiles thousands of shapes (the properties
# draw new ones every run) reached Linux's limit of 65530 mappings per process
# (vm.max_map_count): "LLVM compilation error: Cannot allocate memory", then a crash in
# whichever test compiled next. Past this many mappings, the caches are cleared after a test
# (counted every `_COUNT_EVERY` tests: reading the list takes milliseconds at 20000).
_MAX_MAPPINGS = 20000
_COUNT_EVERY = 8
_tests_run = itertools.count(1)


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    yield
    if next(_tests_run) % _COUNT_EVERY:
        return
    try:
        with open(f"/proc/{os.getpid()}/maps", "rb") as f:
            mappings = sum(1 for _ in f)
    except OSError:  # not Linux
        return
    if mappings > _MAX_MAPPINGS:
        jax.clear_caches()
        gc.collect()


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def pytest_collection_modifyitems(config, items):
    _select_tier(config, items)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _select_tier(config, items):
    """Marks each test with its tier (`full` marker, `tpu` marker, JUnit property `tier`) and
    deselects the tests the run's tier leaves out."""
    tier = _tier(config)
    reps = tiers.representatives()
    own = tiers.own_files(reps)
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        item_tier, _ = tiers.tier_of(item.nodeid, params, item.get_closest_marker("slow")
                                     is not None, reps, own)
        path, _ = tiers.path_and_function(item.nodeid)
        tpu = path in tiers.TPU_FILES
        if item_tier == tiers.FULL:
            item.add_marker(pytest.mark.full)
        if tpu:
            item.add_marker(pytest.mark.tpu)
        item.user_properties.append(("tier", item_tier + (",tpu" if tpu else "")))
        selected = tiers.selected(tier, item_tier, tpu, item.get_closest_marker("cpu") is not None)
        (keep if selected else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _on_cpu_devices(request):
    """A test marked `cpu` runs on the host's CPU devices, at JAX's default matmul precision,
    and decides for a CPU, where the default backend is an accelerator."""
    if not ACCELERATOR or request.node.get_closest_marker("cpu") is None:
        yield
        return
    import portable_rnn

    with (jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision(None),
          portable_rnn.policy(capabilities=portable_rnn.Capabilities("cpu"))):
        yield

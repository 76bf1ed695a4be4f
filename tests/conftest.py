"""Test configuration: fast-compiling XLA flags on CPU-only machines, 8 CPU devices, strict
dtype promotion, hypothesis profiles (`ci`, the default; `thorough`; `smoke`), `gpu` marker."""

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings


def _fast_compile_flags() -> list[str]:
    """XLA:CPU flags that make compiles faster, for the jaxlib installed (an unknown flag is
    fatal). The suite compiles thousands of small programs and runs each a few times: LLVM at
    level 0 and, on jaxlib 0.10, the fast-compile preset and the older non-MLIR fusion code
    generator cut the suite's time (jaxlib 0.10.2: 1094 s -> 686 s; jaxlib 0.12, level 0 only:
    662-726 s, where the preset measured slower over the whole suite) and change no result beyond
    float32 rounding. Benchmarks and library code keep XLA's defaults."""
    flags = ["--xla_backend_optimization_level=0"]
    major_minor = tuple(int(p) for p in importlib.metadata.version("jaxlib").split(".")[:2])
    if major_minor < (0, 11):
        flags += ["--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE",
                  "--xla_cpu_use_fusion_emitters=false"]
    return flags


# A user-set level wins; a machine with a CUDA plugin keeps XLA's defaults.
if ("--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")
        and not any(importlib.util.find_spec(f"jax_cuda{v}_plugin") for v in (12, 13))):
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *_fast_compile_flags()]
                                       ).strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")

_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=6, **_COMMON)
settings.register_profile("thorough", max_examples=200, **_COMMON)
# Every property a few times: CI's second leg (other Python and JAX versions), a quick local run.
settings.register_profile("smoke", max_examples=2, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_CACHE_VAR = "PORTABLE_RNN_TEST_XLA_CACHE"


def pytest_configure(config):
    """A persistent compilation cache per test process for the run, in one temporary directory
    that the xdist workers inherit through the environment and the controller removes at the end.
    Many tests compile the same programs (the same layer at the same shapes under another
    wrapper); a cached executable is the one XLA compiled for the same program, flags and
    versions. One cache per worker: JAX writes its entries without a lock (its locking mode
    rescans the whole directory on every write), and a worker reading an entry another is still
    writing fails. With ``--dist loadfile`` (pyproject.toml), measured on jax 0.12: 358-372 s
    without a cache, 340 s with it, 320 s with both (a cache shared by the workers measured
    298-317 s, and raced). A cache directory the user configured is kept."""
    if jax.config.jax_compilation_cache_dir:
        return
    if not hasattr(config, "workerinput") and not os.environ.get(_CACHE_VAR):
        path = tempfile.mkdtemp(prefix="portable-rnn-xla-cache-")
        os.environ[_CACHE_VAR] = path
        config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))
    if os.environ.get(_CACHE_VAR):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        jax.config.update("jax_compilation_cache_dir", os.path.join(os.environ[_CACHE_VAR], worker))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

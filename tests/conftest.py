"""Test configuration: LLVM optimization level 0 on CPU-only machines, 8 CPU devices, strict
dtype promotion, hypothesis profiles (`ci`, the default; `thorough`; `smoke`), `gpu` marker."""

import importlib.util
import os

# The suite compiles thousands of small programs and runs each a few times: on a CPU-only
# machine, LLVM's optimizations at level 0 cut its time by a quarter (compiles take half as
# long) and change no result beyond float32 rounding. Benchmarks and user code keep XLA's
# defaults; a user-set level wins, and a machine with a CUDA plugin keeps the default.
if ("--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")
        and not any(importlib.util.find_spec(f"jax_cuda{v}_plugin") for v in (12, 13))):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")

_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=6, **_COMMON)
settings.register_profile("thorough", max_examples=200, **_COMMON)
# Every property a few times: CI's second leg (other Python and JAX versions), a quick local run.
settings.register_profile("smoke", max_examples=3, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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

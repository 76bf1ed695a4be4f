"""Test configuration: 8 CPU devices, strict dtype promotion, hypothesis profiles (`ci`, the
default; `thorough`; `smoke`), `gpu` marker."""

import os

import jax
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

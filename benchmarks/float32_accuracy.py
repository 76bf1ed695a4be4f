"""The default platform's float32 accuracy against float64 (NumPy on the host): elementwise
functions over 65536 values and 256x256 matrix products at each precision, as relative errors.

    python -m benchmarks.float32_accuracy [OUT.json]

Tests hold float32 results to float32 rounding where the platform computes to it, and to the
platform's floor (tests/references.py, FLOAT32_FLOOR) where its float32 functions are coarser.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

FUNCTIONS = {
    "tanh": (jnp.tanh, np.tanh),
    "sigmoid": (jax.nn.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    "exp": (jnp.exp, np.exp),
    "reciprocal": (lambda v: 1 / (v + 10), lambda v: 1 / (v + 10)),
    "log1p": (jnp.log1p, np.log1p),
}


def measure() -> dict:
    x = np.random.default_rng(0).normal(size=(1 << 16,)).astype(np.float32) * 3
    out = {"device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "functions": {},
           "matmul": {}}
    for name, (ours, reference) in FUNCTIONS.items():
        v = np.abs(x) if name == "log1p" else x
        got = np.asarray(jax.jit(ours)(v), np.float64)
        want = reference(v.astype(np.float64))
        out["functions"][name] = float(np.max(np.abs(got - want) / np.abs(want)))
    a = np.random.default_rng(1).normal(size=(256, 256)).astype(np.float32)
    want = a.astype(np.float64) @ a.astype(np.float64)
    for precision in ("default", "high", "highest"):
        got = np.asarray(jax.jit(lambda p, q, pr=precision: jnp.dot(p, q, precision=pr))(a, a))
        out["matmul"][precision] = float(np.max(np.abs(got - want)) / np.abs(want).max())
    return out


def main(argv: list[str]) -> int:
    result = measure()
    print(f"{result['device_kind']}, jax {result['jax']}: float32 relative error vs float64")
    for group in ("functions", "matmul"):
        for name, err in result[group].items():
            print(f"  {group[:-1] if group == 'functions' else 'matmul'} {name}: {err:.3g}")
    if argv:
        with open(argv[0], "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

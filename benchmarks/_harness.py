"""Interleaved timing: every implementation runs once per round, in rotating order."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable


def block(out):
    """Waits for JAX arrays (or anything with block_until_ready) inside `out`."""
    import jax

    return jax.block_until_ready(out)


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 2,
                min_seconds: float = 0.0) -> dict[str, dict[str, float]]:
    """Times each zero-argument callable `rounds` times, interleaved; returns ms statistics."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    start = time.perf_counter()
    r = 0
    while r < rounds or time.perf_counter() - start < min_seconds:
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - t0) * 1e3)
        r += 1
    out = {}
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
        out[name] = {"median_ms": statistics.median(ts), "p25_ms": q[0], "p75_ms": q[2],
                     "n": len(ts)}
    return out


def environment() -> dict:
    import jax

    env = {"python": platform.python_version(), "machine": platform.machine(),
           "cpu_count": os.cpu_count(), "jax": jax.__version__,
           "devices": [str(d) for d in jax.devices()],
           "device_kind": jax.devices()[0].device_kind, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    for mod in ("jaxlib", "flax", "numpy", "torch"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return env


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
    print(f"wrote {path}")

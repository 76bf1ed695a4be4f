"""Shared pieces: interleaved timing, agreement checks, rows, the environment record."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def block(out):
    """Waits for JAX arrays (or anything with block_until_ready) inside `out`."""
    import jax

    return jax.block_until_ready(out)


def cores() -> int:
    """CPU cores this process may run on (what XLA's thread pool uses)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def summary(ms: list[float]) -> dict[str, float]:
    """Median and quartiles of a list of milliseconds."""
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    return {"median_ms": statistics.median(ms), "p25_ms": q[0], "p75_ms": q[2], "n": len(ms)}


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 2,
                settle: int = 0) -> dict[str, dict[str, float]]:
    """Times each zero-argument callable `rounds` times: every one once per round, in an order
    that rotates from round to round, after `warmup` untimed calls each.

    `settle`: untimed calls of each callable right before its timed one, so that what ran before
    it does not land in its time (measured in the attention family: the chunked path timed
    right after a dense one, which had just freed its large buffers, read 1.2-1.9x the time of
    the same program timed elsewhere in the rotation).
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(settle):
                fns[name]()
            t0 = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: summary(ts) for name, ts in times.items()}


@dataclass
class Impl:
    """One implementation of a benchmark case: two timed callables and the agreement check."""

    fwd: Callable[[], object]
    fwd_bwd: Callable[[], object]
    check: Callable[[], dict]


def import_torch():
    """PyTorch using one thread per core, as XLA does, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(cores())
    return torch


class Mismatch(AssertionError):
    """An implementation computed something else than the reference: its timing is meaningless."""


def max_rel_err(got, ref) -> float:
    """max |got - ref| relative to max |ref| (or absolute where the reference is below 1)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        raise Mismatch(f"shape {got.shape}, expected {ref.shape}")
    return float(np.max(np.abs(got - ref), initial=0.0) / max(1.0, np.max(np.abs(ref),
                                                                          initial=0.0)))


def agreement(pairs: dict[str, tuple[object, object]], tol: float) -> dict[str, float]:
    """{name: error} for (got, ref) pairs; raises `Mismatch` if any is above `tol` or not finite."""
    errs = {name: max_rel_err(got, ref) for name, (got, ref) in pairs.items()}
    bad = {k: e for k, e in errs.items() if not np.isfinite(e) or e > tol}
    if bad:
        raise Mismatch(", ".join(f"{k}: error {e:.3g} > {tol:g}" for k, e in bad.items()))
    return {**errs, "tol": tol}


def measure(makers: dict[str, Callable[[], Impl]], baseline: str, rounds: int, warmup: int = 2,
            modes=("fwd", "fwd+bwd"), settle: int = 0) -> dict[str, dict]:
    """Builds and checks every implementation, then times the ones that agree (`interleaved`).

    `makers` maps a name to a function returning an `Impl`; building it, or its `check()`, raises
    (`Mismatch` or anything else) when it fails, and a failed implementation is reported in the
    rows and not timed. Returns {mode: row fields}.
    """
    impls, checks, failed = {}, {}, {}
    for name, make in makers.items():
        try:
            impls[name] = make()
            checks[name] = impls[name].check()
        except Exception as e:  # noqa: BLE001 - a failing peer is reported, not fatal
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(f"  FAILED {name}: {failed[name]}", flush=True)
    ok = [n for n in impls if n not in failed]
    rows = {}
    for mode in modes:
        attr = mode.replace("+", "_")
        stats = interleaved({n: getattr(impls[n], attr) for n in ok}, rounds, warmup, settle)
        add_ratios(stats, baseline, "median_ms")
        rows[mode] = {"metric": "median_ms", "baseline": baseline, "rounds": rounds,
                      "settle": settle,
                      "results": stats, "check": checks, "failed": failed}
    return rows


def add_ratios(results: dict[str, dict], baseline: str, metric: str) -> None:
    base = results.get(baseline, {}).get(metric)
    for r in results.values():
        r["ratio"] = r[metric] / base if base else None


def median(row: dict, name: str) -> float | None:
    """`name`'s median time in a timed row, or None where it did not run."""
    return row["results"].get(name, {}).get("median_ms")


def goal(target: str, row: dict, value: float | None, bound: float, at_least: bool) -> list:
    """One performance target checked on one row: ``[{"target", "case", "value", "met"}]``, or
    ``[]`` where the value could not be measured."""
    if value is None:
        return []
    return [{"target": target, "case": row["case"], "value": round(value, 3),
             "met": bool(value >= bound if at_least else value <= bound)}]


def dtype_goals(rows: list[dict], label: str, bound: float = 1.2) -> list:
    """The 16-bit target: ours (the baseline) in bfloat16 no slower than in float32 by more than
    `bound`, per case and mode; medians of the two rows."""
    float32 = {(r["case"], r["mode"]): r for r in rows if r["dtype"] == "float32"}
    out = []
    for row in rows:
        ref = float32.get((row["case"], row["mode"]))
        if row["dtype"] != "bfloat16" or ref is None:
            continue
        ours, base = median(row, row["baseline"]), median(ref, ref["baseline"])
        out += goal(f"{label} {row['mode']}: bfloat16 time / float32 time <= {bound}", row,
                    ours / base if ours and base else None, bound, at_least=False)
    return out


def bfloat16_goals(rows: list[dict], label: str, speedup: float = 1.3, torch: float = 1.2,
                   min_batch: int = 8) -> list:
    """The bfloat16 targets, fwd+bwd: ours in bfloat16 faster than ours in float32 at every shape
    (by `speedup` from batch `min_batch`), and within `torch` of PyTorch's bfloat16 time."""
    float32 = {r["case"]: r for r in rows if r["dtype"] == "float32" and r["mode"] == "fwd+bwd"}
    out = []
    for row in rows:
        ref = float32.get(row["case"])
        if row["dtype"] != "bfloat16" or row["mode"] != "fwd+bwd" or ref is None:
            continue
        ours, base = median(row, row["baseline"]), median(ref, ref["baseline"])
        bound = speedup if row["params"]["B"] >= min_batch else 1.0
        out += goal(f"{label} fwd+bwd: float32 time / bfloat16 time >= {bound}", row,
                    base / ours if ours and base else None, bound, at_least=True)
        theirs = median(row, "torch")
        out += goal(f"{label} bfloat16 fwd+bwd: ours / PyTorch's time <= {torch}", row,
                    ours / theirs if ours and theirs else None, torch, at_least=False)
    return out


# bfloat16 matrix peak per chip, TFLOP/s (device_kind as JAX names it)
PEAK_TFLOPS = {"TPU v5 lite": 197.0, "TPU v5e": 197.0, "TPU v4": 275.0, "TPU v6 lite": 918.0}


def peak_tflops() -> float | None:
    import jax

    return PEAK_TFLOPS.get(jax.devices()[0].device_kind)


def add_peak_share(row: dict, flops: float) -> None:
    """Each result's share of the chip's bfloat16 peak: the products' flops over its median
    time (None off a chip in `PEAK_TFLOPS`)."""
    peak = peak_tflops()
    row["flops"] = flops
    for r in row["results"].values():
        r["tflops"] = flops / (r["median_ms"] * 1e-3) / 1e12
        r["peak_share"] = r["tflops"] / peak if peak else None


def print_row(family: str, row: dict) -> None:
    unit = "ms" if row["metric"].endswith("_ms") else "MiB"
    print(f"{family} | {row['panel']} | {row['case']}: " + "  ".join(
        f"{k}={r[row['metric']]:.4g}{unit}" + (f"(x{r['ratio']:.2f})" if r["ratio"] else "")
        for k, r in row["results"].items()), flush=True)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def environment() -> dict:
    import jax

    env = {"python": platform.python_version(), "machine": platform.machine(),
           "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "cores": cores(),
           "jax_backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
           "device_kind": jax.devices()[0].device_kind,
           "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           # load over the last 1, 5 and 15 minutes, this run included: a busy machine skews
           # the timings (PyTorch's spinning OpenMP threads most)
           "load_average": [round(v, 2) for v in os.getloadavg()],
           "threads": {k: os.environ[k] for k in ("XLA_FLAGS", "OMP_NUM_THREADS",
                                                    "MKL_NUM_THREADS") if k in os.environ}}
    for dist in ("jax", "jaxlib", "flax", "numpy", "torch", "keras", "matplotlib"):
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    if (torch := sys.modules.get("torch")) is not None:  # imported by a benchmark
        env["threads"]["torch"] = torch.get_num_threads()
        env["threads"]["torch_interop"] = torch.get_num_interop_threads()
    return env


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)
    print(f"wrote {path}")


def case_command(doc: str, argv, names: str, cases: list, quick: list, divides=None):
    """The command line of a benchmark of cases of positive integers `names` (``"B,T,I,H"``):
    ``OUT.json [--quick] [--cases ...] [--rounds N]``. Returns (out, cases, rounds): `quick`
    with ``--quick`` (3 rounds), else `cases` (15 rounds) unless given. `divides`, a pair of
    names, asks that the first divide the second."""
    fields = names.split(",")

    def case(text: str) -> tuple[int, ...]:
        values = tuple(int(v) for v in text.split(","))
        ok = len(values) == len(fields) and min(values) >= 1
        if ok and divides:
            named = dict(zip(fields, values))
            ok = named[divides[1]] % named[divides[0]] == 0
        if not ok:
            rule = f", {divides[0]} dividing {divides[1]}" if divides else ""
            raise argparse.ArgumentTypeError(
                f"a case is {names} ({len(fields)} positive integers{rule}); got {text!r}")
        return values

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (any backend)")
    parser.add_argument("--cases", type=case, nargs="+", help=f"{names} per case")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    chosen = args.cases or (quick if args.quick else cases)
    return args.out, chosen, args.rounds or (3 if args.quick else 15)

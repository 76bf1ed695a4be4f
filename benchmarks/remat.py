"""Segment checkpointing (``remat_every``) of an LSTM's training step: peak memory and time,
with segments against without.

    python -m benchmarks.remat OUT_DIR           # a CPU: memory at T 16384, time at T 256
    python -m benchmarks.remat OUT_DIR --tpu     # a TPU: memory at T 65536, time at T 16384
                                                 # and T 65536 (under 4 minutes on a v5e)
    python -m benchmarks.remat OUT_DIR --quick   # tiny shapes, any backend (a smoke run)

The step is the gradient (``jax.grad``) of ``mean(y**2)`` (in float32) with respect to a
one-layer LSTM's weights, B8 I256 H1024 in bfloat16 (``portable_rnn.lstm``, the automatic
route: the scan path on a CPU, the Pallas kernel on a TPU), under `jax.jit`. (With
``jax.value_and_grad`` XLA:CPU keeps a float32 copy of ``y`` for the loss's value besides its
gradient: 512 MiB more at T 16384, with segments or without.) ``full`` keeps every step's residuals
(``policy(recurrent_memory_fraction=inf)``: no segments whatever the size); ``segments``
checkpoints every k steps, k the automatic choice's (`api.automatic_segment_length`: the longest
segments whose residuals take at most `api.SEGMENT_SHARE` of the memory budget, and at least
about sqrt(T) steps); where the residuals fit the budget (no segments), the length it takes
where they just exceed it (the budget taken as the residuals). ``--sweep
K,K,...`` times other segment lengths beside it, and the forward alone (``forward``): a step
with segments runs the forward once more, so 1 + forward / full is the least time it can take
over the step without, whatever k.

Memory is what XLA reports for the compiled step (``compiled.memory_analysis()``: temporaries,
arguments and outputs; their sum is the peak the step needs); a program that does not compile
(a TPU's out of memory) is recorded with its error and the estimated residuals of every step
(`driver.stash_bytes`, as the automatic choice estimates them). Time: medians of interleaved
rounds of the compiled steps (`_harness.interleaved`), where both fit; the ratio segments /
full. Targets: peak memory with segments at most 1/8 of the peak without, time at most 1.35x.
Writes ``remat.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._src.core import dispatch
from portable_rnn._src.core.capabilities import capabilities, device_memory
from portable_rnn._src.recurrent.api import automatic_segment_length
from portable_rnn._src.recurrent.driver import stash_bytes
from portable_rnn._src.recurrent.lstm.cell import LSTMCell

from ._harness import add_ratios, environment, goal, interleaved, write_json

SHAPE = (8, 256, 1024)  # B, I, H
QUICK = (2, 8, 16)
# (T of the memory figures, T of the timed steps) per mode
STEPS = {"cpu": (16384, (256,)), "tpu": (65536, (16384, 65536)), "quick": (512, (64,))}
MEMORY_TARGET = 1 / 8
TIME_TARGET = 1.35


def _step(B, T, I, H, every, dtype, grad=True):
    """The jitted training step and its arguments; `every` None: no segments at all. Without
    `grad`, the loss alone (the forward)."""
    z = jnp.zeros((1, B, H), dtype)

    def loss(w, x):
        y, _, _ = portable_rnn.lstm(x, z, z, w, None, I, H, 1, 0.0, False, remat_every=every)
        return jnp.mean(jnp.square(y.astype(jnp.float32)))

    w = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, 1, False)
    x = jax.random.normal(jax.random.key(1), (B, T, I), dtype)
    return jax.jit(jax.grad(loss) if grad else loss), (w, x)


def _policy(every):
    return (portable_rnn.policy(recurrent_memory_fraction=float("inf")) if every is None
            else contextlib.nullcontext())


def _compiled(B, T, I, H, every, dtype, grad=True):
    """(compiled step or None, its arguments, memory row)."""
    with _policy(every):
        step, args = _step(B, T, I, H, every, dtype, grad)
        t0 = time.perf_counter()
        try:
            compiled = step.lower(*args).compile()
        except Exception as e:  # noqa: BLE001 - a program that does not fit is recorded
            return None, args, {"error": f"{type(e).__name__}: {str(e)[:500]}",
                                "compile_s": time.perf_counter() - t0}
    m = compiled.memory_analysis()
    parts = {k: int(getattr(m, f"{k}_size_in_bytes")) for k in ("temp", "argument", "output")}
    return compiled, args, {**parts, "peak": sum(parts.values()),
                            "compile_s": time.perf_counter() - t0}


def _decision(B, T, I, H, every, dtype):
    S = jax.ShapeDtypeStruct
    n = portable_rnn.get_num_params_in_lstm(I, H, 1, False)
    with _policy(every):
        d = portable_rnn.explain_lstm(S((B, T, I), dtype), S((1, B, H), dtype),
                                      S((1, B, H), dtype), S((n,), jnp.float32), None, I, H, 1,
                                      0.0, False, remat_every=every)
    return {"route": d.implementation, "notes": list(d.notes)}


def _memory_limit() -> int | None:
    """The default device's memory as it reports it (None where it does not): a step whose peak
    exceeds it is not run."""
    try:
        return (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        return None


def estimate(B, T, I, H, dtype) -> int:
    """The estimated residuals of every step (what the automatic choice compares)."""
    stack = (np.dtype(np.float32) if jax.default_backend() == "cpu"
             and np.dtype(dtype).itemsize == 2 else None)
    return stash_bytes(LSTMCell(), I, H, 0, 1, dtype, stack) * B * T


def run(out_dir: str, mode: str, rounds: int, sweep=()) -> dict:
    start = time.perf_counter()
    B, I, H = QUICK if mode == "quick" else SHAPE
    dtype = jnp.dtype(jnp.bfloat16)
    t_memory, t_times = STEPS[mode]
    rows, goals = [], []
    compiled = {}
    for T in sorted({t_memory, *t_times}):
        stash = estimate(B, T, I, H, dtype)
        k = automatic_segment_length(T, stash // T, min(
            stash, dispatch.MEMORY_FRACTION * device_memory(capabilities())[0]))
        row = {"case": f"B{B} T{T} I{I} H{H} bfloat16", "T": T, "segment_length": k,
               "estimated_residuals": stash, "memory": {}}
        variants = [("full", None), ("segments", k)] + [
            (f"segments_{j}", j) for j in sweep if j != k]
        for name, every in variants:
            exe, args, mem = _compiled(B, T, I, H, every, dtype)
            row["memory"][name] = {**mem, **_decision(B, T, I, H, every, dtype)}
            compiled[(T, name)] = (exe, args)
            print(f"remat | {row['case']} {name}: " + (
                f"peak {mem['peak'] / 2**20:.1f} MiB (temp {mem['temp'] / 2**20:.1f})"
                if "peak" in mem else mem["error"][:200]), flush=True)
        full, seg = row["memory"]["full"], row["memory"]["segments"]
        if "peak" in seg:
            base = full.get("peak")
            row["memory_ratio"] = seg["peak"] / base if base else None
            row["memory_ratio_vs_estimate"] = (
                seg["peak"] / (row["estimated_residuals"] + seg["argument"] + seg["output"])
                if base is None else None)
            for name, _ in variants[2:]:
                if base and "peak" in row["memory"][name]:
                    row["memory"][name]["ratio"] = row["memory"][name]["peak"] / base
            if base:
                goals += goal(f"peak memory with segments / without <= 1/{1 / MEMORY_TARGET:g}",
                              row, row["memory_ratio"], MEMORY_TARGET, at_least=False)
        if T in t_times:
            limit = _memory_limit()
            compiled[(T, "forward")] = _compiled(B, T, I, H, None, dtype, grad=False)[:2]
            fns = {name: (lambda exe=exe, args=args: jax.block_until_ready(exe(*args)))
                   for name in [n for n, _ in variants] + ["forward"]
                   for exe, args in [compiled[(T, name)]] if exe is not None
                   and (name == "forward" or limit is None
                        or row["memory"][name]["peak"] <= limit)}
            try:
                stats = interleaved(fns, rounds, warmup=1)
            except Exception as e:  # noqa: BLE001 - a step that does not run is recorded
                row["time_error"] = f"{type(e).__name__}: {str(e)[:500]}"
                stats = {}
            if stats:
                add_ratios(stats, "full", "median_ms")
                row["time"] = stats
                if "full" in stats and "forward" in stats:
                    row["time_floor"] = 1 + stats["forward"]["median_ms"] / stats["full"][
                        "median_ms"]
                if "full" in stats:
                    goals += goal(f"time with segments / without <= {TIME_TARGET}", row,
                                  stats["segments"]["ratio"], TIME_TARGET, at_least=False)
                print(f"remat | {row['case']} time: " + "  ".join(
                    f"{n}={r['median_ms']:.4g}ms" + (f"(x{r['ratio']:.2f})" if r.get("ratio")
                                                      else "")
                    for n, r in stats.items()), flush=True)
        rows.append(row)
        _write(out_dir, mode, rows, goals, start)
    return _write(out_dir, mode, rows, goals, start)


def _write(out_dir, mode, rows, goals, start) -> dict:
    payload = {"family": "remat", "mode": mode, "environment": environment(), "rows": rows,
               "goals": goals, "seconds": time.perf_counter() - start}
    write_json(os.path.join(out_dir, "remat.json"), payload)
    return payload


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="where remat.json goes")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="tiny shapes (any backend)")
    group.add_argument("--tpu", action="store_true",
                       help="the TPU's figures: memory at T 65536, time at T 16384 and 65536")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed rounds (default 3)")
    parser.add_argument("--sweep", default="",
                        help="other segment lengths to measure beside the automatic one "
                             "(comma-separated)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "tpu" if args.tpu else "cpu"
    if mode == "tpu" and jax.default_backend() != "tpu":
        parser.error(f"--tpu needs a TPU; the default backend is {jax.default_backend()}")
    sweep = tuple(int(k) for k in args.sweep.split(",") if k)
    run(args.out_dir, mode, args.rounds or 3, sweep)


if __name__ == "__main__":
    main()

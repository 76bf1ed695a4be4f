"""The LSTM before and after the generic recurrent driver, interleaved in one process.

    python -m benchmarks.lstm_driver              # writes benchmarks/results/lstm_driver.json
    python -m benchmarks.lstm_driver --quick --out /tmp/lstm_driver.json

old: `lstm_scan`, the pure-JAX LSTM as it was before commit 0417cad, in a frozen copy
(`benchmarks/_lstm_scan_pre_driver.py`). new: `rnn_scan(LSTMCell(), ...)`, what
`portable_rnn.lstm(..., implementation="scan")` runs now. Both get the matmul dtype the public
function picks on this machine (float32 operands for bfloat16 inputs on a CPU).

Every case first compares the two: outputs (y, h_n, c_n) and the gradients of all three in x, the
weights, h_0 and c_0 (random initial states and cotangents), and that `portable_rnn.lstm(...,
implementation="scan")` returns new's y. At the driver's commit all of them were bit-identical. The
LSTM's backward step has since been rewritten (the forward step computes its gradient-independent
factors, which changes how XLA fuses the step under a gradient): all of them must now agree within
the LSTM benchmark's tolerance (measured: within 2e-7 relative). Then both are timed under jit,
forward (y) and forward+backward (the gradient of a scalar loss of y in x and the weights, as
`benchmarks/lstm.py`), every case of `benchmarks/lstm.py` once unidirectional and once
bidirectional, float32 and bfloat16. The ratio is new / old (lower: the driver is faster). The exit
status is 1 when a case disagrees.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._cell_lstm import LSTMCell
from portable_rnn._recurrent import scan_matmul_dtype
from portable_rnn._rnn_scan import rnn_scan

from . import lstm, report
from ._harness import Impl, block, environment, max_rel_err, measure, print_row, write_json
from ._lstm_scan_pre_driver import lstm_scan

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "lstm_driver.json")
BASELINE = "old"


def cases(quick: bool) -> list[lstm.Case]:
    """The LSTM benchmark's cases, each unidirectional and bidirectional."""
    out = []
    for case in lstm.QUICK_CASES if quick else lstm.CASES:
        for bidir in (False, True):
            if (c := case._replace(bidirectional=bidir)) not in out:
                out.append(c)
    return out


def old(x, h0, c0, w, seq, case, mm_dtype):
    B, T, I, H, L, bidir, _ = case
    return lstm_scan(x, h0, c0, w, seq, I, H, L, 0.0, bidir, None, None, matmul_dtype=mm_dtype)


def new(x, h0, c0, w, seq, case, mm_dtype):
    B, T, I, H, L, bidir, _ = case
    y, (h, c) = rnn_scan(LSTMCell(), x, (h0, c0), w, seq, I, H, L, 0.0, bidir, None, None,
                         matmul_dtype=mm_dtype)
    return y, h, c


def inputs(case: lstm.Case, dtype):
    """x, weights, lengths, the valid mask and y's cotangent, drawn as `lstm.problem` does."""
    B, T, I, H, L, bidir, ragged = case
    D = 2 if bidir else 1
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((B, T, I), np.float32)).astype(dtype)
    n = portable_rnn.get_num_params_in_lstm(I, H, L, bidir)
    w = jnp.asarray(rng.uniform(-H ** -0.5, H ** -0.5, n).astype(np.float32)).astype(dtype)
    lengths = np.full((B,), T, np.int32)
    if ragged:
        lengths = rng.integers(T // 4, T + 1, B).astype(np.int32)
        lengths[0] = T
    valid = jnp.asarray(np.arange(T)[None, :, None] < lengths[:, None, None])
    ct = jnp.asarray(np.where(np.asarray(valid), rng.standard_normal((B, T, D * H)), 0)
                     .astype(np.float32))
    state = [jnp.asarray(rng.standard_normal((L * D, B, H), np.float32)).astype(dtype)
             for _ in range(2)]
    cts = [jnp.asarray(rng.standard_normal(s.shape, np.float32)) for s in state]
    return x, w.astype(jnp.float32), jnp.asarray(lengths) if ragged else None, valid, ct, \
        state, cts


def identical(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    return got.shape == want.shape and got.dtype == want.dtype and \
        got.tobytes() == want.tobytes()


def check(case, dtype, mm_dtype) -> dict:
    """Old against new: outputs and all gradients (random cotangents), bit for bit and within
    tolerance."""
    x, w, seq, _, ct, (h0, c0), (ct_h, ct_c) = inputs(case, dtype)
    ct_y = ct.astype(dtype)
    results = {}
    for name, fn in (("old", old), ("new", new)):
        @jax.jit
        def vjp(x, h0, c0, w, fn=fn):
            outs, pullback = jax.vjp(lambda *a: fn(*a, seq, case, mm_dtype), x, h0, c0, w)
            cts = (ct_y, ct_h.astype(outs[1].dtype), ct_c.astype(outs[2].dtype))
            return outs, pullback(cts)

        results[name] = vjp(x, h0, c0, w)
    names = ("y", "h_n", "c_n", "dx", "dh_0", "dc_0", "dweights")
    old_arrays = [*results["old"][0], *results["old"][1]]
    new_arrays = [*results["new"][0], *results["new"][1]]
    same = {n: identical(a, b) for n, a, b in zip(names, new_arrays, old_arrays)}
    err = {n: max_rel_err(a, b) for n, a, b in zip(names, new_arrays, old_arrays)}
    B, T, I, H, L, bidir, _ = case
    public = portable_rnn.lstm(x, h0, c0, w, seq, I, H, L, 0.0, bidir, implementation="scan")
    same["public_y"] = identical(public[0], new_arrays[0])
    err["public_y"] = max_rel_err(public[0], new_arrays[0])
    agrees = max(err.values()) <= lstm.TOL[dtype.name]
    return {"bit_identical": all(same.values()), "agrees": agrees, "identical": same,
            "max_rel_err": err}


def impls(case, dtype, mm_dtype, verdict: dict) -> dict:
    x, w, seq, valid, ct, _, _ = inputs(case, dtype)
    D, L, B, H = (2 if case.bidirectional else 1), case.L, case.B, case.H
    z = jnp.zeros((L * D, B, H), dtype)

    def make(fn):
        def apply(x, w):
            return fn(x, z, z, w, seq, case, mm_dtype)[0]

        def loss(x, w):
            return jnp.sum(jnp.where(valid, apply(x, w).astype(jnp.float32), 0) * ct)

        fwd, grad = jax.jit(apply), jax.jit(jax.grad(loss, (0, 1)))
        return lambda: Impl(fwd=lambda: block(fwd(x, w)), fwd_bwd=lambda: block(grad(x, w)),
                            check=lambda: verdict)

    return {"old": make(old), "new": make(new)}


def run(quick: bool, rounds: int | None) -> dict:
    rounds = rounds or (3 if quick else 15)
    rows, checks = [], []
    for case in cases(quick):
        for dtype in ("float32",) if quick else ("float32", "bfloat16"):
            dtype = jnp.dtype(dtype)
            mm_dtype = scan_matmul_dtype(dtype, portable_rnn.capabilities())
            print(f"lstm_driver {case.label} {dtype}", flush=True)
            verdict = check(case, dtype, mm_dtype)
            checks.append({"case": case.label, "dtype": dtype.name, **verdict})
            if not verdict["agrees"]:
                print(f"  DISAGREE: {verdict}", flush=True)
                continue  # a different function: its timing would mean nothing
            for mode, row in measure(impls(case, dtype, mm_dtype, verdict), BASELINE,
                                     rounds).items():
                rows.append({"panel": f"{dtype.name}, {mode}", "case": case.label,
                             "dtype": dtype.name, "mode": mode, "params": case._asdict(),
                             "skipped": {}, **row})
                print_row("lstm_driver", rows[-1])
    return {"family": "lstm_driver", "title": "LSTM: lstm_scan (before) vs rnn_scan (after)",
            "rows": rows, "bit_identical": all(c["bit_identical"] for c in checks),
            "agrees": all(c["agrees"] for c in checks),
            "checks": checks,
            "about": "old: the pre-driver lstm_scan (frozen copy of 909a30f, "
                     "benchmarks/_lstm_scan_pre_driver.py); new: rnn_scan(LSTMCell()), what "
                     "portable_rnn.lstm(implementation='scan') runs. Under jit, interleaved; "
                     "ratio = new / old. Checked first: outputs and gradients within the LSTM "
                     "benchmark's tolerance (bit-identical at the driver's commit)."}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lstm_driver",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small case, few rounds")
    p.add_argument("--rounds", type=int, help="timed rounds per case (default 15, quick 3)")
    p.add_argument("--out", help=f"the JSON file (default {os.path.relpath(OUT)}; --quick: "
                                 "results/quick/lstm_driver.json)")
    args = p.parse_args(argv)
    out = args.out or (os.path.join(HERE, "results", "quick", "lstm_driver.json") if args.quick
                       else OUT)
    start = time.perf_counter()
    payload = run(args.quick, args.rounds)
    payload.update(quick=args.quick, environment=environment(),
                   seconds=round(time.perf_counter() - start, 1))
    write_json(out, payload)
    for rows in report.panels(payload["rows"]).values():
        print("\n".join(report.table(rows)) + "\n")
    if not payload["agrees"]:
        print("FAILED: old and new disagree (see 'checks')", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

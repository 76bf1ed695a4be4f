"""portable_rnn on a TPU: the recurrent family against Flax.

    python -m benchmarks.tpu --out-dir benchmarks/results/tpu        # on a TPU (a few minutes)
    python -m benchmarks.tpu --quick --out-dir /tmp/tpu               # a smoke run, any backend

Recurrent (`tpu_recurrent.json`): `portable_rnn.lstm` and `gru` (automatic route) against Flax's
`nn.RNN(nn.OptimizedLSTMCell)` and `nn.RNN(nn.GRUCell)` on the same weights, forward and
forward+backward under jit, bfloat16 and float32, each checked against a float32 step loop at
the highest precision first (`benchmarks/lstm.py`, `benchmarks/recurrent.py`, whose problems and
peers this reuses). Every timed row gives the median of interleaved rounds, the ratio to
portable_rnn's, and the share of the chip's bfloat16 peak (`_harness.PEAK_TFLOPS`) that its
matrix products' arithmetic reaches. Attention on a TPU: `benchmarks/tpu_attention.py`; the
Pallas recurrent kernel: `benchmarks/tpu_recurrent_kernel.py`.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import flax.linen as nn
import jax.numpy as jnp

from . import lstm, recurrent
from ._harness import add_peak_share, environment, measure, peak_tflops, print_row, write_json

HERE = os.path.dirname(os.path.abspath(__file__))

# (cell, case): the shapes people train, latency-bound (B <= 128) and large
C = lstm.Case
RECURRENT = [("lstm", C(32, 128, 256, 256, 1)), ("lstm", C(128, 256, 512, 512, 1)),
             ("lstm", C(256, 512, 1024, 1024, 1)), ("lstm", C(16, 1024, 128, 512, 1)),
             ("lstm", C(32, 512, 256, 1024, 1)), ("lstm", C(8, 1024, 256, 256, 1)),
             ("gru", C(128, 256, 512, 512, 1)), ("gru", C(16, 1024, 128, 512, 1)),
             ("gru", C(32, 512, 256, 1024, 1))]
FLOAT32 = {lstm.Case(32, 128, 256, 256, 1), lstm.Case(128, 256, 512, 512, 1)}
QUICK_RECURRENT = [("lstm", lstm.Case(4, 16, 8, 16, 1)), ("gru", lstm.Case(4, 16, 8, 16, 1))]


def recurrent_flops(cell: str, case: lstm.Case, mode: str) -> float:
    """Matrix products of a layer stack: per step ``2 B G H (I + H)``; the backward does two
    products for each of the forward's (input and weight gradients)."""
    B, T, I, H, L, bidir, _ = case
    G = {"lstm": 4, "gru": 3}[cell]
    D = 2 if bidir else 1
    per_layer = [2 * B * T * G * H * ((I if layer == 0 else D * H) + H) * D
                 for layer in range(L)]
    return sum(per_layer) * (3 if mode == "fwd+bwd" else 1)


def recurrent_rows(quick: bool, rounds: int) -> list[dict]:
    rows = []
    for cell, case in QUICK_RECURRENT if quick else RECURRENT:
        for dtype in ("bfloat16", "float32") if quick or case in FLOAT32 else ("bfloat16",):
            if cell == "lstm":
                p = lstm.problem(case, jnp.dtype(dtype))
                makers = {"portable_rnn": partial(lstm.ours, p),
                          "flax": partial(lstm.flax(nn.OptimizedLSTMCell), p)}
            else:
                p = recurrent.problem(recurrent.CELLS[cell], case, jnp.dtype(dtype))
                makers = {"portable_rnn": partial(recurrent.ours, p),
                          "flax": partial(recurrent.flax, p)}
            print(f"tpu_recurrent {cell} {case.label} {dtype}", flush=True)
            for mode, row in measure(makers, "portable_rnn", rounds).items():
                row.update(panel=f"{cell} {dtype}, {mode}", case=case.label, cell=cell,
                           dtype=dtype, mode=mode, params=case._asdict(), skipped={})
                add_peak_share(row, recurrent_flops(cell, case, mode))
                rows.append(row)
                print_row("tpu_recurrent", row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tpu",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny shapes, any backend")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "tpu"))
    args = p.parse_args(argv)
    start = time.perf_counter()
    rows = recurrent_rows(args.quick, args.rounds or (3 if args.quick else 10))
    write_json(os.path.join(args.out_dir, "tpu_recurrent.json"), {
        "family": "tpu_recurrent", "rows": rows, "quick": args.quick,
        "peak_tflops": peak_tflops(), "environment": environment(),
        "seconds": round(time.perf_counter() - start, 1), "about": __doc__})
    return 1 if any(r["failed"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""portable_rnn on a TPU: the recurrent family against Flax, attention against jax.nn and JAX's
Pallas TPU kernels.

    python -m benchmarks.tpu --out-dir benchmarks/results/tpu        # on a TPU (a few minutes)
    python -m benchmarks.tpu --quick --out-dir /tmp/tpu               # a smoke run, any backend

Recurrent (`tpu_recurrent.json`): `portable_rnn.lstm` and `gru` (automatic route) against Flax's
`nn.RNN(nn.OptimizedLSTMCell)` and `nn.RNN(nn.GRUCell)` on the same weights, forward and
forward+backward under jit, bfloat16 and float32, each checked against a float32 step loop at
the highest precision first (`benchmarks/lstm.py`, `benchmarks/recurrent.py`, whose problems and
peers this reuses). Attention (`tpu_attention.json`): `portable_rnn.dot_product_attention`
(automatic, "chunked", "xla") against `jax.nn.dot_product_attention` (XLA) and JAX's Pallas
TPU kernels, splash and flash attention with tuned block sizes (their 128-wide defaults ran 2-4x
slower; `benchmarks/tpu_attention.py` measures them over block sizes), bfloat16, checked
against a float32 softmax at the highest precision first. Every
timed row gives the median of interleaved rounds, the ratio to portable_rnn's, and the share of
the chip's bfloat16 peak (`PEAK_TFLOPS`) that its matrix products' arithmetic reaches.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn

from . import lstm, recurrent, tpu_attention
from ._harness import Impl, agreement, block, environment, measure, print_row, write_json

PEAK_TFLOPS = {"TPU v5 lite": 197.0, "TPU v5e": 197.0, "TPU v4": 275.0, "TPU v6 lite": 918.0}
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


def peak_tflops() -> float | None:
    return PEAK_TFLOPS.get(jax.devices()[0].device_kind)


def add_peak_share(row: dict, flops: float) -> None:
    """Each result's share of the bfloat16 peak: the products' flops over its median time."""
    peak = peak_tflops()
    row["flops"] = flops
    for r in row["results"].values():
        r["tflops"] = flops / (r["median_ms"] * 1e-3) / 1e12
        r["peak_share"] = r["tflops"] / peak if peak else None


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


# --- attention ---------------------------------------------------------------------------------

class AttentionCase(NamedTuple):
    B: int
    T: int
    N: int
    D: int
    causal: bool
    block: int  # the Pallas kernels' tuned block size (queries and keys)

    @property
    def label(self) -> str:
        return f"B{self.B} T{self.T} N{self.N} D{self.D}" + (" causal" if self.causal else "")


ATTENTION = [AttentionCase(4, 2048, 8, 128, True, 512), AttentionCase(4, 2048, 8, 128, False, 512),
             AttentionCase(2, 8192, 8, 128, True, 1024), AttentionCase(8, 512, 8, 128, True, 512),
             AttentionCase(16, 256, 8, 128, True, 256)]
QUICK_ATTENTION = [AttentionCase(1, 128, 2, 128, True, 128)]


def attention_problem(case: AttentionCase):
    rng = np.random.default_rng(0)
    q, k, v, ct = (jnp.asarray(rng.standard_normal((case.B, case.T, case.N, case.D)),
                               jnp.bfloat16) for _ in range(4))

    @jax.jit
    def ref(q, k, v):
        def attend(q, k, v):
            q, k, v = (a.astype(jnp.float32) for a in (q, k, v))
            logits = jnp.einsum("btnh,bsnh->bnts", q, k, precision="highest") / np.sqrt(case.D)
            if case.causal:
                logits = jnp.where(jnp.tril(jnp.ones((case.T, case.T), bool)), logits, -jnp.inf)
            return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits), v, precision="highest")
        out, vjp = jax.vjp(attend, q, k, v)
        return out, vjp(ct.astype(jnp.float32))

    return (q, k, v), ct, ref(q, k, v)


def _pallas(kind: str, case: AttentionCase):
    """JAX's flash kernel, or the splash kernel through portable_rnn's splash route, with
    `case.block` for every block size (`benchmarks/tpu_attention.py`)."""
    c = tpu_attention.Case(case.label, "tpu", case.B, case.T, case.N, case.N, case.D,
                           case.causal)
    b = min(case.block, case.T)
    return tpu_attention.flash(c, b) if kind == "flash" else tpu_attention.splash(c, None, b)


def attention_impl(fn, operands, ct, ref) -> Impl:
    def loss(q, k, v):
        return jnp.sum(fn(q, k, v).astype(jnp.float32) * ct.astype(jnp.float32))

    fwd, grad = jax.jit(fn), jax.jit(jax.grad(loss, (0, 1, 2)))

    def check():
        (out_ref, grads_ref) = ref
        got = [fwd(*operands), *grad(*operands)]
        return agreement(dict(zip(("out", "dq", "dk", "dv"),
                                  zip(got, [out_ref, *grads_ref]))), 5e-2)

    return Impl(fwd=lambda: block(fwd(*operands)), fwd_bwd=lambda: block(grad(*operands)),
                check=check)


def attention_rows(quick: bool, rounds: int) -> list[dict]:
    ours = portable_rnn.dot_product_attention
    rows = []
    on_tpu = jax.default_backend() == "tpu"
    for case in QUICK_ATTENTION if quick else ATTENTION:
        operands, ct, ref = attention_problem(case)
        fns = {"portable_auto": partial(ours, is_causal=case.causal),
               "portable_chunked": partial(ours, is_causal=case.causal, implementation="chunked"),
               "portable_xla": partial(ours, is_causal=case.causal, implementation="xla"),
               "jax_nn_xla": partial(jax.nn.dot_product_attention, is_causal=case.causal,
                                     implementation="xla")}
        if on_tpu:
            fns.update(pallas_splash=_pallas("splash", case), pallas_flash=_pallas("flash", case))
        if case.T >= 8192:  # the dense paths' T x T logits: slow and large
            fns = {n: f for n, f in fns.items() if "xla" not in n}
        makers = {n: partial(attention_impl, f, operands, ct, ref) for n, f in fns.items()}
        decision = portable_rnn.explain_attention(*operands, is_causal=case.causal)
        print(f"tpu_attention {case.label}: auto takes {decision.implementation}", flush=True)
        for mode, row in measure(makers, "portable_auto", rounds).items():
            row.update(panel=f"bfloat16, {mode}", case=case.label, dtype="bfloat16", mode=mode,
                       params=case._asdict(), auto=decision.implementation,
                       skipped={} if on_tpu else {"pallas": "not a TPU"})
            # q k^T and p v, each 2 B N T S D (half of it with a causal mask); backward 2.5x
            flops = 4 * case.B * case.N * case.T * case.T * case.D
            flops *= (0.5 if case.causal else 1) * (3.5 if mode == "fwd+bwd" else 1)
            add_peak_share(row, flops)
            rows.append(row)
            print_row("tpu_attention", row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tpu",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny shapes, any backend")
    p.add_argument("--only", default="recurrent,attention")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "tpu"))
    args = p.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 10)
    failed = 0
    for family in args.only.split(","):
        start = time.perf_counter()
        rows = {"recurrent": recurrent_rows, "attention": attention_rows}[family](args.quick,
                                                                                  rounds)
        failed += sum(len(r["failed"]) for r in rows)
        write_json(os.path.join(args.out_dir, f"tpu_{family}.json"), {
            "family": f"tpu_{family}", "rows": rows, "quick": args.quick,
            "peak_tflops": peak_tflops(), "environment": environment(),
            "seconds": round(time.perf_counter() - start, 1), "about": __doc__})
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

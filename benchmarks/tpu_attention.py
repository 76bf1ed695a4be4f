"""Attention on a TPU: JAX's Pallas splash and flash kernels over block sizes against
portable_rnn's chunked and dense paths and `jax.nn.dot_product_attention`, bfloat16, forward and
backward, the median of interleaved rounds, each checked against a float32 softmax first (the
routing model's grid, which the automatic choice and the splash blocks read, comes from
``benchmarks/routing_grid.py``).

    python -m benchmarks.tpu_attention --out-dir DIR                  # on a TPU, every group
    python -m benchmarks.tpu_attention --only core --out-dir DIR      # one group (core, shapes,
                                                                      # memory) or case names
    python -m benchmarks.tpu_attention --out-dir DIR --resume         # the cases DIR lacks
    python -m benchmarks.tpu_attention --quick --out-dir /tmp/t       # a smoke run, any backend

Each case times, with one compiled forward+backward function per implementation (``jax.vjp``
at a fixed cotangent): ``splash_<block>`` (portable_rnn's splash route with that block size for
queries and keys, the blocks that tile T and S among 256, 512, 1024), ``flash_<block>`` (JAX's
flash kernel, plain causal/full cases), ``chunked`` and ``xla`` (portable_rnn's paths),
``jax_nn`` (XLA) and ``auto`` (portable_rnn's automatic choice). Each is checked first against a
float32 softmax at the highest precision (the chunked path in float32 where T x S is too large
for it); one that fails or does not agree is recorded with its error and not timed. The JSON
(``tpu_attention_blocks.json``) has one row per case, each time with its share of the chip's
bfloat16 peak (`flops`). With ``--resume``, the cases that DIR's JSON has measured are kept
(those not asked for with ``--only`` too) and the others run, so that the cases can span several
runs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._src.attention.routes import flash as flash_route
from portable_rnn._src.attention.routes import splash as splash_route

from ._harness import (
    Impl,
    add_peak_share,
    agreement,
    environment,
    measure,
    peak_tflops,
    print_row,
    write_json,
)

HERE = os.path.dirname(os.path.abspath(__file__))
TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")  # forces nothing off a TPU
BLOCKS = (256, 512, 1024)


class Case(NamedTuple):
    name: str
    group: str
    B: int
    T: int
    N: int
    K: int
    D: int = 128
    causal: bool = True
    window: tuple[int, int] | None = None
    ragged: bool = False  # key_value_seq_lengths drawn in [T/4, T]
    flash: bool = False  # also time JAX's flash kernel

    @property
    def label(self) -> str:
        return (f"B{self.B} T{self.T} N{self.N}" + (f" K{self.K}" if self.K != self.N else "")
                + f" D{self.D}" + (" causal" if self.causal else "")
                + (f" window{self.window}" if self.window else "")
                + (" ragged" if self.ragged else ""))


CASES = [
    Case("causal_2k", "core", 4, 2048, 8, 8, flash=True),
    Case("full_2k", "core", 4, 2048, 8, 8, causal=False, flash=True),
    Case("causal_8k", "core", 2, 8192, 8, 8, flash=True),
    Case("gqa_2k", "shapes", 4, 2048, 32, 8),
    Case("window_8k", "shapes", 2, 8192, 8, 8, window=(1024, 0)),
    Case("ragged_2k", "shapes", 4, 2048, 8, 8, ragged=True),
    Case("causal_256", "shapes", 16, 256, 8, 8),
    Case("causal_512", "shapes", 8, 512, 8, 8),
    Case("causal_32k", "memory", 2, 32768, 8, 8),
]
QUICK = [Case("quick", "quick", 1, 256, 2, 1)]
DENSE_MAX = 4096 * 4096  # the dense paths' T x S logits beyond this: slow and large


def problem(case: Case):
    rng = np.random.default_rng(0)
    shape_q, shape_kv = (case.B, case.T, case.N, case.D), (case.B, case.T, case.K, case.D)
    q, ct = (jnp.asarray(rng.standard_normal(shape_q), jnp.bfloat16) for _ in range(2))
    k, v = (jnp.asarray(rng.standard_normal(shape_kv), jnp.bfloat16) for _ in range(2))
    kv_len = (jnp.asarray(rng.integers(case.T // 4, case.T + 1, case.B), jnp.int32)
              if case.ragged else None)
    return (q, k, v), ct, kv_len


def ours(case: Case, kv_len, implementation=None):
    return lambda q, k, v: portable_rnn.dot_product_attention(
        q, k, v, is_causal=case.causal, local_window_size=case.window,
        key_value_seq_lengths=kv_len, implementation=implementation,
        capabilities=None if implementation is None else TPU)


def splash(case: Case, kv_len, block: int):
    scale = 1 / np.sqrt(case.D)
    return lambda q, k, v: splash_route.attention_splash(
        q, k, v, None, kv_len, scale=scale, is_causal=case.causal, window=case.window,
        block_q=block, block_kv=block)


def flash(case: Case, block: int):
    """JAX's flash kernel on (B, T, N, D) operands, through its (B, N, T, D) layout, with `block`
    for every block size (no GQA, window or lengths here)."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    sizes = flash_route.block_sizes(block)
    return lambda q, k, v: fa.flash_attention(
        *(a.swapaxes(1, 2) for a in (q, k, v)), causal=case.causal, sm_scale=1 / np.sqrt(case.D),
        block_sizes=sizes).swapaxes(1, 2)


def jax_nn(case: Case, kv_len):
    return lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=case.causal, local_window_size=case.window,
        key_value_seq_lengths=kv_len, implementation="xla")


def reference(case: Case, kv_len, operands, ct):
    """Output and gradients in float32 at the highest precision: jax.nn's dense softmax, or
    portable_rnn's chunked path where the logits are too large."""
    dense = case.T * case.T <= DENSE_MAX
    fn = jax_nn(case, kv_len) if dense else ours(case, kv_len, "chunked")

    @jax.jit
    def run(q, k, v):
        with jax.default_matmul_precision("highest"):
            out, vjp = jax.vjp(fn, *(a.astype(jnp.float32) for a in (q, k, v)))
            return out, vjp(ct.astype(jnp.float32))

    return run(*operands)  # every query sees a key here (jax.nn would average where none)


def impl(fn, operands, ct, ref) -> Impl:
    step = jax.jit(lambda q, k, v: (lambda o, vjp: (o, vjp(ct)))(*jax.vjp(fn, q, k, v)))

    def check():
        out, grads = step(*operands)
        ref_out, ref_grads = ref
        return agreement(dict(zip(("out", "dq", "dk", "dv"),
                                  zip([out, *grads], [ref_out, *ref_grads]))), 5e-2)

    run = lambda: jax.block_until_ready(step(*operands))  # noqa: E731
    return Impl(fwd=run, fwd_bwd=run, check=check)


def makers(case: Case, operands, ct, kv_len, on_tpu: bool) -> dict:
    fns = {"auto": ours(case, kv_len), "chunked": ours(case, kv_len, "chunked")}
    if case.T * case.T <= DENSE_MAX:
        fns.update(xla=ours(case, kv_len, "xla"), jax_nn=jax_nn(case, kv_len))
    for b in BLOCKS if on_tpu else (128,):
        if b <= case.T and case.T % b == 0:
            fns[f"splash_{b}"] = splash(case, kv_len, b)
            if case.flash and on_tpu:
                fns[f"flash_{b}"] = flash(case, b)
    return fns


def flops(case: Case) -> float:
    """The matrix products of forward+backward: q k^T and p v, 2 B N D flops per visible logit
    each, the backward 2.5x the forward; the logits the causal mask and the window hide are not
    counted, sequence lengths are."""
    i = np.arange(case.T)
    left, right = case.window or (case.T, case.T)
    lo = np.maximum(0, i - left)
    hi = np.minimum(case.T, i + 1 + (0 if case.causal else right))
    return 4 * case.B * case.N * case.D * float(np.sum(hi - lo)) * 3.5


def run_case(case: Case, rounds: int, on_tpu: bool) -> dict:
    start = time.perf_counter()
    row = {"name": case.name, "case": case.label, "params": case._asdict(), "dtype": "bfloat16",
           "mode": "fwd+bwd"}
    try:
        operands, ct, kv_len = problem(case)
        ref = reference(case, kv_len, operands, ct)
        fns = makers(case, operands, ct, kv_len, on_tpu)
        row["auto"] = portable_rnn.explain_attention(
            *operands, is_causal=case.causal, local_window_size=case.window,
            key_value_seq_lengths=kv_len).implementation
        timed = measure({n: partial(impl, f, operands, ct, ref) for n, f in fns.items()},
                        "chunked", rounds, warmup=1, modes=("fwd+bwd",))["fwd+bwd"]
        row.update(timed, panel="bfloat16, fwd+bwd")
        add_peak_share(row, flops(case))
        print_row("tpu_attention", row)
    except Exception as e:  # noqa: BLE001 - a failing case is recorded, the others run
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"tpu_attention {case.label}: FAILED {row['error']}", flush=True)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tpu_attention",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one tiny case, any backend")
    p.add_argument("--only", default="core,shapes,memory",
                   help="groups (core, shapes, memory) or case names, comma-separated")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--budget-s", type=float, default=220.0,
                   help="start no case after this many seconds (the rest are recorded as "
                        "skipped); default 220")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "tpu"))
    p.add_argument("--resume", action="store_true",
                   help="keep the cases the out dir's JSON has measured; run the others")
    args = p.parse_args(argv)
    on_tpu = jax.default_backend() == "tpu"
    wanted = set(args.only.split(","))
    cases = QUICK if args.quick else [c for c in CASES if c.group in wanted or c.name in wanted]
    rounds = args.rounds or (3 if args.quick else 7)
    start = time.perf_counter()
    env = environment()
    env["device_kind"] = jax.devices()[0].device_kind
    path = os.path.join(args.out_dir, "tpu_attention_blocks.json")
    earlier = []
    if args.resume and os.path.exists(path):
        with open(path) as f:
            earlier = json.load(f)["rows"]
    # resumed: measured cases kept, failed or skipped ones rerun, the cases not asked for kept
    kept = {r["name"]: r for r in earlier if "error" not in r}
    selected = {c.name for c in cases}
    rows = [r for r in earlier if r["name"] not in selected]
    for c in cases:
        if c.name in kept:
            rows.append(kept[c.name])
        elif time.perf_counter() - start > args.budget_s:
            rows.append({"name": c.name, "case": c.label, "params": c._asdict(),
                         "error": f"skipped: past the {args.budget_s:g} s budget"})
            print(f"tpu_attention {c.label}: {rows[-1]['error']}", flush=True)
        else:
            rows.append(run_case(c, rounds, on_tpu))
        # after every case: a run stopped by a time limit keeps what it measured
        write_json(path, {"family": "tpu_attention_blocks", "rows": rows, "quick": args.quick,
                          "peak_tflops": peak_tflops(), "environment": env,
                          "seconds": round(time.perf_counter() - start, 1), "about": __doc__})
    print(f"\n{'case':44s} {'auto':8s} fastest (fwd+bwd ms)")
    for row in rows:
        res = {n: r["median_ms"] for n, r in row.get("results", {}).items()}
        best = sorted(res, key=res.get)[:4]
        print(f"{row['case']:44s} {row.get('auto', '-'):8s} "
              + ("  ".join(f"{n} {res[n]:.3g}" for n in best) or row.get("error", "")))
    print(f"wrote {path}")
    return 1 if any("error" in r or r.get("failed") for r in rows if r["name"] in selected) else 0


if __name__ == "__main__":
    raise SystemExit(main())

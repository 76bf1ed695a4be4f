"""Packed attention: several documents per row kept apart by segment ids, against the splash
kernel called directly and against the same packing as a boolean (T, S) mask, bfloat16, causal,
forward+backward (`jax.vjp` at a fixed cotangent), the median of interleaved rounds, each
implementation checked against a float32 reference first.

    python -m benchmarks.packed_attention --out-dir DIR       # on a TPU v5e: B4 T8192 N8 D128,
                                                              # 8 documents per row (< 3 min)
    python -m benchmarks.packed_attention --quick --out-dir DIR   # a smoke run, any backend

Implementations (``results``):

- ``auto``: ``portable_rnn.dot_product_attention(q, k, v, segment_ids=ids, is_causal=True)``,
  the automatic choice (on a TPU the splash route: the kernel takes the ids natively and skips
  the blocks in which no query and key share a document, found from each block's range of ids at
  run time);
- ``route_<block>``: the splash route's function at blocks of ``<block>`` (256, 512 and 1024 on
  a TPU, as ``splash_dynamic``), whatever block the routing model picks for ``auto``;
- ``splash_<block>``: JAX's splash kernel called directly, built once with a causal mask and
  blocks of ``<block>`` (512 and 1024 on a TPU, 128 elsewhere, interpreted), the query
  scaled before it, the ids as its ``SegmentIds``: what a hand-tuned model calls (it computes
  every causal block, the ids masking inside them);
- ``splash_dynamic_<block>``: JAX's splash kernel with the packing and causality as its dynamic
  (T, S) boolean mask per row, its block tables computed at run time: the way JAX offers to skip
  the blocks between documents;
- ``mask``: today's way without segment ids: the packing as a boolean (B, 1, T, S) mask with
  ``is_causal=True``, the automatic choice (a mask rules out the Pallas kernels: the chunked
  or dense path);
- ``chunked``: ``implementation="chunked"`` with the segment ids (each block's ids compared in
  its loop: O(T) memory).

The reference is portable_rnn's chunked path in float32 at the highest precision (jax.nn's
dense path in quick mode, where T x S is small). Each row records the documents' lengths, the
route each automatic call took, every implementation's compiled temporary bytes (XLA's memory
analysis), the medians, their ratios to ``splash_<largest block>`` and the share of the chip's
bfloat16 peak (`flops`: only the query-key pairs inside a document and causal). Writes
``packed_attention.json`` into the out dir after the case; ``--budget-s`` leaves out the
implementations not started by then (recorded as skipped; the baseline always runs).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._src.attention.routes import splash
from portable_rnn._src.core import compat

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
BLOCKS_TPU = (512, 1024)
SKIPPING_BLOCKS_TPU = (256, 512, 1024)  # smaller blocks skip more
DENSE_MAX = 4096 * 4096  # the reference's dense path up to this many logits per head


class Skipped(Exception):
    """An implementation not built: the time budget was spent."""


class Case(NamedTuple):
    name: str
    B: int
    T: int
    N: int
    D: int
    documents: int  # per row

    @property
    def label(self) -> str:
        return (f"B{self.B} T{self.T} N{self.N} D{self.D} causal, {self.documents} documents "
                "per row")


CASES = [Case("packed_8k", 4, 8192, 8, 128, 8)]
QUICK = [Case("quick", 1, 256, 2, 128, 3)]


def document_ids(case: Case, rng) -> np.ndarray:
    """int32 (B, T): per row, `documents` consecutive documents of random lengths (at least
    T / (4 * documents) each), numbered 0, 1, ..."""
    rows = []
    least = max(1, case.T // (4 * case.documents))
    for _ in range(case.B):
        spare = case.T - least * case.documents
        cuts = np.sort(rng.integers(0, spare + 1, case.documents - 1))
        lengths = np.diff(np.concatenate([[0], cuts, [spare]])) + least
        rows.append(np.repeat(np.arange(case.documents), lengths))
    return np.stack(rows).astype(np.int32)


def problem(case: Case):
    rng = np.random.default_rng(0)
    shape = (case.B, case.T, case.N, case.D)
    q, k, v, ct = (jnp.asarray(rng.standard_normal(shape), jnp.bfloat16) for _ in range(4))
    return (q, k, v), ct, jnp.asarray(document_ids(case, rng))


def auto(ids, implementation=None):
    return lambda q, k, v: portable_rnn.dot_product_attention(
        q, k, v, segment_ids=ids, is_causal=True, implementation=implementation)


def with_mask(ids):
    mask = ids[:, None, :, None] == ids[:, None, None, :]  # (B, 1, T, S)
    return lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, mask=mask, is_causal=True)


def splash_direct(case: Case, ids, block: int, interpret: bool):
    """JAX's splash kernel itself (built by `compat.make_splash_attention`, the constructor the
    splash route uses): a causal `MultiHeadMask`, blocks of `block`, the query scaled in
    bfloat16, the ids as its `SegmentIds`, vmapped over the batch."""
    sa = compat.splash_attention_module()
    kernel = compat.make_splash_attention(case.N, sa.CausalMask((case.T, case.T)), block, block,
                                       mqa=False, interpret=interpret)

    def f(q, k, v):
        qh = splash.scaled(q, 1 / np.sqrt(case.D)).swapaxes(1, 2)  # (B, N, T, D)
        out = jax.vmap(lambda q, k, v, i: kernel(q, k, v, segment_ids=sa.SegmentIds(i, i)))(
            qh, k.swapaxes(1, 2), v.swapaxes(1, 2), ids)
        return out.swapaxes(1, 2)

    return f


def splash_dynamic(case: Case, ids, block: int, interpret: bool):
    """JAX's splash kernel with the packing and causality as its dynamic mask: per row a (1, T, T)
    boolean array, from which the kernel's block tables are computed at run time (inside the
    timed step), so that it skips the blocks between documents; blocks of `block`, the query
    scaled in bfloat16, vmapped over the batch."""
    sa = compat.splash_attention_module()
    causal = jnp.tril(jnp.ones((case.T, case.T), bool))

    def row(q, k, v, i):
        mask = ((i[:, None] == i[None, :]) & causal)[None]
        kernel = sa.make_splash_mha(mask, block_sizes=compat.splash_block_sizes(block, block),
                                    head_shards=1, q_seq_shards=1, interpret=interpret)
        # Its tables' `is_dynamic_mask` flag comes back as an array (jnp.array over the tables),
        # a tracer under jit, which the kernel's call then tests as a Python bool: set it back.
        infos, kwargs = kernel.tree_flatten()
        kernel = type(kernel).tree_unflatten(kwargs, tuple(
            None if i is None else i._replace(is_dynamic_mask=True) for i in infos))
        return kernel(q, k, v)

    def f(q, k, v):
        qh = splash.scaled(q, 1 / np.sqrt(case.D)).swapaxes(1, 2)  # (B, N, T, D)
        return jax.vmap(row)(qh, k.swapaxes(1, 2), v.swapaxes(1, 2), ids).swapaxes(1, 2)

    return f


def route_blocks(case: Case, ids, block: int):
    """The splash route's own function (`routes.splash.attention_splash`, block skipping
    included) at blocks of `block`, whatever block the routing model picks for ``auto``."""
    def f(q, k, v):
        return splash.attention_splash(q, k, v, None, None, scale=1 / np.sqrt(case.D),
                                       is_causal=True, window=None, block_q=block,
                                       block_kv=block, segment_ids=(ids, ids), same_ids=True)

    return f


def reference(case: Case, ids, operands, ct):
    """Output and gradients in float32 at the highest precision: portable_rnn's chunked path
    with the ids, or (small T) jax.nn's dense path with the packing as a mask."""
    dense = case.T * case.T <= DENSE_MAX
    mask = ids[:, None, :, None] == ids[:, None, None, :]
    fn = ((lambda q, k, v: jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True))
          if dense else auto(ids, "chunked"))

    @jax.jit
    def run(q, k, v):
        with jax.default_matmul_precision("highest"):
            out, vjp = jax.vjp(fn, *(a.astype(jnp.float32) for a in (q, k, v)))
            return out, vjp(ct.astype(jnp.float32))

    return run(*operands)  # every query sees itself: no row without a key


def impl(fn, operands, ct, ref, memory: dict, name: str) -> Impl:
    """One compiled forward+backward; its temporaries into `memory`."""
    step = jax.jit(lambda q, k, v: (lambda o, vjp: (o, vjp(ct)))(*jax.vjp(fn, q, k, v)))
    compiled = step.lower(*operands).compile()
    try:
        memory[name] = int(compiled.memory_analysis().temp_size_in_bytes)
    except Exception:  # noqa: BLE001 - a backend without a memory analysis: not recorded
        memory[name] = None

    def check():
        out, grads = compiled(*operands)
        ref_out, ref_grads = ref
        return agreement(dict(zip(("out", "dq", "dk", "dv"),
                                  zip([out, *grads], [ref_out, *ref_grads]))), 5e-2)

    run = lambda: jax.block_until_ready(compiled(*operands))  # noqa: E731
    return Impl(fwd=run, fwd_bwd=run, check=check)


def flops(case: Case, ids: np.ndarray) -> float:
    """The products of forward+backward over the query-key pairs inside a document and
    causal: 4 N D flops per pair forward (q k^T and p v), the backward 2.5x that."""
    pairs = 0
    for row in ids:
        lengths = np.bincount(row)
        pairs += int(np.sum(lengths * (lengths + 1) // 2))
    return 4.0 * case.N * case.D * pairs * 3.5


def makers(case: Case, ids, on_tpu: bool) -> dict:
    fns = {"auto": auto(ids), "mask": with_mask(ids), "chunked": auto(ids, "chunked")}
    for b in BLOCKS_TPU if on_tpu else (128,):
        if case.T % b == 0:
            fns[f"splash_{b}"] = splash_direct(case, ids, b, interpret=not on_tpu)
    for b in SKIPPING_BLOCKS_TPU if on_tpu else (128,):
        if case.T % b == 0:
            fns[f"splash_dynamic_{b}"] = splash_dynamic(case, ids, b, interpret=not on_tpu)
            fns[f"route_{b}"] = route_blocks(case, ids, b)
    return fns


def run_case(case: Case, rounds: int, on_tpu: bool, deadline: float, only=frozenset()) -> dict:
    start = time.perf_counter()
    row = {"name": case.name, "case": case.label, "params": case._asdict(), "dtype": "bfloat16",
           "mode": "fwd+bwd", "panel": "bfloat16, fwd+bwd"}
    try:
        operands, ct, ids = problem(case)
        host_ids = np.asarray(ids)
        row["document_lengths"] = [np.bincount(r).tolist() for r in host_ids]
        row["route"] = {
            "auto": portable_rnn.explain_attention(*operands, segment_ids=ids,
                                                   is_causal=True).implementation,
            "mask": portable_rnn.explain_attention(
                *operands, mask=jax.ShapeDtypeStruct((case.B, 1, case.T, case.T), jnp.bool_),
                is_causal=True).implementation}
        ref = reference(case, ids, operands, ct)
        fns = makers(case, ids, on_tpu)
        baseline = max((n for n in fns if n.startswith("splash_") and "dynamic" not in n),
                       key=lambda n: int(n.split("_")[-1]))
        memory: dict = {}

        def make(name, fn):  # built (compiled) in order until the budget is spent
            if name != baseline and time.perf_counter() > deadline:
                raise Skipped("past the time budget")
            return impl(fn, operands, ct, ref, memory, name)

        order = [baseline] + [n for n in fns if n != baseline and (not only or n in only)]
        timed = measure({n: (lambda n=n: make(n, fns[n])) for n in order}, baseline, rounds,
                        warmup=1, modes=("fwd+bwd",))["fwd+bwd"]
        row.update(timed)
        row["skipped"] = {n: why for n, why in timed["failed"].items()
                          if why.startswith("Skipped")}
        row["failed"] = {n: why for n, why in timed["failed"].items() if n not in row["skipped"]}
        row["temp_bytes"] = memory
        add_peak_share(row, flops(case, host_ids))
        print_row("packed_attention", row)
    except Exception as e:  # noqa: BLE001 - recorded, the JSON is still written
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"packed_attention {case.label}: FAILED {row['error']}", flush=True)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.packed_attention",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small case, any backend")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 7, quick 3)")
    p.add_argument("--budget-s", type=float, default=150.0,
                   help="build no implementation after this many seconds (default 150)")
    p.add_argument("--impls", default="",
                   help="comma-separated implementations to run (default: all; the baseline "
                   "always runs)")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "tpu"))
    args = p.parse_args(argv)
    on_tpu = jax.default_backend() == "tpu"
    start = time.perf_counter()
    only = set(filter(None, args.impls.split(",")))
    rows = [run_case(c, args.rounds or (3 if args.quick else 7), on_tpu,
                     start + args.budget_s, only) for c in (QUICK if args.quick else CASES)]
    path = os.path.join(args.out_dir, "packed_attention.json")
    write_json(path, {"family": "packed_attention", "rows": rows, "quick": args.quick,
                      "peak_tflops": peak_tflops(), "environment": environment(),
                      "seconds": round(time.perf_counter() - start, 1), "about": __doc__})
    for row in rows:
        res = {n: r["median_ms"] for n, r in row.get("results", {}).items()}
        print(f"{row['case']}: " + ("  ".join(
            f"{n} {res[n]:.4g} ms (x{row['results'][n]['ratio']:.2f})" for n in sorted(
                res, key=res.get)) or row.get("error", "")))
    return 1 if any("error" in r or r.get("failed") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())

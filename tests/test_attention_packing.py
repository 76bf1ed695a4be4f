"""Packed and decoding attention: segment ids, the logits soft cap and the causal alignment.

Every route this machine runs (the dense ``xla`` and the ``chunked`` path, the latter also at
blocks small enough that segments cross their boundaries; JAX's Pallas ``splash`` and ``flash``
kernels in interpret mode) against float64 references written here: a loop over each row's
segments that calls plain softmax attention on one segment's queries and keys at a time, the
soft-capped softmax in NumPy (values) or JAX under x64 (gradients). Values and the gradients of
query, key, value and bias, float32 and bfloat16 (bounds as `references` states them: 2 ulps for
the portable paths, 6 for the Pallas kernels, which scale the query in bfloat16; see
tests/test_attention_tpu.py). The routes that cannot serve a feature reject it with the reason
and the automatic choice falls back; bad arguments raise at trace time, naming the argument.
The chunked path's temporaries with segment ids at T = S = 32768 stay O(T).
"""

from __future__ import annotations

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import portable_rnn
import references
from portable_rnn._src.attention.math import rows_visible
from portable_rnn._src.attention.routes import chunked, splash
from portable_rnn._src.core import compat
from references import ATTENTION_FLOOR, assert_ulps

TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")
GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
BF = jnp.bfloat16
KERNEL_ULPS = 6.0  # tests/test_attention_tpu.py: the query scaled in bfloat16 before the kernel
# The flash kernel's bias gradient on the chip, P * (dP - D) with dP from bfloat16 products on the
# MXU: 7.5 ulps measured on a TPU v5e at the packed case below (6 or fewer interpreted on a CPU).
FLASH_DBIAS_ULPS = 8.0
INT32 = np.iinfo(np.int32)


# --- the reference -----------------------------------------------------------------------------

def _softmax(logits, vis):
    """Softmax over the last axis of the visible entries; a row with none gives 0."""
    top = np.max(np.where(vis, logits, -np.inf), axis=-1, keepdims=True)
    e = np.where(vis, np.exp(np.where(vis, logits - np.where(np.isfinite(top), top, 0), 0)), 0)
    total = e.sum(-1, keepdims=True)
    return e / np.where(total > 0, total, 1)


def per_segment_attention(q, k, v, bias, c, d_out=None):
    """NumPy, in the arrays' dtype (float64: the reference). q (B, T, N, H), k and v (B, S, K, H),
    bias broadcastable to (B, N, T, S) or None. For each batch row and each of its segment ids,
    that segment's queries (inside the query length) against that segment's keys (inside the key
    length): ``softmax(cap * tanh(q k^T * scale / cap) + bias) v`` over the keys the mask,
    causality and the window leave them, both read at the original positions (query t at key
    ``t + S - T`` bottom-right). Queries that see no key stay 0.

    With `d_out` (B, T, N, H), also the gradients of ``sum(out * d_out)``: (dq, dk, dv, dbias
    (B, N, T, S) or None), by the chain rule written out per segment (softmax: ``dz = p * (dp -
    sum(p * dp))``; the cap: ``1 - tanh^2``); `test_the_reference_gradients_are_the_derivatives`
    checks them against finite differences."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    G = N // K
    q_ids, kv_ids = ids_of(c)
    offset = S - T if c["align"] == "bottom_right" else 0
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(H)
    cap = c["cap"]
    mask = None if c["mask"] is None else np.broadcast_to(c["mask_array"], (B, N, T, S))
    bias = None if bias is None else np.broadcast_to(bias, (B, N, T, S))
    out = np.zeros(q.shape, q.dtype)
    grads = [np.zeros(a.shape, q.dtype) for a in (q, k, v)] + [
        None if bias is None else np.zeros(bias.shape, q.dtype)]
    for b in range(B):
        q_ok = np.arange(T) < (T if c["q_len"] is None else c["q_len"][b])
        kv_ok = np.arange(S) < (S if c["kv_len"] is None else c["kv_len"][b])
        for x in np.unique(q_ids[b]):
            tq = np.flatnonzero((q_ids[b] == x) & q_ok)
            sk = np.flatnonzero((kv_ids[b] == x) & kv_ok)
            if not len(tq) or not len(sk):
                continue
            at, key = tq[:, None] + offset, sk[None, :]
            vis = np.ones((N, len(tq), len(sk)), bool)
            if c["causal"]:
                vis &= key <= at
            if c["window"] is not None:
                vis &= (key >= at - c["window"][0]) & (key <= at + c["window"][1])
            if mask is not None:
                vis &= mask[b][:, tq][:, :, sk]
            qs = q[b, tq]  # (t, N, H)
            ks, vs = (np.repeat(a[b, sk], G, axis=1) for a in (k, v))  # (s, N, H)
            raw = np.einsum("tnh,snh->nts", qs, ks) * scale
            th = None if cap is None else np.tanh(raw / cap)
            z = raw if cap is None else cap * th
            if bias is not None:
                z = z + bias[b][:, tq][:, :, sk]
            p = _softmax(z, vis)
            out[b, tq] = np.einsum("nts,snh->tnh", p, vs)
            if d_out is None:
                continue
            do = d_out[b, tq]  # (t, N, H)
            dp = np.einsum("tnh,snh->nts", do, vs)
            dz = p * (dp - np.sum(p * dp, axis=-1, keepdims=True))
            draw = (dz if th is None else dz * (1 - th * th)) * scale
            grads[0][b, tq] += np.einsum("nts,snh->tnh", draw, ks)
            for i, d in ((1, np.einsum("nts,tnh->snh", draw, qs)),
                         (2, np.einsum("nts,tnh->snh", p, do))):
                grads[i][b, sk] += d.reshape(len(sk), K, G, H).sum(2)  # GQA: the group's sum
            if bias is not None:
                grads[3][b][np.ix_(range(N), tq, sk)] += dz
    return out if d_out is None else (out, grads)


# --- cases ------------------------------------------------------------------------------------

def case(B=1, T=8, S=None, N=2, K=1, H=8, seed=0, **kw):
    c = dict(B=B, T=T, S=T if S is None else S, N=N, K=K, H=H, seed=seed, q_ids=None,
             kv_ids=None, self_ids=False, causal=False, align="top_left", window=None,
             q_len=None, kv_len=None, cap=None, scale=None, bias=None, mask=None,
             blocks=(3, 4), magnitude=2.0)
    c.update(kw)
    if c["self_ids"]:
        c["kv_ids"] = c["q_ids"]
    return c


def ids_of(c):
    """(B, T) and (B, S) int arrays; None in a case means one segment (all 0)."""
    B, T, S = c["B"], c["T"], c["S"]
    q = np.zeros((B, T), np.int64) if c["q_ids"] is None else np.asarray(c["q_ids"], np.int64)
    kv = np.zeros((B, S), np.int64) if c["kv_ids"] is None else np.asarray(c["kv_ids"], np.int64)
    return q, kv


def packed(*lengths, first=0):
    """Ids of consecutive segments of these lengths: [0, 0, 1, 1, 1, ...]."""
    return [first + i for i, n in enumerate(lengths) for _ in range(n)]


@st.composite
def packing_cases(draw, max_len=12, dtype=jnp.float32):
    """Rows of packed segments (sorted ids), ids at random (a segment in pieces), one id per
    position, or one segment; self-attention (T == S, often through `segment_ids`) or T != S;
    with GQA, causality at either alignment, windows, lengths, a boolean mask, a bias, a soft cap
    and a scale."""
    B = draw(st.integers(1, 2))
    T = draw(st.integers(1, max_len))
    same = draw(st.booleans())
    S = T if same else draw(st.integers(1, max_len))
    layout = draw(st.sampled_from(["packed", "random", "distinct", "one"]))

    def ids(n):
        if layout == "packed":
            cuts = sorted(draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=3)) if n > 1 else [])
            edges = [0, *cuts, n]
            return packed(*(b - a for a, b in zip(edges, edges[1:])), first=draw(
                st.integers(-3, 3)))
        if layout == "random":
            return draw(st.lists(st.sampled_from([-1, 0, 2]), min_size=n, max_size=n))
        return list(range(n)) if layout == "distinct" else [5] * n

    q_ids = [ids(T) for _ in range(B)]
    K = draw(st.integers(1, 2))
    N = K * draw(st.integers(1, 2))
    dims = lambda: tuple(draw(st.sampled_from([1, n])) for n in (B, N, T, S))  # noqa: E731
    optional = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    return case(B=B, T=T, S=S, N=N, K=K, H=draw(st.sampled_from([4, 8])),
                seed=draw(st.integers(0, 2**16)), q_ids=q_ids,
                kv_ids=q_ids if same else [ids(S) for _ in range(B)],
                self_ids=same and draw(st.booleans()), causal=draw(st.booleans()),
                align=draw(st.sampled_from(["top_left", "bottom_right"])),
                window=optional(st.tuples(st.integers(0, 4), st.integers(0, 4))),
                q_len=optional(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                kv_len=optional(st.lists(st.integers(0, S), min_size=B, max_size=B)),
                cap=optional(st.sampled_from([0.5, 2.0, 30.0])),
                scale=optional(st.sampled_from([0.3, 1.0])),
                bias=optional(st.builds(dims)), mask=optional(st.builds(dims)),
                blocks=(draw(st.integers(1, 5)), draw(st.integers(1, 5))), dtype=dtype)


def inputs(c, dtype):
    B, T, S, N, K, H = (c[n] for n in "BTSNKH")
    ks = jax.random.split(jax.random.key(c["seed"]), 6)
    # q and k twice the unit normal's by default: logits of a few units, which the caps reach
    q = (jax.random.normal(ks[0], (B, T, N, H)) * c["magnitude"]).astype(dtype)
    k = (jax.random.normal(ks[1], (B, S, K, H)) * c["magnitude"]).astype(dtype)
    v = jax.random.normal(ks[2], (B, S, K, H), dtype)
    args = (q, k, v)
    if c["bias"] is not None:
        args += (jax.random.normal(ks[3], c["bias"], dtype),)
    c["mask_array"] = (None if c["mask"] is None
                       else np.asarray(jax.random.bernoulli(ks[4], 0.8, c["mask"])))
    cot = jax.random.normal(ks[5], (B, T, N, H), dtype)
    return args, cot


def keywords(c):
    """`dot_product_attention`'s keywords for a case."""
    q_ids, kv_ids = ids_of(c)
    kw = dict(is_causal=c["causal"], causal_alignment=c["align"], local_window_size=c["window"],
              logits_soft_cap=c["cap"], scale=c["scale"])
    if c["q_ids"] is not None or c["kv_ids"] is not None:
        if c["self_ids"]:
            kw["segment_ids"] = jnp.asarray(q_ids, jnp.int32)
        else:
            kw["query_segment_ids"] = jnp.asarray(q_ids, jnp.int32)
            kw["key_value_segment_ids"] = jnp.asarray(kv_ids, jnp.int32)
    if c["mask"] is not None:
        kw["mask"] = jnp.asarray(c["mask_array"])
    for name, arg in (("q_len", "query_seq_lengths"), ("kv_len", "key_value_seq_lengths")):
        if c[name] is not None:
            kw[arg] = jnp.asarray(c[name], jnp.int32)
    return kw


def small_blocks(c):
    """The chunked path itself at `c["blocks"]` queries x keys per block (segments, windows and
    causality then cross block boundaries even at these lengths)."""
    q_ids, kv_ids = ids_of(c)
    lengths = [None if c[n] is None else jnp.asarray(c[n], jnp.int32) for n in ("q_len", "kv_len")]
    offset = c["S"] - c["T"] if c["align"] == "bottom_right" else 0
    mask = None if c["mask"] is None else jnp.asarray(c["mask_array"])
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(c["H"])
    ids = (jnp.asarray(q_ids, jnp.int32), jnp.asarray(kv_ids, jnp.int32))

    def f(q, k, v, *bias):
        return chunked.attention_chunked(
            q, k, v, bias[0] if bias else None, mask, *lengths, scale=scale,
            is_causal=c["causal"], window=c["window"], block_q=c["blocks"][0],
            block_k=c["blocks"][1], segment_ids=ids, soft_cap=c["cap"], offset=offset)

    return f


def routed(c, impl, caps=None):
    kw = keywords(c)
    return lambda q, k, v, *bias: portable_rnn.dot_product_attention(
        q, k, v, *bias, implementation=impl, capabilities=caps, **kw)


def run(fns, args, cot):
    """Outputs and gradients (of every array argument) of each function, in one program."""
    argnums = tuple(range(len(args)))

    def both(*a):
        return {name: (f(*a), jax.grad(lambda *x, f=f: jnp.sum(
            f(*x).astype(jnp.float32) * cot.astype(jnp.float32)), argnums)(*a))
            for name, f in fns.items()}

    return jax.jit(both)(*args)


def reference(c, args, cot):
    """The float64 reference's output and the gradients of ``sum(out * cot)`` at the operands'
    values (a 16-bit route rounds its output before the loss: the gradient passes it straight
    through); a bias's gradient summed to the bias's shape."""
    as64 = [np.asarray(a, np.float64) for a in args]
    bias = as64[3] if len(as64) > 3 else None
    want, (dq, dk, dv, db) = per_segment_attention(*as64[:3], bias, c,
                                                  np.asarray(cot, np.float64))
    grads = [dq, dk, dv]
    if bias is not None:
        axes = tuple(i for i, n in enumerate(bias.shape) if n == 1)
        grads.append(db.sum(axis=axes, keepdims=True))
    return want, grads


def visible_rows(c):
    """(B, T, N) bool: which queries see a key, from the reference's own rule."""
    B, T, S, N = (c[n] for n in "BTSN")
    ones = (np.ones((B, T, N, 1)), np.ones((B, S, c["K"], 1)), np.ones((B, S, c["K"], 1)))
    probe = dict(c, cap=None, scale=1.0)
    out = per_segment_attention(*ones, None, probe)  # 1 where a key is seen, else 0
    return out[..., 0] > 0.5


def check_float32(c, names):
    args, cot = inputs(c, jnp.float32)
    fns = {name: small_blocks(c) if name == "chunked_small_blocks" else routed(c, name)
           for name in names}
    got = run(fns, args, cot)
    want, grads = reference(c, args, cot)
    tol = references.float32_tol(2e-5)
    rows = visible_rows(c)
    for name, (out, g) in got.items():
        np.testing.assert_allclose(np.asarray(out), want, rtol=tol,
                                   atol=tol * (1 + np.abs(want).max(initial=0)),
                                   err_msg=f"{name} output")
        assert not np.asarray(out)[~rows].any(), f"{name}: a query that sees no key gives 0"
        for gi, ri, what in zip(g, grads, ("dq", "dk", "dv", "dbias")):
            np.testing.assert_allclose(np.asarray(gi), ri, rtol=tol,
                                       atol=tol * (1 + np.abs(ri).max(initial=0)),
                                       err_msg=f"{name} {what}")
    return got


def check_16_bit(c, names, ulps, caps=None, dtype=BF, dbias_ulps=None):
    args, cot = inputs(c, dtype)
    got = run({name: routed(c, name, caps) for name in names}, args, cot)
    want, grads = reference(c, args, cot)
    largest = max(float(np.max(np.abs(r), initial=0)) for r in grads[:3])
    for name, (out, g) in got.items():
        assert out.dtype == dtype
        assert_ulps(out, want.astype(dtype), dtype, ulps, f"{name} output", ATTENTION_FLOOR)
        for gi, ri, what in zip(g, grads, ("dq", "dk", "dv", "dbias")):
            assert gi.dtype == dtype, what
            bound = dbias_ulps if what == "dbias" and dbias_ulps is not None else ulps
            assert_ulps(gi, ri.astype(dtype), dtype, bound, f"{name} {what}", ATTENTION_FLOOR,
                        references.gradient_scale(ri, largest))


# --- the portable paths against the float64 per-segment loop ----------------------------------

def test_the_reference_gradients_are_the_derivatives():
    """The reference's chain rule against central differences of its own output, along random
    directions of q, k, v and the bias (GQA, a cap, causal, two segments, a masked key)."""
    c = case(B=1, T=5, S=6, N=2, K=1, H=3, q_ids=[packed(2, 3)], kv_ids=[packed(3, 3)],
             causal=True, align="bottom_right", cap=1.5, bias=(1, 2, 5, 6), mask=(1, 1, 5, 6))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s) for s in ((1, 5, 2, 3), (1, 6, 1, 3), (1, 6, 1, 3),
                                             (1, 2, 5, 6))]
    c["mask_array"] = np.ones((1, 1, 5, 6), bool)
    c["mask_array"][..., 4] = False
    cot = rng.standard_normal((1, 5, 2, 3))
    _, (dq, dk, dv, db) = per_segment_attention(*args, c, cot)
    for i, grad in enumerate((dq, dk, dv, db)):
        direction = rng.standard_normal(args[i].shape)
        moved = [[a + e * direction if j == i else a for j, a in enumerate(args)]
                 for e in (1e-6, -1e-6)]
        f = [np.sum(per_segment_attention(*m, c) * cot) for m in moved]
        np.testing.assert_allclose((f[0] - f[1]) / 2e-6, np.sum(grad * direction), rtol=1e-6,
                                   atol=1e-8)


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(packing_cases())
# segments of length 1, a query that sees only itself, with a soft cap
@example(case(B=2, T=6, q_ids=[list(range(6)), packed(1, 1, 4)], self_ids=True, causal=True,
              cap=0.5, blocks=(2, 2)))
# a segment across the small blocks' boundaries and across the public path's (T, S > 64, 256)
@example(case(B=1, T=12, q_ids=[packed(2, 7, 3)], self_ids=True, causal=True, window=(3, 0),
              kv_len=[10], bias=(1, 2, 12, 12), blocks=(4, 4)))
@example(case(B=1, T=70, S=260, N=2, K=2, q_ids=[packed(30, 40)], kv_ids=[packed(100, 160)],
              cap=2.0, q_len=[66], blocks=(64, 256)))
# all one segment: no segments at all (the same as without ids, below)
@example(case(B=2, T=7, S=5, q_ids=[[3] * 7] * 2, kv_ids=[[3] * 5] * 2, causal=True,
              align="bottom_right", mask=(2, 1, 7, 5)))
# T != S, bottom-right: the first T - S queries see no key; segments that no key carries
@example(case(B=2, T=9, S=4, q_ids=[packed(3, 6), packed(5, 4, first=7)],
              kv_ids=[packed(2, 2), [0, 0, 1, 1]], causal=True, align="bottom_right",
              window=(1, 2), q_len=[9, 8], kv_len=[4, 0], cap=30.0))
def test_portable_paths_equal_float64_per_segment_attention(c):
    check_float32(c, ("xla", "chunked", "chunked_small_blocks"))


def test_one_segment_equals_no_segments():
    c = case(B=2, T=10, S=7, N=4, K=2, q_ids=[[1] * 10] * 2, kv_ids=[[1] * 7] * 2, causal=True,
             align="bottom_right", kv_len=[7, 3])
    args, cot = inputs(c, jnp.float32)
    kw = keywords(c)
    plain = {n: v for n, v in kw.items() if "segment" not in n}
    for impl in ("xla", "chunked"):
        with_ids = portable_rnn.dot_product_attention(*args, implementation=impl, **kw)
        without = portable_rnn.dot_product_attention(*args, implementation=impl, **plain)
        np.testing.assert_allclose(np.asarray(with_ids), np.asarray(without), rtol=1e-6,
                                   atol=1e-6)


@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(packing_cases(dtype=BF))
@example(case(B=2, T=64, N=4, K=2, H=16, q_ids=[packed(20, 30, 14), packed(64)], self_ids=True,
              causal=True, cap=2.0, kv_len=[64, 40], bias=(1, 4, 64, 64)))
def test_16_bit_portable_paths_within_the_documented_bound(c):
    check_16_bit(c, ("xla", "chunked"), references.attention_ulps())


# --- the Pallas TPU kernels, interpreted ------------------------------------------------------

@pytest.mark.parametrize("impl,c", [
    # packed causal rows with a soft cap, a key length, and ids at int32's ends (the keys past
    # the length get an id no query has). Logits of about a unit: where tanh saturates, the
    # cap's derivative 1 - tanh^2 magnifies the query's rounding to bfloat16 (the kernel scales
    # no logits), by 2 |logit| / cap (8 ulps measured at logits of 4 against a cap of 1)
    ("splash", case(B=2, T=128, N=2, K=1, H=128,
                    q_ids=[packed(50, 78, first=INT32.max - 1),
                           [INT32.min] * 60 + [INT32.max] * 68],
                    self_ids=True, causal=True, cap=2.0, kv_len=[100, 128], magnitude=1.0)),
    # decoding a block of 128 queries against 256 keys: bottom-right, a window, cross ids
    ("splash", case(B=1, T=128, S=256, N=2, K=2, H=128, q_ids=[packed(64, 64)],
                    kv_ids=[packed(100, 156)], causal=True, align="bottom_right",
                    window=(150, 0), magnitude=1.0)),
    # flash: segment ids with a bias and lengths
    ("flash", case(B=1, T=128, N=2, K=1, H=128, q_ids=[packed(40, 88)], self_ids=True,
                   causal=True, bias=(1, 2, 128, 128), q_len=[120], kv_len=[110],
                   magnitude=1.0)),
])
def test_pallas_kernels_equal_float64_per_segment_attention(impl, c):
    with jax.numpy_dtype_promotion("standard"):  # the int32 ids at int32's ends, as NumPy
        check_16_bit(c, (impl,), KERNEL_ULPS, TPU,
                     dbias_ulps=FLASH_DBIAS_ULPS if impl == "flash" else None)


def splash_small_blocks(c):
    """The splash route's kernel itself (interpreted) at blocks of 128 queries x 128 keys, in
    float32 at HIGHEST: documents start and end inside blocks and whole blocks hold no query and
    key of one document, which the kernel skips."""
    q_ids, kv_ids = (jnp.asarray(i, jnp.int32) for i in ids_of(c))
    lengths = [None if c[n] is None else jnp.asarray(c[n], jnp.int32) for n in ("q_len", "kv_len")]
    offset = c["S"] - c["T"] if c["align"] == "bottom_right" else 0

    def f(q, k, v):
        return splash.attention_splash(
            q, k, v, *lengths, scale=1 / math.sqrt(c["H"]), is_causal=c["causal"],
            window=c["window"], block_q=splash.LANES, block_kv=splash.LANES, precision="highest",
            segment_ids=(q_ids, kv_ids), soft_cap=c["cap"], offset=offset,
            same_ids=c["self_ids"])

    return f


@pytest.mark.parametrize("c", [
    # causal packed rows: boundaries inside blocks (100, 300) and on them (128, 256), a key
    # length, GQA
    case(B=2, T=512, N=2, K=1, H=128, q_ids=[packed(100, 200, 212), packed(128, 128, 256)],
         self_ids=True, causal=True, kv_len=[512, 400], magnitude=1.0),
    # cross attention, no causality, a soft cap: the second query block's id (4) no key carries,
    # so its rows see no key and are zeroed
    case(B=1, T=256, S=512, N=2, K=2, H=128, q_ids=[packed(128, 128, first=3)],
         kv_ids=[packed(300, 212, first=2)], cap=2.0, magnitude=1.0),
])
def test_splash_skipping_blocks_between_documents_equals_float64(c):
    """The splash kernel skips the blocks in which no query and key share a segment: its values
    and gradients are still the float64 per-segment loop's (float32, as `check_float32`)."""
    args, cot = inputs(c, jnp.float32)
    (out, grads), = run({"splash": splash_small_blocks(c)}, args, cot).values()
    want, want_grads = reference(c, args, cot)
    tol = references.float32_tol(2e-5)
    np.testing.assert_allclose(np.asarray(out), want, rtol=tol, atol=tol * (1 + np.abs(want).max()))
    assert not np.asarray(out)[~visible_rows(c)].any()
    for got, ref, what in zip(grads, want_grads, ("dq", "dk", "dv")):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=tol,
                                   atol=tol * (1 + np.abs(ref).max()), err_msg=what)


def _computed_pairs(kernel, q_blocks, kv_blocks):
    """Per table of a splash kernel (forward, dq, dk/dv): the (query block, key block) pairs it
    computes (bool (q_blocks, kv_blocks)), and whether every skipped step fetches what the step
    before it in its run fetched."""
    out = []
    for info, dkv in zip((kernel.fwd_mask_info, kernel.dq_mask_info, kernel.dkv_mask_info),
                         (False, False, True)):
        run_mask = np.asarray(info.block_mask)[0] > 0
        nxt = np.asarray(info.data_next)[0].astype(int)
        if dkv:  # its runs are the columns: query steps for one key block
            run_mask, nxt = run_mask.T, nxt.T
        pairs = np.zeros((q_blocks, kv_blocks), bool)
        still = True
        for r in range(run_mask.shape[0]):
            for j in np.flatnonzero(run_mask[r]):
                pairs[(nxt[r, j], r) if dkv else (r, nxt[r, j])] = True
            started = np.cumsum(run_mask[r]) > 0
            for j in range(1, run_mask.shape[1]):
                still &= bool(run_mask[r, j] or not started[j] or nxt[r, j] == nxt[r, j - 1])
        out.append((pairs, still))
    return out


@settings(max_examples=max(1, settings.default.max_examples // 2), deadline=None)
@given(st.tuples(
    st.sampled_from([256, 512, 1024]), st.sampled_from([256, 512, 1024]),
    st.sampled_from([128, 256]), st.sampled_from([128, 256]), st.booleans(),
    st.one_of(st.none(), st.tuples(st.sampled_from([64, 200]), st.sampled_from([0, 300]))),
    st.lists(st.integers(1, 400), min_size=1, max_size=6),
    st.one_of(st.none(), st.lists(st.integers(1, 400), min_size=1, max_size=6))))
@example((512, 512, 128, 128, True, None, [100, 200, 212], None))
@example((256, 512, 128, 256, False, (128, 64), [128, 128], [300, 212]))
def test_splash_skips_exactly_the_blocks_between_documents(drawn):
    """The kernel's block tables with segment ids (`compat.splash_skipping`), read back: each
    table computes the blocks its static mask (causality, the window) computes that hold a query
    and a key of one segment, found here by comparing every id with every id, and a query block
    that holds no such pair keeps all of its blocks; a skipped step copies nothing in."""
    T, S, bq, bkv, causal, window, q_lengths, kv_lengths = drawn
    q_ids = np.resize(packed(*q_lengths), T)  # ids rise, then repeat: a run may recur
    kv_ids = q_ids if kv_lengths is None and S == T else np.resize(
        packed(*(kv_lengths or q_lengths)), S)
    static = splash._kernel(1, T, S, causal, window, bq, bkv, False, True)
    keep = splash.shared_blocks(jnp.asarray(q_ids, jnp.int32), jnp.asarray(kv_ids, jnp.int32),
                                bq, bkv)
    skipping = compat.splash_skipping(static, keep)
    same = (q_ids[:, None] == kv_ids[None, :]).reshape(T // bq, bq, S // bkv, bkv).any((1, 3))
    sorted_ids = bool(np.all(np.diff(q_ids) >= 0) and np.all(np.diff(kv_ids) >= 0))
    for (before, _), (after, still) in zip(_computed_pairs(static, T // bq, S // bkv),
                                           _computed_pairs(skipping, T // bq, S // bkv)):
        needed = before & (same | ~same.any(1, keepdims=True))
        assert not (needed & ~after).any(), "a block with a query and key of one segment skipped"
        assert not (after & ~before).any(), "a block the static mask hides computed"
        if sorted_ids:
            np.testing.assert_array_equal(after, needed)
        assert still, "a skipped step fetches a new block"


def test_free_id_and_kernel_ids():
    """The id the keys past a length get is one no valid query carries, also when the queries
    use int32's ends; without segment ids the lengths are the kernels' ids, as before."""
    ids = jnp.asarray([[INT32.min, INT32.max, 0, 1], [INT32.min, INT32.min + 1, 5, INT32.max],
                       [3, 3, 3, 3], [INT32.min, INT32.min + 2, INT32.max, 7]], jnp.int32)
    free = np.asarray(splash.free_id(ids))
    for row, f in zip(np.asarray(ids), free):
        assert f not in row, (row, f)
    valid = jnp.asarray([[True, True, False, False]] * 4)
    free = np.asarray(splash.free_id(ids, valid))
    for row, ok, f in zip(np.asarray(ids), np.asarray(valid), free):
        assert f not in row[ok], (row, f)
    q, kv = splash.kernel_segment_ids(2, 3, 4, jnp.array([3, 1]), jnp.array([2, 4]),
                                      jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 4), jnp.int32))
    np.testing.assert_array_equal(np.asarray(kv), [[0, 0, -1, -1], [0, 0, 0, 0]])
    lengths = splash.kernel_segment_ids(1, 2, 3, None, jnp.array([2]), None, None)
    np.testing.assert_array_equal(np.asarray(lengths[1]), [[1, 1, 0]])


@settings(max_examples=max(2, settings.default.max_examples))
@given(packing_cases(max_len=9))
# one array of ids for both and a key length: queries 2 and 3 (id 1) see no key of theirs
@example(case(B=1, T=4, N=1, H=4, q_ids=[packed(2, 2)], self_ids=True, kv_len=[2]))
@example(case(B=2, T=5, N=2, H=4, q_ids=[packed(2, 3), packed(5)], self_ids=True, causal=True,
              window=(1, 0)))  # one array, no length: every query sees its own key
def test_rows_that_see_a_key_without_the_t_by_s_comparison(c):
    """`rows_visible` (a binary search over the keys sorted by id) against the reference's rule,
    for the windows and alignments the kernels take; ``segment_ids=`` (one array for both: no
    search without a key length) where the case has one."""
    B, T, S, N, K = (c[n] for n in "BTSNK")
    q_ids, kv_ids = ids_of(c)
    offset = S - T if c["align"] == "bottom_right" else 0
    got = rows_visible(B, T, N, S, K, *[None if c[n] is None else jnp.asarray(c[n], jnp.int32)
                                        for n in ("q_len", "kv_len")], None,
                       is_causal=c["causal"], window=c["window"], offset=offset,
                       q_seg=jnp.asarray(q_ids, jnp.int32), kv_seg=jnp.asarray(kv_ids, jnp.int32),
                       same_ids=c["self_ids"])
    want = visible_rows(dict(c, mask=None))
    np.testing.assert_array_equal(np.broadcast_to(np.asarray(got)[..., 0], want.shape), want)


# --- decoding: the causal alignment -----------------------------------------------------------

def test_one_query_bottom_right_sees_every_key():
    """Decoding one token against a cache of S keys: bottom-right, the query sits at the last
    key and sees them all (non-causal attention); top-left (jax.nn's) it sees key 0 only."""
    ks = jax.random.split(jax.random.key(1), 3)
    q = jax.random.normal(ks[0], (2, 1, 4, 8))
    k, v = (jax.random.normal(key, (2, 6, 2, 8)) for key in ks[1:])
    def outputs(q, k, v):
        full = portable_rnn.dot_product_attention(q, k, v, implementation="xla")
        with jax.default_matmul_precision("highest"):
            stock = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        return full, stock, {impl: [portable_rnn.dot_product_attention(
            q, k, v, is_causal=True, causal_alignment=a, implementation=impl)
            for a in ("bottom_right", "top_left")] for impl in ("xla", "chunked")}

    full, stock, got = jax.jit(outputs)(q, k, v)
    for br, tl in got.values():
        np.testing.assert_allclose(np.asarray(br), np.asarray(full), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(tl), np.asarray(jnp.repeat(v[:, :1], 2, axis=2)),
                                   rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(tl), np.asarray(stock), rtol=1e-6, atol=1e-6)


# --- what each route serves, and why not ------------------------------------------------------

def _sds(B, T, S, N=8, K=8, H=128, dtype=BF):
    return (jax.ShapeDtypeStruct((B, T, N, H), dtype),
            jax.ShapeDtypeStruct((B, S, K, H), dtype), jax.ShapeDtypeStruct((B, S, K, H), dtype))


IDS = jax.ShapeDtypeStruct((2, 2048), jnp.int32)


@pytest.mark.cpu  # decisions only: the same on every platform
def test_splash_serves_segments_cap_and_bottom_right_on_a_tpu():
    q, k, v = _sds(2, 2048, 2048)
    d = portable_rnn.explain_attention(q, k, v, segment_ids=IDS, is_causal=True,
                                       logits_soft_cap=50.0, capabilities=TPU)
    assert d.implementation == "splash", d
    assert any("segment ids as the kernel's segment ids" in n for n in d.notes), d.notes
    assert any("soft-capped to 50 * tanh(logits / 50)" in n for n in d.notes), d.notes
    q, k, v = _sds(2, 128, 2048)
    d = portable_rnn.explain_attention(q, k, v, is_causal=True, causal_alignment="bottom_right",
                                       implementation="splash", capabilities=TPU)
    assert any("query t sits at key t + 1920" in n for n in d.notes), d.notes


@pytest.mark.cpu  # decisions only: the same on every platform
@pytest.mark.parametrize("impl,kw,match", [
    ("splash", dict(T=256, S=128, is_causal=True, causal_alignment="bottom_right"),
     r"causal_alignment='bottom_right' with T=256 > S=128: the first queries see no key"),
    ("flash", dict(T=128, S=256, is_causal=True, causal_alignment="bottom_right"),
     r"causal_alignment='bottom_right' with T=128 != S=256: the flash kernel's causal mask is "
     r"aligned top-left"),
    ("flash", dict(T=128, S=128, logits_soft_cap=20.0),
     r"logits_soft_cap=20: the flash kernel has no logits soft cap \(the splash route does\)"),
    ("cudnn", dict(T=128, S=128, segments=True),
     r"segment ids: jax.nn.dot_product_attention \(jax [\d.]+\) takes none"),
    ("cudnn", dict(T=128, S=128, logits_soft_cap=20.0),
     r"logits_soft_cap=20: jax.nn.dot_product_attention \(jax [\d.]+\) has no logits soft cap"),
    ("cudnn", dict(T=1, S=128, is_causal=True, causal_alignment="bottom_right"),
     r"causal_alignment='bottom_right' with T=1 != S=128: JAX's cuDNN attention aligns its "
     r"causal mask and window top-left"),
])
def test_routes_that_cannot_serve_a_feature_say_why_and_the_call_falls_back(impl, kw, match):
    T, S = kw.pop("T"), kw.pop("S")
    if kw.pop("segments", False):
        kw.update(query_segment_ids=jax.ShapeDtypeStruct((2, T), jnp.int32),
                  key_value_segment_ids=jax.ShapeDtypeStruct((2, S), jnp.int32))
    caps = GPU if impl == "cudnn" else TPU
    H = 64 if impl == "cudnn" else 128
    q, k, v = _sds(2, T, S, H=H)
    with pytest.raises(ValueError, match=match):
        portable_rnn.explain_attention(q, k, v, implementation=impl, capabilities=caps, **kw)
    with portable_rnn.policy(attention=impl):  # preferred, not asked for: it falls back
        d = portable_rnn.explain_attention(q, k, v, capabilities=caps, **kw)
    assert d.implementation != impl and d.fell_back
    assert any(re.search(match, r) for r in d.rejected[impl]), d.rejected[impl]


@pytest.mark.cpu  # decisions only: the same on every platform
def test_alignment_matters_only_where_t_differs_from_s():
    """T == S: both alignments are one; cuDNN and flash serve a bottom-right call there."""
    q, k, v = _sds(2, 128, 128, H=64)
    d = portable_rnn.explain_attention(q, k, v, is_causal=True, causal_alignment="bottom_right",
                                       capabilities=GPU)
    assert d.implementation == "cudnn", d
    q, k, v = _sds(2, 128, 128)
    d = portable_rnn.explain_attention(q, k, v, is_causal=True, causal_alignment="bottom_right",
                                       implementation="flash", capabilities=TPU)
    assert not any("alignment" in n for n in d.notes)


@pytest.mark.cpu  # the cuDNN emulation lowers for the CPU only
def test_cudnn_serves_bottom_right_where_t_equals_s():
    """Through the test-only emulation of JAX's cuDNN primitives (tests/cudnn_emulation.py): a
    bottom-right call with T == S is cuDNN's ordinary causal call, values and gradients as the
    dense path's."""
    from cudnn_emulation import emulated_cudnn_attention

    ks = jax.random.split(jax.random.key(2), 3)
    q, k, v = (jax.random.normal(key, (2, 16, 2, 16), BF) for key in ks)

    def loss(impl):
        return lambda q, k, v: jnp.sum(portable_rnn.dot_product_attention(
            q, k, v, is_causal=True, causal_alignment="bottom_right", implementation=impl,
            capabilities=GPU).astype(jnp.float32) ** 2)

    with emulated_cudnn_attention():
        got = jax.jit(jax.value_and_grad(loss("cudnn"), (0, 1, 2)))(q, k, v)
        want = jax.jit(jax.value_and_grad(loss("xla"), (0, 1, 2)))(q, k, v)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2 * (1 + np.abs(b).max()))


@pytest.mark.cpu  # the routing model's arithmetic
@settings(max_examples=max(10, settings.default.max_examples * 3))
@given(st.integers(1, 40), st.integers(1, 40), st.booleans(),
       st.one_of(st.none(), st.tuples(st.integers(0, 9), st.integers(0, 9))),
       st.integers(1, 9), st.integers(1, 9))
def test_the_routing_model_counts_the_keys_a_bottom_right_alignment_shows(T, S, causal, window,
                                                                          bq, bk):
    """The cost terms' visible pairs and tiles against a (T, S) mask at the offset S - T."""
    from portable_rnn._src.attention import cost

    shape = dict(T=T, S=S, causal=causal, window=None if window is None else list(window),
                 offset=S - T)
    t, s = np.arange(T)[:, None] + S - T, np.arange(S)[None, :]
    vis = np.ones((T, S), bool)
    if causal:
        vis &= s <= t
    if window is not None:
        vis &= (s >= t - window[0]) & (s <= t + window[1])
    assert cost.visible(shape) == vis.sum()
    tiles = sum(vis[i:i + bq, j:j + bk].any() for i in range(0, T, bq) for j in range(0, S, bk))
    assert cost.visible(shape, (bq, bk)) == tiles


# --- arguments --------------------------------------------------------------------------------

@pytest.mark.cpu  # raised at trace time: the same on every platform
@pytest.mark.parametrize("kw,error,match", [
    (dict(segment_ids=np.zeros((2, 6), np.float32)), TypeError,
     r"`segment_ids` must have an integer dtype \(int32\); got float32"),
    (dict(segment_ids=np.zeros((2, 5), np.int32)), ValueError,
     r"`segment_ids` must have shape \(B, T\)=\(2, 6\); got \(2, 5\)"),
    (dict(query_segment_ids=np.zeros((2, 6), np.int32)), ValueError,
     r"`query_segment_ids` and `key_value_segment_ids` go together: `key_value_segment_ids` is "
     r"missing"),
    (dict(key_value_segment_ids=np.zeros((2, 4), np.int32), T=6, S=4), ValueError,
     r"go together: `query_segment_ids` is missing"),
    (dict(query_segment_ids=np.zeros((2, 6), np.int32),
          key_value_segment_ids=np.zeros((2, 6), np.int32),
          segment_ids=np.zeros((2, 6), np.int32)), ValueError,
     r"`segment_ids` \(self-attention.*cannot be combined with `query_segment_ids` and "
     r"`key_value_segment_ids`"),
    (dict(segment_ids=np.zeros((2, 6), np.int32), S=4), ValueError,
     r"`segment_ids` are the ids of both the queries and the keys: T=6 and S=4 differ"),
    (dict(query_segment_ids=np.zeros((2, 6), np.int32),
          key_value_segment_ids=np.zeros((2, 6), np.int32), S=4), ValueError,
     r"`key_value_segment_ids` must have shape \(B, S\)=\(2, 4\); got \(2, 6\)"),
    (dict(segment_ids=np.full((2, 6), 2**40, np.int64)), ValueError,
     r"`segment_ids` must lie in int32's range"),
    (dict(causal_alignment="bottom-right"), ValueError,
     r"`causal_alignment` must be one of 'top_left', 'bottom_right'; got 'bottom-right'"),
    (dict(causal_alignment=None), ValueError, r"`causal_alignment` must be one of"),
    (dict(logits_soft_cap=0.0), ValueError,
     r"`logits_soft_cap` must be None or a finite float > 0; got 0.0"),
    (dict(logits_soft_cap=True), ValueError, r"`logits_soft_cap` must be None or a finite"),
    (dict(logits_soft_cap=float("inf")), ValueError, r"finite float > 0; got inf"),
    (dict(logits_soft_cap=30.0, dtype=jnp.complex64), TypeError,
     r"`logits_soft_cap` with complex64 inputs: tanh does not cap complex logits"),
])
def test_bad_arguments_name_the_argument(kw, error, match):
    T, S = kw.pop("T", 6), kw.pop("S", 6)
    dtype = kw.pop("dtype", jnp.float32)
    q, k = jnp.zeros((2, T, 2, 8), dtype), jnp.zeros((2, S, 2, 8), dtype)
    with pytest.raises(error, match=match):
        portable_rnn.dot_product_attention(q, k, k, **kw)
    with pytest.raises(error, match=match):
        portable_rnn.explain_attention(q, k, k, **kw)


@pytest.mark.cpu  # raised at trace time: the same on every platform
def test_a_traced_soft_cap_is_refused_and_unbatched_ids_are_taken():
    q = jnp.ones((6, 2, 8))
    with pytest.raises(TypeError, match=r"`logits_soft_cap` must be None or a static Python "
                                        r"float > 0, not a traced value"):
        jax.jit(lambda c: portable_rnn.dot_product_attention(q, q, q, logits_soft_cap=c))(2.0)
    out = portable_rnn.dot_product_attention(q, q, q, segment_ids=jnp.array([0, 0, 0, 1, 1, 1]))
    batched = portable_rnn.dot_product_attention(q[None], q[None], q[None],
                                                 segment_ids=jnp.array([[0, 0, 0, 1, 1, 1]]))
    np.testing.assert_allclose(np.asarray(out), np.asarray(batched[0]), rtol=1e-6)


# --- transforms and the Flax adapter ----------------------------------------------------------

def test_vmap_and_grad_with_segment_ids():
    """The ids batched along with the operands under vmap (one row at a time) give the batched
    call's output and gradients, on both portable paths."""
    c = case(B=2, T=8, N=2, K=1, q_ids=[packed(3, 5), packed(8)], self_ids=True, causal=True,
             cap=2.0)
    (q, k, v), _ = inputs(c, jnp.float32)
    ids = jnp.asarray(ids_of(c)[0], jnp.int32)
    for impl in ("xla", "chunked"):
        def f(q, k, v, ids, impl=impl):
            return portable_rnn.dot_product_attention(q, k, v, segment_ids=ids, is_causal=True,
                                                      logits_soft_cap=2.0, implementation=impl)

        def both(q, k, v, ids, f=f):
            one = lambda q, k, v, i: f(q[None], k[None], v[None], i[None])[0]  # noqa: E731
            rows = jax.vmap(one)(q, k, v, ids)
            loss = lambda g: lambda q: jnp.sum(g(q) ** 2)  # noqa: E731
            return (rows, f(q, k, v, ids),
                    jax.grad(loss(lambda q: jax.vmap(one)(q, k, v, ids)))(q),
                    jax.grad(loss(lambda q: f(q, k, v, ids)))(q))

        rows, batched, g_rows, g_batched = jax.jit(both)(q, k, v, ids)
        np.testing.assert_allclose(np.asarray(rows), np.asarray(batched), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(g_rows), np.asarray(g_batched), rtol=1e-5,
                                   atol=1e-6)
        assert bool(jnp.all(jnp.isfinite(g_batched)))


def test_flax_attention_fn_takes_segment_ids_soft_cap_and_alignment():
    """`portable_rnn.linen.attention_fn` with the keywords through `functools.partial`, in a
    Flax module, with extra batch dims: the output is the functional op's; the sown weights
    keep each query's segment (0 across segments)."""
    import flax.linen as nn

    from portable_rnn import linen as plinen

    B, T, F = 2, 8, 16
    x = jax.random.normal(jax.random.key(0), (B, T, F))
    ids = jnp.asarray([packed(3, 5), packed(8)], jnp.int32)
    fn = functools.partial(plinen.attention_fn, segment_ids=ids, logits_soft_cap=3.0,
                           causal_alignment="bottom_right", is_causal=True)
    module = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16, attention_fn=fn)
    params = module.init(jax.random.key(1), x)
    out, state = module.apply(params, x, sow_weights=True, mutable=["intermediates"])
    weights = state["intermediates"]["attention_weights"][0]  # (B, N, T, S)
    across = np.asarray(ids)[:, None, :, None] != np.asarray(ids)[:, None, None, :]
    assert not np.asarray(weights)[np.broadcast_to(across, weights.shape)].any()
    plain = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16, attention_fn=(
        lambda q, k, v, **kw: portable_rnn.dot_product_attention(
            q, k, v, segment_ids=ids, logits_soft_cap=3.0, is_causal=True)))
    np.testing.assert_allclose(np.asarray(out), np.asarray(plain.apply(params, x)), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match=r"`segment_ids` must have shape \(\*batch, T\)"):
        plinen.attention_fn(x.reshape(B, T, 2, 8), x.reshape(B, T, 2, 8),
                            x.reshape(B, T, 2, 8), segment_ids=ids[:, :4])


# --- memory -----------------------------------------------------------------------------------

@pytest.mark.cpu  # XLA:CPU's memory analysis of a compiled program
def test_chunked_path_with_segment_ids_keeps_o_of_t_temporaries():
    """Forward and backward at T = S = 32768 with segment ids (and causality, lengths and a soft
    cap), compiled for the CPU: XLA's temporaries stay far below the T x S logits (4 GiB in
    float32; measured 25 MB), so the mask is never materialised."""
    T = 32768
    x = jax.ShapeDtypeStruct((1, T, 1, 64), jnp.float32)
    ids = jax.ShapeDtypeStruct((1, T), jnp.int32)
    lengths = jax.ShapeDtypeStruct((1,), jnp.int32)

    def loss(q, k, v, ids, kv_len):
        return jnp.sum(portable_rnn.dot_product_attention(
            q, k, v, segment_ids=ids, is_causal=True, key_value_seq_lengths=kv_len,
            logits_soft_cap=30.0, implementation="chunked"))

    compiled = jax.jit(jax.value_and_grad(loss, (0, 1, 2))).lower(x, x, x, ids, lengths).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp < T * T * 4 / 64, f"{temp / 2**20:.0f} MiB of temporaries"
    assert temp < 40 * T * 64 * 4, f"{temp / 2**20:.0f} MiB: more than a few (T, H) arrays"

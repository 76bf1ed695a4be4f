"""What the attention paths share: the visibility rule, the masked logits and softmax, and the
facts of a checked call.

Internal form (checked and canonicalised by `api`): query (B, T, N, H); key, value (B, S, K, H)
with N a multiple of K (G = N // K query heads share a key/value head); bias and mask 4-D and
broadcastable to (B, N, T, S) (every dimension 1 or full); lengths int32 (B,) or None; segment
ids int32 (B, T) and (B, S), or None; window ``(left, right)`` or None; the causal offset an int
(0 top-left, S - T bottom-right).

A key is *visible* to a query when the mask allows it, it is not in the future (causal), it lies
in the window, both positions are inside their sequence lengths and both carry the same segment
id. Causality and the window read query t at key position ``t + offset``. A query with no
visible key gets output 0 and zero gradients (not the uniform average over masked keys).

Logits are ``scale * q.k``, then soft-capped (``cap * tanh(logits / cap)``), then biased.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core import checks
from ..core.capabilities import Capabilities
from ..core.profile import profile

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Call:
    """The checked facts of one attention call, which every route decides and runs from."""

    B: int
    T: int
    N: int
    H: int
    S: int
    K: int
    dtype: np.dtype
    bias_shape: tuple[int, ...] | None
    mask_shape: tuple[int, ...] | None
    bias_dtype: np.dtype | None
    q_len: Any  # int32 (B,) lengths, or None
    kv_len: Any
    window: tuple[int, int] | None
    scale: Any  # a float, or a traced scalar
    is_causal: bool
    has_lengths: bool
    return_residual: bool
    precision: Any
    preferred: str | None  # the policy's preferred route
    varying: frozenset = frozenset()  # the manual mesh axes (shard_map) the operands vary over
    # Attention-weight dropout (Flax's `dropout_rate` in training): None, or ``(keep, rate)``
    # with `keep` a boolean array broadcastable to (B, N, T, S) and `rate` a float.
    dropout: Any = None
    q_seg: Any = None  # int32 (B, T) query segment ids, or None
    kv_seg: Any = None  # int32 (B, S) key/value segment ids (both or neither)
    same_ids: bool = False  # one array of ids for the queries and the keys (``segment_ids=``)
    soft_cap: float | None = None  # logits become soft_cap * tanh(logits / soft_cap)
    causal_alignment: str = "top_left"  # or "bottom_right": query t sits at key t + S - T

    @property
    def complex(self) -> bool:
        return bool(jnp.issubdtype(self.dtype, jnp.complexfloating))

    @property
    def has_segments(self) -> bool:
        return self.q_seg is not None

    @property
    def causal_offset(self) -> int:
        """The key position of query 0 for causality and the window (`causal_offset`)."""
        return causal_offset(self.causal_alignment, self.T, self.S)

    @property
    def offset_matters(self) -> bool:
        """Whether the alignment changes what a query sees: bottom-right with T != S, and
        causality or a window to align."""
        return self.causal_offset != 0 and (self.is_causal or self.window is not None)


ALIGNMENTS = ("top_left", "bottom_right")


def causal_offset(alignment: str, T: int, S: int) -> int:
    """The key position query 0 sits at: 0 top-left (as `jax.nn`), S - T bottom-right (the last
    query at the last key, as PyTorch's ``causal_lower_right`` and flash-attn)."""
    return S - T if alignment == "bottom_right" else 0


def soft_cap_logits(logits, cap):
    """``cap * tanh(logits / cap)`` (None: the logits as they are)."""
    if cap is None:
        return logits
    cap = jnp.asarray(cap, logits.dtype)
    return cap * jnp.tanh(logits / cap)


def dropout_rejects(call: Call) -> tuple[str, ...]:
    """Why a route without attention-weight dropout cannot serve `call` (only the dense path
    applies it)."""
    if call.dropout is None:
        return ()
    return (f"attention dropout runs on the dense path only (dropout rate {call.dropout[1]}): "
            "this path has no attention weights to drop",)


def feature_notes(call: Call, segments: str = "") -> tuple[str, ...]:
    """What a route that serves them says of a call's segment ids (`segments`: how it
    compares them), soft cap and causal alignment."""
    out = []
    if call.has_segments:
        out.append("segment ids: each query sees only the keys of its own segment"
                   + (f" ({segments})" if segments else ""))
    if call.soft_cap is not None:
        out.append(f"logits soft-capped to {call.soft_cap:g} * tanh(logits / {call.soft_cap:g}), "
                   "after the scale, before the bias")
    if call.offset_matters:
        out.append(f"causal alignment bottom-right: query t sits at key t + {call.causal_offset}"
                   " (S - T) for causality and the window")
    return tuple(out)


def upcast(caps: Capabilities) -> bool:
    """Whether the portable paths multiply 16-bit operands as float32 on `caps`' platform
    (`Profile.upcast_attention`; see `to_accumulation`)."""
    return profile(caps).upcast_attention


def upcast_notes(caps: Capabilities, dtype) -> tuple[str, ...]:
    """Where the profile says so (CPUs), 16-bit operands are multiplied in float32."""
    return (("16-bit operands upcast to float32 for the dots (XLA:CPU lacks a 16-bit x "
             "16-bit = float32 dot in some layouts; the products are exact)",)
            if upcast(caps) and dtype.itemsize == 2 else ())


def precision_notes(precision) -> tuple[str, ...]:
    """The precision of the products, when one is asked for (argument or JAX's default)."""
    text = checks.precision_text(precision)
    return () if text is None else (f"both products at precision {text}",)


def arange(n: int) -> Array:
    """Positions and block indices are int32 everywhere, also under jax_enable_x64."""
    return jnp.arange(n, dtype=jnp.int32)


def acc_dtype(dtype) -> np.dtype:
    return np.promote_types(dtype, np.float32)


def grouped(a: Array | None, num_kv_heads: int) -> Array | None:
    """(b, n, t, s) -> (b, K|1, G|1, t, s): heads split as the query's (K, G)."""
    if a is None:
        return None
    b, n, t, s = a.shape
    if n == 1:
        return a[:, :, None]
    return a.reshape(b, num_kv_heads, n // num_kv_heads, t, s)


def visible(t: Array, s: Array, *, steps: int, keys: int, q_len, kv_len, mask, is_causal: bool,
            window, offset: int = 0, q_seg=None, kv_seg=None) -> Array:
    """Which (query t, key s) pairs attend: bool, broadcastable to (B, K, G, len(t), len(s)).

    `t` and `s` are global positions (a block's, or all); positions >= `steps`/`keys` are padding.
    `mask` is the grouped mask already sliced to these positions, or None; `q_seg` and `kv_seg`
    the segment ids of these positions, (B, len(t)) and (B, len(s)), or None. Causality and the
    window place query t at key position ``t + offset``.
    """
    tt, ss = t[:, None], s[None, :]
    vis = (tt < steps) & (ss < keys)
    at = tt + offset if offset else tt
    if is_causal:
        vis &= ss <= at
    if window is not None:
        left, right = window
        vis &= (ss >= at - left) & (ss <= at + right)
    vis = vis[None, None, None]
    if q_seg is not None:
        vis &= (q_seg[:, :, None] == kv_seg[:, None, :])[:, None, None]
    if q_len is not None:
        vis &= (t[None, :] < q_len[:, None])[:, None, None, :, None]
    if kv_len is not None:
        vis &= (s[None, :] < kv_len[:, None])[:, None, None, None, :]
    if mask is not None:
        vis &= mask
    return vis


def einsum(spec: str, a: Array, b: Array, acc, precision) -> Array:
    return jnp.einsum(spec, a, b, preferred_element_type=acc, precision=precision)


def to_accumulation(acc, *arrays):
    """`arrays` in the accumulation dtype, for a program lowered for the CPU: XLA:CPU runs a dot
    of 16-bit operands with a float32 result only in some layouts (others fail at run time:
    "Unsupported element type for DotThunk::Execute: BF16 x BF16 = F32"). The products are the
    same: a product of two 16-bit floats is exact in float32."""
    return tuple(a.astype(acc) for a in arrays)


def qk(q, k, acc, precision):
    """q (B, t, K, G, H), k (B, s, K, H) -> (B, K, G, t, s); without a group axis when G == 1
    (XLA:CPU runs the 4-D contraction markedly faster)."""
    if q.shape[3] == 1:
        logits = einsum("btkh,bskh->bkts", q[:, :, :, 0], k, acc, precision)
        return logits[:, :, None]
    return einsum("btkgh,bskh->bkgts", q, k, acc, precision)


def pv(p, v, acc, precision):
    """p (B, K, G, t, s), v (B, s, K, H) -> (B, t, K, G, H)."""
    if p.shape[2] == 1:
        out = einsum("bkts,bskh->btkh", p[:, :, 0], v, acc, precision)
        return out[:, :, :, None]
    return einsum("bkgts,bskh->btkgh", p, v, acc, precision)


def hidden_logit(dtype) -> float:
    """The logit of a hidden key: large, negative and finite (no Inf under jax_debug_infs)."""
    return -0.7 * float(jnp.finfo(dtype).max)


def masked_logits(q, k, bias, vis, scale, acc, precision, soft_cap=None):
    """q (B, t, K, G, H), k (B, s, K, H) -> masked logits (B, K, G, t, s), `hidden_logit` where
    hidden; scaled, soft-capped (`soft_cap_logits`), then biased."""
    logits = qk(q, k, acc, precision)
    logits = soft_cap_logits(logits * jnp.asarray(scale, acc), soft_cap)
    if bias is not None:
        logits = logits + bias.astype(acc)
    return jnp.where(vis, logits, jnp.asarray(hidden_logit(acc), acc))


@jax.custom_jvp
def softmax(x, vis):
    """Softmax over the last axis of the visible entries; an all-hidden row gives 0.

    Complex logits (Flax's attention takes complex inputs) give the analytic softmax,
    ``exp(x) / sum(exp(x))``, shifted by the largest real part."""
    if jnp.iscomplexobj(x):
        m = jnp.max(x.real, axis=-1, keepdims=True).astype(x.dtype)
        e = jnp.where(vis, jnp.exp(x - m), 0)
        total = jnp.sum(e, axis=-1, keepdims=True)
        return e / jnp.where(total != 0, total, 1)
    m = jnp.max(x, axis=-1, keepdims=True)
    e = jnp.where(vis, jnp.exp(x - jnp.where(jnp.isfinite(m), m, 0)), 0)
    total = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(total > 0, total, 1)


@softmax.defjvp
def _softmax_jvp(primals, tangents):
    (x, vis), (dx, _) = primals, tangents
    y = softmax(x, vis)
    return y, y * (dx - jnp.sum(y * dx, axis=-1, keepdims=True))


def logsumexp(logits, vis, acc):
    """(B, K, G, t, s) masked logits -> log-sum-exp over the visible keys, (B, t, K * G);
    `hidden_logit` for a query that sees no key."""
    m = lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    m = jnp.where(jnp.isfinite(m), m, 0)
    total = jnp.sum(jnp.where(vis, jnp.exp(logits - m), 0), axis=-1)
    lse = jnp.where(total > 0, m[..., 0] + jnp.log(jnp.where(total > 0, total, 1)),
                    hidden_logit(acc))
    B, K, G, t = lse.shape
    return lse.transpose(0, 3, 1, 2).reshape(B, t, K * G)


def rows_visible(B, T, N, S, K, q_len, kv_len, mask, *, is_causal, window, offset: int = 0,
                 q_seg=None, kv_seg=None, same_ids: bool = False) -> Array:
    """Whether each query row sees at least one key: bool, broadcastable to (B, T, N, 1).

    Without a mask, in O(T + S) memory: each query sees a contiguous range of key positions
    (causality, the window, the key length), and with segment ids it sees a key when its own id
    occurs in that range (`_id_in_range`). With one array of ids for both (`same_ids`:
    ``segment_ids=``) and no key length, every query's range holds its own position (the
    window's sides are >= 0 and T == S), so its own key: no search."""
    t = arange(T)
    if mask is not None:  # the mask is dense already: reduce the full visibility
        vis = visible(t, arange(S), steps=T, keys=S, q_len=q_len, kv_len=kv_len,
                      mask=grouped(mask, K), is_causal=is_causal, window=window, offset=offset,
                      q_seg=q_seg, kv_seg=kv_seg)
        rows = jnp.any(vis, axis=-1)  # (b, K|1, G|1, T)
        rows = jnp.broadcast_to(rows, rows.shape[:1] + (K, N // K, T)).reshape(-1, N, T)
        return rows.swapaxes(1, 2)[..., None]
    sees_own = own_key_visible(same_ids, kv_len)
    if _all_visible(T, S, q_len, kv_len, is_causal=is_causal, window=window, offset=offset,
                    segments=q_seg is not None, sees_own=sees_own):
        return jnp.ones((1, 1, 1, 1), bool)  # a constant: XLA drops the select on it
    at = t + offset
    lo = jnp.zeros_like(t)
    hi = jnp.full_like(t, S - 1)
    if window is not None:
        lo = jnp.maximum(lo, at - window[0])
        hi = jnp.minimum(hi, at + window[1])
    if is_causal:
        hi = jnp.minimum(hi, at)
    lo, hi = lo[None, :], hi[None, :]
    if kv_len is not None:
        hi = jnp.minimum(hi, kv_len[:, None] - 1)
    rows = lo <= hi
    if q_len is not None:
        rows = rows & (t[None, :] < q_len[:, None])
    if q_seg is not None and not sees_own:
        rows = rows & _id_in_range(q_seg, kv_seg, lo, hi)
    return rows[:, :, None, None]


def own_key_visible(same_ids: bool, kv_len) -> bool:
    """Whether each query's segment id is certain to be its own key's: one array of ids for the
    queries and the keys (`same_ids`) and no key length to hide that key."""
    return same_ids and kv_len is None


def _all_visible(T, S, q_len, kv_len, *, is_causal, window, offset, segments, sees_own) -> bool:
    """Whether, without a mask, every query row sees a key whatever the arrays hold: no
    lengths; causal queries at key positions >= 0; a window only where T == S (its sides are
    >= 0: each query's range holds its own position); ids, if any, such that each query sees
    its own key (`own_key_visible`)."""
    return (q_len is None and kv_len is None and S > 0 and (not is_causal or offset >= 0)
            and (window is None or T == S) and (not segments or sees_own))


def _id_in_range(q_seg, kv_seg, lo, hi) -> Array:
    """(B, T) bool: whether ``kv_seg[b, lo[b, t]:hi[b, t] + 1]`` holds ``q_seg[b, t]``.

    The keys sorted by (id, position); a binary search for the first key at or after
    ``(q_seg[b, t], lo[b, t])``, which must carry the query's id at a position <= ``hi``:
    O(S log S + T log S) work and O(T + S) memory, never the (T, S) comparison."""
    B, S = kv_seg.shape
    lo, hi = (jnp.broadcast_to(a, q_seg.shape) for a in (lo, hi))
    order = jnp.argsort(kv_seg, axis=1, stable=True).astype(jnp.int32)  # by id, then position
    ids = jnp.take_along_axis(kv_seg, order, axis=1)

    def step(_, bounds):
        a, b = bounds  # the answer lies in [a, b]
        mid = (a + b) // 2
        at = jnp.minimum(mid, S - 1)
        i, p = (jnp.take_along_axis(x, at, axis=1) for x in (ids, order))
        before = (i < q_seg) | ((i == q_seg) & (p < lo))
        searching = a < b
        return (jnp.where(searching & before, mid + 1, a),
                jnp.where(searching & ~before, mid, b))

    first, _ = lax.fori_loop(0, S.bit_length() + 1, step,
                             (jnp.zeros_like(q_seg), jnp.full_like(q_seg, S)))
    at = jnp.minimum(first, S - 1)
    return ((first < S) & (jnp.take_along_axis(ids, at, axis=1) == q_seg)
            & (jnp.take_along_axis(order, at, axis=1) <= hi))

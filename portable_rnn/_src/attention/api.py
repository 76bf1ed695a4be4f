"""`portable_rnn.dot_product_attention` and `explain_attention`: the checks, and the routes of
`routes.ROUTES` registered in their order of preference."""

from __future__ import annotations

import math
import numbers
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from ..core import checks, dispatch
from ..core.capabilities import Capabilities
from ..core.checks import own_rank_promotion
from ..core.compat import varying_axes
from ..core.dispatch import Decision
from . import cost
from .math import ALIGNMENTS, Call, hidden_logit
from .routes import ROUTES

Array = jax.Array


dispatch.register("attention", *ROUTES)
cost.group("attention")


def _window(value):
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (int(value), int(value))
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0
                       for v in value)):
        raise ValueError("`local_window_size` must be None, an int >= 0 or a pair (left, right) "
                         f"of ints >= 0; got {value!r}.")
    return (int(value[0]), int(value[1]))


def _scale(value):
    """None, a finite Python float, or a scalar array of a real dtype (a traced one included:
    a learned temperature). A traced array (or a `jax.ShapeDtypeStruct`) is returned as is, a
    concrete value as a float."""
    if value is None:
        return None
    is_array = hasattr(value, "shape") and hasattr(value, "dtype")
    if isinstance(value, (bool, np.bool_)) or not (isinstance(value, numbers.Real) or is_array):
        raise TypeError(f"`scale` must be None, a Python float or a scalar array; got {value!r}.")
    if not isinstance(value, numbers.Real):
        shape, dtype = checks.shape_dtype("scale", value)
        if shape != () or not (jnp.issubdtype(dtype, jnp.floating)
                               or jnp.issubdtype(dtype, jnp.integer)):
            raise TypeError("`scale` must be None, a Python float or a scalar array of a real "
                            f"dtype; got shape {shape} and dtype {dtype}.")
        if isinstance(value, (jax.core.Tracer, jax.ShapeDtypeStruct)):
            return value  # traced (or, for `explain_attention`, as if traced)
        value = np.asarray(value).item()
    if not math.isfinite(value):
        raise ValueError(f"`scale` must be finite; got {value!r}.")
    return float(value)


def checked_soft_cap(value):
    """None, or a finite Python float > 0 (static: the kernels take it at compile time)."""
    if value is None:
        return None
    if isinstance(value, (jax.core.Tracer, jax.ShapeDtypeStruct)):
        raise TypeError("`logits_soft_cap` must be None or a static Python float > 0, not a "
                        "traced value.")
    if hasattr(value, "shape") and np.shape(value) == () and not isinstance(value, bool):
        value = np.asarray(value).item()  # a concrete scalar array
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"`logits_soft_cap` must be None or a finite float > 0; got {value!r}.")
    return float(value)


def checked_alignment(value) -> str:
    if not (isinstance(value, str) and value in ALIGNMENTS):
        raise ValueError("`causal_alignment` must be one of "
                         f"{', '.join(repr(a) for a in ALIGNMENTS)}; got {value!r}.")
    return value


_INT32 = np.iinfo(np.int32)


def _segment_ids(name: str, value, B: int, n: int, axis: str, batched: bool):
    """Checks segment ids: an integer dtype, shape (B, n) ((n,) too for unbatched inputs);
    returns them as int32 (B, n) (a `jax.ShapeDtypeStruct` stays one). Concrete ids outside
    int32's range raise (traced ones are cast)."""
    shape, dtype = checks.shape_dtype(name, value)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"`{name}` must have an integer dtype (int32); got {dtype}.")
    if shape != (B, n) and (batched or shape != (n,)):
        raise ValueError(f"`{name}` must have shape (B, {axis})=({B}, {n})"
                         + ("" if batched else f" or ({axis},)=({n},) for unbatched inputs")
                         + f"; got {shape}.")
    if isinstance(value, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct((B, n), np.int32)
    if not isinstance(value, jax.core.Tracer) and np.dtype(dtype).itemsize > 4:
        concrete = np.asarray(value)
        bad = (concrete < _INT32.min) | (concrete > _INT32.max)
        if bad.any():
            raise ValueError(f"`{name}` must lie in int32's range [{_INT32.min}, {_INT32.max}]; "
                             f"got {concrete[bad].tolist()[:5]}.")
    return jnp.reshape(jnp.asarray(value), (B, n)).astype(np.int32)


def _segments(query_segment_ids, key_value_segment_ids, segment_ids, B, T, S, batched):
    """The checked (query, key/value) segment ids, or (None, None)."""
    if segment_ids is not None:
        given = [n for n, a in (("query_segment_ids", query_segment_ids),
                                ("key_value_segment_ids", key_value_segment_ids))
                 if a is not None]
        if given:
            names = " and ".join(f"`{n}`" for n in given)
            raise ValueError(f"`segment_ids` (self-attention: the ids of both the queries and the "
                             f"keys) cannot be combined with {names}; pass either.")
        if T != S:
            raise ValueError(f"`segment_ids` are the ids of both the queries and the keys: T={T} "
                             f"and S={S} differ; pass `query_segment_ids` (B, T) and "
                             "`key_value_segment_ids` (B, S).")
        ids = _segment_ids("segment_ids", segment_ids, B, T, "T", batched)
        return ids, ids
    if (query_segment_ids is None) != (key_value_segment_ids is None):
        missing = "key_value_segment_ids" if key_value_segment_ids is None else "query_segment_ids"
        raise ValueError(f"`query_segment_ids` and `key_value_segment_ids` go together: `{missing}`"
                         " is missing (for self-attention, `segment_ids` gives both).")
    if query_segment_ids is None:
        return None, None
    return (_segment_ids("query_segment_ids", query_segment_ids, B, T, "T", batched),
            _segment_ids("key_value_segment_ids", key_value_segment_ids, B, S, "S", batched))


def _as_4d(name, shape):
    if len(shape) > 4:
        raise ValueError(f"`{name}` must have at most 4 dimensions (broadcastable to "
                         f"(B, N, T, S)); got shape {shape}.")
    return (1,) * (4 - len(shape)) + tuple(shape)


_DIMS = {-4: "batch dims", -3: "lengths", -2: "num_heads", -1: "depths"}


def _mismatch(names: str, a, b, dims) -> str:
    """Which (B, T, N, H) dims of two shapes differ, in Flax's words ("q, k depths must match"),
    which code matching Flax's errors looks for."""
    a, b = (1,) * (4 - len(a)) + tuple(a), (1,) * (4 - len(b)) + tuple(b)
    return "; ".join(f"{names} {_DIMS[d]} must match" for d in dims if a[d] != b[d])


def check_attention_args(query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
                         key_value_seq_lengths, local_window_size, implementation,
                         precision=None, return_residual=False, dropout=None, *,
                         query_segment_ids=None, key_value_segment_ids=None, segment_ids=None,
                         logits_soft_cap=None, causal_alignment="top_left") -> Call:
    """Validates every argument at trace time; returns the facts the routes decide and run
    from. `dropout`: None or ``(keep, rate)``, checked by its caller (`Call.dropout`)."""
    checks.implementation(implementation, dispatch.implementations("attention"))
    checks.precision(precision)
    shapes = {}
    for name, a in (("query", query), ("key", key), ("value", value)):
        shape, dtype = checks.shape_dtype(name, a)
        if len(shape) not in (3, 4):
            raise ValueError(f"`{name}` must have shape (B, T, N, H) or (T, N, H); got shape "
                             f"{shape}.")
        checks.floating(name, dtype, complex_too=True)
        shapes[name] = (shape, dtype)
    (q_shape, q_dtype), (k_shape, k_dtype), (v_shape, v_dtype) = shapes.values()
    if not len(q_shape) == len(k_shape) == len(v_shape):
        raise ValueError(f"`query`, `key` and `value` must have the same rank; got shapes "
                         f"{q_shape}, {k_shape}, {v_shape}.")
    if not q_dtype == k_dtype == v_dtype:
        raise TypeError(f"`query`, `key` and `value` must have one dtype; got {q_dtype}, "
                        f"{k_dtype}, {v_dtype}.")
    if v_shape != k_shape:
        raise ValueError(f"`value` must have the shape of `key` {k_shape}; got {v_shape} "
                         f"({_mismatch('k, v', k_shape, v_shape, range(-4, 0))}).")
    q4 = (1,) * (4 - len(q_shape)) + tuple(q_shape)
    k4 = (1,) * (4 - len(k_shape)) + tuple(k_shape)
    B, T, N, H = q4
    _, S, K, Hk = k4
    if k4[0] != B or Hk != H:
        raise ValueError(f"`key` must have shape (B, S, K, H) with B={B} and H={H} from "
                         f"`query` {q_shape}; got {k_shape} "
                         f"({_mismatch('q, k', q4, k4, (-4, -1))}).")
    if K == 0 or N % K:
        raise ValueError(f"the number of query heads N={N} (`query` {q_shape}) must be a multiple "
                         f"of the number of key/value heads K={K} (`key` {k_shape}).")
    target = (B, N, T, S)
    extra = {}
    for name, a, want_bool in (("bias", bias, False), ("mask", mask, True)):
        if a is None:
            extra[name] = None
            continue
        shape, dtype = checks.shape_dtype(name, a)
        if want_bool and dtype != np.bool_:
            raise TypeError(f"`mask` must be boolean (True = attend); got {dtype}. Pass an "
                            "additive mask as `bias`.")
        if not want_bool:
            checks.floating(name, dtype, complex_too=jnp.issubdtype(q_dtype, jnp.complexfloating))
        s4 = _as_4d(name, shape)
        if any(d not in (1, t) for d, t in zip(s4, target)):
            raise ValueError(f"`{name}` must be broadcastable to (B, N, T, S)={target}; got "
                             f"shape {shape}.")
        extra[name] = s4
        extra[name + "_dtype"] = dtype
    lengths = {}
    policy = dispatch.current_policy()
    for name, a, limit, axis in (("query_seq_lengths", query_seq_lengths, T, "T"),
                                 ("key_value_seq_lengths", key_value_seq_lengths, S, "S")):
        lengths[name] = checks.seq_lengths(
            a, B, limit, name=name, axis=axis, check=policy.checkify_lengths)
    scale = _scale(scale)
    checks.static_bool("is_causal", is_causal)
    alignment = checked_alignment(causal_alignment)
    soft_cap = checked_soft_cap(logits_soft_cap)
    if soft_cap is not None and jnp.issubdtype(q_dtype, jnp.complexfloating):
        raise TypeError(f"`logits_soft_cap` with {q_dtype} inputs: tanh does not cap complex "
                        "logits; pass real inputs or logits_soft_cap=None.")
    q_seg, kv_seg = _segments(query_segment_ids, key_value_segment_ids, segment_ids, B, T, S,
                              batched=len(q_shape) == 4)
    same_ids = segment_ids is not None or (query_segment_ids is not None
                                           and query_segment_ids is key_value_segment_ids)
    return Call(B=B, T=T, N=N, H=H, S=S, K=K, dtype=q_dtype, bias_shape=extra["bias"],
                mask_shape=extra["mask"], bias_dtype=extra.get("bias_dtype"),
                q_len=lengths["query_seq_lengths"], kv_len=lengths["key_value_seq_lengths"],
                window=_window(local_window_size),
                scale=1.0 / math.sqrt(max(H, 1)) if scale is None else scale,
                is_causal=bool(is_causal),
                has_lengths=query_seq_lengths is not None or key_value_seq_lengths is not None,
                return_residual=bool(return_residual), precision=precision,
                preferred=policy.attention, dropout=dropout, q_seg=q_seg, kv_seg=kv_seg,
                same_ids=same_ids,
                soft_cap=soft_cap, causal_alignment=alignment,
                varying=frozenset().union(*(varying_axes(a) for a in (query, key, value)
                                            if isinstance(a, jax.Array))))


def _decide(query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
            key_value_seq_lengths, local_window_size, implementation, capabilities,
            return_residual=False, precision=None, dropout=None,
            **features) -> tuple[Decision, Call]:
    """`features`: the segment ids, soft cap and causal alignment (`check_attention_args`)."""
    call = check_attention_args(query, key, value, bias, mask, scale, is_causal,
                                query_seq_lengths, key_value_seq_lengths, local_window_size,
                                implementation, precision, return_residual, dropout, **features)
    checks.static_bool("return_residual", return_residual)
    if return_residual and call.complex:
        raise TypeError(f"`return_residual`=True with {call.dtype} inputs: the log-sum-exp of "
                        "complex logits is defined only up to multiples of 2*pi*i; pass real "
                        "inputs or return_residual=False.")
    caps = dispatch.resolve_capabilities(capabilities)
    return dispatch.choose("attention", call, caps, implementation, call.preferred), call


def explain_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
                      causal_alignment: Literal["top_left", "bottom_right"] = "top_left",
                      query_seq_lengths=None, key_value_seq_lengths=None,
                      query_segment_ids: ArrayLike | jax.ShapeDtypeStruct | None = None,
                      key_value_segment_ids: ArrayLike | jax.ShapeDtypeStruct | None = None,
                      segment_ids: ArrayLike | jax.ShapeDtypeStruct | None = None,
                      local_window_size=None, logits_soft_cap: float | None = None,
                      return_residual: bool = False, precision: lax.PrecisionLike = None,
                      implementation: str | None = None,
                      capabilities: Capabilities | None = None) -> Decision:
    """The routing decision `dot_product_attention` would make, with reasons; runs nothing.

    Takes the same arguments (arrays or `jax.ShapeDtypeStruct`s) and raises what
    `dot_product_attention` would raise for them, except a policy's ``on_fallback="error"``.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> q = jax.ShapeDtypeStruct((2, 4096, 8, 64), jnp.float32)
      >>> cpu = portable_rnn.Capabilities("cpu")
      >>> portable_rnn.explain_attention(q, q, q, capabilities=cpu).implementation
      'chunked'
    """
    return _decide(query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
                   key_value_seq_lengths, local_window_size, implementation, capabilities,
                   return_residual, precision, query_segment_ids=query_segment_ids,
                   key_value_segment_ids=key_value_segment_ids, segment_ids=segment_ids,
                   logits_soft_cap=logits_soft_cap, causal_alignment=causal_alignment)[0]


def _zero_past(a, lengths):
    """(B, T, ...) with the positions past each batch row's length set to 0."""
    valid = jnp.arange(a.shape[1], dtype=jnp.int32)[None, :] < lengths[:, None]
    return jnp.where(valid[:, :, None, None], a, jnp.zeros((), a.dtype))


def _to_4d(a):
    return None if a is None else jnp.reshape(a, (1,) * (4 - a.ndim) + a.shape)


@own_rank_promotion
def dot_product_attention(query: Array, key: Array, value: Array, bias: Array | None = None,
                          mask: Array | None = None, *, scale: float | Array | None = None,
                          is_causal: bool = False,
                          causal_alignment: Literal["top_left", "bottom_right"] = "top_left",
                          query_seq_lengths: Array | None = None,
                          key_value_seq_lengths: Array | None = None,
                          query_segment_ids: Array | None = None,
                          key_value_segment_ids: Array | None = None,
                          segment_ids: Array | None = None,
                          local_window_size: int | tuple[int, int] | None = None,
                          logits_soft_cap: float | None = None,
                          return_residual: bool = False, precision: lax.PrecisionLike = None,
                          implementation: str | None = None,
                          capabilities: Capabilities | None = None) -> Array | tuple[Array, Array]:
    """Scaled dot-product attention, a drop-in for `jax.nn.dot_product_attention`.

    Shapes: ``B`` batch, ``T`` query length, ``S`` key length, ``N`` query heads, ``K`` key/value
    heads (N a multiple of K: GQA, MQA), ``H`` head dim.

    ``softmax(cap(query @ key^T * scale) + bias) @ value`` per head, ``cap`` the logits soft cap
    (or none), over the keys each query may see: `mask` True, not in the future when `is_causal`
    (``s <= t``), inside `local_window_size` ``(left, right)`` (``t - left <= s <= t + right``),
    within both sequence lengths, and in the query's own segment (segment ids equal). With
    ``causal_alignment="bottom_right"``, causality and the window read query t at key
    ``t + S - T``. A query that sees no key at all gets 0 (and zero gradients), never NaN and
    never the average of masked keys. Softmax runs in float32 for 16-bit inputs; the output has
    `query`'s dtype. Complex inputs run on the dense path with the complex softmax, as Flax's
    attention does.

    Args:
      query: (B, T, N, H) or (T, N, H).
      key: (B, S, K, H) or (S, K, H).
      value: the shape of `key`.
      bias: additive logits bias, broadcastable to (B, N, T, S) (up to 4-D).
      mask: boolean, True where attention is allowed, broadcastable to (B, N, T, S).
      scale: logits scale, a Python float or a scalar array (traced, e.g. a learned
        temperature: differentiable; not on cuDNN); default ``1 / sqrt(H)``.
      is_causal: mask keys after each query (aligned as `causal_alignment` says).
      causal_alignment: where query t sits among the keys, for causality and the window:
        ``"top_left"`` (key t, as `jax.nn`) or ``"bottom_right"`` (key ``t + S - T``: the last
        query at the last key, decoding with a key/value cache; PyTorch's
        ``causal_lower_right``, flash-attn's). The same when T == S.
      query_seq_lengths: (B,) valid query lengths, any integer dtype; rows past them are 0.
      key_value_seq_lengths: (B,) valid key lengths, any integer dtype.
      query_segment_ids: (B, T) integer ids (int32; (T,) for unbatched inputs), with
        `key_value_segment_ids`: a query sees only keys whose id equals its own (packed
        sequences). Any values: equal ids, one segment; no id is special.
      key_value_segment_ids: (B, S) integer ids of the keys.
      segment_ids: (B, T) ids of both the queries and the keys (self-attention, T == S);
        instead of the two above.
      local_window_size: ``w`` or ``(left, right)``: each query sees keys in
        ``[t - left, t + right]``.
      logits_soft_cap: None or a float ``cap > 0``: the scaled logits become
        ``cap * tanh(logits / cap)`` (Gemma 2's, the splash kernel's
        ``attn_logits_soft_cap``), before `bias` is added and before masking. Not on cuDNN or
        flash.
      return_residual: also return, as `jax.nn.dot_product_attention` does, the log-sum-exp of
        each query's (scaled, biased) logits over its visible keys, (B, T, N) or (T, N), in
        `query`'s dtype, with its gradient (``d lse / d logits`` is the softmax; `jax.nn`'s XLA
        path stops it, giving zero). A query that sees no key gets
        ``-0.7 * finfo(dtype).max`` (finite). Not on cuDNN; not for complex inputs.
      precision: of both products (``query @ key^T`` and ``weights @ value``, forward and
        backward), as in `jax.lax.dot_general`: None (JAX's default), a `jax.lax.Precision`
        or its name, a pair of them, or a dot algorithm. cuDNN serves a call only where it
        computes what was asked (16-bit operands: every `Precision`, and the
        ``BF16_BF16_F32`` / ``F16_F16_F32`` algorithm); the decision says which precision ran.
      implementation: None (automatic) or one of, in order of preference: ``"cudnn"``,
        ``"splash"`` or ``"flash"`` (JAX's Pallas TPU kernels), ``"chunked"``
        (memory-efficient, any backend) or ``"xla"`` (dense, any backend). The automatic
        choice takes cuDNN when it can serve the call, on a TPU the splash kernel where its
        benchmark shows it faster, else the chunked path for large T x S, else the dense one.
        A route asked for that cannot serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine.

    Returns:
      The attention output, shaped like `query`; with `return_residual`, ``(output, lse)``.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, or
        an explicit `implementation` that cannot serve the call.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> q = jnp.ones((2, 8, 4, 16), jnp.bfloat16)
      >>> kv = jnp.ones((2, 8, 2, 16), jnp.bfloat16)  # GQA: 2 key/value heads for 4 query heads
      >>> out = portable_rnn.dot_product_attention(q, kv, kv, is_causal=True,
      ...                                          key_value_seq_lengths=jnp.array([8, 0]))
      >>> out.shape, out.dtype, float(jnp.abs(out[1]).max())  # no visible key: 0
      ((2, 8, 4, 16), dtype(bfloat16), 0.0)
    """
    return attend(query, key, value, bias, mask, scale=scale, is_causal=is_causal,
                  query_seq_lengths=query_seq_lengths,
                  key_value_seq_lengths=key_value_seq_lengths,
                  local_window_size=local_window_size, return_residual=return_residual,
                  precision=precision, implementation=implementation, capabilities=capabilities,
                  query_segment_ids=query_segment_ids,
                  key_value_segment_ids=key_value_segment_ids, segment_ids=segment_ids,
                  logits_soft_cap=logits_soft_cap, causal_alignment=causal_alignment)


def attend(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
           query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None,
           return_residual=False, precision=None, implementation=None, capabilities=None,
           dropout=None, query_segment_ids=None, key_value_segment_ids=None, segment_ids=None,
           logits_soft_cap=None, causal_alignment="top_left"):
    """`dot_product_attention`, with attention-weight dropout: `dropout` None or ``(keep,
    rate)``, `keep` a boolean (B, N, T, S)-broadcastable array, checked by the caller (the
    Flax adapter). A call with dropout is decided as any other: the routes without dropout
    reject it, saying so."""
    query, key, value = (checks.array(n, a) for n, a in
                         (("query", query), ("key", key), ("value", value)))
    bias = None if bias is None else checks.array("bias", bias)
    mask = None if mask is None else checks.array("mask", mask)
    # Segment ids stay NumPy (int64 too) until checked: `jnp.asarray` would wrap int64 ids
    # beyond int32's range silently.
    ids = {n: None if a is None else a if hasattr(a, "dtype") else np.asarray(a) for n, a in (
        ("query_segment_ids", query_segment_ids), ("key_value_segment_ids", key_value_segment_ids),
        ("segment_ids", segment_ids))}
    decision, call = _decide(query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
                             key_value_seq_lengths, local_window_size, implementation,
                             capabilities, return_residual, precision, dropout,
                             logits_soft_cap=logits_soft_cap, causal_alignment=causal_alignment,
                             **ids)
    dispatch.report_fallback(decision)
    shape = query.shape
    empty = jnp.asarray(hidden_logit(query.dtype), query.dtype)  # the lse of no visible key
    if query.size == 0 or call.S == 0:  # nothing to compute, or no key to see: zeros
        out = jnp.zeros(shape, query.dtype)
        return (out, jnp.broadcast_to(empty, shape[:-1])) if return_residual else out
    q, k, v, bias, mask = (_to_4d(a) for a in (query, key, value, bias, mask))
    q_len, kv_len = call.q_len, call.kv_len
    # Padding past the lengths never reaches a result or gradient, even NaN padding.
    if q_len is not None:
        q = _zero_past(q, q_len)
    if kv_len is not None:
        k, v = _zero_past(k, kv_len), _zero_past(v, kv_len)
    out = dispatch.run(decision, call, q, k, v, bias, mask, q_len, kv_len, call.q_seg,
                       call.kv_seg)
    if not return_residual:
        return out.reshape(shape)
    out, lse = out
    # 16-bit: the accumulator's empty-row value would round to -inf; keep it finite.
    lse = jnp.maximum(lse, empty.astype(lse.dtype)).astype(query.dtype)
    return out.reshape(shape), lse.reshape(shape[:-1])

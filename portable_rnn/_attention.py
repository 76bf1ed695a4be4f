"""`portable_rnn.dot_product_attention`: checks, routing, and the chosen attention path."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _checks, _compat, _cudnn_attention, _dispatch
from ._attention_math import attention_chunked, attention_dense, block_sizes, hidden_logit
from ._capabilities import Capabilities
from ._checks import own_rank_promotion
from ._dispatch import Decision

Array = jax.Array

IMPLEMENTATIONS = ("cudnn", "chunked", "xla")  # in order of preference
# The automatic choice takes the chunked path from this many logits per (batch, head) on.
# CPU: measured (interleaved fwd+bwd, B=1 N=8 H=64, 2 cores): chunked is 1.2x slower
# than dense at T=S=64, even at 128, 0.9x at 256 and 0.6x at 512. Other backends: not measured
# yet; the dense path stays until its float32 logits reach 64 MiB per (batch, head).
CHUNKED_MIN_LOGITS = {"cpu": 128 * 128}
CHUNKED_MIN_LOGITS_DEFAULT = 4096 * 4096


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
        shape, dtype = _checks.shape_dtype("scale", value)
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
                         precision=None):
    """Validates every argument at trace time; returns the static facts the paths need."""
    _checks.implementation(implementation, IMPLEMENTATIONS)
    _checks.precision(precision)
    shapes = {}
    for name, a in (("query", query), ("key", key), ("value", value)):
        shape, dtype = _checks.shape_dtype(name, a)
        if len(shape) not in (3, 4):
            raise ValueError(f"`{name}` must have shape (B, T, N, H) or (T, N, H); got shape "
                             f"{shape}.")
        _checks.floating(name, dtype, complex_too=True)
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
        shape, dtype = _checks.shape_dtype(name, a)
        if want_bool and dtype != np.bool_:
            raise TypeError(f"`mask` must be boolean (True = attend); got {dtype}. Pass an "
                            "additive mask as `bias`.")
        if not want_bool:
            _checks.floating(name, dtype, complex_too=jnp.issubdtype(q_dtype, jnp.complexfloating))
        s4 = _as_4d(name, shape)
        if any(d not in (1, t) for d, t in zip(s4, target)):
            raise ValueError(f"`{name}` must be broadcastable to (B, N, T, S)={target}; got "
                             f"shape {shape}.")
        extra[name] = s4
        extra[name + "_dtype"] = dtype
    lengths = {}
    for name, a, limit, axis in (("query_seq_lengths", query_seq_lengths, T, "T"),
                                 ("key_value_seq_lengths", key_value_seq_lengths, S, "S")):
        lengths[name] = _checks.seq_lengths(a, B, limit, name=name, axis=axis)
    scale = _scale(scale)
    _checks.static_bool("is_causal", is_causal)
    return dict(B=B, T=T, N=N, H=H, S=S, K=K, dtype=q_dtype,
                bias_shape=extra["bias"], mask_shape=extra["mask"],
                bias_dtype=extra.get("bias_dtype"),
                q_len=lengths["query_seq_lengths"], kv_len=lengths["key_value_seq_lengths"],
                window=_window(local_window_size),
                scale=1.0 / math.sqrt(max(H, 1)) if scale is None else scale)


def _decide(query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
            key_value_seq_lengths, local_window_size, implementation, capabilities,
            return_residual=False, precision=None):
    info = check_attention_args(query, key, value, bias, mask, scale, is_causal,
                                query_seq_lengths, key_value_seq_lengths, local_window_size,
                                implementation, precision)
    _checks.static_bool("return_residual", return_residual)
    complex_inputs = jnp.issubdtype(info["dtype"], jnp.complexfloating)
    if return_residual and complex_inputs:
        raise TypeError(f"`return_residual`=True with {info['dtype']} inputs: the log-sum-exp "
                        "of complex logits is defined only up to multiples of 2*pi*i; pass "
                        "real inputs or return_residual=False.")
    caps = _dispatch.resolve_capabilities(capabilities)
    T, S, H = info["T"], info["S"], info["H"]
    has_lengths = query_seq_lengths is not None or key_value_seq_lengths is not None
    preferred = _dispatch.current_policy().attention
    not_for_cudnn = (("a traced `scale` (cuDNN takes it as a compile-time constant)",)
                    if not isinstance(info["scale"], float) else ())
    if return_residual:
        not_for_cudnn += ("return_residual=True: the log-sum-exp and its gradient are computed "
                         "on the portable paths",)

    def route(caps: Capabilities, cudnn_unavailable: str | None = None,
              implementation: str | None = implementation) -> Decision:
        rejects = {
            "cudnn": (lambda: (cudnn_unavailable,)) if cudnn_unavailable else (
                lambda: not_for_cudnn + _cudnn_attention.rejects(
                    caps, info["dtype"], T, S, H, info["bias_shape"], info["mask_shape"],
                    is_causal, info["window"], has_lengths, info["bias_dtype"], precision)),
            "chunked": lambda: (f"{info['dtype']} inputs: the chunked path's online softmax "
                                "takes real logits (the dense path computes the complex "
                                "softmax)",) if complex_inputs else (),
            "xla": lambda: (),
        }
        threshold = CHUNKED_MIN_LOGITS.get(caps.platform, CHUNKED_MIN_LOGITS_DEFAULT)
        skips = {"chunked": lambda: () if T * S >= threshold else (
            f"T*S={T * S:,} logits per head, below {threshold:,} on {caps.platform}: the dense "
            "path is as fast here and its buffers are small",)}
        upcast = (("16-bit operands upcast to float32 for the dots (XLA:CPU lacks a 16-bit x "
                   "16-bit = float32 dot in some layouts; the products are exact)",)
                  if caps.platform == "cpu" and info["dtype"].itemsize == 2 else ())
        products = _precision_notes(precision)
        acc = np.promote_types(info["dtype"], np.float32)
        notes = {"cudnn": lambda: _cudnn_notes(caps, T, S, H, backward(caps), precision),
                 "chunked": lambda: ("blocks of {} queries x {} keys, online softmax; the VJP "
                                     "keeps only the output and log-sum-exp".format(
                                         *block_sizes(T, S, info["N"] // info["K"], H)),)
                 + upcast + products,
                 "xla": lambda: (f"dense: T x S logits in {acc}",) + upcast + products}
        return _dispatch.decide("attention", IMPLEMENTATIONS, rejects, notes, implementation,
                                preferred, caps, skips=skips)

    def backward(caps: Capabilities) -> str | None:
        """The portable path for the gradient when cuDNN can serve only the forward."""
        if not _cudnn_attention.backward_rejects(caps, T, S, H):
            return None
        return route(caps, "the backward runs on a portable path", None).implementation

    decision = route(caps)
    info["cudnn_backward"] = backward(caps) if decision.implementation == "cudnn" else None
    if implementation is None and decision.implementation == "cudnn":
        decision = _dispatch.per_platform(decision, _compat.cudnn_attention_platforms(),
                                          lambda c, why: route(c, why, None))
    return decision, info


def _precision_notes(precision) -> tuple[str, ...]:
    """The precision of the products, when one is asked for (argument or JAX's default)."""
    text = _checks.precision_text(precision)
    return () if text is None else (f"both products at precision {text}",)


def _cudnn_notes(caps: Capabilities, T: int, S: int, H: int, backward: str | None, precision):
    out = ["vmap axes fold into the batch"]
    text = _checks.precision_text(precision)
    if text is not None:
        out.append(f"precision {text}: cuDNN multiplies the 16-bit operands exactly with float32 "
                   "accumulation" + ("" if backward is None else
                                     f" (the {backward} backward's products at {text})"))
    reasons = _cudnn_attention.backward_rejects(caps, T, S, H)
    if backward is None:
        out.append("the backward re-runs the cuDNN forward (one extra forward per backward)")
    else:
        out.append(f"forward on cuDNN; gradients on the {backward} path: " + "; ".join(reasons))
    out.append("no second-order derivatives (jax.hessian, grad of grad)")
    return tuple(out)


def explain_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
                      query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None,
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
                   return_residual, precision)[0]


def _zero_past(a, lengths):
    """(B, T, ...) with the positions past each batch row's length set to 0."""
    valid = jnp.arange(a.shape[1], dtype=jnp.int32)[None, :] < lengths[:, None]
    return jnp.where(valid[:, :, None, None], a, jnp.zeros((), a.dtype))


def _to_4d(a):
    return None if a is None else jnp.reshape(a, (1,) * (4 - a.ndim) + a.shape)


@own_rank_promotion
def dot_product_attention(query: Array, key: Array, value: Array, bias: Array | None = None,
                          mask: Array | None = None, *, scale: float | Array | None = None,
                          is_causal: bool = False, query_seq_lengths: Array | None = None,
                          key_value_seq_lengths: Array | None = None,
                          local_window_size: int | tuple[int, int] | None = None,
                          return_residual: bool = False, precision: lax.PrecisionLike = None,
                          implementation: str | None = None,
                          capabilities: Capabilities | None = None) -> Array | tuple[Array, Array]:
    """Scaled dot-product attention, a drop-in for `jax.nn.dot_product_attention`.

    Shapes: ``B`` batch, ``T`` query length, ``S`` key length, ``N`` query heads, ``K`` key/value
    heads (N a multiple of K: GQA, MQA), ``H`` head dim.

    ``softmax(query @ key^T * scale + bias) @ value`` per head, over the keys each query may see:
    `mask` True, not in the future when `is_causal` (``s <= t``), inside `local_window_size`
    ``(left, right)`` (``t - left <= s <= t + right``), and within both sequence lengths. A query
    that sees no key at all gets 0 (and zero gradients), never NaN and never the average of
    masked keys. Softmax runs in float32 for 16-bit inputs; the output has `query`'s dtype.
    Complex inputs run on the dense path with the complex softmax, as Flax's attention does.

    Args:
      query: (B, T, N, H) or (T, N, H).
      key: (B, S, K, H) or (S, K, H).
      value: the shape of `key`.
      bias: additive logits bias, broadcastable to (B, N, T, S) (up to 4-D).
      mask: boolean, True where attention is allowed, broadcastable to (B, N, T, S).
      scale: logits scale, a Python float or a scalar array (traced, e.g. a learned
        temperature: differentiable; not on cuDNN); default ``1 / sqrt(H)``.
      is_causal: mask keys after each query (top-left aligned).
      query_seq_lengths: (B,) valid query lengths, any integer dtype; rows past them are 0.
      key_value_seq_lengths: (B,) valid key lengths, any integer dtype.
      local_window_size: ``w`` or ``(left, right)``: each query sees keys in
        ``[t - left, t + right]``.
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
      implementation: None (automatic: cuDNN when it can serve the call, else ``"chunked"`` for
        large T x S, else ``"xla"``), ``"cudnn"`` (raises with every reason if it cannot),
        ``"chunked"`` (memory-efficient, any backend) or ``"xla"`` (dense, any backend).
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
    query, key, value = (_checks.array(n, a) for n, a in
                         (("query", query), ("key", key), ("value", value)))
    bias = None if bias is None else _checks.array("bias", bias)
    mask = None if mask is None else _checks.array("mask", mask)
    decision, info = _decide(query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
                             key_value_seq_lengths, local_window_size, implementation,
                             capabilities, return_residual, precision)
    _dispatch.report_fallback(decision)
    shape = query.shape
    empty = jnp.asarray(hidden_logit(query.dtype), query.dtype)  # the lse of no visible key
    if query.size == 0 or info["S"] == 0:  # nothing to compute, or no key to see: zeros
        out = jnp.zeros(shape, query.dtype)
        return (out, jnp.broadcast_to(empty, shape[:-1])) if return_residual else out
    q, k, v, bias, mask = (_to_4d(a) for a in (query, key, value, bias, mask))
    q_len, kv_len = info["q_len"], info["kv_len"]
    # Padding past the lengths never reaches a result or gradient, even NaN padding.
    if q_len is not None:
        q = _zero_past(q, q_len)
    if kv_len is not None:
        k, v = _zero_past(k, kv_len), _zero_past(v, kv_len)
    kw = dict(scale=info["scale"], is_causal=bool(is_causal), window=info["window"],
              precision=precision)
    if return_residual:
        kw["return_residual"] = True
    if decision.implementation == "cudnn" and implementation is not None:
        _cudnn_attention.check_traceable()

    def branch(d: Decision):
        upcast = d.capabilities.platform == "cpu"  # see `_attention_math._upcast`

        def run(*args):
            match d.implementation:
                case "xla":
                    with jax.named_scope("portable_rnn.attention.xla"):
                        return attention_dense(*args, **kw, upcast=upcast)
                case "chunked":
                    with jax.named_scope("portable_rnn.attention.chunked"):
                        return attention_chunked(*args, **kw, upcast=upcast)
                case "cudnn":
                    with jax.named_scope("portable_rnn.attention.cudnn"):
                        return _cudnn_attention.attention_cudnn(
                            *args, **kw, backward=info["cudnn_backward"])
            raise AssertionError(d)  # unreachable: decide() returns one of IMPLEMENTATIONS
        return run

    out = _dispatch.run(decision, branch, q, k, v, bias, mask, q_len, kv_len)
    if not return_residual:
        return out.reshape(shape)
    out, lse = out
    # 16-bit: the accumulator's empty-row value would round to -inf; keep it finite.
    lse = jnp.maximum(lse, empty.astype(lse.dtype)).astype(query.dtype)
    return out.reshape(shape), lse.reshape(shape[:-1])


def _flax_to_4d(name, a, batch, B):
    """A Flax mask/bias broadcastable to (*batch, N, T, S) -> (B or 1, n, t, s)."""
    if a is None:
        return None
    a = _checks.array(name, a)
    rank, shape = len(batch) + 3, a.shape
    if a.ndim > rank:
        raise ValueError(f"`{name}` must be broadcastable to (*batch, N, T, S) with batch={batch} "
                         f"(at most {rank} dims); got shape {shape}.")
    a = a.reshape((1,) * (rank - a.ndim) + a.shape)
    lead = a.shape[:len(batch)]
    if any(d not in (1, b) for d, b in zip(lead, batch)):
        raise ValueError(f"`{name}` must be broadcastable to (*batch, N, T, S) with batch={batch};"
                         f" got shape {shape}.")
    if all(d == 1 for d in lead):
        return a.reshape((1,) + a.shape[len(batch):])
    return jnp.broadcast_to(a, batch + a.shape[len(batch):]).reshape((B,) + a.shape[len(batch):])


def _flax_unsupported(module, hooks: dict, unused: dict) -> None:
    """Raises for what Flax's attention would do and portable_rnn's paths cannot."""
    if module is not None:
        raise ValueError("`module` is set (Flax passes it to sow the attention weights, "
                         "sow_weights=True): portable_rnn's attention_fn does not materialise "
                         "them; use flax.linen.dot_product_attention to inspect them.")
    for name, hook in hooks.items():
        if hook is not None:
            raise ValueError(f"`{name}`={hook!r}: a custom einsum (e.g. for quantization) cannot "
                             "replace portable_rnn's fused attention paths; use Flax's own "
                             "dot_product_attention with it.")
    given = sorted(name for name, v in unused.items() if v is not None)
    if given:
        raise TypeError(f"attention_fn got unsupported arguments {given}.")


@own_rank_promotion
def flax_attention_fn(query, key, value, bias=None, mask=None, broadcast_dropout=True,
                      dropout_rng=None, dropout_rate=0.0, deterministic=False, dtype=None,
                      precision=None, module=None, force_fp32_for_softmax=False, is_causal=False,
                      einsum_dot_general=None, qk_attn_weights_einsum=None,
                      attn_weights_value_einsum=None, *, implementation=None, **unused):
    """`portable_rnn.dot_product_attention` with the signature of Flax's ``attention_fn``.

    Pass it as ``attention_fn=`` to ``flax.linen.MultiHeadDotProductAttention`` or
    ``flax.nnx.MultiHeadAttention``. It takes every keyword those modules pass. Inputs are
    (*batch, T, N, H) with any number of batch dims; `mask` and `bias` broadcast to
    (*batch, N, T, S). Attention dropout (Flax's mask shapes and RNG use, so results match Flax's
    own attention for the same key) runs on the dense path; otherwise the usual routing applies.
    Use ``functools.partial(attention_fn, implementation="chunked")`` to choose a path.

    Differences from Flax's default ``dot_product_attention`` (docs/layers.md lists them too):

    - a query with no visible key gives 0 (Flax: the average of all values);
    - softmax always runs in float32 for 16-bit inputs (`force_fp32_for_softmax` is always on),
      and the logits are scaled after the product, not the query before it;
    - the attention weights are never materialised on the chunked and cuDNN paths, so they
      cannot be sown: a `module` (``sow_weights=True``) raises;
    - `precision` applies to both products, forward and backward, as Flax's einsums take it;
      cuDNN serves the call only where it computes what the precision asks;
    - the einsum hooks `einsum_dot_general`, `qk_attn_weights_einsum` and
      `attn_weights_value_einsum` (e.g. quantized einsums) raise: the fused paths have no
      einsum to replace;
    - `dtype` None: the inputs' common dtype, as Flax's ``promote_dtype``; complex inputs run
      on the dense path with the complex softmax, as Flax's, and are differentiable (Flax's
      own complex attention is not on jax 0.12).
    """
    _flax_unsupported(module, {"einsum_dot_general": einsum_dot_general,
                               "qk_attn_weights_einsum": qk_attn_weights_einsum,
                               "attn_weights_value_einsum": attn_weights_value_einsum}, unused)
    del force_fp32_for_softmax
    _checks.implementation(implementation, IMPLEMENTATIONS)
    query, key, value = (_checks.array(n, a) for n, a in
                         (("query", query), ("key", key), ("value", value)))
    for name, a in (("query", query), ("key", key), ("value", value)):
        if a.ndim < 3:
            raise ValueError(f"`{name}` must have shape (*batch, T, N, H) (rank >= 3); got shape "
                             f"{a.shape}.")
    if not query.ndim == key.ndim == value.ndim:
        raise ValueError(f"`query`, `key` and `value` must have the same rank (*batch, T, N, H); "
                         f"got shapes {query.shape}, {key.shape}, {value.shape}.")
    batch = query.shape[:-3]
    for name, a in (("key", key), ("value", value)):
        if a.shape[:-3] != batch:
            raise ValueError(f"`{name}` must have the batch dims of `query` {batch} (q, k, v batch "
                             f"dims must match); got shape {a.shape}.")
    if dtype is not None:
        _checks.floating("dtype", np.dtype(dtype), complex_too=True)
    dropout_rate = _checks.rate("dropout_rate", dropout_rate)
    if dtype is None:  # Flax's promote_dtype: the inputs' common dtype
        with jax.numpy_dtype_promotion("standard"):
            dtype = jnp.result_type(query.dtype, key.dtype, value.dtype)
    dt = jnp.dtype(dtype)
    query, key, value = (a.astype(dt) for a in (query, key, value))
    B = math.prod(batch)
    q, k, v = (a.reshape((B,) + a.shape[-3:]) for a in (query, key, value))
    if mask is not None:
        mask = _checks.array("mask", mask)
        if mask.dtype != jnp.bool_:
            mask = mask != 0  # Flax masks are often float (nn.make_causal_mask)
    mask4, bias4 = _flax_to_4d("mask", mask, batch, B), _flax_to_4d("bias", bias, batch, B)
    if bias4 is not None:
        bias4 = bias4.astype(dt)
    if not deterministic and dropout_rate > 0 and query.size and key.shape[-3]:
        if dropout_rng is None:
            raise ValueError("attention dropout needs `dropout_rng` (deterministic=False and "
                             f"dropout_rate={dropout_rate}).")
        _checks.prng_key("dropout_rng", dropout_rng)
        T, N, S = query.shape[-3], query.shape[-2], key.shape[-3]
        shape = (1,) * (len(batch) + 1) + (T, S) if broadcast_dropout else batch + (N, T, S)
        keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, shape)
        keep = _flax_to_4d("dropout mask", keep, batch, B)
        if implementation not in (None, "xla"):
            raise ValueError(f"attention dropout runs on the dense path only; got "
                             f"implementation={implementation!r}.")
        info = check_attention_args(q, k, v, bias4, mask4, None, is_causal, None, None, None,
                                    None, precision)
        out = attention_dense(q, k, v, bias4, mask4, None, None, scale=info["scale"],
                              is_causal=bool(is_causal), window=None,
                              dropout=(keep, float(dropout_rate)),
                              upcast=_dispatch.resolve_capabilities(None).platform == "cpu",
                              precision=precision)
    else:
        out = dot_product_attention(q, k, v, bias4, mask4, is_causal=bool(is_causal),
                                    precision=precision, implementation=implementation)
    return out.reshape(batch + out.shape[1:])

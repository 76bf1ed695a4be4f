"""`attention_fn` for Flax's attention modules: `portable_rnn.dot_product_attention` with the
signature of Flax's ``dot_product_attention``, its dropout, and the differences it documents."""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..attention.api import attend, checked_alignment, checked_soft_cap
from ..core import checks, dispatch
from ..core.checks import own_rank_promotion


def _flax_to_4d(name, a, batch, B):
    """A Flax mask/bias broadcastable to (*batch, N, T, S) -> (B or 1, n, t, s)."""
    if a is None:
        return None
    a = checks.array(name, a)
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


def _flax_segments(query_ids, kv_ids, ids, batch, B, T, S):
    """Segment ids of (*batch, T) and (*batch, S) as (B, T) and (B, S) int arrays (checked again,
    with the other arguments, by `attend`), or None."""
    if ids is not None:
        if query_ids is not None or kv_ids is not None:
            raise ValueError("`segment_ids` (self-attention: the ids of both the queries and the "
                             "keys) cannot be combined with `query_segment_ids` or "
                             "`key_value_segment_ids`; pass either.")
        if T != S:
            raise ValueError(f"`segment_ids` are the ids of both the queries and the keys: T={T} "
                             f"and S={S} differ; pass `query_segment_ids` (*batch, T) and "
                             "`key_value_segment_ids` (*batch, S).")
        query_ids = kv_ids = ids
    if query_ids is None and kv_ids is None:
        return None
    if query_ids is None or kv_ids is None:
        missing = "query_segment_ids" if query_ids is None else "key_value_segment_ids"
        raise ValueError(f"`query_segment_ids` and `key_value_segment_ids` go together: `{missing}`"
                         " is missing (for self-attention, `segment_ids` gives both).")
    out = []
    for name, a, n, axis in (("segment_ids" if ids is not None else "query_segment_ids",
                              query_ids, T, "T"),
                             ("segment_ids" if ids is not None else "key_value_segment_ids",
                              kv_ids, S, "S")):
        a = a if hasattr(a, "dtype") else np.asarray(a)  # int64 ids: range-checked by `attend`
        if a.shape != batch + (n,):
            raise ValueError(f"`{name}` must have shape (*batch, {axis})={batch + (n,)}; got "
                             f"{a.shape}.")
        out.append(a.reshape(B, n))
    return tuple(out)


def _flax_unsupported(hooks: dict, unused: dict) -> None:
    """Raises for what Flax's attention would do and portable_rnn's paths cannot."""
    for name, hook in hooks.items():
        if hook is not None:
            raise ValueError(f"`{name}`={hook!r}: a custom einsum (e.g. for quantization) cannot "
                             "replace portable_rnn's fused attention paths; use Flax's own "
                             "dot_product_attention with it.")
    given = sorted(name for name, v in unused.items() if v is not None)
    if given:
        raise TypeError(f"attention_fn got unsupported arguments {given}.")


def _flax_weights(query, key, bias, mask, is_causal, precision, force_fp32_for_softmax,
                  segments=None, soft_cap=None, offset=0):
    """The attention weights (*batch, N, T, S) that Flax's ``dot_product_attention_weights``
    sows: Flax's own math, step by step, for `query` (*batch, T, N, H) and `key` (*batch, S, K, H)
    in the computation dtype. Dropout comes after Flax's sow, so it is not here.

    A separate O(T*S) pass, only for a `module` that sows them: the paths that compute the
    output (chunked, cuDNN, splash) never hold these weights. `bias` is as given (Flax adds it
    without a cast); `mask` is boolean, broadcastable to the weights. The features Flax lacks,
    as the output computes them: `segments` ``(q_ids (*batch, T), kv_ids (*batch, S))`` mask
    other segments' keys, `soft_cap` caps the scaled logits before the bias, `offset` moves the
    causal mask (bottom-right: S - T).
    """
    dtype = query.dtype
    N, K = query.shape[-2], key.shape[-2]
    query = query / jnp.sqrt(query.shape[-1]).astype(dtype)  # Flax scales the query, in dtype
    # Flax's modules promote dtypes implicitly (a float32 bias over 16-bit logits): as Flax does.
    with jax.numpy_dtype_promotion("standard"):
        if N == K:
            logits = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=precision)
        else:  # GQA as Flax NNX: query head h*G + g against key head h
            query = query.reshape(query.shape[:-2] + (K, N // K, query.shape[-1]))
            logits = jnp.einsum("...qhgd,...kh1d->...hgqk", query, key[..., None, :],
                                precision=precision)
            logits = logits.reshape(logits.shape[:-4] + (N,) + logits.shape[-2:])
        if soft_cap is not None:
            logits = soft_cap * jnp.tanh(logits / soft_cap)
        if bias is not None:
            logits = logits + bias
        if is_causal:  # Flax NNX's causal mask: lower triangular from the top-left corner
            causal = jnp.tril(jnp.ones(logits.shape[-2:], jnp.bool_), k=offset)
            mask = causal if mask is None else mask & causal
        if segments is not None:
            same = segments[0][..., None, :, None] == segments[1][..., None, None, :]
            mask = same if mask is None else mask & same
        if mask is not None:
            logits = jnp.where(mask, logits, jnp.finfo(dtype).min)
        if force_fp32_for_softmax and dtype != jnp.float32:  # Flax Linen's option
            return jax.nn.softmax(logits.astype(jnp.float32))
        return jax.nn.softmax(logits).astype(dtype)


@own_rank_promotion
def flax_attention_fn(query, key, value, bias=None, mask=None, broadcast_dropout=True,
                      dropout_rng=None, dropout_rate=0.0, deterministic=False, dtype=None,
                      precision=None, module=None, force_fp32_for_softmax=False, is_causal=False,
                      einsum_dot_general=None, qk_attn_weights_einsum=None,
                      attn_weights_value_einsum=None, *, implementation=None,
                      query_segment_ids: ArrayLike | None = None,
                      key_value_segment_ids: ArrayLike | None = None,
                      segment_ids: ArrayLike | None = None,
                      logits_soft_cap: float | None = None,
                      causal_alignment: Literal["top_left", "bottom_right"] = "top_left",
                      **unused):
    """`portable_rnn.dot_product_attention` with the signature of Flax's ``attention_fn``.

    Pass it as ``attention_fn=`` to ``flax.linen.MultiHeadDotProductAttention`` or
    ``flax.nnx.MultiHeadAttention``. It takes every keyword those modules pass. Inputs are
    (*batch, T, N, H) with any number of batch dims; `mask` and `bias` broadcast to
    (*batch, N, T, S). Attention dropout (Flax's mask shapes and RNG use, so results match Flax's
    own attention for the same key) runs on the dense path: the routing decides it, and every
    other route rejects such a call, saying why.
    Use ``functools.partial(attention_fn, implementation="chunked")`` to choose a path, and
    likewise to pass what Flax's modules do not: `query_segment_ids` (*batch, T) and
    `key_value_segment_ids` (*batch, S), or `segment_ids` (*batch, T) for self-attention (packed
    sequences: a query sees only keys of its own segment), `logits_soft_cap` and
    `causal_alignment`, as `portable_rnn.dot_product_attention` takes them (the sown weights
    follow them too).

    Differences from Flax's default ``dot_product_attention`` (docs/layers.md lists them too):

    - a query with no visible key gives 0 (Flax: the average of all values);
    - softmax always runs in float32 for 16-bit inputs (`force_fp32_for_softmax` is always on
      for the output), and the logits are scaled after the product, not the query before it;
    - with a `module` (``sow_weights=True``) the weights are sown as Flax sows them
      (``intermediates``/``attention_weights``, (*batch, N, T, S), Flax's dtype and
      `force_fp32_for_softmax`, before dropout), from a separate O(T*S) pass of Flax's math, as
      in Flax; the output still comes from the routed path (the chunked, cuDNN and splash
      routes never hold the weights). A query with no visible key sows Flax's uniform row.
      Without a `module` no such pass runs;
    - `precision` applies to both products, forward and backward, as Flax's einsums take it;
      cuDNN serves the call only where it computes what the precision asks;
    - the einsum hooks `einsum_dot_general`, `qk_attn_weights_einsum` and
      `attn_weights_value_einsum` (e.g. quantized einsums) raise: the fused paths have no
      einsum to replace;
    - `dtype` None: the inputs' common dtype, as Flax's ``promote_dtype``; complex inputs run
      on the dense path with the complex softmax, as Flax's, and are differentiable (Flax's
      own complex attention is not on jax 0.12).
    """
    _flax_unsupported({"einsum_dot_general": einsum_dot_general,
                               "qk_attn_weights_einsum": qk_attn_weights_einsum,
                               "attn_weights_value_einsum": attn_weights_value_einsum}, unused)
    checks.implementation(implementation, dispatch.implementations("attention"))
    query, key, value = (checks.array(n, a) for n, a in
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
        checks.floating("dtype", np.dtype(dtype), complex_too=True)
    dropout_rate = checks.rate("dropout_rate", dropout_rate)
    if dtype is None:  # Flax's promote_dtype: the inputs' common dtype
        with jax.numpy_dtype_promotion("standard"):
            dtype = jnp.result_type(query.dtype, key.dtype, value.dtype)
    dt = jnp.dtype(dtype)
    query, key, value = (a.astype(dt) for a in (query, key, value))
    B = math.prod(batch)
    q, k, v = (a.reshape((B,) + a.shape[-3:]) for a in (query, key, value))
    if mask is not None:
        mask = checks.array("mask", mask)
        if mask.dtype != jnp.bool_:
            mask = mask != 0  # Flax masks are often float (nn.make_causal_mask)
    mask4, bias4 = _flax_to_4d("mask", mask, batch, B), _flax_to_4d("bias", bias, batch, B)
    if module is not None and not callable(getattr(module, "sow", None)):
        raise TypeError("`module` must be a Flax module (Linen or NNX) to sow the attention "
                        f"weights into (sow_weights=True); got {type(module).__name__}.")
    ids = _flax_segments(query_segment_ids, key_value_segment_ids, segment_ids, batch, B,
                         query.shape[-3], key.shape[-3])
    logits_soft_cap = checked_soft_cap(logits_soft_cap)
    causal_alignment = checked_alignment(causal_alignment)
    if module is not None:  # sow_weights=True: Flax's weights, sown where Flax sows them
        offset = key.shape[-3] - query.shape[-3] if causal_alignment == "bottom_right" else 0
        weights = _flax_weights(query, key, None if bias is None else checks.array("bias", bias),
                                mask, bool(is_causal), precision, force_fp32_for_softmax,
                                None if ids is None else tuple(
                                    a.reshape(batch + a.shape[1:]) for a in ids),
                                logits_soft_cap, offset)
        module.sow("intermediates", "attention_weights", weights)  # Linen's and NNX's name
    if bias4 is not None:
        bias4 = bias4.astype(dt)
    dropout = None
    if not deterministic and dropout_rate > 0 and query.size and key.shape[-3]:
        if dropout_rng is None:
            raise ValueError("attention dropout needs `dropout_rng` (deterministic=False and "
                             f"dropout_rate={dropout_rate}).")
        checks.prng_key("dropout_rng", dropout_rng)
        T, N, S = query.shape[-3], query.shape[-2], key.shape[-3]
        shape = (1,) * (len(batch) + 1) + (T, S) if broadcast_dropout else batch + (N, T, S)
        keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, shape)
        dropout = (_flax_to_4d("dropout mask", keep, batch, B), float(dropout_rate))
    out = attend(q, k, v, bias4, mask4, is_causal=bool(is_causal), precision=precision,
                 implementation=implementation, dropout=dropout,
                 query_segment_ids=None if ids is None else ids[0],
                 key_value_segment_ids=None if ids is None else ids[1],
                 logits_soft_cap=logits_soft_cap, causal_alignment=causal_alignment)
    return out.reshape(batch + out.shape[1:])

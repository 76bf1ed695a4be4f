"""The dense attention route ("xla"): the T x S logits materialised, differentiated by JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...core import dispatch
from ..math import (
    acc_dtype,
    arange,
    feature_notes,
    grouped,
    logsumexp,
    masked_logits,
    precision_notes,
    pv,
    softmax,
    to_accumulation,
    upcast,
    upcast_notes,
    visible,
)


def attention_dense(q, k, v, bias, mask, q_len, kv_len, *, scale, is_causal, window,
                    dropout=None, return_residual=False, upcast=False, precision=None,
                    segment_ids=None, soft_cap=None, offset=0):
    """Dense attention (materialises the T x S logits); differentiated by JAX.

    `segment_ids`: None or ``(q_seg, kv_seg)``, int32 (B, T) and (B, S): a query sees only the
    keys of its own segment. `soft_cap`: None or a float, the logits capped to
    ``soft_cap * tanh(logits / soft_cap)`` after the scale, before the bias. `offset`: the key
    position of query 0 for causality and the window (0 top-left, S - T bottom-right).

    `dropout` is None or ``(keep, rate)``: `keep` a boolean (b, n, t, s) array broadcastable to
    (B, N, T, S); kept attention weights are scaled by ``1 / (1 - rate)``.
    `return_residual`: also return the log-sum-exp of each query's logits, (B, T, N) in the
    accumulation dtype (`hidden_logit` where no key is visible). `upcast`: compute in the
    accumulation dtype (see `to_accumulation`). `precision`: of both products, as in `jnp.einsum`.
    """
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    dtype = q.dtype
    acc = acc_dtype(dtype)
    if upcast:
        q, k, v = to_accumulation(acc, q, k, v)
    qg = q.reshape(B, T, K, N // K, H)
    q_seg, kv_seg = segment_ids or (None, None)
    vis = visible(arange(T), arange(S), steps=T, keys=S, q_len=q_len, kv_len=kv_len,
                  mask=grouped(mask, K), is_causal=is_causal, window=window, offset=offset,
                  q_seg=q_seg, kv_seg=kv_seg)
    logits = masked_logits(qg, k, grouped(bias, K), vis, scale, acc, precision, soft_cap)
    p = softmax(logits, vis)
    if dropout is not None:
        keep, rate = dropout
        p = jnp.where(grouped(keep, K), p * jnp.asarray(1.0 / (1.0 - rate), acc), 0)
    out = pv(p.astype(v.dtype), v, acc, precision).reshape(B, T, N, H).astype(dtype)
    return (out, logsumexp(logits, vis, acc)) if return_residual else out


def _notes(call, caps):
    acc = acc_dtype(call.dtype)
    dropout = () if call.dropout is None else (
        f"attention weights dropped at rate {call.dropout[1]}, the kept ones scaled by "
        "1 / (1 - rate)",)
    return ((f"dense: T x S logits in {acc}",) + dropout + upcast_notes(caps, call.dtype)
            + precision_notes(call.precision) + feature_notes(call))


def _run(d, call, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg):
    with jax.named_scope("portable_rnn.attention.xla"):
        return attention_dense(q, k, v, bias, mask, q_len, kv_len, scale=call.scale,
                               is_causal=call.is_causal, window=call.window,
                               dropout=call.dropout, return_residual=call.return_residual,
                               upcast=upcast(d.capabilities), precision=call.precision,
                               segment_ids=None if q_seg is None else (q_seg, kv_seg),
                               soft_cap=call.soft_cap, offset=call.causal_offset)


ROUTE = dispatch.Route("xla", rejects=lambda call, caps: (), notes=_notes, run=_run,
                       fn=attention_dense)

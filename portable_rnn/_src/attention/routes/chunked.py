"""The memory-efficient attention route ("chunked"): blocks with an online softmax and a
hand-written VJP.

The chunked path (Rabe & Staats 2021; FlashAttention 2) runs over query blocks and, inside, key
blocks with an online softmax. Its VJP saves only the output and the log-sum-exp and recomputes
each block's probabilities, so neither pass holds more than a (block x block) slice of the
T x S logits. Key blocks that causality or the window hide entirely are skipped. Segment ids are
compared per block inside the loops (a query block's ids against a key block's), so they cost
O(T + S) memory too; the soft cap's derivative ``1 - tanh^2`` is recomputed per block in the
backward.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from ...core import dispatch
from ...core.checks import own_rank_promotion
from ...core.compat import zeros_like
from ...core.sharding import on_mesh_of, split_like, vary_together
from ..math import (
    acc_dtype,
    arange,
    dropout_rejects,
    einsum,
    feature_notes,
    grouped,
    hidden_logit,
    precision_notes,
    to_accumulation,
    upcast,
    upcast_notes,
    visible,
)

Array = jax.Array

def block_sizes(T: int, S: int, G: int, H: int) -> tuple[int, int]:
    """Query and key block sizes of the chunked path, for T queries, S keys, G query heads per
    key/value head and head dimension H.

    On XLA:CPU the block products run best with about 512 query rows (G * bq: GQA's heads share
    the key block) against 256 keys, 512 keys from H=128 on, fwd+bwd, of blocks from 64 to 1024
    per side: smaller blocks cost more in loop steps than they save in cache, larger ones spill
    it.
    """
    bq = max(64, 512 // max(G, 1))
    bk = 256 if H <= 64 else 512
    return min(bq, max(T, 1)), min(bk, max(S, 1))


# --- chunked --------------------------------------------------------------------------------
# Layout. Inside the chunked path a query block is head-major, heads split as the key's (K, G):
# its G x bq queries are its "rows" R, in order (g, t), (B, K, R, H). Every block product is a
# batched GEMM over (B, K) whose (bq x bk) operand is already in the order XLA:CPU's GEMM wants:
# the backward computes the transposed block (keys x rows), so that
#   logits^T = k q^T,  dv += P^T dO,  dP^T = v dO^T,  dk += dS^T q,  dq^T += k^T dS^T
# transpose only (rows x H) and (bk x H) slices, never a (bq x bk) block. (In a batch-major
# layout XLA:CPU copies a transposed (bq x bk) block per head for three of the five backward
# products, making the backward about 2x slower.) Keys, values and their gradients stay
# (B, S, K, H): a key block is transposed as it is read, rather than a whole transposed copy kept
# (such copies nearly double XLA's temporary memory at long S).

def _pad_axis(a, axis: int, size: int, value=0):
    if a is None or a.shape[axis] in (1, size):
        return a
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, size - a.shape[axis])
    return jnp.pad(a, pad, constant_values=value)


def _block(a, i, bq, j, bk, t_axis=3, s_axis=4):
    """Slice query block i / key block j out of a grouped (b, k, g, t, s) array (t, s may be 1),
    or out of its transpose along the given axes."""
    if a is None:
        return None
    if a.shape[t_axis] != 1:
        a = lax.dynamic_slice_in_dim(a, i * bq, bq, axis=t_axis)
    if a.shape[s_axis] != 1:
        a = lax.dynamic_slice_in_dim(a, j * bk, bk, axis=s_axis)
    return a


def _reach(cfg):
    """How far left and right of its own index a query may see (None: no bound), from the
    window and causality, which place query t at key ``t + offset``."""
    left, right = (None, None) if cfg["window"] is None else cfg["window"]
    if cfg["is_causal"]:
        right = 0 if right is None else min(right, 0)
    offset = cfg["offset"]
    return (None if left is None else left - offset), (None if right is None else right + offset)


def _key_block_range(i, cfg):
    """Key blocks [lo, hi) that can hold a visible key for query block i (causal, window)."""
    bq, bk, nk = cfg["bq"], cfg["bk"], cfg["nk"]
    left, right = _reach(cfg)
    lo = jnp.int32(0) if left is None else jnp.maximum(0, (i * bq - left) // bk)
    hi = jnp.int32(nk) if right is None else jnp.clip((i * bq + bq - 1 + right) // bk + 1, 0, nk)
    return lo, jnp.maximum(lo, hi)


def _unmasked_block_range(i, lo, hi, cfg):
    """Key blocks [flo, fhi) within [lo, hi) whose every key causality and the window let every
    query of block i see, with no padded key: they need no visibility mask. (Padded queries need
    none: their outputs are dropped and their cotangents are 0.)"""
    bq, bk = cfg["bq"], cfg["bk"]
    left, right = _reach(cfg)
    flo, fhi = lo, jnp.int32(cfg["S"] // bk)
    if left is not None:  # the block's first key >= its last query - left
        flo = jnp.maximum(flo, -((left - (i * bq + bq - 1)) // bk))
    if right is not None:  # the block's last key <= its first query + right
        fhi = jnp.minimum(fhi, (i * bq + right + 1) // bk)
    flo = jnp.clip(flo, lo, hi)
    return flo, jnp.clip(fhi, flo, hi)


def _key_blocks(i, cfg, body, init):
    """`body(j, carry, masked)` folded over the key blocks query block i can see, with
    ``masked=False`` where no key of the block needs hiding (no mask, no lengths, no segment ids,
    wholly inside causality, the window and the keys): those skip the visibility computation."""
    lo, hi = _key_block_range(i, cfg)
    if cfg["dynamic"]:  # a mask, sequence lengths or segment ids: every block is masked
        return lax.fori_loop(lo, hi, partial(body, masked=True), init)
    if _reach(cfg) == (None, None) and cfg["S"] % cfg["bk"] == 0:
        return lax.fori_loop(lo, hi, partial(body, masked=False), init)
    flo, fhi = _unmasked_block_range(i, lo, hi, cfg)
    carry = lax.fori_loop(lo, flo, partial(body, masked=True), init)
    carry = lax.fori_loop(flo, fhi, partial(body, masked=False), carry)
    return lax.fori_loop(fhi, hi, partial(body, masked=True), carry)


def _block_visible(i, j, q_len, kv_len, mask, cfg, q_seg=None, kv_seg=None):
    """`visible` for query block i and key block j; `mask` is the grouped, padded mask, `q_seg`
    and `kv_seg` the padded segment ids (B, T') and (B, S'), sliced here to the blocks."""
    bq, bk = cfg["bq"], cfg["bk"]
    if q_seg is not None:
        q_seg = lax.dynamic_slice_in_dim(q_seg, i * bq, bq, axis=1)
        kv_seg = lax.dynamic_slice_in_dim(kv_seg, j * bk, bk, axis=1)
    return visible(i * bq + arange(bq), j * bk + arange(bk), steps=cfg["T"], keys=cfg["S"],
                   q_len=q_len, kv_len=kv_len, mask=_block(mask, i, bq, j, bk),
                   is_causal=cfg["is_causal"], window=cfg["window"], offset=cfg["offset"],
                   q_seg=q_seg, kv_seg=kv_seg)


# Each reshape below splits or merges one axis only: that is what an operand sharded over batch
# or heads can follow under explicit sharding (and it costs nothing).

def _query_blocks(a, num_kv_heads, cfg):
    """(B, T, N, ...) -> (nq, B, K, G, bq, ...), padded to whole query blocks."""
    a = _pad_axis(a, 1, cfg["nq"] * cfg["bq"])
    a = a.reshape(a.shape[:1] + (cfg["nq"], cfg["bq"]) + a.shape[2:])
    a = a.reshape(a.shape[:3] + (num_kv_heads, a.shape[3] // num_kv_heads) + a.shape[4:])
    return jnp.moveaxis(a, (1, 2), (0, 4))


def _from_query_blocks(a, T):
    """(nq, B, K, G, bq, ...) -> (B, T, N, ...), the inverse of `_query_blocks`."""
    a = jnp.moveaxis(a, (0, 4), (1, 2))  # (B, nq, bq, K, G, ...)
    a = a.reshape(a.shape[:3] + (a.shape[3] * a.shape[4],) + a.shape[5:])
    return a.reshape((a.shape[0], a.shape[1] * a.shape[2]) + a.shape[3:])[:, :T]


def _rows(a):
    """A query block (B, K, G, bq, H) as rows (B, K, G * bq, H)."""
    return a.reshape(a.shape[:2] + (a.shape[2] * a.shape[3], a.shape[4]))


def _prepare(q, k, v, bias, mask, cfg):
    """Pads to whole blocks and groups heads: q as (nq, B, K, G, bq, H) blocks, k and v padded
    (B, S', K, H), bias and mask grouped (b, k, g, t, s)."""
    K = k.shape[2]
    Tp, Sp = cfg["nq"] * cfg["bq"], cfg["nk"] * cfg["bk"]
    bias = _pad_axis(_pad_axis(grouped(bias, K), 3, Tp), 4, Sp)
    mask = _pad_axis(_pad_axis(grouped(mask, K), 3, Tp, False), 4, Sp, False)
    return _query_blocks(q, K, cfg), _pad_axis(k, 1, Sp), _pad_axis(v, 1, Sp), bias, mask


def _padded_ids(q_seg, kv_seg, cfg):
    """Segment ids padded to whole blocks (the padding is hidden by position already)."""
    if q_seg is None:
        return None, None
    return (_pad_axis(q_seg, 1, cfg["nq"] * cfg["bq"]),
            _pad_axis(kv_seg, 1, cfg["nk"] * cfg["bk"]))


def _capped(logits, cfg):
    """The soft-capped logits and ``tanh(logits / cap)`` (None without a cap): its derivative
    is ``1 - tanh^2``."""
    cap = cfg["soft_cap"]
    if cap is None:
        return logits, None
    th = jnp.tanh(logits / jnp.asarray(cap, logits.dtype))
    return th * jnp.asarray(cap, logits.dtype), th


def _chunked_forward(q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale, cfg):
    T = q.shape[1]
    bq, bk, acc, prec = cfg["bq"], cfg["bk"], cfg["acc"], cfg["precision"]
    hidden = jnp.asarray(hidden_logit(acc), acc)
    qb, k, v, bias, mask = _prepare(q, k, v, bias, mask, cfg)
    q_seg, kv_seg = _padded_ids(q_seg, kv_seg, cfg)

    def q_block(_, inputs):
        i, q_i = inputs  # (B, K, G, bq, H)
        rows = _rows(q_i)

        def k_block(j, carry, masked):
            m, l, o = carry
            k_j = lax.dynamic_slice_in_dim(k, j * bk, bk, axis=1)  # (B, bk, K, H)
            v_j = lax.dynamic_slice_in_dim(v, j * bk, bk, axis=1)
            logits = einsum("bkrh,bskh->bkrs", rows, k_j, acc, prec).reshape(m.shape + (bk,))
            logits, _ = _capped(logits * scale, cfg)  # (B, K, G, bq, bk)
            if bias is not None:
                logits = logits + _block(bias, i, bq, j, bk).astype(acc)
            if masked:
                vis = _block_visible(i, j, q_len, kv_len, mask, cfg, q_seg, kv_seg)
                logits = jnp.where(vis, logits, hidden)
            m_new = jnp.maximum(m, jnp.max(logits, axis=-1))  # >= the hidden logit: finite
            p = jnp.exp(logits - m_new[..., None])
            if masked:
                p = jnp.where(vis, p, 0)
            corr = jnp.exp(m - m_new)
            pv = einsum("bkrs,bskh->bkrh", _rows(p.astype(v.dtype)), v_j, acc, prec)
            return m_new, l * corr + jnp.sum(p, axis=-1), o * corr[..., None] + pv.reshape(o.shape)

        # Built from q_i, so the carry is sharded (and, in shard_map, varies) as q_i does.
        o = jnp.zeros_like(q_i, acc)  # (B, K, G, bq, H)
        init = (jnp.full_like(o[..., 0], hidden_logit(acc)), jnp.zeros_like(o[..., 0]), o)
        m, l, o = _key_blocks(i, cfg, k_block, init)
        out = o / jnp.where(l > 0, l, 1)[..., None]
        lse = jnp.where(l > 0, m + jnp.log(jnp.where(l > 0, l, 1)), 0)
        return None, (out, lse, l > 0)

    _, (out, lse, seen) = lax.scan(q_block, None, (arange(cfg["nq"]), qb))
    out = _from_query_blocks(out, T).astype(q.dtype)
    # (nq, B, K, G, bq) -> (B, T, N); the residual (`lse`, 0 where no key is seen) stays blocked.
    lse_out = _from_query_blocks(jnp.where(seen, lse, hidden_logit(acc)), T)
    return out, lse_out, lse


@partial(jax.custom_vjp, nondiff_argnums=(10,))
def _chunked(q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale, cfg):
    """(out, log-sum-exp (B, T, N))."""
    return _chunked_forward(q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale,
                            dict(cfg))[:2]


def _chunked_fwd(q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale, cfg):
    out, lse_out, lse = _chunked_forward(q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale,
                                         dict(cfg))
    return (out, lse_out), (q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale, out, lse)


def _reduce_to(a, shape):
    """Sums `a` over the axes where `shape` has size 1 (keepdims)."""
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and a.shape[d] != 1)
    return jnp.sum(a, axis=axes, keepdims=True) if axes else a


def _add_block(a, block, start, axis):
    """`a` with `block` added at `start` along `axis` (in place)."""
    old = lax.dynamic_slice_in_dim(a, start, block.shape[axis], axis=axis)
    return lax.dynamic_update_slice_in_dim(a, old + block, start, axis=axis)


def _transposed(a):
    """A grouped (b, k, g, t, s) array as (b, k, s, g, t), the backward's block order."""
    return None if a is None else a.transpose(0, 1, 4, 2, 3)


@own_rank_promotion
def _chunked_bwd(cfg, residuals, cotangents):
    cfg = dict(cfg)
    q, k, v, bias0, mask, q_len, kv_len, q_seg, kv_seg, scale, out, lse = residuals
    d_out, d_lse = cotangents
    S, K = k.shape[1], k.shape[2]
    acc, bq, bk, nq, prec = cfg["acc"], cfg["bq"], cfg["bk"], cfg["nq"], cfg["precision"]
    hidden = jnp.asarray(hidden_logit(acc), acc)
    qb, kp, vp, bias, mask = _prepare(q, k, v, bias0, mask, cfg)
    q_seg, kv_seg = _padded_ids(q_seg, kv_seg, cfg)
    biasT, maskT = _transposed(bias), _transposed(mask)  # (b, k, s, g, t)
    dob = _query_blocks(d_out, K, cfg)
    # D = rowsum(dO * O), per query block: (nq, B, K, G, bq)
    # A log-sum-exp cotangent adds d_lse * P to dS = P * (dP - D): it enters as D - d_lse.
    delta = jnp.sum(d_out.astype(acc) * out.astype(acc), axis=-1) - d_lse.astype(acc)
    delta = _query_blocks(delta, K, cfg)

    def q_block(carry, inputs):
        i, q_i, do_i, lse_i, delta_i = inputs
        rows, do_rows = _rows(q_i), _rows(do_i)  # (B, K, R, H)
        rowsT, doT = rows.swapaxes(2, 3), do_rows.swapaxes(2, 3)  # (B, K, H, R)
        lse_i, delta_i = lse_i[:, :, None], delta_i[:, :, None]  # (B, K, 1, G, bq)

        def k_block(j, carry, masked):
            dqT, dk, dv, dbT = carry
            k_j, v_j = (lax.dynamic_slice_in_dim(a, j * bk, bk, axis=1).swapaxes(1, 2)
                        for a in (kp, vp))  # (B, K, bk, H)
            logits = einsum("bksh,bkhr->bksr", k_j, rowsT, acc, prec)
            logits = logits.reshape(logits.shape[:3] + lse_i.shape[3:]) * scale  # (B,K,bk,G,bq)
            logits, th = _capped(logits, cfg)
            if biasT is not None:
                logits = logits + _block(biasT, i, bq, j, bk, 4, 2).astype(acc)
            if masked:  # exp(hidden - lse) is 0: the lse of a row is a visible logit's or 0
                vis = _transposed(_block_visible(i, j, q_len, kv_len, None, cfg, q_seg, kv_seg))
                if maskT is not None:
                    vis = vis & _block(maskT, i, bq, j, bk, 4, 2)
                logits = jnp.where(vis, logits, hidden)
            p = jnp.exp(logits - lse_i)
            pT = p.reshape(p.shape[:3] + (-1,))  # (B, K, bk, R)
            dv = _add_block(dv, einsum("bksr,bkrh->bksh", pT.astype(do_i.dtype), do_rows, acc,
                                        prec), j * bk, 2)
            dp = einsum("bksh,bkhr->bksr", v_j, doT, acc, prec).reshape(p.shape)
            ds = p * (dp - delta_i)  # (B, K, bk, G, bq): d loss / d (capped) logits, the bias's
            # d loss / d (scaled) logits q.k * scale: through the cap's derivative 1 - tanh^2
            dsq = ds if th is None else ds * (1 - th * th)
            dsT = dsq.reshape(pT.shape).astype(q_i.dtype)
            dk = _add_block(dk, einsum("bksr,bkrh->bksh", dsT, rows, acc, prec), j * bk, 2)
            dqT = dqT + einsum("bksh,bksr->bkhr", k_j, dsT, acc, prec)
            if dbT is not None:
                blk = _reduce_to(ds, dbT.shape)
                zero = jnp.int32(0)  # one index type, also under jax_enable_x64
                start = [zero, zero, j * bk if dbT.shape[2] != 1 else zero, zero,
                         i * bq if dbT.shape[4] != 1 else zero]
                old = lax.dynamic_slice(dbT, start, blk.shape)
                dbT = lax.dynamic_update_slice(dbT, old + blk, start)
            return dqT, dk, dv, dbT

        dk, dv, dbT = carry
        dqT, dk, dv, dbT = _key_blocks(i, cfg, k_block, (jnp.zeros_like(rowsT, acc), dk, dv, dbT))
        return (dk, dv, dbT), dqT.swapaxes(2, 3).reshape(q_i.shape)

    # Sharded as the block gradients written into them (dynamic_update_slice needs the carry and
    # the update alike): dk, dv as k, v; the bias gradient over the query's batch and heads
    # where the bias has those axes in full, although the bias may be replicated.
    dbT = None
    if biasT is not None:
        dbT = on_mesh_of(zeros_like(biasT, acc), qb)
        for axis, q_axis in ((0, 1), (1, 2), (3, 3)):  # (b, k, s, g, t) from (nq, B, K, G, ...)
            if dbT.shape[axis] != 1:
                dbT = split_like(dbT, axis, qb, q_axis)
    init = (zeros_like(kp.swapaxes(1, 2), acc), zeros_like(vp.swapaxes(1, 2), acc), dbT)
    (dk, dv, dbT), dq = lax.scan(q_block, init, (arange(nq), qb, dob, lse, delta))
    # d logits / d scale = q . k, so d scale = sum(dS * (q . k)) = sum(q * (dS @ k)).
    dscale = jnp.sum(qb.astype(acc) * dq).astype(scale.dtype)
    dq = _from_query_blocks(dq * scale, q.shape[1]).astype(q.dtype)
    dk = (dk[:, :, :S] * scale).swapaxes(1, 2).astype(k.dtype)
    dv = dv[:, :, :S].swapaxes(1, 2).astype(v.dtype)
    dbias = None
    if bias0 is not None:
        db = dbT.transpose(0, 1, 3, 4, 2)[:, :, :, :bias0.shape[2], :bias0.shape[3]]
        dbias = db.reshape(bias0.shape).astype(bias0.dtype)
    return dq, dk, dv, dbias, None, None, None, None, None, dscale


_chunked.defvjp(_chunked_fwd, _chunked_bwd)


def attention_chunked(q, k, v, bias, mask, q_len, kv_len, *, scale, is_causal, window,
                      block_q=None, block_k=None, return_residual=False, upcast=False,
                      precision=None, segment_ids=None, soft_cap=None, offset=0):
    """Memory-efficient attention; same arguments and result as `attention_dense`. Blocks of
    `block_q` queries and `block_k` keys (default: `block_sizes`); `precision` of every block
    product, forward and backward."""
    dtype = q.dtype
    (_, T, N, H), S = q.shape, k.shape[1]
    auto_q, auto_k = block_sizes(T, S, N // k.shape[2], H)
    bq, bk = min(block_q or auto_q, T), min(block_k or auto_k, S)
    acc = acc_dtype(dtype)
    if upcast:
        q, k, v = to_accumulation(acc, q, k, v)
    q_seg, kv_seg = segment_ids or (None, None)
    cfg = dict(is_causal=bool(is_causal), window=window, T=T, S=S, bq=bq, bk=bk,
               nq=-(-T // bq), nk=-(-S // bk), acc=acc, precision=precision,
               offset=int(offset), soft_cap=None if soft_cap is None else float(soft_cap),
               dynamic=(mask is not None or q_len is not None or kv_len is not None
                        or q_seg is not None))
    scale = jnp.asarray(scale, acc)  # an operand: a traced scale has a gradient
    q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale = vary_together(
        q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale)
    out, lse = _chunked(q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, scale,
                        tuple(sorted(cfg.items())))
    out = out.astype(dtype)
    return (out, lse) if return_residual else out


def _rejects(call, caps):
    if call.complex:
        return dropout_rejects(call) + (
            f"{call.dtype} inputs: the chunked path's online softmax takes real logits (the "
            "dense path computes the complex softmax)",)
    return dropout_rejects(call)


def _notes(call, caps):
    return (("blocks of {} queries x {} keys, online softmax; the VJP keeps only the output and "
             "log-sum-exp".format(*block_sizes(call.T, call.S, call.N // call.K, call.H)),)
            + upcast_notes(caps, call.dtype) + precision_notes(call.precision)
            + feature_notes(call, "compared per block: O(T + S) memory"))


def _run(d, call, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg):
    with jax.named_scope("portable_rnn.attention.chunked"):
        return attention_chunked(q, k, v, bias, mask, q_len, kv_len, scale=call.scale,
                                 is_causal=call.is_causal, window=call.window,
                                 return_residual=call.return_residual,
                                 upcast=upcast(d.capabilities),
                                 precision=call.precision,
                                 segment_ids=None if q_seg is None else (q_seg, kv_seg),
                                 soft_cap=call.soft_cap, offset=call.causal_offset)


ROUTE = dispatch.Route("chunked", rejects=_rejects, notes=_notes, run=_run,
                       fn=attention_chunked)

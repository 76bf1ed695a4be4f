"""The Pallas TPU attention route ("splash"): JAX's splash attention kernel
(`jax.experimental.pallas.ops.tpu.splash_attention`), its block sizes from the routing model.

The kernel attends one batch row at a time, heads first: q (N, T, H), k and v (N, S, H), or, for
GQA and MQA, one key/value head shared by G query heads (its MQA form, applied per key/value
head). Causality and the window are its static mask (blocks they hide entirely are skipped),
offset for a bottom-right alignment; the soft cap is the kernel's own (``attn_logits_soft_cap``:
``cap * tanh(logits / cap)`` of the scaled logits, as the portable paths compute it). Segment ids
are the kernel's own; sequence lengths become segment ids too (1 inside a sequence, 0 past it),
or, with segment ids, the keys past a length get an id that no query inside its length carries
(`kernel_segment_ids`), so that a query sees only keys inside the key sequence. With ids, the
kernel also skips, per row, the pairs of blocks whose ranges of ids do not overlap
(`shared_blocks`, `compat.splash_skipping`): the blocks between packed documents. It scales no
logits: the query is scaled before the call, in its own dtype (as Pallas users do). Rows that see
no key are zeroed afterwards, as on every route (`rows_visible`, which finds them without the
T x S comparison); their zero cotangents keep them out of every gradient.

A program lowered for a TPU calls the compiled kernel; one lowered for any other platform (the
route asked for with ``capabilities=`` a TPU, on a CPU) runs the same kernel in Pallas
interpret mode: how the route is tested without a chip. The flash route (`flash`) shares
its reasons for rejecting a call, its segment ids and its block sizes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp
from jax import lax

from ...core import compat, dispatch, routing
from ...core.capabilities import Capabilities
from ...core.checks import asks_other_products, precision_name, precision_text
from ..math import dropout_rejects, feature_notes, own_key_visible, rows_visible

LANES = 128  # the kernel's sequence blocks and head dim are multiples of the TPU's lane width
BLOCKS = (1024, 512, 256, 128)
DEFAULT_BLOCK = 1024  # where the routing model does not rank the block sizes
# float32 blocks of 1024 x 1024 need more than the kernel's 16 MiB of scoped VMEM in its dk/dv
# backward (20 MiB on a TPU v5e): float32 blocks are at most 512
FLOAT32_BLOCK = 512


def largest_block(dtype) -> int:
    """The largest block the splash kernel runs for operands of `dtype`."""
    return FLOAT32_BLOCK if jnp.dtype(dtype) == jnp.float32 else DEFAULT_BLOCK
KERNEL = "JAX's Pallas TPU splash attention kernel"


# --- block sizes -----------------------------------------------------------------------------

def _fit(block: int, n: int) -> int:
    """The largest of `BLOCKS` up to `block` that divides `n` (a multiple of `LANES`)."""
    return next(b for b in BLOCKS if b <= max(block, LANES) and n % b == 0)


def fit_block(block: int, T: int, S: int) -> int:
    """The largest of `BLOCKS` up to `block` that tiles both T and S."""
    return min(_fit(block, T), _fit(block, S))


def block_sizes(call, caps: Capabilities) -> tuple[int, int, str]:
    """Query and key block sizes for a call, and where they come from: the block size the
    routing model predicts fastest (`attention.cost.variants`: those that tile T and S), else
    `DEFAULT_BLOCK`, each the largest that tiles its sequence."""
    found = routing.best_variant("attention", call, caps, "splash")
    if found is not None:
        params, predicted, m = found
        block = params["block"]
        return block, block, (f"predicted fastest of the block sizes that tile T and S, "
                              f"{predicted['fwdbwd']:.3g} ms forward+backward ({m.describe()})")
    block = largest_block(call.dtype)
    return (_fit(block, call.T), _fit(block, call.S),
            f"the routing model does not rank them for this call on "
            f"{caps.device_kind or caps.platform}: {block}, or the largest block below it that "
            "tiles the sequence")


# --- the call ---------------------------------------------------------------------------------

def static_mask(T: int, S: int, is_causal: bool, window, offset: int = 0):
    """The kernel's static (T, S) mask: causal (``s <= t + offset``), the window
    ``[t + offset - left, t + offset + right]``, both, or none."""
    sa = compat.splash_attention_module()
    if window is None:
        return sa.CausalMask((T, S), offset=offset) if is_causal else sa.FullMask((T, S))
    left, right = window
    return sa.LocalMask((T, S), (left, min(right, 0) if is_causal else right), offset=offset)


@functools.lru_cache(maxsize=64)
def _kernel(heads, T, S, is_causal, window, block_q, block_kv, mqa, interpret, offset=0,
            soft_cap=None):
    return compat.make_splash_attention(heads, static_mask(T, S, is_causal, window, offset),
                                        block_q, block_kv, mqa=mqa, interpret=interpret,
                                        soft_cap=soft_cap)


def segments(B: int, n: int, lengths):
    """int32 (B, n) segment ids: 1 inside each row's length, 0 past it (all 1 without)."""
    if lengths is None:
        return jnp.ones((B, n), jnp.int32)
    return (jnp.arange(n, dtype=jnp.int32)[None, :] < lengths[:, None]).astype(jnp.int32)


def free_id(ids, valid=None):
    """int32 (B,): per row, an id that no valid entry of `ids` (B, n) int32 carries (`valid`
    (B, n) bool, or None: every entry). The smallest id less one where it exists, else the first
    gap above an id (n < 2**32 ids leave one), found in the sorted ids."""
    lowest, highest = jnp.iinfo(jnp.int32).min, jnp.iinfo(jnp.int32).max
    if valid is not None:  # invalid entries repeat the smallest valid id: they add none
        smallest = jnp.min(jnp.where(valid, ids, highest), axis=1, keepdims=True)
        ids = jnp.where(valid, ids, smallest)
    s = jnp.sort(ids, axis=1)
    # s[i] + 1 is free where the next id is more than one above it (the difference in uint32:
    # exact, as it lies in [0, 2**32)), or after the largest id, if that is not int32's largest
    gap = (s[:, 1:].astype(jnp.uint32) - s[:, :-1].astype(jnp.uint32)) > 1
    gap = jnp.concatenate([gap, (s[:, -1:] < highest)], axis=1)
    above = jnp.take_along_axis(s, jnp.argmax(gap, axis=1)[:, None], axis=1)[:, 0] + 1
    return jnp.where(s[:, 0] > lowest, s[:, 0] - 1, above)


def kernel_segment_ids(B: int, T: int, S: int, q_len, kv_len, q_seg, kv_seg):
    """The kernels' (q, kv) segment ids, int32 (B, T) and (B, S), for the call's lengths and
    segment ids, or None without either. Without segment ids: `segments`. With them, the keys
    past a row's key length get an id that no query inside the row's query length carries
    (`free_id`); queries past their length keep theirs (their rows are zeroed)."""
    if q_seg is None:
        if q_len is None and kv_len is None:
            return None
        return segments(B, T, q_len), segments(B, S, kv_len)
    if kv_len is None:
        return q_seg, kv_seg
    valid = None if q_len is None else jnp.arange(T, dtype=jnp.int32)[None, :] < q_len[:, None]
    past = jnp.arange(S, dtype=jnp.int32)[None, :] >= kv_len[:, None]
    return q_seg, jnp.where(past, free_id(q_seg, valid)[:, None], kv_seg)


def shared_blocks(q_ids, kv_ids, block_q: int, block_kv: int):
    """bool (T / block_q, S / block_kv): the (query block, key block) pairs of one row whose
    ranges of ids overlap, `q_ids` (T,) and `kv_ids` (S,) int32: never False where a query and a
    key of the pair share an id, and exactly those pairs where ids rise along the row, as packing
    writes them. The kernel skips the others. A query block that overlaps no key block keeps
    every pair: its rows see no key (they are zeroed afterwards), and the kernel, dividing by the
    sum of its exponentials, needs a computed block to give them a number."""
    q = q_ids.reshape(-1, block_q)
    k = kv_ids.reshape(-1, block_kv)
    overlap = ((q.min(1)[:, None] <= k.max(1)[None, :])
               & (k.min(1)[None, :] <= q.max(1)[:, None]))
    return overlap | ~overlap.any(1, keepdims=True)


def scaled(q, scale: float):
    """The query times `scale`, rounded to its dtype: the Pallas TPU kernels are called with
    unscaled logits."""
    return (q.astype(jnp.float32) * scale).astype(q.dtype)


def attention_splash(q, k, v, q_len, kv_len, *, scale: float, is_causal: bool, window,
                     block_q: int | None = None, block_kv: int | None = None,
                     precision: str | None = None, segment_ids=None, soft_cap=None,
                     offset: int = 0, same_ids: bool = False):
    """Splash attention on canonical, checked operands that the routing accepted: q (B, T, N, H),
    k and v (B, S, K, H) bfloat16 or float32, lengths (B,) int32 or None, `segment_ids` None or
    int32 ``(q_seg (B, T), kv_seg (B, S))``; blocks of `block_q` queries and `block_kv` keys
    (default: `DEFAULT_BLOCK`, or the largest block below it that tiles the sequence); float32
    products at `precision` (`kernel_precision`); `soft_cap` the kernel's
    ``attn_logits_soft_cap``; `offset` the static mask's (S - T: bottom-right); `same_ids`:
    the query's ids are the keys' (`rows_visible`). Returns (B, T, N, H)."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    G = N // K
    block = largest_block(q.dtype)
    bq, bkv = block_q or _fit(block, T), block_kv or _fit(block, S)
    q_seg, kv_seg = segment_ids or (None, None)
    rows = rows_visible(B, T, N, S, K, q_len, kv_len, None, is_causal=is_causal, window=window,
                        offset=offset, q_seg=q_seg, kv_seg=kv_seg, same_ids=same_ids)
    q = scaled(q, scale)
    qh = q.transpose(0, 2, 1, 3).reshape(B, K, G, T, H)  # heads first, grouped as the keys'
    kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # (B, K, S, H)
    ids = kernel_segment_ids(B, T, S, q_len, kv_len, q_seg, kv_seg)

    def call(interpret):
        sa = compat.splash_attention_module()
        mqa = K < N
        kernel = _kernel(G if mqa else N, T, S, is_causal, window, bq, bkv, mqa, interpret,
                         offset, soft_cap)

        def one_row(q, k, v, *seg):  # q (K, G, T, H), k and v (K, S, H)
            row = kernel
            if seg:
                row = compat.splash_skipping(kernel, shared_blocks(*seg, bq, bkv))
                seg = sa.SegmentIds(*seg)
            else:
                seg = None
            if not mqa:
                return row(q.reshape(N, T, H), k, v, segment_ids=seg).reshape(K, G, T, H)
            return jax.vmap(lambda q, k, v: row(q, k, v, segment_ids=seg))(q, k, v)

        return lambda *arrays: jax.vmap(one_row)(*arrays)

    arrays = (qh, kh, vh) + (() if ids is None else ids)
    n_ids = len(arrays) - 3
    context = functools.partial(kernel_precision, q.dtype, precision)
    out = lax.platform_dependent(*arrays, tpu=traced_in(call(False), context, n_ids),
                                 default=traced_in(call(True), context, n_ids))
    out = out.reshape(B, N, T, H).transpose(0, 2, 1, 3)
    return jnp.where(rows, out, jnp.zeros((), out.dtype))


def float32_precision(precision) -> str | None:
    """The ``jax_default_matmul_precision`` the kernels' float32 dots are traced at for a call's
    `precision` (None: JAX's global default): "highest" for HIGH and HIGHEST (Mosaic lowers
    DEFAULT and HIGHEST only), None (the platform's default: one bfloat16 pass on a TPU, as
    XLA's) for DEFAULT."""
    return "highest" if precision_name(precision) in ("HIGH", "HIGHEST") else None


@contextlib.contextmanager
def kernel_precision(dtype=jnp.bfloat16, precision: str | None = None) -> Iterator[None]:
    """JAX's Pallas kernels' dots read ``jax_default_matmul_precision`` when they are traced,
    and Mosaic contracts bfloat16 operands at no precision but DEFAULT: for them the kernels are
    traced with that setting cleared (every precision asks the same products of bfloat16
    operands, exact and accumulated in float32). float32 operands are traced at `precision`
    (`float32_precision`)."""
    with jax.default_matmul_precision(precision if dtype == jnp.float32 else None):
        yield


def traced_in(fn, context, n_ids: int):
    """`fn(*arrays, *ids)` with its forward and backward both traced in `context()`: a kernel's
    own VJP is traced when the backward pass is, outside any context of the caller's, so a
    `custom_vjp` keeps that VJP (a pytree) as its residuals and applies it in the context. The
    last `n_ids` arguments (segment ids) get no cotangent."""

    @jax.custom_vjp
    def run(*args):
        with context():
            return fn(*args)

    def fwd(*args):
        arrays, ids = args[:len(args) - n_ids], args[len(args) - n_ids:]
        with context():
            out, vjp = jax.vjp(lambda *a: fn(*a, *ids), *arrays)
        return out, vjp

    def bwd(vjp, d_out):
        with context():
            return tuple(vjp(d_out)) + (None,) * n_ids

    run.defvjp(fwd, bwd)
    return run


# --- the route --------------------------------------------------------------------------------

_ALGORITHM = "BF16_BF16_F32"


def _precision_rejects(precision) -> tuple[str, ...]:
    """The kernel multiplies bfloat16 operands exactly with float32 accumulation: every
    `lax.Precision` (they differ only for float32 operands) and that dot algorithm ask for it;
    any other algorithm asks for products it does not compute."""
    if asks_other_products(precision, getattr(lax.DotAlgorithmPreset, _ALGORITHM)):
        return (f"precision {precision_text(precision)}: the Pallas TPU kernels multiply bfloat16 "
                f"operands exactly with float32 accumulation (DotAlgorithmPreset.{_ALGORITHM}) "
                "and run no other dot algorithm",)
    return ()


def common_rejects(call, caps: Capabilities, kernel: str, module) -> list[str]:
    """Why one of JAX's Pallas TPU attention kernels (`kernel`, its module `module` or None
    where this JAX lacks it) cannot serve a call, for reasons the splash and flash routes
    share."""
    reasons = list(dropout_rejects(call))
    if caps.platform != "tpu":
        reasons.append(f"platform is {caps.platform!r}: {kernel} needs a TPU")
    if module is None:
        reasons.append(f"this JAX has no {kernel} or no Pallas TPU lowering")
    if call.dtype == jnp.float16:
        reasons.append("inputs are float16: Mosaic compiles no float16 arithmetic in a TPU "
                       "kernel (a TPU has none); the portable paths serve it")
    elif call.dtype not in (jnp.bfloat16, jnp.float32):
        reasons.append(f"inputs are {call.dtype}: the Pallas TPU kernels run bfloat16 and "
                       "float32 (a TPU has no float64)")
    if call.H % LANES:
        reasons.append(f"head dim {call.H}: the Pallas TPU kernels need a multiple of {LANES}")
    if call.T % LANES or call.S % LANES:
        reasons.append(f"T={call.T}, S={call.S}: the Pallas TPU kernels' blocks tile only "
                       f"sequence lengths that are multiples of {LANES}")
    if call.mask_shape is not None:
        reasons.append("a boolean `mask`: the Pallas TPU kernels take causality and sequence "
                       "lengths, not a mask array")
    if not isinstance(call.scale, float):
        reasons.append("a traced `scale` (the kernels take it as a compile-time constant)")
    if call.return_residual:
        reasons.append("return_residual=True: the log-sum-exp and its gradient are computed on "
                       "the portable paths")
    if call.varying:
        reasons.append("inside jax.shard_map with check_vma=True (operands varying over "
                       f"{sorted(call.varying)}): the kernel's pallas_call leaves its outputs' "
                       "varying axes untyped, which shard_map rejects; pass check_vma=False")
    if call.dtype == jnp.bfloat16:
        reasons.extend(_precision_rejects(call.precision))
    elif precision_name(call.precision) == "algorithm":
        reasons.append(f"precision {precision_text(call.precision)}: the Pallas TPU kernels "
                       "take lax.Precision values for float32 operands, not dot algorithms")
    return reasons


def rejects(call, caps: Capabilities) -> tuple[str, ...]:
    """Why the splash route cannot serve a call (empty when it can)."""
    reasons = common_rejects(call, caps, KERNEL, compat.splash_attention_module())
    if call.bias_shape is not None:
        reasons.append("a `bias`: the splash kernel adds no bias to the logits (the flash "
                       "route does)")
    offset = call.causal_offset
    if call.window is not None and call.T + offset > call.S + call.window[0]:
        reasons.append(f"local_window_size={call.window} with T={call.T} > S + "
                       f"{call.window[0]}: the last queries see no key, which the kernel "
                       "divides by zero for")
    right = None if call.window is None else call.window[1]
    if call.is_causal:
        right = 0 if right is None else min(right, 0)
    if right is not None and offset + right < 0:
        reasons.append(f"causal_alignment='bottom_right' with T={call.T} > S={call.S}"
                       + (f" + {right}" if right else "") + ": the first queries see no key, "
                       "which the kernel divides by zero for")
    return tuple(reasons)


def precision_notes(call) -> list[str]:
    """How the kernels multiply a call's float32 operands."""
    if call.dtype != jnp.float32:
        return []
    if float32_precision(call.precision) == "highest":
        return [f"float32 products at HIGHEST (precision {precision_text(call.precision)}; "
                "Mosaic lowers DEFAULT and HIGHEST only)"]
    return ["float32 products at the platform's DEFAULT precision (one bfloat16 pass on a TPU, "
            "as XLA's); precision='highest' asks for exact float32 products"]


def _notes(call, caps: Capabilities) -> tuple[str, ...]:
    bq, bkv, where = block_sizes(call, caps)
    out = [f"blocks of {bq} queries x {bkv} keys ({where})",
           f"the query is scaled in {call.dtype} before the kernel (the kernel scales no "
           "logits)"]
    out += precision_notes(call)
    if call.K < call.N:
        out.append(f"GQA/MQA: the kernel's MQA form per key/value head ({call.N // call.K} "
                   "query heads each)")
    out += segment_notes(call)
    out += feature_notes(call)[call.has_segments:]
    out.append("vmap axes batch the kernel's grid; lowered for a platform other than a TPU "
               "it runs in Pallas interpret mode")
    return tuple(out)


def segment_notes(call, skips: bool = True) -> list[str]:
    """How the Pallas TPU kernels receive a call's sequence lengths and segment ids; `skips`:
    whether the kernel skips the blocks whose ids share no segment (the splash kernel)."""
    skip = ", the blocks whose ranges of ids do not overlap skipped" if skips else ""
    if call.has_segments:
        if own_key_visible(call.same_ids, call.kv_len):
            return [f"segment ids as the kernel's segment ids{skip}; one array for the queries "
                    "and the keys: every query sees its own key"]
        return [f"segment ids as the kernel's segment ids{skip}" + (
            "; keys past a key length get an id no query has" if call.kv_len is not None
            else "")
            + "; rows whose segment has no visible key are found by a binary search (no "
            "T x S comparison) and zeroed"]
    if call.has_lengths:
        return [f"sequence lengths as the kernel's segment ids{skip}"]
    return []


def _run(d, call, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg):
    bq, bkv, _ = block_sizes(call, d.capabilities)
    with jax.named_scope("portable_rnn.attention.splash"):
        return attention_splash(q, k, v, q_len, kv_len, scale=call.scale,
                                is_causal=call.is_causal, window=call.window, block_q=bq,
                                block_kv=bkv, precision=float32_precision(call.precision),
                                segment_ids=None if q_seg is None else (q_seg, kv_seg),
                                soft_cap=call.soft_cap, offset=call.causal_offset,
                                same_ids=call.same_ids)


ROUTE = dispatch.Route("splash", rejects=rejects, notes=_notes, run=_run,
                       platforms=compat.pallas_tpu_platforms, kernel="Pallas TPU kernel")

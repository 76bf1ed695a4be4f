"""The Pallas TPU flash attention route ("flash"): JAX's flash attention kernel
(`jax.experimental.pallas.ops.tpu.flash_attention`), for the calls with a `bias` that the
splash kernel cannot take.

The kernel attends (B, N, T, H) operands with one key/value head per query head (GQA and MQA
repeat the key/value heads; autodiff sums their gradients back), causality as a static flag
(top-left only: it takes no offset), segment ids and sequence lengths as its segment ids (as on
the splash route), no logits soft cap, and an additive bias of the full
(B, N, T, S) shape, widened to float32 (a broadcast bias gets the sum of its copies' gradients,
summed in float32). The kernel would add
the bias before scaling the logits; the route scales the query instead (as on the splash route)
and calls it with a scale of 1. Rows that see no key are zeroed afterwards, as on every route.

Lowered for a TPU the program calls the compiled kernel; lowered for any other platform it runs
the kernel in Pallas interpret mode. The kernel takes no ``interpret=`` argument, so that
branch traces its forward and backward inside `compat.pallas_interpret_mode` (a `custom_vjp` that
keeps the kernel's own VJP).
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
from jax import lax

from ...core import compat, dispatch
from ...core.capabilities import Capabilities
from ..math import rows_visible
from . import splash

KERNEL = "JAX's Pallas TPU flash attention kernel"
BLOCK = 512  # queries and keys in every block, or the largest block below it that tiles


def block_sizes(b: int):
    """The flash kernel's `BlockSizes` with `b` queries and keys in every block, forward and
    backward, one batch row per block."""
    fa = compat.flash_attention_module()
    return fa.BlockSizes(block_q=b, block_k_major=b, block_k=b, block_b=1, block_q_major_dkv=b,
                         block_k_major_dkv=b, block_k_dkv=b, block_q_dkv=b, block_k_major_dq=b,
                         block_k_dq=b, block_q_dq=b)


def _kernel_call(q, k, v, ab, q_ids, kv_ids, *, causal, block):
    fa = compat.flash_attention_module()
    segment_ids = None if q_ids is None else fa.SegmentIds(q_ids, kv_ids)
    return fa.flash_attention(q, k, v, ab, segment_ids, causal=causal, sm_scale=1.0,
                              block_sizes=block_sizes(block))


@contextlib.contextmanager
def _context(interpret: bool, dtype, precision: str | None):
    # JAX's flash kernel promotes dtypes implicitly (a float32 bias against bfloat16 logits)
    with jax.numpy_dtype_promotion("standard"), splash.kernel_precision(dtype, precision):
        if not interpret:
            yield
            return
        with compat.pallas_interpret_mode():
            yield


def attention_flash(q, k, v, bias, q_len, kv_len, *, scale: float, is_causal: bool,
                    block: int | None = None, precision: str | None = None, segment_ids=None,
                    same_ids: bool = False):
    """Flash attention on canonical, checked operands that the routing accepted: q (B, T, N, H),
    k and v (B, S, K, H) bfloat16 or float32, `bias` broadcastable to (B, N, T, S) or None,
    lengths (B,) int32 or None, `segment_ids` None or int32 ``(q_seg (B, T), kv_seg (B, S))``;
    blocks of `block` queries and keys (default: `BLOCK`, or the largest block below it that
    tiles T and S); float32 products at `precision` (`splash.kernel_precision`); `same_ids`: the
    query's ids are the keys' (`rows_visible`). Returns (B, T, N, H)."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    if block is None:
        block = splash.fit_block(BLOCK, T, S)
    q_seg, kv_seg = segment_ids or (None, None)
    rows = rows_visible(B, T, N, S, K, q_len, kv_len, None, is_causal=is_causal, window=None,
                        q_seg=q_seg, kv_seg=kv_seg, same_ids=same_ids)
    qh = splash.scaled(q, scale).transpose(0, 2, 1, 3)
    kh, vh = (jnp.repeat(a, N // K, axis=2).transpose(0, 2, 1, 3) for a in (k, v))
    # In float32: the kernel returns the bias gradient in the bias's dtype, and autodiff sums a
    # broadcast bias's copies in it (1024 bfloat16 copies summed in bfloat16 measured 7 ulps).
    ab = None if bias is None else jnp.broadcast_to(bias.astype(jnp.float32), (B, N, T, S))
    ids = splash.kernel_segment_ids(B, T, S, q_len, kv_len, q_seg, kv_seg) or ()

    def kernel(q, k, v, ab, *ids):
        return _kernel_call(q, k, v, ab, *(ids or (None, None)), causal=is_causal, block=block)

    out = lax.platform_dependent(
        qh, kh, vh, ab, *ids,
        tpu=splash.traced_in(kernel, lambda: _context(False, q.dtype, precision), len(ids)),
        default=splash.traced_in(kernel, lambda: _context(True, q.dtype, precision),
                                     len(ids)))
    out = out.transpose(0, 2, 1, 3)
    return jnp.where(rows, out, jnp.zeros((), out.dtype))


def rejects(call, caps: Capabilities) -> tuple[str, ...]:
    """Why the flash route cannot serve a call (empty when it can)."""
    reasons = splash.common_rejects(call, caps, KERNEL, compat.flash_attention_module())
    if call.window is not None:
        reasons.append(f"local_window_size={call.window}: the flash kernel has no sliding "
                       "window (the splash route does)")
    if call.soft_cap is not None:
        reasons.append(f"logits_soft_cap={call.soft_cap:g}: the flash kernel has no logits soft "
                       "cap (the splash route does)")
    if call.offset_matters:
        reasons.append(f"causal_alignment='bottom_right' with T={call.T} != S={call.S}: the "
                       "flash kernel's causal mask is aligned top-left and takes no offset (the "
                       "splash route's does)")
    return tuple(reasons)


def _notes(call, caps: Capabilities) -> tuple[str, ...]:
    out = [f"blocks of {splash.fit_block(BLOCK, call.T, call.S)} "
           "queries and keys",
           f"the query is scaled in {call.dtype} before the kernel"]
    out += splash.precision_notes(call)
    if call.bias_shape is not None:
        out.append("the bias broadcast to (B, N, T, S) in float32 for the kernel")
    if call.K < call.N:
        out.append("GQA/MQA: key/value heads repeated for the kernel")
    out += splash.segment_notes(call, skips=False)
    out.append("lowered for a platform other than a TPU it runs in Pallas interpret mode")
    return tuple(out)


def _run(d, call, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg):
    with jax.named_scope("portable_rnn.attention.flash"):
        return attention_flash(q, k, v, bias, q_len, kv_len, scale=call.scale,
                               is_causal=call.is_causal,
                               precision=splash.float32_precision(call.precision),
                               segment_ids=None if q_seg is None else (q_seg, kv_seg),
                               same_ids=call.same_ids)


ROUTE = dispatch.Route("flash", rejects=rejects, notes=_notes, run=_run,
                       platforms=compat.pallas_tpu_platforms, kernel="Pallas TPU kernel")

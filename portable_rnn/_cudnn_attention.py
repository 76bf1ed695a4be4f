"""The cuDNN attention route: `jax.nn.dot_product_attention(implementation="cudnn")`, vmappable.

JAX's cuDNN attention primitives batch only along axis 0 (and, in JAX 0.10, not even there when
an operand is unbatched or under ``vmap(grad)``). The call is therefore wrapped, with public API
only, as a `jax.custom_vjp` whose forward and backward are `jax.custom_batching.custom_vmap`
functions. Their rules move nothing themselves (JAX has already moved each vmapped axis to the
front); they broadcast unbatched operands, fold the vmapped axis into the batch axis, make one
cuDNN call, and unfold. Calling the same function again re-enters the rule for outer vmaps.

- An unbatched bias with batch dimension 1 is left as it is in the forward (every row shares
  it). In the backward it is broadcast to the folded batch, because each vmapped instance needs
  its own bias gradient (``vmap(grad(f))``); ``grad(vmap(f))`` then sums them.
- Cost: JAX's public API does not expose the cuDNN backward on its own, so the backward runs the
  cuDNN forward again (through `jax.vjp`) before the backward kernel: one extra forward per
  backward pass.
- Query rows with no visible key are zeroed afterwards (cuDNN, like JAX's XLA path, would return
  the average over all keys there).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._attention_math import rows_visible
from ._batching import fold, unfold
from ._capabilities import Capabilities, cudnn_platform_rejects
from ._sharding import split_like, typed_like


def rejects(caps: Capabilities, dtype: np.dtype, T: int, S: int, H: int, bias_shape, mask_shape,
            is_causal: bool, window, has_lengths: bool, bias_dtype=None) -> tuple[str, ...]:
    """Why cuDNN fused attention cannot serve a call (empty when it can)."""
    reasons = cudnn_platform_rejects(caps, "attention")
    if dtype.itemsize != 2:
        reasons.append(f"inputs are {dtype}: cuDNN attention supports float16/bfloat16 only")
    h_max = 256 if caps.compute_capability and caps.compute_capability >= (9, 0) else 128
    if H % 8 or H > h_max:
        reasons.append(f"head dim {H}: cuDNN needs a multiple of 8 that is <= {h_max}"
                       + ("" if h_max == 256 else " (256 on sm90+)"))
    for name, shape in (("bias", bias_shape), ("mask", mask_shape)):
        if shape is not None and tuple(shape[-2:]) != (T, S):
            reasons.append(f"{name} last dims {tuple(shape[-2:])}: cuDNN needs exactly "
                           f"(T, S)=({T}, {S})")
    if bias_dtype is not None and bias_dtype != dtype:
        reasons.append(f"bias is {bias_dtype}, inputs are {dtype}: cuDNN needs one dtype")
    if bias_shape is not None and (T % 2 or S % 2):
        reasons.append(f"a bias with odd T={T} or S={S}: cuDNN cannot compute its gradient")
    if window is not None and window[1] > 0 and not (is_causal and not has_lengths):
        reasons.append(f"local_window_size={window}: cuDNN supports a right window only with "
                       "plain causal masking")
    if T == 0 or S == 0:
        reasons.append("T=0 or S=0: nothing to attend")
    return tuple(reasons)


# --- the batched call -------------------------------------------------------------------------

_ORDER = ("q", "k", "v", "bias", "mask", "q_len", "kv_len")


def _call(statics, present, *arrays):
    """The stock cuDNN call on the operands named in `present`."""
    scale, is_causal, window = statics
    kw = dict(zip(present, arrays))
    # JAX's own wrapper promotes implicitly; our operands already share one dtype.
    with jax.numpy_dtype_promotion("standard"):
        return jax.nn.dot_product_attention(
            kw["q"], kw["k"], kw["v"], kw.get("bias"), kw.get("mask"), scale=scale,
            is_causal=is_causal, query_seq_lengths=kw.get("q_len"),
            key_value_seq_lengths=kw.get("kv_len"), local_window_size=window,
            implementation="cudnn")


def _fold(a, batched, axis_size, batch, share_broadcast=False):
    """Vmapped axis (front) into the batch axis 0. A 4-D bias/mask with batch 1 is broadcast to
    `batch` first, unless it is unbatched and `share_broadcast` (then every row shares it)."""
    if not batched and share_broadcast and a.shape[0] == 1:
        return a
    if a.ndim == (5 if batched else 4) and a.shape[-4] == 1 and batch != 1:
        a = jnp.broadcast_to(a, a.shape[:-4] + (batch,) + a.shape[-3:])
    return fold(a, batched, axis_size, 0)


@functools.cache
def _primitives(statics, present):
    """custom_vmap forward and backward for one static configuration and set of operands."""
    differentiable = [n for n in present if n in ("q", "k", "v", "bias")]

    @jax.custom_batching.custom_vmap
    def fwd(*arrays):
        return _call(statics, present, *arrays)

    @fwd.def_vmap
    def fwd_rule(axis_size, in_batched, *arrays):
        batch = arrays[0].shape[1] if in_batched[0] else arrays[0].shape[0]
        folded = [_fold(a, b, axis_size, batch, share_broadcast=name in ("bias", "mask"))
                  for name, a, b in zip(present, arrays, in_batched)]
        return unfold(fwd(*folded), axis_size, 0), True

    @jax.custom_batching.custom_vmap
    def bwd(d_out, *arrays):
        kw = dict(zip(present, arrays))

        def f(*diff):
            return _call(statics, present, *[dict(kw, **dict(zip(differentiable, diff)))[n]
                                             for n in present])

        with jax.numpy_dtype_promotion("standard"):  # JAX's cuDNN backward promotes implicitly
            _, vjp = jax.vjp(f, *[kw[n] for n in differentiable])
            return vjp(d_out)

    @bwd.def_vmap
    def bwd_rule(axis_size, in_batched, d_out, *arrays):
        batch = arrays[0].shape[1] if in_batched[1] else arrays[0].shape[0]
        folded = [_fold(a, b, axis_size, batch, share_broadcast=name == "mask")
                  for name, a, b in zip(present, arrays, in_batched[1:])]
        grads = bwd(_fold(d_out, in_batched[0], axis_size, batch), *folded)
        out = []
        for name, g in zip(differentiable, grads):
            g = unfold(g, axis_size, 0)
            if name == "bias" and dict(zip(present, arrays))["bias"].shape[-4] == 1:
                g = jnp.sum(g, axis=1, keepdims=True)  # per instance, back to batch 1
            out.append(g)
        return tuple(out), (True,) * len(out)

    return fwd, bwd, differentiable


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _cudnn(statics, present, *arrays):
    return _primitives(statics, present)[0](*arrays)


def _cudnn_fwd(statics, present, *arrays):
    return _primitives(statics, present)[0](*arrays), arrays


def _cudnn_bwd(statics, present, arrays, d_out):
    _, bwd, differentiable = _primitives(statics, present)
    grads = dict(zip(differentiable, bwd(d_out, *arrays)))
    return tuple(None if name not in grads else typed_like(grads[name], a)
                 for name, a in zip(present, arrays))


_cudnn.defvjp(_cudnn_fwd, _cudnn_bwd)


def attention_cudnn(q, k, v, bias, mask, q_len, kv_len, *, scale, is_causal, window):
    """cuDNN fused attention on canonical, checked operands that the routing accepted."""
    B, T, N, _ = q.shape
    S, K = k.shape[1], k.shape[2]
    rows = rows_visible(B, T, N, S, K, q_len, kv_len, mask, is_causal=is_causal, window=window)
    if (q_len is None) != (kv_len is None):  # cuDNN needs both: the missing one is full length
        q_len = jnp.full_like(kv_len, T) if q_len is None else q_len
        kv_len = jnp.full_like(q_len, S) if kv_len is None else kv_len
    # JAX's partitioning rule hands each batch shard the lengths as they are sharded, and cuDNN
    # reads the first B/n of them: they must be split like the query's batch.
    q_len, kv_len = (None if a is None else split_like(a, 0, q) for a in (q_len, kv_len))
    given = dict(zip(_ORDER, (q, k, v, bias, mask, q_len, kv_len)))
    present = tuple(n for n in _ORDER if given[n] is not None)
    statics = (float(scale), bool(is_causal), window)
    out = typed_like(_cudnn(statics, present, *[given[n] for n in present]), q)
    return jnp.where(rows, out, jnp.zeros((), out.dtype))

"""The cuDNN attention route ("cudnn"): `jax.nn.dot_product_attention(implementation="cudnn")`,
vmappable.

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
  the average over all keys there). cuDNN never sees a sequence length of 0 (it sees 1): its
  answer for a row that its padding mask leaves empty has not been checked on a GPU.
"""

from __future__ import annotations

import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...core import compat, dispatch
from ...core.batching import fold, unfold
from ...core.capabilities import Capabilities, cudnn_platform_rejects
from ...core.checks import asks_other_products, first_line, own_rank_promotion, precision_text
from ...core.sharding import split_like, typed_like
from ..math import dropout_rejects, rows_visible

# cuDNN releases that lift a limit JAX does not check itself (or checks only when it compiles).
CUDNN_FOR_WINDOW = 90200  # sliding window: JAX's own tests require cuDNN 9.2
CUDNN_FOR_SM103 = 91100  # compute capability 10.3: JAX raises below cuDNN 9.11
# Head dim > 128 in the backward: cuDNN 9.5 on Hopper (TransformerEngine issue 1591); 9.23 on
# Blackwell, sm10x (cudnn-frontend 1.24.1 release notes). JAX checks neither.
CUDNN_FOR_WIDE_BACKWARD = {(9, 0): 90500, (10, 0): 92300}
SECOND_ORDER = ("second-order derivatives (jax.hessian, grad of grad, jvp of grad) through cuDNN "
                "attention are not supported: JAX's cuDNN attention kernels have no derivative "
                "rules of their own. Pass implementation='xla' or 'chunked', or trace the "
                "function under portable_rnn.policy(attention='xla').")


def rejects(caps: Capabilities, dtype: np.dtype, T: int, S: int, H: int, bias_shape, mask_shape,
            is_causal: bool, window, has_lengths: bool, bias_dtype=None,
            precision=None) -> tuple[str, ...]:
    """Why cuDNN fused attention cannot serve a call (empty when it can).

    A bias or mask whose last two dims broadcast to (T, S) is broadcast for cuDNN (JAX's cuDNN
    call wants them whole), so only the dims that cannot be served are rules here.
    """
    reasons = cudnn_platform_rejects(caps, "attention")
    cc, cudnn = caps.compute_capability, caps.cudnn_version or 0
    if cc is not None and cc < (8, 0):
        reasons.append(f"compute capability {cc[0]}.{cc[1]}: cuDNN flash attention needs 8.0 "
                       "(Ampere) or newer")
    if cc == (10, 3) and caps.cudnn_version is not None and cudnn < CUDNN_FOR_SM103:
        reasons.append(f"compute capability 10.3 needs cuDNN >= 9.11 (JAX raises); this "
                       f"machine has {_version(cudnn)}")
    if dtype.itemsize != 2:
        reasons.append(f"inputs are {dtype}: cuDNN attention supports float16/bfloat16 only")
    h_max = 256 if cc and cc >= (9, 0) else 128
    if H % 8 or H > h_max:
        reasons.append(f"head dim {H}: cuDNN needs a multiple of 8 that is <= {h_max}"
                       + ("" if h_max == 256 else " (256 on sm90+)"))
    if bias_dtype is not None and bias_dtype != dtype:
        reasons.append(f"bias is {bias_dtype}, inputs are {dtype}: cuDNN needs one dtype")
    if window is not None and window[1] > 0 and not (is_causal and not has_lengths):
        reasons.append(f"local_window_size={window}: cuDNN supports a right window only with "
                       "plain causal masking")
    if window is not None and T > S + window[0]:
        reasons.append(f"local_window_size={window} with T={T} > S + {window[0]}: the last "
                       "queries see no key, and what cuDNN returns for such rows is unverified")
    if window is not None and caps.cudnn_version is not None and cudnn < CUDNN_FOR_WINDOW:
        reasons.append(f"local_window_size={window} needs cuDNN >= 9.2; this machine has "
                       f"{_version(cudnn)}")
    if T == 0 or S == 0:
        reasons.append("T=0 or S=0: nothing to attend")
    reasons.extend(precision_rejects(precision, dtype))
    if not reasons and caps.probe_device is not None:
        failure = probe(caps.probe_device)
        if failure:
            hint = (" (on CUDA 13, cuDNN may create no execution plans: jax issue 32430)"
                    if (caps.cuda_version or 0) >= 13000 else "")
            reasons.append(f"a one-time check compiling and running cuDNN attention on this "
                           f"machine failed{hint}: {failure}")
    return tuple(reasons)


# The dot algorithm cuDNN runs for 16-bit operands: exact products, float32 accumulation.
_CUDNN_ALGORITHM = {np.dtype(jnp.bfloat16): lax.DotAlgorithmPreset.BF16_BF16_F32,
                    np.dtype(np.float16): lax.DotAlgorithmPreset.F16_F16_F32}


def precision_rejects(precision, dtype: np.dtype) -> list[str]:
    """Why cuDNN attention cannot honour `precision` (None: ``jax_default_matmul_precision``) for
    `dtype` operands (empty when it can).

    cuDNN multiplies 16-bit operands exactly and accumulates in float32. That is what every
    `lax.Precision` gives 16-bit operands (a precision chooses how float32 operands are rounded),
    and the dot algorithm of that form (``BF16_BF16_F32`` for bfloat16); any other algorithm
    asks for products cuDNN does not compute.
    """
    algorithm = _CUDNN_ALGORITHM.get(dtype)
    if algorithm is None:  # not 16-bit: rejected for its dtype already
        return []
    if asks_other_products(precision, algorithm):
        return [f"precision {precision_text(precision)}: cuDNN attention multiplies {dtype} "
                f"operands exactly with float32 accumulation (DotAlgorithmPreset."
                f"{algorithm.name}) and runs no other dot algorithm"]
    return []


def check_traceable() -> None:
    """Raises when this jaxlib cannot build the cuDNN attention call (an explicit request)."""
    if not compat.cudnn_attention_traceable():
        raise ValueError("implementation='cudnn' cannot be traced here: this jaxlib has no CUDA "
                         "plugin (JAX reports no cuDNN). Install jax[cuda12] or jax[cuda13], or "
                         "pass implementation=None.")


def backward_rejects(caps: Capabilities, T: int, S: int, H: int) -> tuple[str, ...]:
    """Why cuDNN cannot compute the gradient of a call whose forward it serves."""
    reasons = []
    if T % 2 or S % 2:
        reasons.append(f"odd T={T} or S={S}: JAX's cuDNN training kernels need even sequence "
                       "lengths (its training forward always passes a bias)")
    cc = caps.compute_capability or (9, 0)
    need = CUDNN_FOR_WIDE_BACKWARD[(10, 0) if cc >= (10, 0) else (9, 0)]
    if H > 128 and (caps.cudnn_version or 0) < need:
        reasons.append(f"head dim {H} > 128: the cuDNN backward needs {_version(need)} or newer "
                       f"on sm{cc[0]}{cc[1]}")
    return tuple(reasons)


def _version(v: int) -> str:
    return f"cuDNN {v // 10000}.{v // 100 % 100}.{v % 100}"


@functools.cache
def probe(device) -> str | None:
    """Compiles and runs a tiny cuDNN attention forward and backward on `device`, once per
    process and device; returns the error's first line, or None when it works.

    Some CUDA/cuDNN combinations fail only when the kernel is compiled (JAX's own tests skip
    cuDNN attention on CUDA 13), after routing, where nothing could fall back. The check runs in
    its own thread, so no trace, mesh or default device of the caller applies to it.
    """
    result: list[str | None] = []

    def check():
        try:
            f32 = jnp.float32
            q = jax.device_put(
                (jnp.arange(2 * 64 * 2 * 64, dtype=f32).reshape(2, 64, 2, 64) % 7 / 7)
                .astype(jnp.bfloat16), device)

            def loss(q, k, v):
                with jax.numpy_dtype_promotion("standard"):
                    out = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                                       implementation="cudnn")
                return jnp.sum(out.astype(f32))

            out = jax.jit(jax.value_and_grad(loss, (0, 1, 2)))(q, q, q)
            if not all(bool(jnp.isfinite(a.astype(f32)).all()) for a in jax.tree.leaves(out)):
                raise FloatingPointError("non-finite results")
            result.append(None)
        except Exception as e:  # noqa: BLE001 - any failure means: do not route here
            result.append(first_line(e))

    thread = threading.Thread(target=check, name="portable_rnn cuDNN attention check")
    thread.start()
    thread.join()
    return result[0]


# --- the batched call -------------------------------------------------------------------------

_ORDER = ("q", "k", "v", "bias", "mask", "q_len", "kv_len")


def _call(statics, present, *arrays):
    """The stock cuDNN call on the operands named in `present` (`precision`, which the routing
    checked cuDNN honours, is for a portable backward)."""
    scale, is_causal, window, _ = statics
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


def _no_derivatives(fn):
    """`fn`, whose own derivative raises an error that says what to do (second-order AD)."""
    guarded = jax.custom_jvp(fn)

    @guarded.defjvp
    def _(primals, tangents):
        raise NotImplementedError(SECOND_ORDER)

    return guarded


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

    return _no_derivatives(fwd), _no_derivatives(bwd), differentiable


def _portable_grads(statics, present, backward, arrays, d_out):
    """The gradients of the call computed by the portable path `backward` (recomputed)."""
    scale, is_causal, window, precision = statics
    kw = dict(zip(present, arrays))
    differentiable = [n for n in present if n in ("q", "k", "v", "bias")]

    def f(*diff):
        a = dict(kw, **dict(zip(differentiable, diff)))
        return dispatch.routes("attention")[backward].fn(
            a["q"], a["k"], a["v"], a.get("bias"), a.get("mask"), a.get("q_len"), a.get("kv_len"),
            scale=scale, is_causal=is_causal, window=window, precision=precision)

    _, vjp = jax.vjp(f, *[kw[n] for n in differentiable])
    return dict(zip(differentiable, vjp(d_out)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _cudnn(statics, present, backward, *arrays):
    return _primitives(statics, present)[0](*arrays)


def _cudnn_fwd(statics, present, backward, *arrays):
    return _primitives(statics, present)[0](*arrays), arrays


@own_rank_promotion
def _cudnn_bwd(statics, present, backward, arrays, d_out):
    if backward is None:
        _, bwd, differentiable = _primitives(statics, present)
        grads = dict(zip(differentiable, bwd(d_out, *arrays)))
    else:
        grads = _portable_grads(statics, present, backward, arrays, d_out)
    return tuple(None if name not in grads else typed_like(grads[name], a)
                 for name, a in zip(present, arrays))


_cudnn.defvjp(_cudnn_fwd, _cudnn_bwd)


def attention_cudnn(q, k, v, bias, mask, q_len, kv_len, *, scale, is_causal, window,
                    backward=None, precision=None):
    """cuDNN fused attention on canonical, checked operands that the routing accepted.

    `backward`: None runs the gradient on cuDNN too; ``"xla"`` or ``"chunked"`` computes it with
    that portable path instead (for calls whose forward cuDNN serves but whose backward it
    cannot, see `backward_rejects`), at `precision`.
    """
    B, T, N, _ = q.shape
    S, K = k.shape[1], k.shape[2]
    rows = rows_visible(B, T, N, S, K, q_len, kv_len, mask, is_causal=is_causal, window=window)
    # JAX's cuDNN call wants the last two dims of a bias or mask whole, and adds a mask to the
    # bias in the 16-bit dtype, broadcasting the bias over the mask's batch and heads (whose
    # copies' gradients JAX then sums in 16 bits, a few bfloat16 ulps off already for 4 heads).
    # Widened here instead, autodiff sums the bias gradient back to the given shape in float32.
    if mask is not None:
        mask = jnp.broadcast_to(mask, mask.shape[:2] + (T, S))
    if bias is not None:
        lead = bias.shape[:2] if mask is None else tuple(map(max, bias.shape[:2],
                                                             mask.shape[:2]))
        if bias.shape != lead + (T, S):
            wide = jnp.broadcast_to(bias.astype(jnp.float32), lead + (T, S))
            bias = wide.astype(bias.dtype)
    if (q_len is None) != (kv_len is None):  # cuDNN needs both: the missing one is full length
        q_len = jnp.full_like(kv_len, T) if q_len is None else q_len
        kv_len = jnp.full_like(q_len, S) if kv_len is None else kv_len
    if q_len is not None:
        # What cuDNN returns for rows its own masks leave empty (a length 0; a window past the
        # last key) is unverified on a GPU: it never sees one. Lengths are at least 1, and with
        # a window the queries past the last key's reach are padding to cuDNN. `rows`, from the
        # real lengths, zeroes those rows, whose zero cotangents keep them out of every gradient.
        kv_len = jnp.maximum(kv_len, 1)
        if window is not None:
            q_len = jnp.minimum(q_len, kv_len + window[0])
        q_len = jnp.maximum(q_len, 1)
        # and cuDNN's gradient for the rows it takes as padding is never read
        q = jnp.where((jnp.arange(T, dtype=jnp.int32) < q_len[:, None])[:, :, None, None], q,
                      jnp.zeros((), q.dtype))
    # JAX's partitioning rule hands each batch shard the lengths as they are sharded, and cuDNN
    # reads the first B/n of them: they must be split like the query's batch.
    q_len, kv_len = (None if a is None else split_like(a, 0, q) for a in (q_len, kv_len))
    given = dict(zip(_ORDER, (q, k, v, bias, mask, q_len, kv_len)))
    present = tuple(n for n in _ORDER if given[n] is not None)
    statics = (float(scale), bool(is_causal), window, precision)
    out = typed_like(_cudnn(statics, present, backward, *[given[n] for n in present]), q)
    return jnp.where(rows, out, jnp.zeros((), out.dtype))


# --- the route --------------------------------------------------------------------------------

def feature_rejects(call) -> tuple[str, ...]:
    """Why JAX's cuDNN attention, as `jax.nn.dot_product_attention` exposes it, cannot serve a
    call's segment ids, logits soft cap or bottom-right causal alignment (empty when the call
    has none of them)."""
    takes = compat.jax_nn_attention_parameters()
    version = f"jax {jax.__version__}"
    reasons = []
    if call.has_segments:
        reasons.append(
            "segment ids: jax.nn.dot_product_attention "
            + (f"({version}) takes none, so JAX's cuDNN attention cannot keep segments apart"
               if not any("segment" in n for n in takes) else
               f"({version}) takes them, but portable_rnn does not pass them to cuDNN yet "
               "(unverified on a GPU)"))
    if call.soft_cap is not None:
        reasons.append(
            f"logits_soft_cap={call.soft_cap:g}: jax.nn.dot_product_attention "
            + (f"({version}) has no logits soft cap for cuDNN"
               if not any("soft_cap" in n for n in takes) else
               f"({version}) takes one, but portable_rnn does not pass it to cuDNN yet"))
    if call.offset_matters:
        reasons.append(f"causal_alignment='bottom_right' with T={call.T} != S={call.S}: JAX's "
                       "cuDNN attention aligns its causal mask and window top-left (its "
                       "MaskType.CAUSAL) and takes no offset")
    return tuple(reasons)


def _rejects(call, caps: Capabilities) -> tuple[str, ...]:
    reasons = dropout_rejects(call)
    if not isinstance(call.scale, float):
        reasons += ("a traced `scale` (cuDNN takes it as a compile-time constant)",)
    if call.return_residual:
        reasons += ("return_residual=True: the log-sum-exp and its gradient are computed on the "
                    "portable paths",)
    return reasons + rejects(caps, call.dtype, call.T, call.S, call.H, call.bias_shape,
                             call.mask_shape, call.is_causal, call.window, call.has_lengths,
                             call.bias_dtype, call.precision) + feature_rejects(call)


def portable_backward(call, caps: Capabilities) -> str | None:
    """The portable route that computes the gradient of a call whose forward cuDNN serves but
    whose backward it cannot (None when cuDNN computes both)."""
    if not backward_rejects(caps, call.T, call.S, call.H):
        return None
    return dispatch.decide("attention", call, caps, None, call.preferred, unavailable={
        "cudnn": "the backward runs on a portable path"}).implementation


def _notes(call, caps: Capabilities) -> tuple[str, ...]:
    backward = portable_backward(call, caps)
    out = ["vmap axes fold into the batch"]
    text = precision_text(call.precision)
    if text is not None:
        out.append(f"precision {text}: cuDNN multiplies the 16-bit operands exactly with float32 "
                   "accumulation" + ("" if backward is None else
                                     f" (the {backward} backward's products at {text})"))
    reasons = backward_rejects(caps, call.T, call.S, call.H)
    if backward is None:
        out.append("the backward re-runs the cuDNN forward (one extra forward per backward)")
    else:
        out.append(f"forward on cuDNN; gradients on the {backward} path: " + "; ".join(reasons))
    out.append("no second-order derivatives (jax.hessian, grad of grad)")
    return tuple(out)


def _run(d, call, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg):
    check_traceable()  # asked for on a jaxlib without CUDA (an automatic choice: see platforms)
    with jax.named_scope("portable_rnn.attention.cudnn"):
        return attention_cudnn(q, k, v, bias, mask, q_len, kv_len, scale=call.scale,
                               is_causal=call.is_causal, window=call.window,
                               precision=call.precision,
                               backward=portable_backward(call, d.capabilities))


ROUTE = dispatch.Route("cudnn", rejects=_rejects, notes=_notes, run=_run,
                       platforms=compat.cudnn_attention_platforms)

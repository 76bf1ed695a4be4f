"""FROZEN REFERENCE, do not edit: the pure-JAX LSTM before the generic recurrent driver.

This is `portable_rnn/_lstm_scan.py` as of commit 909a30f, the last version before commit 0417cad
replaced it with `portable_rnn/_rnn_scan.py` and `portable_rnn/_cell_lstm.py`. It is kept only so
that `python -m benchmarks.lstm_driver` can compare the two in one process. The one change: its two
relative imports (`_weights`, `_sharding`) now point into `portable_rnn`; `unpack_lstm_weights`
still slices the flat vector the same way. Its original docstring follows.

The pure-JAX LSTM: one `lax.scan` per layer with a hand-written VJP.

Per layer and direction, the input projection of all time steps is one 2-D GEMM outside the loop,
and the loop does one fused (H, 4H) recurrent matmul per step. Both directions of a bidirectional
layer advance in the same loop (the reverse one over a time-reversed copy of the input), so a
layer costs T sequential steps, not 2T. The backward loop only propagates ``dz @ W_hh^T`` through
time; every weight and input gradient is a large GEMM after the loop, instead of T small
accumulations as plain autodiff of the loop would do.

Gate trick: ``sigmoid(z) = 0.5 * tanh(z / 2) + 0.5``. The i, f, o rows of every weight and bias are
pre-scaled by 1/2 (exact in floating point), so each step applies one ``tanh`` to all 4H gates and
one multiply-add, instead of three sigmoids and a tanh.

Ragged sequences: a step past a sequence's length leaves the carry unchanged. The forward
direction therefore ends at the last valid step, and the reverse direction, which reads the
time-reversed input (padding first), starts from the initial state at the last valid step; a
sequence of length 0 returns the initial state.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from portable_rnn import _weights
from portable_rnn._sharding import split_like, vary_together

Array = jax.Array

# Per gate (i, f, g, o): activation = tanh(z) * _ACT_A + _ACT_B, where z is the pre-activation with
# the i, f, o rows scaled by _SCALE; d activation / dz = (1 - tanh(z)^2) * _ACT_A.
_SCALE = (0.5, 0.5, 1.0, 0.5)
_ACT_A = (0.5, 0.5, 1.0, 0.5)
_ACT_B = (0.5, 0.5, 0.0, 0.5)
UNROLL = 4  # measured on CPU: unroll=1 ran bf16 fwd+bwd ~10x slower; more gained nothing


def accumulation_dtype(dtype) -> np.dtype:
    """float32 for 16-bit floats, else the dtype itself."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def _gates(values, hidden: int, dtype) -> np.ndarray:
    return np.repeat(np.asarray(values, dtype), hidden)


def _mm(a: Array, b: Array, precision, acc, contract=((1,), (0,)), out_sharding=None) -> Array:
    """Matmul with `acc` accumulation; `contract` and `out_sharding` as in `lax.dot_general`."""
    return lax.dot_general(a, b, (contract, ((), ())), precision=precision,
                           preferred_element_type=acc, out_sharding=out_sharding)


def _forward(x, w_ih, w_hh, bias, h0, c0, mask, precision, unroll, save):
    """One layer, both directions. Shapes (per direction d < D):

    x (T, B, I) compute dtype; w_ih (D, I, 4H), w_hh (D, H, 4H) compute dtype, pre-scaled;
    bias (D, 4H) accumulation dtype, pre-scaled; h0 (D, B, H); c0 (D, B, H) accumulation dtype;
    mask (T, B) bool or None. Direction 1 runs over time-reversed input ("scan time").

    Returns per direction the carries after every step in scan time (hs, and when `save` also the
    cell states cs and t = tanh(z) for the backward pass), and the final cell states.
    """
    steps = x.shape[0]
    acc = bias.dtype
    hidden = w_hh.shape[1]
    xs = [x, x[::-1]][:w_ih.shape[0]]
    # (T, B, I) x (I, 4H): one GEMM over all steps, without merging T and B (a reshape that a
    # batch-sharded `x` cannot follow under explicit sharding).
    zxs = [_mm(xd.astype(w_ih.dtype), w_ih[d], precision, acc, contract=((2,), (0,)))
           for d, xd in enumerate(xs)]
    masks = None if mask is None else [mask, mask[::-1]][:len(xs)]
    act_a, act_b = _gates(_ACT_A, hidden, acc), _gates(_ACT_B, hidden, acc)

    def step(carry, inputs):
        zx_t, m_t = inputs
        new_carry, outs = [], []
        for d, (h, c) in enumerate(carry):
            t = jnp.tanh(zx_t[d] + _mm(h.astype(w_hh.dtype), w_hh[d], precision, acc) + bias[d])
            i, f, g, o = jnp.split(t * act_a + act_b, 4, axis=-1)
            c_new = f * c + i * g
            h_new = (o * jnp.tanh(c_new)).astype(h.dtype)
            if m_t is not None:
                m = m_t[d][:, None]
                h_new, c_new = jnp.where(m, h_new, h), jnp.where(m, c_new, c)
            new_carry.append((h_new, c_new))
            outs.append((h_new, c_new, t) if save else h_new)
        return new_carry, outs

    carry = [(h0[d], c0[d]) for d in range(len(xs))]
    carry, outs = lax.scan(step, carry, (zxs, masks), unroll=min(unroll, steps))
    return outs, [c for _, c in carry]


def _outputs(hs, mask):
    """Layer output y (T, B, D*H) in original time order, zero past each length."""
    y = jnp.concatenate([hs[0], hs[1][::-1]] if len(hs) == 2 else hs, axis=-1)
    return y if mask is None else jnp.where(mask[..., None], y, jnp.zeros((), y.dtype))


@partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def lstm_layer(x, w_ih, w_hh, bias, h0, c0, mask, precision, unroll):
    """One (bidirectional) layer: returns y (T, B, D*H), h_n (D, B, H), c_n (D, B, H) (acc dtype).

    See `_forward` for the argument shapes. Differentiable in everything but `mask`.
    """
    hs, c_n = _forward(x, w_ih, w_hh, bias, h0, c0, mask, precision, unroll, save=False)
    return _outputs(hs, mask), jnp.stack([h[-1] for h in hs]), jnp.stack(c_n)


def _lstm_layer_fwd(x, w_ih, w_hh, bias, h0, c0, mask, precision, unroll):
    outs, c_n = _forward(x, w_ih, w_hh, bias, h0, c0, mask, precision, unroll, save=True)
    hs = [h for h, _, _ in outs]
    primal = (_outputs(hs, mask), jnp.stack([h[-1] for h in hs]), jnp.stack(c_n))
    return primal, (x, w_ih, w_hh, h0, c0, mask, outs)


def _lstm_layer_bwd(precision, unroll, residuals, cotangents):
    x, w_ih, w_hh, h0, c0, mask, outs = residuals
    dy, dh_n, dc_n = cotangents
    num_dirs, hidden = w_hh.shape[0], w_hh.shape[1]
    steps = x.shape[0]
    acc = dc_n.dtype
    act_a, act_b = _gates(_ACT_A, hidden, acc), _gates(_ACT_B, hidden, acc)
    if mask is not None:
        dy = jnp.where(mask[..., None], dy, jnp.zeros((), dy.dtype))
    dhs = [dy[..., :hidden], dy[::-1, :, hidden:]][:num_dirs]  # per direction, scan time
    masks = None if mask is None else [mask, mask[::-1]][:num_dirs]
    c_prev = [jnp.concatenate([c0[d][None], cs[:-1]]) for d, (_, cs, _) in enumerate(outs)]
    w_hh_t = jnp.swapaxes(w_hh, 1, 2)  # (D, 4H, H): a plain GEMM per step, not a transposed one
    ts = [t for _, _, t in outs]
    cs = [c for _, c, _ in outs]

    def step(carry, inputs):
        t_s, c_s, cp_s, dh_s, m_s = inputs
        new_carry, dzs = [], []
        for d, (dh, dc) in enumerate(carry):
            t, c, c_p = t_s[d], c_s[d], cp_s[d]
            dh = dh + dh_s[d].astype(acc)
            i, f, g, o = jnp.split(t * act_a + act_b, 4, axis=-1)
            tanh_c = jnp.tanh(c)
            dc_t = dc + dh * o * (1 - tanh_c * tanh_c)
            dz = jnp.concatenate([dc_t * g, dc_t * c_p, dc_t * i, dh * tanh_c], axis=-1)
            dz = dz * (1 - t * t) * act_a
            dc_p = dc_t * f
            if m_s is not None:
                m = m_s[d][:, None]
                dz, dc_p = jnp.where(m, dz, 0), jnp.where(m, dc_p, dc)
            dz = dz.astype(w_hh.dtype)
            dh_p = _mm(dz, w_hh_t[d], precision, acc)
            if m_s is not None:
                dh_p = jnp.where(m, dh_p, dh)
            new_carry.append((dh_p, dc_p))
            dzs.append(dz)
        return new_carry, dzs

    init = [(dh_n[d].astype(acc), dc_n[d].astype(acc)) for d in range(num_dirs)]
    carry, dzs = lax.scan(step, init, (ts, cs, c_prev, dhs, masks), reverse=True,
                          unroll=min(unroll, steps))
    xs = [x, x[::-1]][:num_dirs]
    # Weight gradients contract over (T, B); with a batch-sharded B, the result is summed over
    # the shards and has the weights' own sharding (as JAX's transpose of dot_general gives).
    steps_batch = ((0, 1), (0, 1))
    like_ih, like_hh = jax.typeof(w_ih[0]).sharding, jax.typeof(w_hh[0]).sharding
    dx_d, dw_ih, dw_hh, dbias = [], [], [], []
    for d in range(num_dirs):
        dz = dzs[d]
        h_prev = jnp.concatenate([h0[d][None], outs[d][0][:-1]]).astype(w_hh.dtype)
        dx_d.append(_mm(dz, w_ih[d], precision, acc, contract=((2,), (1,))))
        dw_ih.append(_mm(xs[d].astype(w_ih.dtype), dz, precision, acc, contract=steps_batch,
                         out_sharding=like_ih))
        dw_hh.append(_mm(h_prev, dz, precision, acc, contract=steps_batch,
                         out_sharding=like_hh))
        dbias.append(jnp.sum(dz, axis=(0, 1), dtype=acc))
    dx = dx_d[0] if num_dirs == 1 else dx_d[0] + dx_d[1][::-1]
    dh0 = jnp.stack([dh for dh, _ in carry]).astype(h0.dtype)
    dc0 = jnp.stack([dc for _, dc in carry]).astype(c0.dtype)
    return (dx.astype(x.dtype), jnp.stack(dw_ih).astype(w_ih.dtype),
            jnp.stack(dw_hh).astype(w_hh.dtype), jnp.stack(dbias), dh0, dc0, None)


lstm_layer.defvjp(_lstm_layer_fwd, _lstm_layer_bwd)


def apply_layer_dropout(y: Array, rng: Array, layer: int, rate: float, *, time_major: bool):
    """Dropout on layer `layer`'s output, with the mask every path shares.

    The keep-mask is ``bernoulli(fold_in(rng, layer), 1 - rate, (B, T, D*H))``, so a key gives the
    same result on every path; kept values are scaled by ``1 / (1 - rate)``.
    """
    shape = (y.shape[1], y.shape[0], y.shape[2]) if time_major else y.shape
    keep = jax.random.bernoulli(jax.random.fold_in(rng, layer), 1.0 - rate, shape)
    if time_major:
        keep = jnp.swapaxes(keep, 0, 1)
    factor = 0.0 if rate >= 1 else 1.0 / (1.0 - rate)
    return jnp.where(keep, y * jnp.asarray(factor, y.dtype), jnp.zeros((), y.dtype))


@partial(jax.jit, static_argnames=("input_size", "hidden_size", "num_layers", "dropout",
                                   "bidirectional", "precision", "unroll", "matmul_dtype"))
def lstm_scan(x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
              bidirectional, precision=None, dropout_rng=None, unroll=UNROLL, matmul_dtype=None):
    """The pure-JAX LSTM on checked arguments (`seq_lengths` int32, or None for full length).

    `matmul_dtype` (default: `x`'s dtype) is the dtype the matmul operands are handed to the
    backend in. Weights are always rounded to `x`'s dtype first, so float32 here for 16-bit inputs
    gives the same products (exact in float32) with float32 accumulation, as the 16-bit matmul
    does; XLA:CPU has no fast 16-bit GEMM and converts the weights in every step otherwise.
    """
    mm_dtype = x.dtype if matmul_dtype is None else matmul_dtype
    batch, steps, _ = x.shape
    dtype = x.dtype
    acc = accumulation_dtype(dtype)
    num_dirs = 2 if bidirectional else 1
    if steps == 0:
        return jnp.zeros((batch, 0, num_dirs * hidden_size), dtype), h_0, c_0
    h_0, c_0 = split_like(h_0, 1, x), split_like(c_0, 1, x)  # carries sharded as the batch
    if seq_lengths is not None:
        seq_lengths = split_like(seq_lengths, 0, x)
    x, h_0, c_0, weights, seq_lengths = vary_together(x, h_0, c_0, weights, seq_lengths)
    W_ih, W_hh, b_ih, b_hh = _weights.unpack_lstm_weights(weights, input_size, hidden_size,
                                                          num_layers, bidirectional)
    scale = _gates(_SCALE, hidden_size, np.float32)
    mask = None
    if seq_lengths is not None:
        mask = jnp.arange(steps, dtype=jnp.int32)[:, None] < seq_lengths[None, :]  # (T, B)

    def scaled_t(w):  # (4H, n) -> (n, 4H), i/f/o rows halved
        return (w * scale[:, None].astype(w.dtype)).T.astype(dtype).astype(mm_dtype)

    y = jnp.swapaxes(x, 0, 1)  # time-major inside
    h_n, c_n = [], []
    for layer in range(num_layers):
        ps = range(layer * num_dirs, (layer + 1) * num_dirs)
        w_ih = jnp.stack([scaled_t(W_ih[p]) for p in ps])
        w_hh = jnp.stack([scaled_t(W_hh[p]) for p in ps])
        bias = jnp.stack([(b_ih[p].astype(acc) + b_hh[p].astype(acc)) * scale.astype(acc)
                          for p in ps])
        sl = slice(ps[0], ps[-1] + 1)
        y, h, c = lstm_layer(y, w_ih, w_hh, bias, h_0[sl].astype(dtype), c_0[sl].astype(acc),
                             mask, precision, unroll)
        h_n.append(h)
        c_n.append(c)
        if dropout_rng is not None and dropout > 0 and layer < num_layers - 1:
            y = apply_layer_dropout(y, dropout_rng, layer, dropout, time_major=True)
    return (jnp.swapaxes(y, 0, 1), jnp.concatenate(h_n).astype(h_0.dtype),
            jnp.concatenate(c_n).astype(c_0.dtype))

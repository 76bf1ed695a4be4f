"""The sLSTM's float64 references: FlashRNN's sLSTM equations (its vanilla PyTorch backend's
``flashrnn_forward_pointwise``, with the ``n == 0`` test made per unit as its CUDA and Triton
kernels make it) as a step (`step`, in NumPy or `jax.numpy`), the op's reference for the
self-test (`float64`, differentiable, `jax.numpy`) and a plain NumPy loop with ragged lengths
(`numpy_loop`). Nothing here is shared with the cell."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..reference import loop


def _maximum(a, b, xp):
    """``max(a, b)``, a tie's derivative split in half, as selects (not `jnp.maximum`, whose
    derivative XLA:CPU at the test suite's fast-compile flags evaluated wrongly in such loops)."""
    return xp.where(a > b, a, xp.where(a < b, b, (a + b) / 2))


def step(zx, zh, state, xp=jnp):
    """The new (h, c, n, m) from this step's products with their biases, in `xp`."""
    _, c, n, m = state
    a_i, a_f, a_z, a_o = xp.split(zx + zh, 4, axis=-1)
    log_f = -xp.logaddexp(0.0, -a_f) + m  # log(sigmoid(a_f)) + m
    m_new = xp.where(n == 0, a_i, _maximum(a_i, log_f, xp))
    i = xp.where(n == 0, 1.0, xp.exp(a_i - m_new))  # 1 on a first step, exactly (the cell's)
    f = xp.exp(log_f - m_new)
    c_new = f * c + i * xp.tanh(a_z)
    n_new = _maximum(f * n + i, xp.ones_like(n), xp)
    return (c_new / n_new / (1 + xp.exp(-a_o)), c_new, n_new, m_new)


def float64(x, h0, c0, n0, m0, w, seq_lengths, input_size, hidden_size, num_layers, dropout,
            bidirectional, precision=None, *, dropout_rng=None, implementation=None):
    """`portable_rnn.slstm`'s reference for calls with every length T and no dropout (the
    self-test's): a `jax.lax.scan` of `step`."""
    del dropout, precision, implementation
    if seq_lengths is not None or dropout_rng is not None:
        raise ValueError("the sLSTM's float64 reference takes every length T (seq_lengths=None) "
                         "and no dropout (dropout_rng=None); `numpy_loop` takes lengths.")
    return loop(step, 4)(x, (h0, c0, n0, m0), w, input_size, hidden_size, num_layers,
                         bidirectional)


def numpy_loop(x, states, w, seq_lengths, input_size, hidden_size, num_layers, bidirectional):
    """The op in float64 NumPy, one step at a time: ``states`` (h_0, c_0, n_0, m_0), each
    (L*D, B, H); ``seq_lengths`` (B,) or None. Returns ``(y, h_n, c_n, n_n, m_n)``: y (B, T,
    D*H) zero past each length, the final states at each sequence's last valid step (the initial
    ones for a length 0); the reverse direction reads each sequence from its last valid step."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    B, T, _ = x.shape
    D, H, G = (2 if bidirectional else 1), hidden_size, 4 * hidden_size
    lengths = np.full(B, T) if seq_lengths is None else np.asarray(seq_lengths)
    offset, mats = 0, []

    def take(*shape):
        nonlocal offset
        offset += int(np.prod(shape))
        return w[offset - int(np.prod(shape)):offset].reshape(shape)

    for p in range(num_layers * D):
        mats.append((take(G, input_size if p < D else D * H), take(G, H)))
    biases = [take(G) + take(G) for _ in mats]
    y, finals = x, []
    for layer in range(num_layers):
        out = np.zeros((B, T, D * H))
        for d in range(D):
            p = layer * D + d
            (W_ih, W_hh), b = mats[p], biases[p]
            for bi in range(B):
                state = tuple(np.asarray(s[p, bi:bi + 1], np.float64) for s in states)
                steps = range(lengths[bi])
                for t in (reversed(steps) if d else steps):
                    zx = y[bi:bi + 1, t] @ W_ih.T + b
                    state = step(zx, state[0] @ W_hh.T, state, np)
                    out[bi, t, d * H:(d + 1) * H] = state[0][0]
                finals.append((p, bi, state))
        y = out
    result = [np.zeros((num_layers * D, B, H)) for _ in states]
    for p, bi, state in finals:
        for r, s in zip(result, state):
            r[p, bi] = s[0]
    return (y, *result)

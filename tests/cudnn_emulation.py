"""Test-only CPU emulation of JAX's cuDNN LSTM primitives (never part of the package).

`jax.experimental.rnn.lstm` binds `rnn_fwd_p` / `rnn_bwd_p`, whose only lowerings are for CUDA and
ROCm, and whose abstract evaluation asks jaxlib's GPU plugin for the reserve-space size. Giving
them a CPU lowering (and a stand-in size) lets JAX's own `lstm_fwd`/`lstm_bwd`, and with them
portable_rnn's cuDNN wrapper (folding, per-instance backward, dropout, weights), run end to end on
a CPU.

The math comes from `jax.experimental.rnn.lstm_ref`, which shares no code with portable_rnn. The
"reserve space" carries a fingerprint of the forward call (sums of x and w, and the batch size);
the backward multiplies its results by NaN when handed a reserve space from a different call, so
a wrapper that mixes up reserve spaces fails the tests loudly.
"""

from __future__ import annotations

import contextlib
import types

import jax
import jax.numpy as jnp
from jax._src.interpreters import mlir
from jax.experimental import rnn as jrnn

RESERVE = 3


def _reference(x, h0, c0, w, seq, input_size, hidden_size, num_layers, bidirectional):
    weights = jrnn.unpack_lstm_weights(w, input_size, hidden_size, num_layers, bidirectional)
    return jrnn.lstm_ref(x, h0, c0, *weights, seq, input_size, hidden_size, num_layers, 0.0,
                         bidirectional)


def _fingerprint(x, w):
    return jnp.stack([jnp.sum(x), jnp.sum(w), jnp.float32(x.shape[0])])


def _fwd(x, h0, c0, w, seq, *, input_size, hidden_size, num_layers, dropout, bidirectional,
         cudnn_allow_tf32):
    assert dropout == 0.0, "portable_rnn never asks cuDNN for its own dropout"
    y, h, c = _reference(x, h0, c0, w, seq, input_size, hidden_size, num_layers, bidirectional)
    return y, h, c, _fingerprint(x, w)


def _bwd(dy, dh, dc, x, h0, c0, w, y, reserve, seq, *, input_size, hidden_size, num_layers,
         dropout, bidirectional, cudnn_allow_tf32):
    _, vjp = jax.vjp(lambda *a: _reference(*a, seq, input_size, hidden_size, num_layers,
                                           bidirectional), x, h0, c0, w)
    grads = vjp((dy, dh, dc))
    same = jnp.all(jnp.abs(reserve - _fingerprint(x, w)) <= 1e-3 * (1 + jnp.abs(reserve)))
    return [g * jnp.where(same, 1.0, jnp.nan).astype(g.dtype) for g in grads]


_registered = False


@contextlib.contextmanager
def emulated_cudnn():
    """Within the block, `jax.experimental.rnn.lstm` (and its fwd/bwd) run on the CPU."""
    global _registered
    if not _registered:
        mlir.register_lowering(jrnn.rnn_fwd_p, mlir.lower_fun(_fwd, multiple_results=True),
                               platform="cpu")
        mlir.register_lowering(jrnn.rnn_bwd_p, mlir.lower_fun(_bwd, multiple_results=True),
                               platform="cpu")
        _registered = True
    original = jrnn.gpu_rnn
    jrnn.gpu_rnn = types.SimpleNamespace(
        compute_rnn_workspace_reserve_space_sizes=lambda *args: (0, RESERVE))
    try:
        yield
    finally:
        jrnn.gpu_rnn = original

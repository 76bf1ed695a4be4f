"""Test-only CPU emulation of JAX's cuDNN primitives, LSTM and attention (never in the package).

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
from jax._src.cudnn import fused_attention_stablehlo as fa
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


# --- fused attention --------------------------------------------------------------------------
# jax.nn.dot_product_attention(implementation="cudnn") checks the cuDNN version, then binds
# `_dot_product_attention_{fwd,bwd}_p_wrapper` (whose batchers raise for batch dims other than 0)
# which lower to `_dot_product_attention_{fwd,bwd}_p`. Those two get a CPU lowering: a plain
# float32 softmax attention written here, with cuDNN's conventions (masked logits get a large
# negative number, so a fully masked row averages all keys; padded query rows are zero), so the
# real wrappers, batchers and custom_vjp run unchanged.

def _attention(q, k, v, bias, q_len, kv_len, *, scale, variadic_args, mask_type,
               sliding_window_length):
    f32 = jnp.float32
    T, N, S, K = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    k, v = (jnp.repeat(a.astype(f32), N // K, axis=2) for a in (k, v))
    logits = jnp.einsum("btnh,bsnh->bnts", q.astype(f32), k) * scale
    if variadic_args[0]:
        logits = logits + bias.astype(f32)
    t, s = jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    allowed = jnp.ones((1, 1, T, S), bool)
    if mask_type in (fa.MaskType.CAUSAL, fa.MaskType.PADDING_CAUSAL):
        allowed &= s <= t
    if sliding_window_length is not None:
        allowed &= (s > t - sliding_window_length) & (s <= t)
    rows = jnp.ones((q.shape[0], 1, T, 1), bool)
    if mask_type in (fa.MaskType.PADDING, fa.MaskType.PADDING_CAUSAL):
        allowed &= (s < kv_len[:, None, None, None])
        rows = t < q_len[:, None, None, None]
    logits = jnp.where(allowed, logits, -1e30)
    lse = jax.nn.logsumexp(logits, axis=-1)
    p = jnp.exp(logits - lse[..., None])
    out = jnp.where(rows, jnp.einsum("bnts,bsnh->bnth", p, v), 0.0)
    return out.transpose(0, 2, 1, 3).astype(q.dtype), lse


# `score_mod_name` / `score_mod_jaxpr`: parameters of both primitives since jax 0.11 (None here:
# portable_rnn passes no score modifier).
def _attention_fwd(q, k, v, bias, q_len, kv_len, *unused, scale, seed, dropout_rate,
                   variadic_args, mask_type, layout, sliding_window_length, is_training,
                   score_mod_name=None, score_mod_jaxpr=None):
    assert layout == fa.AttentionLayout.BTNH.value and dropout_rate == 0.0
    assert score_mod_jaxpr is None
    out, lse = _attention(q, k, v, bias, q_len, kv_len, scale=scale, variadic_args=variadic_args,
                          mask_type=mask_type, sliding_window_length=sliding_window_length)
    return (out, lse) if is_training else (out,)  # stats: float32 (B, N, T)


def _attention_bwd(q, k, v, bias, q_len, kv_len, *rest, scale, seed, dropout_rate,
                   variadic_args, mask_type, layout, sliding_window_length,
                   score_mod_name=None, score_mod_jaxpr=None):
    assert score_mod_jaxpr is None
    *_, activation, fwd_output, d_out = rest
    kw = dict(scale=scale, variadic_args=variadic_args, mask_type=mask_type,
              sliding_window_length=sliding_window_length)
    if variadic_args[1]:
        f = lambda q, k, v, b: _attention(q, k, v, b, q_len, kv_len, **kw)[0]  # noqa: E731
        _, vjp = jax.vjp(f, q, k, v, bias)
    else:
        f = lambda q, k, v: _attention(q, k, v, bias, q_len, kv_len, **kw)[0]  # noqa: E731
        _, vjp = jax.vjp(f, q, k, v)
    return list(vjp(d_out))


_attention_registered = False


@contextlib.contextmanager
def emulated_cudnn_attention():
    """Within the block, `jax.nn.dot_product_attention(implementation="cudnn")` runs on a CPU."""
    global _attention_registered
    if not _attention_registered:
        mlir.register_lowering(fa._dot_product_attention_fwd_p,
                               mlir.lower_fun(_attention_fwd, multiple_results=True),
                               platform="cpu")
        mlir.register_lowering(fa._dot_product_attention_bwd_p,
                               mlir.lower_fun(_attention_bwd, multiple_results=True),
                               platform="cpu")
        _attention_registered = True
    original = fa.check_cudnn_version
    fa.check_cudnn_version = lambda: 91000
    try:
        yield
    finally:
        fa.check_cudnn_version = original

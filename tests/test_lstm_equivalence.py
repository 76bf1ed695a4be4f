"""portable_rnn.lstm against independent references: NumPy loop, lstm_ref, Flax cells."""

from functools import partial

import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from jax.experimental import rnn as jrnn

import portable_rnn
from lstm_helpers import lstm_cases, make_inputs, run
from references import numpy_lstm


@given(lstm_cases())
def test_matches_numpy_loop(case):
    """Ragged lengths (0 included), bidirectional, several layers, against a float64 step loop."""
    B, T, I, H, L, bidir, lengths, seed = case
    x, h0, c0, w = make_inputs(B, T, I, H, L, bidir, seed)
    y, h_n, c_n = run(x, h0, c0, w, lengths, I, H, L, bidir)
    ref = numpy_lstm(x, h0, c0, *portable_rnn.unpack_lstm_weights(w, I, H, L, bidir), lengths,
                     L, bidir)
    for got, want in zip((y, h_n, c_n), ref):
        np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=2e-5)


def test_length_zero_returns_initial_state():
    B, T, I, H, L = 3, 4, 2, 3, 2
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 0)
    lengths = jnp.array([0, 4, 0])
    y, h_n, c_n = run(x, h0, c0, w, lengths, I, H, L, True)
    np.testing.assert_array_equal(np.asarray(y[0]), 0)
    np.testing.assert_array_equal(np.asarray(h_n[:, 0]), np.asarray(h0[:, 0]))
    np.testing.assert_array_equal(np.asarray(c_n[:, 2]), np.asarray(c0[:, 2]))
    # lstm_ref (and Flax) return the carry of the last time step instead.
    _, ref_h, _ = jrnn.lstm_ref(x, h0, c0, *jrnn.unpack_lstm_weights(w, I, H, L, True),
                                lengths.astype(jnp.int32), I, H, L, 0.0, True)
    assert not np.allclose(np.asarray(ref_h[:, 0]), np.asarray(h0[:, 0]))


def test_zero_time_steps():
    x, h0, c0, w = make_inputs(2, 1, 3, 4, 2, True, 0)
    x = x[:, :0]
    y, h_n, c_n = run(x, h0, c0, w, jnp.zeros((2,), jnp.int32), 3, 4, 2, True)
    assert y.shape == (2, 0, 8)
    np.testing.assert_array_equal(np.asarray(h_n), np.asarray(h0))
    np.testing.assert_array_equal(np.asarray(c_n), np.asarray(c0))


@partial(jax.jit, static_argnums=(5, 6, 7, 8))
def _ref(x, h0, c0, w, lengths, I, H, L, bidir):
    return jrnn.lstm_ref(x, h0, c0, *jrnn.unpack_lstm_weights(w, I, H, L, bidir),
                         jnp.asarray(lengths, jnp.int32), I, H, L, 0.0, bidir)


def _loss(f, cot):
    def loss(x, h0, c0, w):
        y, h, c = f(x, h0, c0, w)
        return jnp.sum(y * cot[0]) + jnp.sum(h * cot[1]) + jnp.sum(c * cot[2])
    return loss


@given(lstm_cases(min_length=1, max_layers=2))
def test_matches_lstm_ref_outputs_and_gradients(case):
    """Same flat weights as jax.experimental.rnn.lstm_ref; lengths >= 1 (lstm_ref is wrong at 0)."""
    B, T, I, H, L, bidir, lengths, seed = case
    args = make_inputs(B, T, I, H, L, bidir, seed)
    ours = run(*args, lengths, I, H, L, bidir)
    ref = _ref(*args, lengths, I, H, L, bidir)
    for got, want in zip(ours, ref):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)
    cot = [jax.random.normal(jax.random.key(seed + i), o.shape) for i, o in enumerate(ours)]
    g_ours = jax.jit(jax.grad(_loss(lambda *a: run(*a, lengths, I, H, L, bidir), cot),
                              (0, 1, 2, 3)))(*args)
    g_ref = jax.jit(jax.grad(_loss(lambda *a: _ref(*a, lengths, I, H, L, bidir), cot),
                             (0, 1, 2, 3)))(*args)
    for name, got, want in zip(("x", "h_0", "c_0", "weights"), g_ours, g_ref):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=5e-5, rtol=5e-5,
                                   err_msg=f"d{name}")


@pytest.mark.parametrize("cell", ["OptimizedLSTMCell", "LSTMCell"])
@pytest.mark.parametrize("bidir", [False, True])
def test_matches_flax_rnn(cell, bidir):
    """Flax nn.RNN cells, stacked two layers deep, through lstm_weights_from_flax."""
    B, T, I, H, L = 3, 7, 4, 5, 2
    cell_cls = getattr(flax_nn, cell)
    layers, trees, inp = [], [], None
    x = jax.random.normal(jax.random.key(1), (B, T, I))
    lengths = jnp.array([7, 3, 1])
    inp = x
    for layer in range(L):
        if bidir:
            m = flax_nn.Bidirectional(flax_nn.RNN(cell_cls(H)), flax_nn.RNN(cell_cls(H)))
        else:
            m = flax_nn.RNN(cell_cls(H))
        params = m.init(jax.random.key(10 + layer), inp)
        inp = m.apply(params, inp, seq_lengths=lengths)
        layers.append(m)
        trees.append(params)
    w = portable_rnn.lstm_weights_from_flax(trees)
    zeros = jnp.zeros((L * (2 if bidir else 1), B, H))
    y, _, _ = run(x, zeros, zeros, w, lengths, I, H, L, bidir)
    valid = (jnp.arange(T)[None, :] < lengths[:, None])[..., None]
    # Flax leaves outputs past each length non-zero: compare where they are defined.
    np.testing.assert_allclose(np.asarray(jnp.where(valid, y, 0)),
                               np.asarray(jnp.where(valid, inp, 0)), atol=1e-5, rtol=1e-5)

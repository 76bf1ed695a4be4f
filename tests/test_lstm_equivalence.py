"""Length-0 sequences and T = 0: the initial state comes back (the references differ here).

The property-based equivalences with the references are in `test_equivalence_matrix.py`.
"""

import jax.numpy as jnp
import numpy as np
from jax.experimental import rnn as jrnn

from lstm_helpers import make_inputs, run


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

"""Shared hypothesis strategies and input builders for the LSTM tests."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

import portable_rnn


@st.composite
def lstm_cases(draw, min_length=0, max_layers=3, ragged=True):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(max(1, min_length), 6))
    I = draw(st.integers(1, 5))
    H = draw(st.integers(1, 5))
    L = draw(st.integers(1, max_layers))
    bidir = draw(st.booleans())
    if ragged:
        lengths = draw(st.lists(st.integers(min_length, T), min_size=B, max_size=B))
    else:
        lengths = [T] * B
    seed = draw(st.integers(0, 2**16))
    return B, T, I, H, L, bidir, np.array(lengths, np.int32), seed


def make_inputs(B, T, I, H, L, bidir, seed, dtype=jnp.float32):
    D = 2 if bidir else 1
    k = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(k[0], (B, T, I), dtype)
    h0 = jax.random.normal(k[1], (L * D, B, H), dtype)
    c0 = jax.random.normal(k[2], (L * D, B, H), dtype)
    w = portable_rnn.init_lstm_weight(k[3], I, H, L, bidir)
    return x, h0, c0, w


def run(x, h0, c0, w, lengths, I, H, L, bidir, **kw):
    return portable_rnn.lstm(x, h0, c0, w, lengths, I, H, L, 0.0, bidir, **kw)



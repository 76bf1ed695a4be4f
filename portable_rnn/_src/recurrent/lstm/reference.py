"""The LSTM's float64 reference: JAX's own `jax.experimental.rnn.lstm_ref` (`float64`), and for
``proj_size`` (which `lstm_ref` lacks) a step loop of PyTorch's ``nn.LSTM`` equations
(`step`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import rnn as jrnn

from ..reference import loop


def step(zx, zh, state):
    i, f, g, o = jnp.split(zx + zh, 4, axis=-1)
    c = jax.nn.sigmoid(f) * state[1] + jax.nn.sigmoid(i) * jnp.tanh(g)
    return (jax.nn.sigmoid(o) * jnp.tanh(c), c)


def float64(x, h0, c0, w, seq_lengths, input_size, hidden_size, num_layers, dropout,
            bidirectional, *, dropout_rng=None, proj_size=0, implementation=None):
    """`jax.experimental.rnn.lstm_ref`, a layer at a time with the documented dropout masks
    between layers (it has no dropout of its own), and the initial state for a sequence of
    length 0 (where it returns the last step's carry). With ``proj_size``, the step loop."""
    del implementation
    if proj_size:
        y, h, c = loop(step, 4)(x, (h0, c0), w, input_size, hidden_size, num_layers,
                                bidirectional, proj_size)
        return y, h, c
    B, T = x.shape[:2]
    D = 2 if bidirectional else 1
    seq = (jnp.full((B,), T, jnp.int32) if seq_lengths is None
           else jnp.asarray(seq_lengths, jnp.int32))
    W_ih, W_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(w, input_size, hidden_size, num_layers,
                                                      bidirectional)
    y, hs, cs = x, [], []
    for layer in range(num_layers):
        ps = range(layer * D, (layer + 1) * D)
        one = [{i: g[p] for i, p in enumerate(ps)} for g in (W_ih, W_hh, b_ih, b_hh)]
        y, h, c = jrnn.lstm_ref(y, h0[ps[0]:ps[-1] + 1], c0[ps[0]:ps[-1] + 1], *one, seq,
                                y.shape[-1], hidden_size, 1, 0.0, bidirectional)
        hs.append(h)
        cs.append(c)
        if dropout_rng is not None and dropout > 0 and layer < num_layers - 1:
            # the masks of a float32 run: bernoulli draws from the dtype of its probability
            keep = jax.random.bernoulli(jax.random.fold_in(dropout_rng, layer),
                                        jnp.float32(1.0 - dropout), y.shape)
            y = jnp.where(keep, y / (1.0 - dropout), 0.0)
    empty = (seq == 0)[None, :, None]
    return (y, jnp.where(empty, h0, jnp.concatenate(hs)), jnp.where(empty, c0,
                                                                    jnp.concatenate(cs)))

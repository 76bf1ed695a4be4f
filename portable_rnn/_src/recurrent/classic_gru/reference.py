"""The classic GRU's float64 reference step (Keras' ``GRU(reset_after=False)`` equations) and op
(`float64`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..reference import one_state_op


def step(zx, zh, state):
    h = state[0]
    H = h.shape[-1]
    z = jax.nn.sigmoid(zx[:, :H] + zh(h, 0, 1))
    r = jax.nn.sigmoid(zx[:, H:2 * H] + zh(h, 1, 2))
    hh = jnp.tanh(zx[:, 2 * H:] + zh(r * h, 2, 3))
    return (z * h + (1 - z) * hh,)


float64 = one_state_op(step, 3, own_products=True)

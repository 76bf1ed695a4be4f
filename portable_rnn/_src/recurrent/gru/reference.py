"""The GRU's float64 reference step (PyTorch's ``nn.GRU`` equations) and op (`float64`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..reference import one_state_op


def step(zx, zh, state):
    h = state[0]
    H = h.shape[-1]
    r = jax.nn.sigmoid(zx[:, :H] + zh[:, :H])
    z = jax.nn.sigmoid(zx[:, H:2 * H] + zh[:, H:2 * H])
    n = jnp.tanh(zx[:, 2 * H:] + r * zh[:, 2 * H:])
    return ((1 - z) * n + z * h,)


float64 = one_state_op(step, 3)

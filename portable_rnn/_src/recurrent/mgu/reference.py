"""The MGU's float64 reference step (Flax's ``nn.MGUCell`` equations) and op (`float64`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..reference import one_state_op


def step(zx, zh, state, reset_gate=True):
    h = state[0]
    H = h.shape[-1]
    f = jax.nn.sigmoid(zx[:, :H] + zh[:, :H])
    n = jnp.tanh(zx[:, H:] + (f * zh[:, H:] if reset_gate else zh[:, H:]))
    return ((1 - f) * n + f * h,)


float64 = one_state_op(step, 2)

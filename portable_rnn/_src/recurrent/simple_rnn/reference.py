"""The simple RNN's float64 reference step (PyTorch's ``nn.RNN`` equations) and op
(`float64`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..reference import one_state_op


def step(zx, zh, state, nonlinearity="tanh"):
    del state
    return ((jnp.tanh if nonlinearity == "tanh" else jax.nn.relu)(zx + zh),)


float64 = one_state_op(step, 1)

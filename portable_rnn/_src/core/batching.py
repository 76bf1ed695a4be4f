"""Helpers for `custom_vmap` rules that serve a vmapped call with batch-folded kernel calls.

JAX moves the vmapped axis of every batched argument to the front before calling a rule.
"""

from __future__ import annotations

import jax.numpy as jnp


def fold(a, batched: bool, axis_size: int, batch_axis: int):
    """Moves the vmapped axis (at 0, or absent) into `batch_axis`, as its leading part."""
    if not batched:
        a = jnp.broadcast_to(a[None], (axis_size,) + a.shape)
    a = jnp.moveaxis(a, 0, batch_axis)
    shape = a.shape
    return a.reshape(shape[:batch_axis] + (shape[batch_axis] * shape[batch_axis + 1],)
                     + shape[batch_axis + 2:])


def unfold(a, axis_size: int, batch_axis: int):
    shape = a.shape
    a = a.reshape(shape[:batch_axis] + (axis_size, shape[batch_axis] // axis_size)
                  + shape[batch_axis + 1:])
    return jnp.moveaxis(a, batch_axis, 0)

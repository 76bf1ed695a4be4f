"""Helpers for `custom_vmap` rules that serve a vmapped call with batch-folded kernel calls.

JAX moves the vmapped axis of every batched argument to the front before calling a rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jax import lax


def map_instances(fn, in_batched: Sequence[bool], args):
    """Calls `fn` once per vmapped instance (`lax.map`), batched args sliced, others shared."""
    idx = [i for i, b in enumerate(in_batched) if b]

    def body(sliced):
        full = list(args)
        for i, a in zip(idx, sliced):
            full[i] = a
        return fn(*full)

    return lax.map(body, [args[i] for i in idx])


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

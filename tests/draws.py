"""`jax.random.normal`, `uniform` and the families' `init_*_weight`, the same bits, for test inputs
drawn at many shapes: from one compiled program per power-of-two size instead of one per shape.

A property draws new shapes every example, and each new shape compiled JAX's threefry and its
normal or uniform transform again (about 0.1 s a draw on a CPU, a third of a small case's time).
JAX's threefry is counter-based (``jax_threefry_partitionable``, the default since jax 0.5): the
draw at a shape is the flat draw of its size, and that is the first elements of a longer flat
draw. So a draw is sliced (on the host) from the flat draw of the next power of two, compiled once
per size and dtype. Under a trace (a key that is a tracer), or where the threefry is not
counter-based, the draws are jax.random's own. `tests/test_draws.py` holds them to jax.random's,
bit for bit.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from portable_rnn._src.recurrent import layout
from portable_rnn._src.recurrent.families import family

_SMALLEST = 256


@partial(jax.jit, static_argnums=(1, 2))
def _flat_normal(key, size, dtype):
    return jax.random.normal(key, (size,), dtype)


@partial(jax.jit, static_argnums=(1, 2))
def _flat_uniform(key, size, dtype, minval, maxval):
    return jax.random.uniform(key, (size,), dtype, minval, maxval)


@partial(jax.jit, static_argnums=(1,))
def _flat_bernoulli(key, size, p):
    return jax.random.bernoulli(key, p, (size,))


def _sliced(flat, key, shape, *args):
    """`flat(key, size, *args)`'s first elements in `shape`, or None where they would not be
    jax.random's draw at `shape`."""
    if isinstance(key, jax.core.Tracer) or not jax.config.jax_threefry_partitionable:
        return None
    n = math.prod(shape)
    size = max(_SMALLEST, 1 << max(n - 1, 0).bit_length())
    # device_put, not jnp.asarray: on a NumPy array jnp.asarray binds `lax.stage`, one more
    # compiled program per shape and dtype
    return jax.device_put(np.asarray(flat(key, size, *args))[:n].reshape(shape))


def normal(key, shape=(), dtype=float):
    """``jax.random.normal(key, shape, dtype)``."""
    shape = tuple(shape)
    out = _sliced(_flat_normal, key, shape, dtype)
    return jax.random.normal(key, shape, dtype) if out is None else out


def uniform(key, shape=(), dtype=float, minval=0.0, maxval=1.0):
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``."""
    shape = tuple(shape)
    out = _sliced(_flat_uniform, key, shape, dtype, minval, maxval)
    return jax.random.uniform(key, shape, dtype, minval, maxval) if out is None else out


def bernoulli(key, p=0.5, shape=()):
    """``jax.random.bernoulli(key, p, shape)`` (a scalar `p`)."""
    shape = tuple(shape)
    out = _sliced(_flat_bernoulli, key, shape, p)
    return jax.random.bernoulli(key, p, shape) if out is None else out


def init_weight(key, I, H, L, bidir, family_name, P=0):
    """The family's ``init_<family>_weight(key, I, H, L, bidir)`` (float32; ``proj_size=P``):
    U(-1/sqrt(H), 1/sqrt(H)) over the flat layout's length (`layout.init_weight`)."""
    n = layout.num_params(I, H, L, bidir, family(family_name), P)
    k = np.sqrt(1.0 / H)
    return uniform(key, (n,), jnp.float32, -k, k)

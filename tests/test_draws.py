"""`tests/draws.py`: the test inputs' draws are jax.random's (and the families' init weights'),
bit for bit, at the shapes and dtypes the tests draw, under x64 too and under a trace."""

import contextlib

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn
import references

# a scalar, nothing, a shape of three axes, one element past the smallest flat draw (256)
SHAPES = [(), (0,), (3, 7, 5), (257,)]


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("x64", [False, True])
def test_draws_are_jax_randoms(x64):
    key = jax.random.key(11)
    with references.float64() if x64 else contextlib.nullcontext():
        for shape in SHAPES:
            for dtype in (float, jnp.float32, jnp.bfloat16, jnp.float16):
                _same(draws.normal(key, shape, dtype), jax.random.normal(key, shape, dtype))
            _same(draws.uniform(key, shape, jnp.float32, -0.3, 0.7),
                  jax.random.uniform(key, shape, jnp.float32, -0.3, 0.7))
            _same(draws.uniform(key, shape), jax.random.uniform(key, shape))
            _same(draws.bernoulli(key, 0.75, shape), jax.random.bernoulli(key, 0.75, shape))
        raw = jax.random.PRNGKey(3)  # a raw uint32 key
        _same(draws.normal(raw, (4, 5)), jax.random.normal(raw, (4, 5)))


def test_under_a_trace_the_draws_are_jax_randoms_own():
    f = jax.jit(lambda key: draws.normal(key, (3, 4)) + draws.uniform(key, (3, 4)))
    key = jax.random.key(2)
    _same(f(key), jax.jit(lambda k: jax.random.normal(k, (3, 4)) + jax.random.uniform(k, (3, 4)))(
        key))


@pytest.mark.parametrize(("name", "P"), [("lstm", 0), ("lstm", 3), ("gru", 0), ("simple_rnn", 0),
                                         ("mgu", 0), ("classic_gru", 0)])
def test_init_weight_is_the_familys(name, P):
    key = jax.random.key(5)
    for I, H, L, bidir in ((3, 4, 1, False), (16, 40, 3, True)):
        extra = {"proj_size": P} if P else {}
        want = getattr(portable_rnn, f"init_{name}_weight")(key, I, H, L, bidir, **extra)
        _same(draws.init_weight(key, I, H, L, bidir, name, P), want)

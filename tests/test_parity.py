"""Drop-in parity: calls that `jax.nn.dot_product_attention`, `jax.experimental.rnn` and Flax's
`nn.RNN` accept must work here too (configuration flags, layouts, argument kinds)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn


def _qkv(B=1, T=8, N=2, K=2, H=4, dtype=jnp.float32, seed=0):
    ks = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(ks[0], (B, T, N, H), dtype),
            jax.random.normal(ks[1], (B, T, K, H), dtype),
            jax.random.normal(ks[2], (B, T, K, H), dtype))


@pytest.mark.parametrize("window", [None, (2, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_chunked_causal_under_x64(dtype, window):
    with jax.enable_x64(True):
        q, k, v = _qkv(dtype=dtype)

        def f(impl):
            return jax.value_and_grad(lambda q: portable_rnn.dot_product_attention(
                q, k, v, is_causal=True, local_window_size=window,
                implementation=impl).sum())(q)

        (a, da), (b, db) = f("chunked"), f("xla")
        assert a.dtype == q.dtype and da.dtype == q.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5)
        np.testing.assert_allclose(da, db, rtol=1e-5, atol=1e-6)

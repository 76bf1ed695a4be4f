"""A query that sees no key gets 0 and zero gradients on every path, never NaN.

jax.nn gives such a row the average over all keys; the property-based equivalences with jax.nn,
PyTorch SDPA and between the paths are in `test_equivalence_matrix.py`.
"""

import draws
import jax
import jax.numpy as jnp
import pytest

import portable_rnn


@pytest.mark.parametrize("impl", ["xla", "chunked"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_no_visible_key_gives_zero_and_finite_gradients(impl, dtype):
    """Fully masked rows, zero kv length, and 1e4-scale logits: 0, never NaN."""
    B, T, S, N, H = 2, 6, 5, 2, 8
    ks = jax.random.split(jax.random.key(0), 3)
    q = (draws.normal(ks[0], (B, T, N, H)) * 100).astype(dtype)
    k = (draws.normal(ks[1], (B, S, N, H)) * 100).astype(dtype)
    v = draws.normal(ks[2], (B, S, N, H), dtype)
    mask = jnp.ones((B, N, T, S), bool).at[0, :, 2].set(False)
    kw = dict(mask=mask, key_value_seq_lengths=jnp.array([5, 0]), implementation=impl)
    f = jax.jit(lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, **kw))
    out = f(q, k, v)
    assert bool(jnp.all(out[0, 2] == 0)) and bool(jnp.all(out[1] == 0))
    assert bool(jnp.all(jnp.isfinite(out.astype(jnp.float32))))
    grads = jax.grad(lambda *a: jnp.sum(f(*a).astype(jnp.float32)), (0, 1, 2))(q, k, v)
    for g in grads:
        assert bool(jnp.all(jnp.isfinite(g.astype(jnp.float32))))
    assert bool(jnp.all(grads[0][1] == 0)) and bool(jnp.all(grads[0][0, 2] == 0))

"""Attention under vmap (any axis of any operand, nested), grad in both orders, jit, checkpoint."""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn

B, T, S, N, K, H = 2, 6, 5, 4, 2, 8
V = 3


def inputs(seed=0):
    ks = jax.random.split(jax.random.key(seed), 5)
    return dict(query=draws.normal(ks[0], (B, T, N, H)),
                key=draws.normal(ks[1], (B, S, K, H)),
                value=draws.normal(ks[2], (B, S, K, H)),
                bias=draws.normal(ks[3], (1, N, T, S)),
                mask=draws.bernoulli(ks[4], 0.8, (B, 1, T, S)),
                query_seq_lengths=jnp.array([6, 3]), key_value_seq_lengths=jnp.array([5, 2]))


def attend(impl, **kw):
    names = ("query", "key", "value", "bias", "mask", "query_seq_lengths",
             "key_value_seq_lengths")

    def f(*args):
        a = dict(zip(names, args))
        return portable_rnn.dot_product_attention(
            a["query"], a["key"], a["value"], a["bias"], a["mask"], is_causal=True,
            query_seq_lengths=a["query_seq_lengths"],
            key_value_seq_lengths=a["key_value_seq_lengths"], implementation=impl, **kw)
    return f, names


OPERANDS = ["query", "key", "value", "bias", "mask", "query_seq_lengths", "key_value_seq_lengths"]


@pytest.mark.parametrize("impl", ["xla", "chunked"])
@pytest.mark.parametrize("operand", OPERANDS)
def test_vmap_any_axis_of_any_operand_equals_loop(impl, operand):
    """The vmapped axis is inserted at every position of one operand (axis 1 = heads...)."""
    f, names = attend(impl)
    base = inputs()
    slices = [inputs(10 + v)[operand] for v in range(V)]
    ndim = slices[0].ndim
    loop, one_call = [], jax.jit(f)  # one compiled program for every slice
    for v in range(V):
        one = dict(base, **{operand: slices[v]})
        loop.append(one_call(*[one[n] for n in names]))
    for axis in range(ndim + 1):
        stacked = dict(base, **{operand: jnp.stack(slices, axis=axis)})
        in_axes = tuple(axis if n == operand else None for n in names)
        got = jax.jit(jax.vmap(f, in_axes=in_axes, out_axes=2))(*[stacked[n] for n in names])
        np.testing.assert_allclose(np.asarray(got), np.asarray(jnp.stack(loop, axis=2)),
                                   atol=1e-5, rtol=1e-5, err_msg=f"axis {axis}")


@pytest.mark.parametrize("impl", ["xla", "chunked"])
def test_grad_orders_nested_vmap_checkpoint(impl):
    f, names = attend(impl)
    base = inputs()
    qs = jnp.stack([jnp.stack([base["query"] * (i + 1) * (j - 1.5) for j in range(2)], 1)
                    for i in range(3)], 1)  # (B, 3, 2, T, N, H): vmapped on axes 1 and 1

    def loss(q, k, v, bias):
        return jnp.sum(f(q, k, v, bias, base["mask"], base["query_seq_lengths"],
                         base["key_value_seq_lengths"]) ** 2)

    g = jax.jit(jax.grad(loss, (0, 1, 2, 3)))  # one compiled program for every slice
    args = (base["key"], base["value"], base["bias"])
    nested = jax.jit(jax.vmap(jax.vmap(g, in_axes=(1, None, None, None)),
                              in_axes=(1, None, None, None)))(qs, *args)
    for i in range(3):
        for j in range(2):
            want = g(qs[:, i, j], *args)
            for a, b in zip(nested, want):
                np.testing.assert_allclose(np.asarray(a[i, j]), np.asarray(b), atol=1e-4,
                                           rtol=1e-4)
    total = lambda qs, *a: jnp.sum(jax.vmap(jax.vmap(loss, in_axes=(1, None, None, None)),
                                            in_axes=(1, None, None, None))(qs, *a))
    gv = jax.jit(jax.grad(total, (0, 1, 2, 3)))(qs, *args)
    np.testing.assert_allclose(np.asarray(gv[1]), np.asarray(sum(
        nested[1][i, j] for i in range(3) for j in range(2))), atol=1e-4, rtol=1e-4)
    ck = jax.jit(jax.grad(jax.checkpoint(loss), (0, 1, 2, 3)))(qs[:, 0, 0], *args)
    for a, b in zip(ck, g(qs[:, 0, 0], *args)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)


def test_tnh_layout_and_mqa():
    base = inputs()
    q, k, v = base["query"][0], base["key"][0, :, :1], base["value"][0, :, :1]  # MQA: K=1
    for impl in ("xla", "chunked"):
        out = portable_rnn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        want = portable_rnn.dot_product_attention(q[None], k[None], v[None], is_causal=True,
                                                  implementation=impl)[0]
        assert out.shape == (T, N, H)
        np.testing.assert_allclose(np.asarray(out), np.asarray(want), atol=1e-6, rtol=1e-6)

"""The cuDNN attention route on a CPU, through the test-only emulation of JAX's cuDNN primitives.

The stock `jax.nn.dot_product_attention(implementation="cudnn")` is shown to fail where the seed
report says (vmap over a non-zero axis, an unbatched operand, vmap(grad)); portable_rnn's wrapper
serves the same calls and matches its own dense path.
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn
from cudnn_emulation import emulated_cudnn_attention
from jaxpr_helpers import binds_any, trace

pytestmark = pytest.mark.cpu  # the cuDNN emulation lowers for the CPU only

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
# jax 0.11 made the stock call batch at axis 0 with unbatched operands and under vmap(grad).
STOCK_AXIS_0_WORKS = jax.__version_info__ >= (0, 11)
B, T, S, N, K, H = 2, 8, 6, 4, 2, 16
V = 3
BF = jnp.bfloat16
CUDNN_FWD = ("dot_product_attention_fwd_wrapper", "dot_product_attention_fwd")


@pytest.fixture(autouse=True)
def _emulation():
    with emulated_cudnn_attention():
        yield


def inputs(seed=0, dtype=BF):
    ks = jax.random.split(jax.random.key(seed), 4)
    return (draws.normal(ks[0], (B, T, N, H), dtype),
            draws.normal(ks[1], (B, S, K, H), dtype),
            draws.normal(ks[2], (B, S, K, H), dtype),
            draws.normal(ks[3], (1, N, T, S), dtype))


def ours(impl=None, **kw):
    return lambda q, k, v, *b: portable_rnn.dot_product_attention(
        q, k, v, *b, implementation=impl, capabilities=GPU, **kw)


def close(a, b, tol=2e-2):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        np.testing.assert_allclose(x, y, atol=tol * (1 + np.abs(y).max()), rtol=tol)


def test_routes_to_cudnn_and_binds_the_fused_primitive():
    q, k, v, bias = inputs()
    assert portable_rnn.explain_attention(q, k, v, capabilities=GPU).implementation == "cudnn"
    assert binds_any(trace(ours(is_causal=True), q, k, v), *CUDNN_FWD)
    assert not binds_any(trace(ours("xla", is_causal=True), q, k, v), *CUDNN_FWD)
    close(ours(is_causal=True)(q, k, v), ours("xla", is_causal=True)(q, k, v))


@pytest.mark.parametrize("in_axes", [(1, 1, 1), (2, None, None), (0, None, None), (3, 1, 1)])
def test_stock_cudnn_fails_under_vmap_where_ours_matches_xla(in_axes):
    q, k, v, _ = inputs()
    stacked = [jnp.stack([a * (i + 1) for i in range(V)], axis=ax) if ax is not None else a
               for a, ax in zip((q, k, v), in_axes)]
    stock = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
    got = jax.jit(jax.vmap(ours(), in_axes=in_axes))(*stacked)
    want = jax.vmap(ours("xla"), in_axes=in_axes)(*stacked)
    close(got, want)
    if in_axes[0] == 0 and STOCK_AXIS_0_WORKS:
        close(jax.vmap(stock, in_axes=in_axes)(*stacked), want)
        return
    with pytest.raises(Exception, match=r"batch_dim in \[0, None\]|cannot reshape|reshape"):
        jax.vmap(stock, in_axes=in_axes)(*stacked)


@pytest.mark.parametrize("axis", [0, 1])
def test_stock_cudnn_fails_under_vmap_grad_where_ours_matches_xla(axis):
    q, k, v, _ = inputs()
    qs = jnp.stack([q, -q, 0.5 * q], axis=axis)
    in_axes = (axis, None, None)

    def loss(f):
        return lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) ** 2)

    stock = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
    got = jax.jit(jax.vmap(jax.grad(loss(ours(is_causal=True)), (0, 1, 2)),
                           in_axes=in_axes))(qs, k, v)
    want = jax.vmap(jax.grad(loss(ours("xla", is_causal=True)), (0, 1, 2)),
                    in_axes=in_axes)(qs, k, v)
    close(got, want)
    stock_grads = jax.vmap(jax.grad(loss(stock), (0, 1, 2)), in_axes=in_axes)
    if axis == 0 and STOCK_AXIS_0_WORKS:
        close(stock_grads(qs, k, v), jax.vmap(jax.grad(loss(ours("xla")), (0, 1, 2)),
                                              in_axes=in_axes)(qs, k, v))
        return
    with pytest.raises(Exception, match=r"batch_dim in \[0, None\]|cannot reshape"):
        stock_grads(qs, k, v)


@pytest.mark.parametrize("bias_axis", [None, 0, 2])
def test_bias_gradient_per_instance_and_summed(bias_axis):
    """vmap(grad) gives each instance its bias gradient; grad(vmap) gives their sum."""
    q, k, v, bias = inputs()
    qs = jnp.stack([q, -q, 0.5 * q], axis=1)
    biases = bias if bias_axis is None else jnp.stack([bias, bias * 2, -bias], axis=bias_axis)

    def loss(impl):
        return lambda q, b: jnp.sum(ours(impl)(q, k, v, b).astype(jnp.float32) ** 2)

    in_axes = (1, bias_axis)
    for impl_grads in (jax.vmap(jax.grad(loss(None), (0, 1)), in_axes=in_axes),):
        got = jax.jit(impl_grads)(qs, biases)
        want = jax.vmap(jax.grad(loss("xla"), (0, 1)), in_axes=in_axes)(qs, biases)
        close(got, want)
    total = lambda impl: jax.grad(lambda qs, b: jnp.sum(jax.vmap(loss(impl), in_axes=in_axes)(
        qs, b)), (0, 1))
    close(jax.jit(total(None))(qs, biases), total("xla")(qs, biases))


def test_nested_vmaps_mask_lengths_and_empty_rows():
    q, k, v, _ = inputs()
    mask = jnp.ones((B, 1, T, S), bool).at[0, :, 3].set(False)
    kw = dict(mask=mask, query_seq_lengths=jnp.array([8, 5]),
              key_value_seq_lengths=jnp.array([6, 0]))
    qs = jnp.stack([jnp.stack([q, -q]), jnp.stack([q * 2, q * 0.5])])  # (2, 2, B, T, N, H)
    got = jax.jit(jax.vmap(jax.vmap(lambda q: ours(**kw)(q, k, v))))(qs)
    want = jax.vmap(jax.vmap(lambda q: ours("xla", **kw)(q, k, v)))(qs)
    close(got, want)
    assert not np.asarray(got[:, :, 0, 3], np.float32).any()  # fully masked row
    assert not np.asarray(got[:, :, 1], np.float32).any()  # zero key/value length


def test_left_window_with_causal_and_grad_checkpoint():
    q, k, v, bias = inputs()
    f = lambda impl: lambda q, k, v, b: jnp.sum(ours(impl, is_causal=True, local_window_size=(
        2, 0))(q, k, v, b).astype(jnp.float32))
    assert portable_rnn.explain_attention(q, k, v, bias, is_causal=True, local_window_size=(2, 0),
                                          capabilities=GPU).implementation == "cudnn"
    g1 = jax.jit(jax.grad(jax.checkpoint(f(None)), (0, 1, 2, 3)))(q, k, v, bias)
    g2 = jax.grad(f("xla"), (0, 1, 2, 3))(q, k, v, bias)
    close(g1, g2)

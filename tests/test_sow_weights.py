"""`sow_weights=True` through portable_rnn's `attention_fn`: the weights sown are the ones Flax
sows (``intermediates``/``attention_weights``, same shape and dtype, before dropout), for Linen's
and NNX's attention modules and for direct calls, while the output still comes from the routed
path, unchanged; without a `module`, no weights pass runs."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import portable_rnn
import references
from jaxpr_helpers import primitive_names, trace
from portable_rnn import linen as plinen
from portable_rnn import nnx as pnnx

# Ours against Flax's sown weights: the same math, so equal up to how XLA fuses each program
# (16-bit: within one rounding of a weight <= 1).
TOL = {jnp.float32: references.float32_tol(1e-6), jnp.bfloat16: 1e-2, jnp.float16: 1e-3}
OUT_TOL = references.float32_tol(2e-6)  # float32 outputs, ours against Flax's
DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
B, T, F = 2, 5, 8


def _x(shape, seed=0, dtype=jnp.float32):
    return jax.random.normal(jax.random.key(seed), shape).astype(dtype)


def _close(got, want, dtype):
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               atol=TOL[dtype], rtol=TOL[dtype])


def _mask(kind):
    """Linen masks (B, 1, T, T): none, key padding, causal (float, Flax's own helper)."""
    if kind == "padding":
        return nn.make_attention_mask(jnp.ones((B, T), bool), jnp.arange(T) < T - 2)
    return nn.make_causal_mask(jnp.ones((B, T))) if kind == "causal" else None


# --- Linen: MultiHeadDotProductAttention ------------------------------------------------------

def _linen_sown(layer, variables, x, **kw):
    out, state = layer.apply(variables, x, sow_weights=True, mutable=["intermediates"], **kw)
    return out, state["intermediates"]["attention_weights"][0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", ["none", "padding", "causal"])
@pytest.mark.parametrize("dropout", [False, True])
def test_linen_sown_weights_equal_flax(dtype, mask, dropout):
    """Flax's and ours sow the same weights for the same parameters and dropout key (Flax sows
    them before dropout), and sowing leaves our output as it is without sowing."""
    kw = dict(num_heads=2, qkv_features=8, dtype=dtype, dropout_rate=0.5 if dropout else 0.0,
              deterministic=not dropout)
    stock = nn.MultiHeadDotProductAttention(**kw)
    ours = nn.MultiHeadDotProductAttention(**kw, attention_fn=plinen.attention_fn)
    x = _x((B, T, F))
    call = dict(mask=_mask(mask), rngs={"dropout": jax.random.key(3)})
    with jax.numpy_dtype_promotion("standard"):  # Flax's modules promote implicitly
        variables = stock.init(jax.random.key(1), x)
        want_out, want = _linen_sown(stock, variables, x, **call)
        got_out, got = _linen_sown(ours, variables, x, **call)
        plain = ours.apply(variables, x, **call)
    assert want.shape == (B, 2, T, T)
    _close(got, want, dtype)
    np.testing.assert_array_equal(np.asarray(got_out, np.float32), np.asarray(plain, np.float32))
    if dtype == jnp.float32:
        np.testing.assert_allclose(np.asarray(got_out), np.asarray(want_out), atol=OUT_TOL)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_linen_force_fp32_for_softmax_sows_float32_weights(dtype):
    """Flax sows float32 weights where `force_fp32_for_softmax` is set, 16-bit ones otherwise."""
    x = _x((B, T, F))
    for force in (True, False):
        kw = dict(num_heads=2, qkv_features=8, dtype=dtype, force_fp32_for_softmax=force)
        stock = nn.MultiHeadDotProductAttention(**kw)
        ours = nn.MultiHeadDotProductAttention(**kw, attention_fn=plinen.attention_fn)
        with jax.numpy_dtype_promotion("standard"):
            variables = stock.init(jax.random.key(1), x)
            _, want = _linen_sown(stock, variables, x, mask=_mask("causal"))
            _, got = _linen_sown(ours, variables, x, mask=_mask("causal"))
        assert got.dtype == (jnp.float32 if force else dtype)
        _close(got, want, jnp.float32 if force else dtype)


def test_linen_sows_under_jit_and_only_where_asked():
    ours = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8,
                                           attention_fn=plinen.attention_fn)
    x = _x((B, T, F))
    variables = ours.init(jax.random.key(1), x)
    apply = jax.jit(ours.apply, static_argnames=("sow_weights", "mutable"))
    _, state = apply(variables, x, sow_weights=True, mutable=("intermediates",))
    weights = state["intermediates"]["attention_weights"][0]
    np.testing.assert_allclose(np.asarray(weights.sum(-1)), 1.0, rtol=1e-5)
    _, state = apply(variables, x, sow_weights=False, mutable=("intermediates",))
    assert "intermediates" not in state


class _Sow(nn.Module):
    """Calls an attention function with itself as the module that sows, as Flax's modules do."""
    fn: object

    def __call__(self, *args, **kw):
        return self.fn(*args, module=self, **kw)


@pytest.mark.parametrize("implementation", [None, "xla", "chunked"])
@pytest.mark.parametrize("dtype, force", [(jnp.float32, False), (jnp.bfloat16, False),
                                          (jnp.float16, True)])
def test_direct_linen_call_with_bias_mask_and_two_batch_dims(implementation, dtype, force):
    """What the modules never pass: a float32 bias over 16-bit inputs (Flax adds it as given),
    two batch dims, a mask broadcast over them; the output is the routed one, sow or not."""
    q, k, v = (_x((2, 3, T, 2, 4), seed=s, dtype=dtype) for s in range(3))
    bias = _x((3, 1, T, T), seed=4)
    mask = jnp.arange(T) < T - 1
    kw = dict(bias=bias, mask=mask, force_fp32_for_softmax=force)
    ours = jax.tree_util.Partial(plinen.attention_fn, implementation=implementation)
    with jax.numpy_dtype_promotion("standard"):
        _, want = _Sow(nn.dot_product_attention).apply({}, q, k, v, mutable=["intermediates"],
                                                        **kw)
    out, got = _Sow(ours).apply({}, q, k, v, mutable=["intermediates"], **kw)
    want, got = (s["intermediates"]["attention_weights"][0] for s in (want, got))
    assert want.shape == (2, 3, 2, T, T)
    _close(got, want, jnp.float32 if force else dtype)
    np.testing.assert_array_equal(np.asarray(out, np.float32),
                                  np.asarray(ours(q, k, v, **kw), np.float32))


# --- NNX: MultiHeadAttention ------------------------------------------------------------------

def _nnx_sown(layer, x, **kw):
    out, state = nnx.capture(lambda m: m(x, sow_weights=True, **kw), nnx.Intermediate)(layer)
    return out, state["attention_weights"][0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_heads", [4, 2, 1])  # MHA, GQA, MQA
@pytest.mark.parametrize("causal, mask", [(False, "none"), (True, "none"), (True, "padding"),
                                          (False, "causal")])
def test_nnx_sown_weights_equal_flax(dtype, kv_heads, causal, mask):
    kw = dict(num_heads=4, num_kv_heads=kv_heads, in_features=F, qkv_features=8, decode=False,
              dtype=dtype)
    stock = nnx.MultiHeadAttention(**kw, rngs=nnx.Rngs(0))
    ours = nnx.MultiHeadAttention(**kw, rngs=nnx.Rngs(0), attention_fn=pnnx.attention_fn)
    x = _x((B, T, F))
    call = dict(is_causal=causal, mask=_mask(mask))
    with jax.numpy_dtype_promotion("standard"):
        want_out, want = _nnx_sown(stock, x, **call)
        got_out, got = _nnx_sown(ours, x, **call)
        plain = ours(x, **call)
    assert want.shape == (B, 4, T, T)
    _close(got, want, dtype)
    np.testing.assert_array_equal(np.asarray(got_out, np.float32), np.asarray(plain, np.float32))
    if dtype == jnp.float32:
        np.testing.assert_allclose(np.asarray(got_out), np.asarray(want_out), atol=OUT_TOL)


@pytest.mark.parametrize("broadcast_dropout", [True, False])
def test_nnx_dropout_sows_the_weights_before_dropout_and_keeps_flax_output(broadcast_dropout):
    kw = dict(num_heads=4, num_kv_heads=2, in_features=F, qkv_features=8, decode=False,
              dropout_rate=0.5, deterministic=False, broadcast_dropout=broadcast_dropout)
    stock = nnx.MultiHeadAttention(**kw, rngs=nnx.Rngs(0))
    ours = nnx.MultiHeadAttention(**kw, rngs=nnx.Rngs(0), attention_fn=pnnx.attention_fn)
    x = _x((B, T, F))
    want_out, want = _nnx_sown(stock, x, is_causal=True)
    got_out, got = _nnx_sown(ours, x, is_causal=True)
    _close(got, want, jnp.float32)
    np.testing.assert_allclose(np.asarray(got.sum(-1)), 1.0, rtol=1e-5)  # not dropped
    np.testing.assert_allclose(np.asarray(got_out), np.asarray(want_out), atol=OUT_TOL)


def test_direct_nnx_call_with_bias_mask_causal_and_gqa():
    class Dummy(nnx.Module):
        pass

    q = _x((B, T, 4, 4), seed=1)
    k, v = (_x((B, T, 2, 4), seed=s) for s in (2, 3))
    # (Flax NNX broadcasts its causal mask to the mask's shape: a full-rank mask here.)
    kw = dict(bias=_x((B, 4, T, T), seed=4), mask=_mask("padding"), is_causal=True)

    def run(fn):
        return nnx.capture(lambda m: fn(q, k, v, module=m, **kw), nnx.Intermediate)(Dummy())

    _, want = run(nnx.dot_product_attention)
    out, got = run(pnnx.attention_fn)
    _close(got["attention_weights"][0], want["attention_weights"][0], jnp.float32)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(pnnx.attention_fn(q, k, v, **kw)))


# --- no module, no weights pass ---------------------------------------------------------------

@pytest.mark.parametrize("implementation", ["xla", "chunked"])
def test_without_a_module_no_weights_pass_runs(implementation):
    """Without a `module` the adapter binds the products and exponentials of the routed call
    alone; with one, the weights pass adds its product."""
    q = _x((B, 16, 2, 4))

    class Holder(nnx.Module):
        def sow(self, *args):
            pass

    def counts(f):
        names = primitive_names(trace(f, q))
        return names["dot_general"], names["exp"]

    routed = counts(lambda q: portable_rnn.dot_product_attention(
        q, q, q, implementation=implementation))
    plain = counts(lambda q: plinen.attention_fn(q, q, q, implementation=implementation))
    sown = counts(lambda q: plinen.attention_fn(q, q, q, implementation=implementation,
                                                module=Holder()))
    assert plain == routed
    assert sown[0] == routed[0] + 1, (sown, routed)


def test_a_module_that_cannot_sow_is_named():
    q = _x((B, T, 2, 4))
    with pytest.raises(TypeError, match=r"`module` must be a Flax module \(Linen or NNX\) to sow "
                       r"the attention weights into \(sow_weights=True\); got object\."):
        plinen.attention_fn(q, q, q, module=object())

"""Drop-in parity: calls that `jax.nn.dot_product_attention`, `jax.experimental.rnn` and Flax's
`nn.RNN` accept must work here too (configuration flags, layouts, argument kinds)."""

from functools import partial

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn
import references


def _qkv(B=1, T=8, N=2, K=2, H=4, dtype=jnp.float32, seed=0):
    ks = jax.random.split(jax.random.key(seed), 3)
    return (draws.normal(ks[0], (B, T, N, H), dtype),
            draws.normal(ks[1], (B, T, K, H), dtype),
            draws.normal(ks[2], (B, T, K, H), dtype))


@pytest.mark.parametrize("window", [None, (2, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_chunked_causal_under_x64(dtype, window):
    with references.float64():
        q, k, v = _qkv(dtype=dtype)

        def f(impl):
            return jax.jit(jax.value_and_grad(lambda q: portable_rnn.dot_product_attention(
                q, k, v, is_causal=True, local_window_size=window,
                implementation=impl).sum()))(q)

        (a, da), (b, db) = f("chunked"), f("xla")
        assert a.dtype == q.dtype and da.dtype == q.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5)
        np.testing.assert_allclose(da, db, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("implementation", ["xla", "chunked"])
def test_debug_infs_with_hidden_keys(implementation):
    q, k, v = _qkv(B=2)
    mask = jnp.ones((2, 1, 8, 8), bool).at[0, :, 3].set(False)  # row 3 of batch 0 sees nothing
    kw = dict(mask=mask, is_causal=True, key_value_seq_lengths=jnp.array([8, 5]),
              query_seq_lengths=jnp.array([8, 6]), implementation=implementation)

    def f(q, k, v):
        return portable_rnn.dot_product_attention(q, k, v, **kw)

    want, want_grads = f(q, k, v), jax.grad(lambda *a: f(*a).sum(), (0, 1, 2))(q, k, v)
    with jax.debug_infs(True), jax.debug_nans(True):
        out = f(q, k, v)
        grads = jax.grad(lambda *a: f(*a).sum(), (0, 1, 2))(q, k, v)
    assert float(jnp.abs(out[0, 3]).max()) == 0.0
    np.testing.assert_array_equal(out, want)
    for g, w in zip(grads, want_grads):
        assert bool(jnp.isfinite(g).all())
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("implementation", ["xla", "chunked"])
def test_16bit_inputs_in_any_layout(implementation, dtype):
    """(B, N, T, H) arrays swapped to (B, T, N, H) inside jit: XLA:CPU has no mixed-type dot
    (16-bit x 16-bit = float32) in that layout; the result must not depend on the layout."""
    ks = jax.random.split(jax.random.key(1), 2)
    q = draws.normal(ks[0], (2, 4, 16, 8), dtype)  # (B, N, T, H)
    kv = draws.normal(ks[1], (2, 2, 16, 8), dtype)

    def loss(q, kv):
        q, kv = q.swapaxes(1, 2), kv.swapaxes(1, 2)
        out = portable_rnn.dot_product_attention(q, kv, kv, is_causal=True,
                                                 implementation=implementation)
        return out.astype(jnp.float32).sum(), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))(q, kv)
    (_, want), want_grads = jax.value_and_grad(loss, (0, 1), has_aux=True)(
        q.astype(jnp.float32), kv.astype(jnp.float32))
    assert out.dtype == q.dtype and all(g.dtype == q.dtype for g in grads)
    np.testing.assert_allclose(out.astype(np.float32), want, atol=2e-2, rtol=2e-2)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g.astype(np.float32), w, atol=5e-2, rtol=5e-2)


def test_rank_promotion_raise():
    """`lstm_ref` and `jax.nn.dot_product_attention` run under rank promotion "raise": so do we
    (forward and gradient: the custom backward passes are traced outside the call)."""
    from jax.experimental import rnn

    I, H, L, B, T = 3, 4, 1, 2, 5
    x = draws.normal(jax.random.key(0), (B, T, I))
    h0 = jnp.zeros((L, B, H))
    lengths = jnp.array([5, 3], jnp.int32)
    w = portable_rnn.init_lstm_weight(jax.random.key(1), I, H, L, False)
    wg = portable_rnn.init_gru_weight(jax.random.key(1), I, H, L, True)
    wr = portable_rnn.init_simple_rnn_weight(jax.random.key(1), I, H, L, True)
    h2 = jnp.zeros((2 * L, B, H))
    q, k, v = _qkv()
    losses = [
        lambda x: portable_rnn.lstm(x, h0, h0, w, lengths, I, H, L, 0.0, False)[0].sum(),
        lambda x: portable_rnn.gru(x, h2, wg, lengths, I, H, L, 0.0, True)[0].sum(),
        lambda x: portable_rnn.simple_rnn(x, h2, wr, lengths, I, H, L, 0.0, True)[0].sum(),
    ] + [lambda x, impl=impl: portable_rnn.dot_product_attention(
        q * x.sum(), k, v, bias=jnp.zeros((8, 8)), mask=jnp.ones((8,), bool), is_causal=True,
        key_value_seq_lengths=lengths[:1], implementation=impl).sum()
         for impl in ("xla", "chunked")]
    want = [jax.value_and_grad(f)(x) for f in losses]
    with jax.numpy_rank_promotion("raise"):
        ref = rnn.lstm_ref(x, h0, h0, *rnn.unpack_lstm_weights(w, I, H, L, False), lengths, I, H,
                           L, 0.0, False)[0].sum()
        got = [jax.value_and_grad(f)(x) for f in losses]
    np.testing.assert_allclose(got[0][0], ref, rtol=1e-5)
    for (a, da), (b, db) in zip(got, want):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(da, db)


@pytest.mark.parametrize("implementation", ["xla", "chunked"])
def test_traced_scale(implementation):
    """A learned temperature: `scale` traced under jit and differentiated, as `jax.nn` allows."""
    q, k, v = _qkv(B=2)
    bias = draws.normal(jax.random.key(3), (2, 2, 8, 8))

    def loss(f, scale, q):
        return (f(q, k, v, bias, scale=scale, is_causal=True) ** 2).sum()

    ours = jax.jit(jax.grad(partial(loss, partial(portable_rnn.dot_product_attention,
                                                  implementation=implementation)), (0, 1)))
    theirs = jax.grad(partial(loss, jax.nn.dot_product_attention), (0, 1))
    for scale in (0.7, jnp.float32(1.3)):
        for g, w in zip(ours(scale, q), theirs(scale, q)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    got = portable_rnn.dot_product_attention(q, k, v, scale=np.float32(0.5))
    np.testing.assert_allclose(got, jax.nn.dot_product_attention(q, k, v, scale=0.5), rtol=1e-5)


def test_traced_scale_is_not_for_cudnn():
    q = jax.ShapeDtypeStruct((2, 128, 4, 64), jnp.bfloat16)
    gpu = portable_rnn.Capabilities(platform="gpu", cudnn_version=91000,
                                    compute_capability=(9, 0), device_kind="NVIDIA H100")
    scale = jax.ShapeDtypeStruct((), jnp.float32)
    d = portable_rnn.explain_attention(q, q, q, scale=scale, capabilities=gpu)
    assert d.implementation != "cudnn"
    assert any("traced `scale`" in r for r in d.rejected["cudnn"])
    assert portable_rnn.explain_attention(q, q, q, scale=0.5,
                                          capabilities=gpu).implementation == "cudnn"


@pytest.mark.parametrize("family", ["LSTM", "GRU", "SimpleRNN"])
def test_flax_layers_promote_integer_inputs(family):
    """Flax's `nn.RNN` cells promote integer (and bool) inputs to the parameter dtype."""
    import flax.linen as nn
    from flax import nnx

    from portable_rnn import linen as plinen
    from portable_rnn import nnx as pnnx

    x = jnp.arange(2 * 3 * 4, dtype=jnp.int32).reshape(2, 3, 4) % 3
    cell = {"LSTM": nn.OptimizedLSTMCell, "GRU": nn.GRUCell, "SimpleRNN": nn.SimpleCell}[family]
    flax_rnn = nn.RNN(cell(5))
    with jax.numpy_dtype_promotion("standard"):  # Flax promotes implicitly
        flax_rnn.apply(flax_rnn.init(jax.random.key(0), x), x)
    layer = getattr(plinen, family)(hidden_size=5)
    variables = layer.init(jax.random.key(0), x)
    model = getattr(pnnx, family)(4, 5, rngs=nnx.Rngs(0))
    for ints in (x, x.astype(jnp.uint8), x > 0):
        y = layer.apply(variables, ints)
        assert y.dtype == jnp.float32
        np.testing.assert_array_equal(y, layer.apply(variables, ints.astype(jnp.float32)))
        np.testing.assert_array_equal(model(ints), model(ints.astype(jnp.float32)))


def test_chunked_bias_gradient_under_x64():
    with references.float64():
        q, k, v = _qkv()
        bias = jnp.zeros((1, 2, 8, 8))

        def f(impl):
            return jax.grad(lambda b: portable_rnn.dot_product_attention(
                q, k, v, b, is_causal=True, implementation=impl).sum())(bias)

        np.testing.assert_allclose(f("chunked"), f("xla"), atol=1e-6)


def test_attention_fn_rejects_what_it_cannot_honour_and_promotes_like_flax():
    import flax.linen as nn

    from portable_rnn import linen as plinen

    x = draws.normal(jax.random.key(0), (2, 5, 8))

    def mha(**kw):
        layer = nn.MultiHeadDotProductAttention(num_heads=2, attention_fn=plinen.attention_fn,
                                                **kw)
        return layer, layer.init(jax.random.key(1), x)

    class Einsum(nn.Module):  # e.g. a quantized einsum
        @nn.compact
        def __call__(self, spec, *args, **kw):
            return jnp.einsum(spec, *args, **kw)

    for kw, match in [(dict(qk_attn_weights_einsum_cls=Einsum), "`qk_attn_weights_einsum`="),
                      (dict(attn_weights_value_einsum_cls=Einsum),
                       "`attn_weights_value_einsum`=")]:
        with pytest.raises(ValueError, match=match):
            mha(**kw)
    layer, variables = mha()
    # sow_weights=True is honoured (tests/test_sow_weights.py compares the weights with Flax's)
    _, sown = layer.apply(variables, x, sow_weights=True, mutable=["intermediates"])
    assert sown["intermediates"]["attention_weights"][0].shape == (2, 2, 5, 5)
    with pytest.raises(ValueError, match="`einsum_dot_general`="):
        plinen.attention_fn(x[:, :, None], x[:, :, None], x[:, :, None],
                            einsum_dot_general=jax.lax.dot_general)
    with pytest.raises(TypeError, match=r"unsupported arguments \['sharding'\]"):
        plinen.attention_fn(x[:, :, None], x[:, :, None], x[:, :, None], sharding="x")
    q = x[:, :, None].astype(jnp.bfloat16)  # Flax's promote_dtype: the common dtype
    out = plinen.attention_fn(q, x[:, :, None], x[:, :, None])
    with jax.numpy_dtype_promotion("standard"):
        want = nn.dot_product_attention(q, x[:, :, None], x[:, :, None])
    assert out.dtype == want.dtype == jnp.float32
    np.testing.assert_allclose(out, want, atol=1e-2)


@pytest.mark.parametrize("family", ["LSTM", "GRU", "SimpleRNN"])
def test_layers_load_a_bidirectional_of_one_shared_cell(family):
    """Flax stores it once, under forward_rnn, and writes backward_rnn whenever the directions
    have cells of their own: the layers' loaders, as the converters, read such a tree as shared
    (`shared_cell=True` says so explicitly; False refuses it)."""
    import flax.linen as nn
    from flax import nnx

    from portable_rnn import linen as plinen
    from portable_rnn import nnx as pnnx

    x = draws.normal(jax.random.key(0), (2, 4, 3))
    cell = {"LSTM": nn.OptimizedLSTMCell, "GRU": nn.GRUCell, "SimpleRNN": nn.SimpleCell}[family]
    rnn = nn.RNN(cell(5))
    shared = nn.Bidirectional(rnn, rnn)
    params = shared.init(jax.random.key(1), x)
    assert sorted(params["params"]) == ["forward_rnn"]
    want = shared.apply(params, x)
    layer = getattr(plinen, family)(hidden_size=5, bidirectional=True)
    with pytest.raises(ValueError, match="`shared_cell=False`"):
        layer.variables_from_flax(params, shared_cell=False)
    for explicit in ({}, dict(shared_cell=True)):
        got = layer.apply(layer.variables_from_flax(params, **explicit), x)
        tol = references.float32_tol(1e-5)
        np.testing.assert_allclose(got, want, atol=tol)
        model = getattr(pnnx, family).from_flax(params, rngs=nnx.Rngs(0), **explicit)
        np.testing.assert_allclose(model(x), want, atol=tol)


@pytest.mark.parametrize("implementation", ["xla", "chunked"])
def test_return_residual_matches_jax_nn_and_is_differentiable(implementation):
    q, k, v = _qkv(B=2, N=4, K=2)
    bias = draws.normal(jax.random.key(4), (1, 4, 8, 8))
    lengths = jnp.array([8, 5])
    kw = dict(is_causal=True, key_value_seq_lengths=lengths)

    def ours(q, k, v, bias):
        return portable_rnn.dot_product_attention(q, k, v, bias, return_residual=True,
                                                  implementation=implementation, **kw)

    out, lse = jax.jit(ours)(q, k, v, bias)
    want_out, want_lse = jax.nn.dot_product_attention(q, k, v, bias, return_residual=True, **kw)
    assert lse.shape == want_lse.shape == (2, 8, 4) and lse.dtype == q.dtype
    tol = references.float32_tol(1e-5)
    np.testing.assert_allclose(out, want_out, rtol=tol, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=tol, atol=1e-5)
    # Gradient of the log-sum-exp: against autodiff of a plain float32 formula.
    def plain_lse(q, k, bias):
        logits = jnp.einsum("btnh,bsnh->bnts", q, jnp.repeat(k, 2, axis=2)) / jnp.sqrt(4.0)
        logits = logits + bias
        vis = (jnp.arange(8)[None, :] <= jnp.arange(8)[:, None])[None, None] & (
            jnp.arange(8)[None, None, None, :] < lengths[:, None, None, None])
        return jax.nn.logsumexp(jnp.where(vis, logits, -jnp.inf), axis=-1).transpose(0, 2, 1)

    weights = draws.normal(jax.random.key(5), (2, 8, 4))
    # each gradient one compiled program (eagerly, one per op)
    got = jax.jit(jax.grad(lambda q, k, b: jnp.sum(ours(q, k, v, b)[1] * weights), (0, 1, 2)))(
        q, k, bias)
    want = jax.jit(jax.grad(lambda q, k, b: jnp.sum(plain_lse(q, k, b) * weights), (0, 1, 2)))(
        q, k, bias)
    # A platform's float32 floor (a TPU's exp and log: about 1e-4 of the largest term) applies
    # at the gradient's scale: an element that cancels to near 0 keeps the terms' error.
    for g, w in zip(got, want):
        atol = max(1e-5, references.float32_tol(0.0) * float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, w, rtol=references.float32_tol(1e-4), atol=atol)


def test_return_residual_edges():
    q, k, v = _qkv()
    out, lse = portable_rnn.dot_product_attention(q, k, v, mask=jnp.zeros((8, 8), bool),
                                                  return_residual=True)
    assert float(jnp.abs(out).max()) == 0 and bool(jnp.isfinite(lse).all())
    out, lse = portable_rnn.dot_product_attention(q[0], k[0, :0], v[0, :0], return_residual=True)
    assert out.shape == (8, 2, 4) and lse.shape == (8, 2) and bool(jnp.isfinite(lse).all())
    for dtype, implementation in (("float16", "chunked"), ("bfloat16", "xla")):
        _, lse = portable_rnn.dot_product_attention(
            *_qkv(dtype=dtype), mask=jnp.zeros((8, 8), bool), return_residual=True,
            implementation=implementation)
        assert lse.dtype == dtype and bool(jnp.isfinite(lse).all())
    with pytest.raises(TypeError, match="`return_residual` must be a Python bool"):
        portable_rnn.dot_product_attention(q, k, v, return_residual=1)
    gpu = portable_rnn.Capabilities("gpu", 91000, (9, 0), "NVIDIA H100")
    qs = jax.ShapeDtypeStruct((2, 128, 4, 64), jnp.bfloat16)
    d = portable_rnn.explain_attention(qs, qs, qs, return_residual=True, capabilities=gpu)
    assert d.implementation != "cudnn" and any("return_residual" in r
                                               for r in d.rejected["cudnn"])

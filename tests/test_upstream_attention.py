"""Flax's and JAX's own attention tests, with portable_rnn's attention in place of theirs.

Ported from google/flax `tests/nnx/nn/attention_test.py` (`TestLinenConsistency`,
`TestDotProductAttentionValidation`, `test_multihead_sow_attention_weights`,
`test_causal_mask_equivalence`, `test_gqa_parity_with_jax`) and
`tests/linen/linen_attention_test.py` (`test_decoding`, `test_dtype_infer`,
`test_multihead_sow_attention_weights`, `test_mixed_precision_multihead_attention`), Apache 2.0,
with every upstream assertion and tolerance kept; each case also checks portable_rnn against
Flax's own attention (the sown weights too). Then what those tests
rely on without asserting: that `precision` reaches every product (forward and backward, on
every path), complex inputs, and the log-sum-exp's gradient against finite differences.
"""

import functools

import draws
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import lax
from jax.test_util import check_grads

import portable_rnn
import references
from cudnn_emulation import emulated_cudnn_attention
from jaxpr_helpers import binds, trace
from portable_rnn import linen as plinen
from portable_rnn import nnx as pnnx

Precision = lax.Precision
GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
TOL = {jnp.float32: 1e-6, jnp.float16: 2e-3}  # Flax's own attention against ours, per dtype


# --- google/flax tests/nnx/nn/attention_test.py: TestLinenConsistency -------------------------

@pytest.mark.parametrize("precision", [Precision.DEFAULT, Precision.HIGH, Precision.HIGHEST])
@pytest.mark.parametrize("dtype, param_dtype, use_bias, normalize_qk", [
    (jnp.float32, jnp.float32, True, False), (jnp.float16, jnp.float32, False, True),
    (jnp.float16, jnp.float16, True, False)])
@pytest.mark.parametrize("decode", [True, False])
def test_nnx_attention_equivalence(precision, dtype, param_dtype, use_bias, normalize_qk, decode):
    """Linen's and NNX's attention with `attention_fn` equal each other (upstream), and Flax's
    own attention at the same precision, within the dtype's rounding. (Flax's modules promote
    dtypes implicitly, as upstream runs them: standard promotion.)"""
    with jax.numpy_dtype_promotion("standard"):
        _nnx_attention_equivalence(precision, dtype, param_dtype, use_bias, normalize_qk, decode)


def _nnx_attention_equivalence(precision, dtype, param_dtype, use_bias, normalize_qk, decode):
    key, rngs = jax.random.key(42), nnx.Rngs(42)
    x = jax.numpy.ones((1, 3))
    sizes = dict(num_heads=2, qkv_features=6, out_features=6)
    options = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, precision=precision,
                   decode=decode, normalize_qk=normalize_qk)
    model_nnx = nnx.MultiHeadAttention(in_features=3, **sizes, **options, rngs=rngs,
                                       attention_fn=pnnx.attention_fn)
    model = nn.MultiHeadDotProductAttention(**sizes, **options, attention_fn=plinen.attention_fn)
    stock = nn.MultiHeadDotProductAttention(**sizes, **options)
    variables = model.init(key, x)
    for qkvo in ("query", "key", "value", "out"):
        getattr(model_nnx, qkvo).kernel[...] = variables["params"][qkvo]["kernel"]
        if use_bias:
            getattr(model_nnx, qkvo).bias[...] = variables["params"][qkvo]["bias"]
    if decode:
        model_nnx.init_cache(x.shape, dtype=dtype)
    out_nnx = model_nnx(x)
    out, _ = model.apply(variables, x, mutable=["cache"])
    np.testing.assert_array_equal(out, out_nnx)
    want, _ = stock.apply(variables, x, mutable=["cache"])
    assert out.dtype == want.dtype == dtype
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(want, np.float32),
                               atol=TOL[dtype], rtol=TOL[dtype])


# --- google/flax tests/nnx/nn/attention_test.py: TestDotProductAttentionValidation ------------

@pytest.mark.parametrize("q_shape, k_shape, v_shape, match", [
    ((2, 16, 4, 8), (16, 4, 8), (16, 4, 8), "same rank"),
    ((2, 16, 4, 8), (3, 16, 4, 8), (3, 16, 4, 8), "batch dims"),
    ((2, 16, 4, 8), (2, 16, 4, 8), (2, 15, 4, 8), "lengths must match"),
    ((2, 16, 4, 8), (2, 16, 4, 7), (2, 16, 4, 8), "depths must match"),
])
def test_invalid_shapes(q_shape, k_shape, v_shape, match):
    """Code that matches Flax's shape errors by phrase matches ours: with attention dropout
    (upstream's case, the dense path), without it (the routed paths), and in
    `portable_rnn.dot_product_attention` itself."""
    q, k, v = jnp.ones(q_shape), jnp.ones(k_shape), jnp.ones(v_shape)
    calls = [lambda: pnnx.attention_fn(q, k, v, dropout_rate=0.1, dropout_rng=jax.random.key(0)),
             lambda: plinen.attention_fn(q, k, v)]
    if match != "same rank":
        calls.append(lambda: portable_rnn.dot_product_attention(q, k, v))
    for call in calls:
        with pytest.raises(ValueError, match=match):
            call()


# --- google/flax tests/linen/linen_attention_test.py: test_decoding, test_dtype_infer ---------

@pytest.mark.parametrize("spatial_shape, attn_dims", [((5,), (1,)), ((6, 5), (2,))])
def test_decoding(spatial_shape, attn_dims):
    """Autoregressive decoding with `precision=HIGHEST` (one query against the cache at a time)
    equals the causal attention over the whole sequence (upstream), and Flax's own attention."""
    from flax import jax_utils
    from flax.core import pop

    bs, num_heads, num_features = 2, 3, 4
    key1, key2 = jax.random.split(jax.random.key(0))
    inputs = draws.normal(key1, (bs,) + spatial_shape + (num_heads * num_features,))
    kw = dict(num_heads=num_heads, qkv_features=num_heads * num_features,
              precision=Precision.HIGHEST, deterministic=False, decode=False)
    module = nn.MultiHeadDotProductAttention(**kw, attention_fn=plinen.attention_fn)
    decode_module = module.clone(decode=True)
    initial_vars = decode_module.init(key2, inputs)
    state, params = pop(initial_vars, "params")
    causal_mask = nn.attention.make_causal_mask(jnp.ones((bs,) + spatial_shape))
    y_ref = jax.jit(lambda x, y: module.apply(initial_vars, x, mask=y))(inputs, causal_mask)

    def body_fn(state, x):
        y, state = decode_module.apply({"params": params, **state}, x, mutable=["cache"])
        return state, y

    _, y = jax_utils.scan_in_dim(body_fn, state, inputs, axis=attn_dims, keepdims=True)
    np.testing.assert_allclose(y_ref, y, atol=1e-5)
    stock = nn.MultiHeadDotProductAttention(**kw)
    np.testing.assert_allclose(y_ref, stock.apply(initial_vars, inputs, mask=causal_mask),
                               atol=1e-6, rtol=1e-6)


def test_dtype_infer():
    """Complex inputs give a complex output (upstream), equal to Flax's own."""
    x = jnp.ones((4, 6, 5), jnp.complex64)
    kw = dict(num_heads=8, qkv_features=16, kernel_init=nn.initializers.ones,
              bias_init=nn.initializers.zeros, deterministic=False)
    sa_module = nn.MultiHeadDotProductAttention(**kw, attention_fn=plinen.attention_fn)
    with jax.numpy_dtype_promotion("standard"):  # Flax promotes implicitly (float32 params)
        y, variables = sa_module.init_with_output(jax.random.key(0), x)
        want = nn.MultiHeadDotProductAttention(**kw).apply(variables, x)
    assert y.shape == x.shape and y.dtype == jnp.complex64
    np.testing.assert_allclose(y, want, atol=1e-5, rtol=1e-5)


# --- google/flax tests/linen/linen_attention_test.py: test_multihead_sow_attention_weights, ---
# --- test_mixed_precision_multihead_attention -------------------------------------------------

def _sown(intermediates, *path):
    for name in path:
        intermediates = intermediates[name]
    return intermediates["attention_weights"][0]


def test_multihead_sow_attention_weights():
    """Only the modules called with `sow_weights=True` sow (upstream), Flax's weights."""
    rng = jax.random.key(0)
    x = jnp.ones((4, 6, 5))

    class Model(nn.Module):
        attention_kwargs: dict

        @nn.compact
        def __call__(self, x, sow_weights=False):
            x = nn.MultiHeadDotProductAttention(**self.attention_kwargs)(
                x, sow_weights=sow_weights)
            x = nn.MultiHeadDotProductAttention(**self.attention_kwargs)(x)
            x = nn.MultiHeadDotProductAttention(**self.attention_kwargs)(
                x, sow_weights=sow_weights)
            return x

    kw = dict(num_heads=8, qkv_features=16, kernel_init=nn.initializers.ones,
              bias_init=nn.initializers.zeros, deterministic=False)
    module = Model(dict(kw, attention_fn=plinen.attention_fn))
    v = module.init(rng, x)
    _, intermediates = module.apply(v, x, mutable=["intermediates"], sow_weights=True)
    assert _sown(intermediates["intermediates"], "MultiHeadDotProductAttention_0").shape == (
        4, 8, 6, 6)
    assert "MultiHeadDotProductAttention_1" not in intermediates["intermediates"]
    assert _sown(intermediates["intermediates"], "MultiHeadDotProductAttention_2").shape == (
        4, 8, 6, 6)
    _, stock = Model(kw).apply(v, x, mutable=["intermediates"], sow_weights=True)
    for name in ("MultiHeadDotProductAttention_0", "MultiHeadDotProductAttention_2"):
        np.testing.assert_allclose(_sown(intermediates["intermediates"], name),
                                   _sown(stock["intermediates"], name), atol=1e-6)
    _, intermediates = module.apply(v, x, mutable=["intermediates"], sow_weights=False)
    assert "intermediates" not in intermediates


@pytest.mark.parametrize("force_fp32, attn_weights_dtype",
                         [(True, jnp.float32), (False, jnp.bfloat16)])
def test_mixed_precision_multihead_attention(force_fp32, attn_weights_dtype):
    """The sown weights' dtype follows `force_fp32_for_softmax` (upstream); their values are
    Flax's within a bfloat16 rounding."""
    input_key, params_key, dropout_key = jax.random.split(jax.random.key(0), 3)
    x = draws.uniform(input_key, (2, 4))
    attention_kwargs = dict(num_heads=2, qkv_features=4,
                            kernel_init=nn.initializers.lecun_normal(),
                            bias_init=nn.initializers.uniform(), force_fp32_for_softmax=force_fp32,
                            deterministic=False, dtype=jnp.bfloat16)
    mha = nn.MultiHeadDotProductAttention(**attention_kwargs, attention_fn=plinen.attention_fn)
    stock = nn.MultiHeadDotProductAttention(**attention_kwargs)
    with jax.numpy_dtype_promotion("standard"):  # Flax promotes implicitly (float32 params)
        init_vars = mha.init({"params": params_key, "dropout": dropout_key}, x)
        _, updated_vars = mha.apply(init_vars, x, mutable=["intermediates"], sow_weights=True)
        _, want = stock.apply(init_vars, x, mutable=["intermediates"], sow_weights=True)
    got = updated_vars["intermediates"]["attention_weights"][0]
    assert got.dtype == attn_weights_dtype
    np.testing.assert_allclose(np.asarray(got, np.float32),
                               np.asarray(want["intermediates"]["attention_weights"][0],
                                          np.float32), atol=1e-2)


# --- google/flax tests/nnx/nn/attention_test.py: test_multihead_sow_attention_weights, --------
# --- test_causal_mask_equivalence, TestGQADotProductAttention.test_gqa_parity_with_jax --------

class _Dummy(nnx.Module):
    pass


def _captured(fn, *args, **kwargs):
    """`fn(..., module=m)` under `nnx.capture`: its output and the weights it sowed."""
    out, intermediates = nnx.capture(lambda m: fn(*args, **kwargs, module=m),
                                     nnx.Intermediate)(_Dummy())
    return out, intermediates["attention_weights"][0]


def test_nnx_multihead_sow_attention_weights():
    class Model(nnx.Module):
        def __init__(self, attention_kwargs, rng):
            self.attention_layers = nnx.data([
                nnx.MultiHeadAttention(**attention_kwargs, rngs=rng) for i in range(3)])

        def __call__(self, x, sow_weights=False):
            x = self.attention_layers[0](x, sow_weights=sow_weights)
            x = self.attention_layers[1](x)
            x = self.attention_layers[2](x, sow_weights=sow_weights)
            return x

    x = jnp.ones((4, 6, 8))
    kw = dict(in_features=8, num_heads=8, kernel_init=nnx.initializers.ones_init(),
              bias_init=nnx.initializers.zeros_init(), deterministic=False)
    module = Model(dict(kw, attention_fn=pnnx.attention_fn), nnx.Rngs(0))
    module.set_attributes(decode=False)
    _, intermediates = nnx.capture(module, nnx.Intermediate)(x, True)
    assert intermediates["attention_layers"][0]["attention_weights"][0].shape == (4, 8, 6, 6)
    assert 1 not in intermediates["attention_layers"]
    assert intermediates["attention_layers"][2]["attention_weights"][0].shape == (4, 8, 6, 6)
    stock = Model(kw, nnx.Rngs(0))
    stock.set_attributes(decode=False)
    _, want = nnx.capture(stock, nnx.Intermediate)(x, True)
    for i in (0, 2):
        np.testing.assert_allclose(intermediates["attention_layers"][i]["attention_weights"][0],
                                   want["attention_layers"][i]["attention_weights"][0],
                                   atol=1e-6)
    _, intermediates = nnx.capture(module, nnx.Intermediate)(x)
    assert not intermediates  # empty


@pytest.mark.parametrize("use_padding", [True, False])
@pytest.mark.parametrize("is_cross_attention", [True, False])
def test_causal_mask_equivalence(use_padding, is_cross_attention):
    """`is_causal` with a padding mask equals the two masks combined (upstream); the sown weights
    are Flax's; the output is Flax's where a query sees a key, 0 where it sees none (Flax: the
    average of the values, the documented difference)."""
    from flax.nnx.nn.attention import combine_masks

    batch_size, num_heads, q_len, head_dim = 1, 2, 2, 4
    kv_len = 4 if is_cross_attention else q_len
    q = draws.normal(jax.random.key(0), (batch_size, 1, q_len, num_heads, head_dim))
    k = draws.normal(jax.random.key(1), (batch_size, 1, kv_len, num_heads, head_dim))
    v = draws.normal(jax.random.key(2), (batch_size, 1, kv_len, num_heads, head_dim))
    causal_mask = jnp.tril(jnp.ones((q_len, kv_len), jnp.bool_))
    causal_mask = jnp.broadcast_to(causal_mask, (batch_size, 1, num_heads, q_len, kv_len))
    padding_mask = None
    if use_padding:
        padding_mask = jnp.ones((batch_size, 1, 1, q_len, kv_len), jnp.bool_)
        padding_mask = padding_mask.at[..., -2:].set(False)
    manual_mask = combine_masks(padding_mask, causal_mask, dtype=q.dtype)

    attn_jax = pnnx.attention_fn(query=q, key=k, value=v, mask=manual_mask, is_causal=False,
                                 deterministic=True, module=None)
    kw = dict(query=q, key=k, value=v, mask=padding_mask, is_causal=True, deterministic=True)
    attn_manual, weights = _captured(pnnx.attention_fn, **kw)
    np.testing.assert_allclose(attn_jax, attn_manual, atol=1e-6)

    with jax.numpy_dtype_promotion("standard"):  # Flax combines its bool and float masks
        want, want_weights = _captured(nnx.dot_product_attention, **kw)
    np.testing.assert_allclose(weights, want_weights, atol=1e-6)
    # (batch, 1, T, N, 1): whether query t of head n sees a key
    sees = np.moveaxis(np.asarray(manual_mask).any(-1), -1, -2)[..., None]
    np.testing.assert_allclose(np.where(sees, attn_manual, 0), np.where(sees, want, 0),
                               atol=1e-6)
    assert not np.asarray(attn_manual)[~np.broadcast_to(sees, attn_manual.shape)].any()


def test_gqa_parity_with_jax():
    """Grouped query heads (4 over 2 key/value heads) equal `jax.nn.dot_product_attention`
    (upstream), and the weights sown are Flax's."""
    B, T, S, D = 2, 8, 8, 16
    num_heads_q, num_heads_kv = 4, 2
    k1, k2, k3 = jax.random.split(jax.random.key(42), 3)
    query = draws.normal(k1, (B, T, num_heads_q, D))
    key = draws.normal(k2, (B, S, num_heads_kv, D))
    value = draws.normal(k3, (B, S, num_heads_kv, D))
    jax_out = jax.nn.dot_product_attention(query, key, value)
    nnx_out, weights = _captured(pnnx.attention_fn, query, key, value)
    np.testing.assert_allclose(nnx_out, jax_out, atol=1e-3, rtol=1e-3)
    _, want = _captured(nnx.dot_product_attention, query, key, value)
    assert weights.shape == (B, num_heads_q, T, S)
    np.testing.assert_allclose(weights, want, atol=1e-6)


# --- precision reaches every product ----------------------------------------------------------

def _dot_precisions(f, *args):
    """The `precision` of every dot_general in the program of `f`, its backward included."""
    return [eqn.params["precision"] for eqn in binds(trace(f, *args), "dot_general")]


def _canonical(precision):
    """How a program records `precision` (as `lax.dot_general` canonicalises it)."""
    program = jax.make_jaxpr(lambda a: lax.dot_general(a, a, (((1,), (0,)), ((), ())),
                                                       precision=precision))(jnp.ones((1, 1)))
    return program.eqns[0].params["precision"]


PRECISIONS = [Precision.HIGHEST, "high", (Precision.HIGHEST, Precision.DEFAULT),
              lax.DotAlgorithmPreset.BF16_BF16_F32]


@pytest.mark.parametrize("precision", PRECISIONS, ids=str)
@pytest.mark.parametrize("path", ["xla", "chunked", "flax dropout", "cudnn, xla backward"])
def test_precision_reaches_every_product(path, precision):
    """Every product of the forward and the backward, on every path, runs at the precision
    asked for (what Flax's einsums do with it): dropping it anywhere fails here."""
    q = draws.normal(jax.random.key(0), (2, 8, 4, 16), jnp.bfloat16)
    kv = draws.normal(jax.random.key(1), (2, 8, 2, 16), jnp.bfloat16)
    if path == "flax dropout":
        def f(q, k, v):
            return plinen.attention_fn(q, k, v, dropout_rate=0.2, dropout_rng=jax.random.key(2),
                                       precision=precision)
        kv = jnp.repeat(kv, 2, axis=2)
    elif path == "cudnn, xla backward":  # odd T: cuDNN's forward, the xla path's gradients
        q = q[:, :7]

        def f(q, k, v):
            return portable_rnn.dot_product_attention(q, k, v, is_causal=True,
                                                      precision=precision, capabilities=GPU)
    else:
        def f(q, k, v):
            return portable_rnn.dot_product_attention(q, k, v, is_causal=True,
                                                      precision=precision, implementation=path)

    def loss(q, k, v):
        return jnp.sum(f(q, k, v).astype(jnp.float32))

    with emulated_cudnn_attention():
        got = _dot_precisions(jax.grad(loss, (0, 1, 2)), q, kv, kv)
        if path.startswith("cudnn"):
            d = portable_rnn.explain_attention(q, kv, kv, is_causal=True, precision=precision,
                                               capabilities=GPU)
            assert d.implementation == "cudnn", d
            assert any(n.startswith("forward on cuDNN; gradients on the xla path") for n in d.notes)
    assert len(got) >= (4 if path.startswith("cudnn") else 6), got
    assert set(got) == {_canonical(precision)}, got


def test_precision_in_the_decision_and_cudnn_rejects_what_it_cannot_compute():
    q = jax.ShapeDtypeStruct((2, 64, 4, 64), jnp.bfloat16)
    d = portable_rnn.explain_attention(q, q, q, precision="highest",
                                       capabilities=portable_rnn.Capabilities("cpu"))
    assert "both products at precision HIGHEST" in d.notes, d
    with jax.default_matmul_precision(None):  # the suite sets "highest" on accelerators
        assert not any("precision" in n for n in portable_rnn.explain_attention(q, q, q).notes)
    with jax.default_matmul_precision("float32"):
        assert ("both products at precision 'float32' (jax_default_matmul_precision)"
                in portable_rnn.explain_attention(q, q, q, implementation="xla").notes)
    for ok in (None, Precision.HIGHEST, "bfloat16", (Precision.HIGH, Precision.DEFAULT),
               lax.DotAlgorithmPreset.DEFAULT, lax.DotAlgorithmPreset.BF16_BF16_F32):
        d = portable_rnn.explain_attention(q, q, q, precision=ok, capabilities=GPU)
        assert d.implementation == "cudnn", (ok, d)
    for bad in (lax.DotAlgorithmPreset.F32_F32_F32, lax.DotAlgorithmPreset.BF16_BF16_F32_X3,
                lax.DotAlgorithmPreset.F16_F16_F32):
        d = portable_rnn.explain_attention(q, q, q, precision=bad, capabilities=GPU)
        assert d.implementation == "xla" and d.fell_back, (bad, d)
        assert d.rejected["cudnn"] == (
            f"precision DotAlgorithmPreset.{bad.name}: cuDNN attention multiplies bfloat16 "
            "operands exactly with float32 accumulation (DotAlgorithmPreset.BF16_BF16_F32) and "
            "runs no other dot algorithm",)
        assert f"both products at precision DotAlgorithmPreset.{bad.name}" in d.notes
        with pytest.raises(ValueError, match=r"implementation='cudnn' cannot serve .*\n.*"
                                             r"runs no other dot algorithm"):
            portable_rnn.explain_attention(q, q, q, precision=bad, capabilities=GPU,
                                           implementation="cudnn")
    with pytest.raises(ValueError, match=r"`precision` must be None, a `jax.lax.Precision`"):
        portable_rnn.explain_attention(q, q, q, precision="fast")


@pytest.mark.parametrize("precision", [Precision.DEFAULT, Precision.HIGH, Precision.HIGHEST])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_precision_matches_flax_attention(precision, dtype):
    """Forward and gradients equal Flax's own `dot_product_attention` at the same precision."""
    ks = jax.random.split(jax.random.key(3), 3)
    q, k, v = (draws.normal(kk, (2, 9, 4, 8), dtype) for kk in ks)
    mask = nn.make_causal_mask(jnp.ones((2, 9)))

    def loss(fn, q, k, v):
        out = fn(q, k, v, mask=mask, precision=precision)
        return jnp.sum(out.astype(jnp.float32) * jnp.cos(jnp.arange(out.size).reshape(out.shape)))

    with jax.numpy_dtype_promotion("standard"):
        want = jax.value_and_grad(functools.partial(loss, nn.dot_product_attention),
                                  (0, 1, 2))(q, k, v)
    got = jax.value_and_grad(functools.partial(loss, plinen.attention_fn), (0, 1, 2))(q, k, v)
    tol = 2e-2  # Flax rounds its bfloat16 weights and logits
    if dtype == jnp.float32:
        # A TPU runs float32 products at DEFAULT as one bfloat16 pass (2^-8 relative each), in
        # another order than Flax's; at HIGH as three.
        tol = 2.0**-8 if precision == Precision.DEFAULT and references.platform() == "tpu" else (
            references.float32_tol(1e-5))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, atol=tol * (1 + np.abs(b).max()), rtol=tol)


# --- complex inputs ---------------------------------------------------------------------------

def _complex(key, shape, dtype=jnp.complex64):
    re, im = draws.normal(key, (2,) + shape, jnp.float32)
    return lax.complex(re, im).astype(dtype)


def _complex_reference(q, k, v, mask):
    """The complex softmax attention in complex128 NumPy: exp(x) / sum(exp(x)) of the logits."""
    q, k, v = (np.asarray(a, np.complex128) for a in (q, k, v))
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    e = np.where(mask, np.exp(logits - np.where(mask, logits.real, -np.inf).max(-1)[..., None]),
                 0)
    return np.einsum("bnts,bsnh->btnh", e / e.sum(-1, keepdims=True), v)


def test_complex_inputs_forward_gradient_and_routing():
    with references.float64():
        ks = jax.random.split(jax.random.key(5), 4)
        q = _complex(ks[0], (2, 5, 3, 4), jnp.complex128)
        k, v = (_complex(kk, (2, 7, 3, 4), jnp.complex128) for kk in ks[1:3])
        mask = np.array(draws.bernoulli(ks[3], 0.7, (2, 3, 5, 7)))
        mask[..., 0] = True  # every query sees a key
        for fn in (portable_rnn.dot_product_attention, plinen.attention_fn):
            np.testing.assert_allclose(fn(q, k, v, mask=jnp.asarray(mask)),
                                       _complex_reference(q, k, v, mask), rtol=1e-12, atol=1e-12)
        w = _complex(ks[0], q.shape, jnp.complex128)
        check_grads(jax.jit(lambda q, k, v: jnp.real(jnp.sum(portable_rnn.dot_product_attention(
            q, k, v, mask=jnp.asarray(mask)) * jnp.conj(w)))), (q, k, v), order=1, modes=["rev"],
                    eps=1e-6, atol=1e-7, rtol=1e-7)
    q64 = _complex(ks[0], (2, 5, 3, 4))  # made here: a TPU has no complex128 to convert from
    out = portable_rnn.dot_product_attention(q64, q64, q64, mask=jnp.zeros((5, 5), bool))
    assert out.dtype == jnp.complex64 and not np.asarray(out).any()  # no visible key: 0
    d = portable_rnn.explain_attention(q64, q64, q64)
    assert d.implementation == "xla"
    d = portable_rnn.explain_attention(jax.ShapeDtypeStruct((1, 4096, 2, 8), jnp.complex64),
                                       *(jax.ShapeDtypeStruct((1, 4096, 2, 8), jnp.complex64),) * 2,
                                       capabilities=GPU)
    assert d.implementation == "xla"
    assert "inputs are complex64: cuDNN attention supports float16/bfloat16 only" in (
        d.rejected["cudnn"])
    assert d.rejected["chunked"] == ("complex64 inputs: the chunked path's online softmax takes "
                                     "real logits (the dense path computes the complex softmax)",)
    with pytest.raises(ValueError, match=r"'chunked' cannot serve (?s:.*)complex64 inputs"):
        portable_rnn.dot_product_attention(q64, q64, q64, implementation="chunked")
    with pytest.raises(TypeError, match=r"`return_residual`=True with complex64 inputs"):
        portable_rnn.dot_product_attention(q64, q64, q64, return_residual=True)
    with pytest.raises(TypeError, match=r"`bias` must have a floating dtype .*; got complex64"):
        r = jnp.real(q64)
        portable_rnn.dot_product_attention(r, r, r, jnp.zeros((5, 5), jnp.complex64))


def test_complex_flax_attention_gradients():
    """Against autodiff of a plain complex formula, and Flax's own where it has a gradient (on
    jax 0.12 it has none: `jax.nn.softmax` takes the `max` of the complex logits)."""
    ks = jax.random.split(jax.random.key(6), 4)
    q, k, v = (_complex(kk, (2, 6, 2, 4)) for kk in ks[:3])
    mask = jnp.tril(jnp.ones((6, 6), bool))
    w = _complex(ks[3], q.shape)

    def plain(q, k, v):
        logits = jnp.einsum("btnh,bsnh->bnts", q, k) / 2
        logits = jnp.where(mask, logits, -1e30)
        shift = lax.stop_gradient(logits.real.max(-1, keepdims=True)).astype(logits.dtype)
        e = jnp.exp(logits - shift)
        return jnp.einsum("bnts,bsnh->btnh", e / e.sum(-1, keepdims=True), v)

    def loss(fn):
        return lambda q, k, v: jnp.real(jnp.sum(fn(q, k, v) * jnp.conj(w)))

    # each gradient one compiled program (eagerly, one per op)
    got = jax.jit(jax.grad(loss(lambda q, k, v: plinen.attention_fn(q, k, v, mask=mask)),
                           (0, 1, 2)))(q, k, v)
    with jax.numpy_dtype_promotion("standard"):
        references = [jax.jit(jax.grad(loss(plain), (0, 1, 2)))(q, k, v)]
        try:
            references.append(jax.jit(jax.grad(loss(lambda q, k, v: nn.dot_product_attention(
                q, k, v, mask=mask)), (0, 1, 2)))(q, k, v))
        except TypeError as e:  # jax >= 0.11
            assert "complex64" in str(e) and jax.__version_info__ >= (0, 11), e
    for want in references:
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, atol=2e-4 * (1 + np.abs(b).max()), rtol=2e-4)


# --- the log-sum-exp's gradient ---------------------------------------------------------------

@pytest.mark.parametrize("implementation", ["xla", "chunked"])
def test_return_residual_gradient_against_finite_differences(implementation):
    """`d lse / d (q, k, bias, scale)` against central finite differences in float64; where
    `jax.nn.dot_product_attention`'s XLA path stops the gradient (the documented difference)."""
    with references.float64():
        ks = jax.random.split(jax.random.key(7), 4)
        q = draws.normal(ks[0], (2, 6, 4, 8), jnp.float64)
        k, v = (draws.normal(kk, (2, 6, 2, 8), jnp.float64) for kk in ks[1:3])
        bias = draws.normal(ks[3], (1, 4, 6, 6), jnp.float64)
        lengths = jnp.array([6, 3])

        def lse(q, k, bias, scale):
            return portable_rnn.dot_product_attention(
                q, k, v, bias, is_causal=True, key_value_seq_lengths=lengths, scale=scale,
                return_residual=True, implementation=implementation)[1]

        # jitted: eagerly, each finite difference's call ran the op by op's compiled programs
        check_grads(jax.jit(lse), (q, k, bias, jnp.float64(0.4)), order=1, modes=["rev"], eps=1e-4,
                    atol=1e-7, rtol=1e-7)
        with jax.numpy_dtype_promotion("standard"):  # jax.nn promotes implicitly
            stock = jax.grad(lambda q: jnp.sum(jax.nn.dot_product_attention(
                q, k, v, bias, is_causal=True, return_residual=True)[1]))(q)
        assert not np.asarray(stock).any()  # jax.nn's gradient of its log-sum-exp is 0

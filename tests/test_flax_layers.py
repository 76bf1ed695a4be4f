"""Flax Linen and NNX layers: parameters, equivalences (torch, Flax cells, linen == nnx), dtypes,
dropout, carries, and attention_fn inside Flax's own attention modules."""

import warnings

import draws
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import portable_rnn
from portable_rnn import linen as plinen
from portable_rnn import nnx as pnnx
from portable_rnn._src.core import dispatch as _dispatch

I, H = 4, 6


def _x(shape=(2, 3, 5, I), seed=0, dtype=jnp.float32):
    return draws.normal(jax.random.key(seed), shape, dtype)


def test_parameter_tree_is_readable_and_initialised_like_pytorch():
    layer = plinen.LSTM(hidden_size=H, num_layers=2, bidirectional=True)
    params = layer.init(jax.random.key(0), _x())["params"]
    assert set(params) == {"layer_0", "layer_1"}
    assert set(params["layer_1"]) == {"forward", "reverse"}
    shapes = {k: v.shape for k, v in params["layer_1"]["reverse"].items()}
    assert shapes == {"W_ih": (4 * H, 2 * H), "W_hh": (4 * H, H), "b_ih": (4 * H,),
                      "b_hh": (4 * H,)}
    values = np.concatenate([np.ravel(a) for a in jax.tree.leaves(params)])
    bound = 1 / np.sqrt(H)
    assert np.abs(values).max() <= bound and values.std() > 0.8 * bound / np.sqrt(3)
    zeros = plinen.LSTM(hidden_size=H, kernel_init=nn.initializers.zeros)
    p = zeros.init(jax.random.key(0), _x())["params"]["layer_0"]["forward"]
    assert not np.asarray(p["W_ih"]).any() and np.asarray(p["W_hh"]).any()
    model = pnnx.LSTM(I, H, num_layers=2, bidirectional=True, rngs=nnx.Rngs(0))
    nnx_paths = {jax.tree_util.keystr(k) for k, _ in
                 jax.tree_util.tree_leaves_with_path(nnx.to_pure_dict(nnx.state(model, nnx.Param)))}
    linen_paths = {jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_leaves_with_path(params)}
    assert nnx_paths == linen_paths


def test_linen_and_nnx_agree_with_extra_batch_dims_lengths_and_carry():
    x = _x()
    lengths = jnp.array([[5, 2, 0], [1, 5, 4]])
    layer = plinen.LSTM(hidden_size=H, num_layers=2, bidirectional=True)
    variables = layer.init(jax.random.key(1), x)
    carry = (draws.normal(jax.random.key(2), (4, 2, 3, H)),
             draws.normal(jax.random.key(3), (4, 2, 3, H)))
    y, (h, c) = layer.apply(variables, x, lengths, carry, return_carry=True)
    assert y.shape == (2, 3, 5, 2 * H) and h.shape == (4, 2, 3, H)
    model = pnnx.LSTM(I, H, num_layers=2, bidirectional=True, rngs=nnx.Rngs(9))
    model.load_params(variables["params"])
    y2, (h2, c2) = model(x, lengths, carry, return_carry=True)
    for a, b in ((y, y2), (h, h2), (c, c2)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(y[0, 2]), 0)  # length 0
    np.testing.assert_array_equal(np.asarray(h[:, 0, 2]), np.asarray(carry[0][:, 0, 2]))


def test_carry_continues_a_sequence():
    """Running T steps at once equals two halves with the carry passed along (unidirectional)."""
    layer = plinen.LSTM(hidden_size=H, num_layers=2)
    x = _x((3, 8, I))
    v = layer.init(jax.random.key(0), x)
    full = layer.apply(v, x)
    first, carry = layer.apply(v, x[:, :5], return_carry=True)
    second = layer.apply(v, x[:, 5:], initial_carry=carry)
    np.testing.assert_allclose(np.asarray(jnp.concatenate([first, second], 1)),
                               np.asarray(full), atol=1e-6, rtol=1e-6)


def test_matches_torch_via_state_dict_and_round_trips():
    torch = pytest.importorskip("torch", reason="needs torch (CPU)")
    torch.manual_seed(0)
    mod = torch.nn.LSTM(I, H, 2, batch_first=True, bidirectional=True)
    x = _x((3, 5, I))
    with torch.no_grad():
        want = mod(torch.tensor(np.asarray(x)))[0].numpy()
    variables = plinen.LSTM.variables_from_torch(mod.state_dict())
    got = plinen.LSTM(hidden_size=H, num_layers=2, bidirectional=True).apply(variables, x)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=1e-5)
    model = pnnx.LSTM.from_torch(mod.state_dict())
    np.testing.assert_allclose(np.asarray(model(x)), want, atol=1e-5, rtol=1e-5)
    for again in (plinen.LSTM.variables_to_torch(variables), model.to_torch_state_dict()):
        assert again.keys() == mod.state_dict().keys()
        for k, v in mod.state_dict().items():
            np.testing.assert_array_equal(again[k], v.numpy())
    flat = portable_rnn.lstm_weights_from_torch(mod.state_dict())
    via_flat = plinen.LSTM.variables_from_flat(flat, I, H, 2, True)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), via_flat,
                                     variables))


def test_loads_flax_optimized_lstm_cell_params():
    x = _x((3, 5, I))
    rnn = nn.RNN(nn.OptimizedLSTMCell(H))
    flax_params = rnn.init(jax.random.key(4), x)
    want = rnn.apply(flax_params, x)
    got = plinen.LSTM(hidden_size=H).apply(plinen.LSTM.variables_from_flax(flax_params), x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)
    model = pnnx.LSTM.from_flax(flax_params)
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(want), atol=1e-5, rtol=1e-5)


def test_bf16_compute_with_float32_params_and_visible_decision():
    x = _x((2, 6, I))
    layer = plinen.LSTM(hidden_size=H, num_layers=2, dtype=jnp.bfloat16)
    v = layer.init(jax.random.key(0), x)
    assert {a.dtype for a in jax.tree.leaves(v)} == {jnp.dtype(jnp.float32)}
    y = layer.apply(v, x)
    assert y.dtype == jnp.bfloat16  # Flax's own cells return float32 here
    ref = plinen.LSTM(hidden_size=H, num_layers=2).apply(v, x)
    np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(ref), atol=3e-2)
    gpu = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
    _dispatch._WARNED.clear()
    with portable_rnn.policy(capabilities=gpu, on_fallback="warn"):
        with pytest.warns(portable_rnn.FallbackWarning, match=r"`x` is bfloat16"):
            jax.jit(layer.apply)(v, x)


def test_dropout_between_layers():
    x = _x((2, 6, I))
    layer = plinen.LSTM(hidden_size=H, num_layers=2, dropout=0.5)
    v = layer.init(jax.random.key(0), x)
    plain = layer.apply(v, x)
    np.testing.assert_array_equal(np.asarray(layer.apply(v, x, deterministic=True)),
                                  np.asarray(plain))
    a = layer.apply(v, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    b = layer.apply(v, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    assert not np.allclose(np.asarray(a), np.asarray(plain))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    model = pnnx.LSTM(I, H, num_layers=2, dropout=0.5, rngs=nnx.Rngs(0, dropout=1))
    model.load_params(v["params"])
    np.testing.assert_allclose(np.asarray(model(x, deterministic=True)), np.asarray(plain),
                               atol=1e-6)
    assert not np.allclose(np.asarray(model(x)), np.asarray(plain))  # NNX: dropout by default
    model.eval()
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(plain), atol=1e-6)


def test_layers_train_under_jit_and_grad():
    x = _x((4, 6, I))
    layer = plinen.LSTM(hidden_size=H, bidirectional=True)
    v = layer.init(jax.random.key(0), x)
    g = jax.jit(jax.grad(lambda v: jnp.sum(layer.apply(v, x) ** 2)))(v)
    assert jax.tree.structure(g) == jax.tree.structure(v)
    assert all(bool(jnp.all(jnp.isfinite(a))) for a in jax.tree.leaves(g))
    model = pnnx.LSTM(I, H, bidirectional=True, rngs=nnx.Rngs(0))
    grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x) ** 2)))(model)
    assert all(bool(jnp.all(jnp.isfinite(a))) for a in jax.tree.leaves(nnx.state(grads)))


def test_layer_errors_name_the_argument():
    layer = plinen.LSTM(hidden_size=H)
    x = _x((2, 5, I))
    v = layer.init(jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"`initial_carry\[0\]` must have shape .*=\(1, 2, 6\)"):
        layer.apply(v, x, initial_carry=(jnp.zeros((1, 3, H)), jnp.zeros((1, 2, H))))
    with pytest.raises(ValueError, match=r"`seq_lengths` must have shape \(\*batch,\)=\(2,\)"):
        layer.apply(v, x, jnp.array([5, 5, 5]))
    with pytest.raises(ValueError,
                       match=r"`layer_0/forward/W_ih` must have shape \(24, 4\); got \(28, 4\)"):
        pnnx.LSTM(I, H, rngs=nnx.Rngs(0)).load_params(
            plinen.LSTM(hidden_size=H + 1).init(jax.random.key(0), x)["params"])


# --- attention_fn ---------------------------------------------------------------------------

def test_linen_attention_fn_matches_flax_default_with_masks_dropout_and_batch_dims():
    B, T, F, heads = 2, 7, 16, 4
    inp = _x((2, B, T, F), seed=5)  # an extra leading batch dim
    causal = nn.make_causal_mask(jnp.ones((2, B, T)))  # float32, Flax's own helper
    pad = nn.make_attention_mask(jnp.ones(T, bool), jnp.arange(T) < 6)  # key padding
    for rate, mask in ((0.0, causal), (0.0, pad), (0.3, causal)):
        kw = dict(num_heads=heads, qkv_features=32, dropout_rate=rate)
        stock = nn.MultiHeadDotProductAttention(**kw)
        ours = nn.MultiHeadDotProductAttention(**kw, attention_fn=plinen.attention_fn)
        v = stock.init(jax.random.key(0), inp, mask=mask, deterministic=True)
        call = dict(mask=mask, deterministic=rate == 0, rngs={"dropout": jax.random.key(2)})
        np.testing.assert_allclose(np.asarray(ours.apply(v, inp, **call)),
                                   np.asarray(stock.apply(v, inp, **call)), atol=2e-6, rtol=2e-6)
    # The documented difference: a query that sees no key gives 0 (Flax: the average of values).
    q = _x((1, T, heads, 8), seed=8)
    no_key = nn.make_attention_mask(jnp.arange(T) < 5, jnp.ones(T, bool))
    out = plinen.attention_fn(q, q, q, mask=no_key)
    assert not np.asarray(out[0, 5:]).any() and np.asarray(out[0, :5]).all()


def test_nnx_attention_fn_matches_flax_default():
    F, heads = 16, 4
    inp = _x((2, 9, F), seed=6)
    for kw in (dict(), dict(is_causal=True)):
        stock = nnx.MultiHeadAttention(num_heads=heads, in_features=F, qkv_features=32,
                                       decode=False, rngs=nnx.Rngs(0))
        ours = nnx.MultiHeadAttention(num_heads=heads, in_features=F, qkv_features=32,
                                      decode=False, attention_fn=pnnx.attention_fn,
                                      rngs=nnx.Rngs(0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            want, got = stock(inp, **kw), ours(inp, **kw)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6, rtol=2e-6)


def test_attention_fn_bf16_and_explicit_paths():
    q = _x((2, 3, 64, 4, 8), seed=7, dtype=jnp.bfloat16)  # two batch dims
    mask = jnp.ones((1, 1, 1, 64, 64), bool)
    dense = plinen.attention_fn(q, q, q, mask=mask, implementation="xla")
    chunked = plinen.attention_fn(q, q, q, mask=mask, implementation="chunked")
    assert dense.shape == q.shape and dense.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(chunked, np.float32), np.asarray(dense, np.float32),
                               atol=2e-2)
    with pytest.raises(ValueError, match=r"attention dropout runs on the dense path only"):
        plinen.attention_fn(q, q, q, dropout_rate=0.1, dropout_rng=jax.random.key(0),
                            implementation="chunked")


@pytest.mark.parametrize("caps", [portable_rnn.Capabilities("cpu"),
                                  portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite"),
                                  portable_rnn.Capabilities("gpu", cudnn_version=91000,
                                                            compute_capability=(9, 0))])
def test_attention_dropout_is_a_decision(caps):
    """Dropout is a reason every route but the dense one rejects: asking for one raises with it,
    a preferred one falls back saying so, and the automatic choice on any machine runs dense."""
    q = _x((2, 64, 4, 8), seed=3, dtype=jnp.bfloat16)
    drop = dict(dropout_rate=0.1, dropout_rng=jax.random.key(0), deterministic=False)
    for name in _dispatch.implementations("attention")[:-1]:
        with pytest.raises(ValueError, match=rf"implementation='{name}' cannot serve this "
                           r"attention call:\n  - attention dropout runs on the dense path "
                           r"only \(dropout rate 0.1\)"):
            with portable_rnn.policy(capabilities=caps):
                plinen.attention_fn(q, q, q, implementation=name, **drop)
        with portable_rnn.policy(attention=name, on_fallback="error", capabilities=caps):
            with pytest.raises(_dispatch.FallbackError) as err:
                jax.eval_shape(lambda q: plinen.attention_fn(q, q, q, **drop), q)
        text = str(err.value)
        assert "attention: xla (requested" in text, text
        assert f"{name} rejected:\n    - attention dropout runs on the dense path only" in text
        assert "attention weights dropped at rate 0.1" in text
    with portable_rnn.policy(capabilities=caps):
        want = plinen.attention_fn(q, q, q, implementation="xla", **drop)
        got = plinen.attention_fn(q, q, q, **drop)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))

"""The Flax layers of every family: `GRU`, `SimpleRNN` (tanh, relu) and `LSTM(proj_size=P)`.

Linen == NNX on the same parameters (outputs and carries, with and without an initial carry,
leading batch dims, ragged lengths), layer == the functional call on the packed flat weights,
layer == PyTorch after loading its state_dict and back, NNX train()/eval() and dropout, jit/grad,
and the errors for bad configuration or input.
"""

import inspect
import re

import draws
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import portable_rnn
import references
from portable_rnn import linen as plinen
from portable_rnn import nnx as pnnx
from portable_rnn._src.layers import params as _params
from references import assert_ulps

I, H, P, L, T = 3, 5, 2, 2, 6
LEAD = (2, 3)  # two leading batch dims
LENGTHS = np.array([[6, 2, 0], [1, 6, 4]])
# name: (layer class name, family, keyword options, per-direction output size)
CASES = {
    "lstm_proj": ("LSTM", "lstm", dict(proj_size=P), P),
    "gru": ("GRU", "gru", {}, H),
    "rnn_tanh": ("SimpleRNN", "simple_rnn", dict(nonlinearity="tanh"), H),
    "rnn_relu": ("SimpleRNN", "simple_rnn", dict(nonlinearity="relu"), H),
}
GATES = {"lstm": 4, "gru": 3, "simple_rnn": 1}


def _x(shape, seed=0, dtype=jnp.float32):
    return draws.normal(jax.random.key(seed), shape, dtype)


def _linen(case, **kw):
    name, _, options, _ = CASES[case]
    kw = dict(dict(hidden_size=H, num_layers=L, bidirectional=True), **kw)
    return getattr(plinen, name)(**options, **kw)


def _nnx(case, *, rngs=None, **kw):
    name, _, options, _ = CASES[case]
    kw = dict(dict(num_layers=L, bidirectional=True), **kw)
    return getattr(pnnx, name)(I, H, **options, **kw, rngs=rngs or nnx.Rngs(0))


def _carry(case, lead, seed):
    """A random initial carry: (h, c) for the LSTM, h otherwise."""
    _, family, _, S = CASES[case]
    kh, kc = jax.random.split(jax.random.key(seed))
    h = _x((2 * L, *lead, S), seed=seed)
    return (h, draws.normal(kc, (2 * L, *lead, H))) if family == "lstm" else h


def _close(a, b, tol):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert u.shape == v.shape and u.dtype == v.dtype, (u.shape, v.shape, u.dtype, v.dtype)
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=tol, rtol=tol)


def _functional(case, params, x, state, lengths):
    """The functional call on flat weights packed with the public `pack_*_weights`."""
    _, family, options, _ = CASES[case]
    pseudo = [(f"layer_{l}", d) for l in range(L) for d in ("forward", "reverse")]
    group = {n: [params[l][d][n] for l, d in pseudo] for n in ("W_ih", "W_hh", "b_ih", "b_hh")}
    sizes = (I, H, L)
    if family == "lstm":
        w = portable_rnn.pack_lstm_weights(*group.values(), *sizes, True, proj_size=P,
                                           W_hr=[params[l][d]["W_hr"] for l, d in pseudo])
        return w, portable_rnn.lstm(x, *state, w, lengths, *sizes, 0.0, True, proj_size=P)
    if family == "gru":
        w = portable_rnn.pack_gru_weights(*group.values(), *sizes, True)
        return w, portable_rnn.gru(x, state, w, lengths, *sizes, 0.0, True)
    w = portable_rnn.pack_simple_rnn_weights(*group.values(), *sizes, True)
    return w, portable_rnn.simple_rnn(x, state, w, lengths, *sizes, 0.0, True, **options)


@pytest.mark.parametrize("case", ["lstm_proj", "gru", "rnn_tanh"])
def test_parameter_tree_shapes_init_and_overrides(case):
    _, family, _, S = CASES[case]
    G = GATES[family] * H
    x = _x((*LEAD, T, I))
    params = _linen(case).init(jax.random.key(0), x)["params"]
    want = dict(W_ih=(G, 2 * S), W_hh=(G, S), b_ih=(G,), b_hh=(G,))
    if family == "lstm":
        want["W_hr"] = (P, H)
    assert {k: v.shape for k, v in params["layer_1"]["reverse"].items()} == want
    assert params["layer_0"]["forward"]["W_ih"].shape == (G, I)
    values = np.concatenate([np.ravel(a) for a in jax.tree.leaves(params)])
    assert np.abs(values).max() <= 1 / np.sqrt(H) and values.std() > 0.2 / np.sqrt(H)
    zeros = dict(kernel_init=nn.initializers.zeros, bias_init=nn.initializers.ones)
    if family == "lstm":
        zeros["projection_init"] = nn.initializers.zeros
    p = _linen(case, **zeros).init(jax.random.key(0), x)["params"]["layer_1"]["reverse"]
    m = _nnx(case, **zeros).layer_1["reverse"]
    for tree in (p, {k: v[...] for k, v in m.items()}):
        assert not np.asarray(tree["W_ih"]).any() and np.asarray(tree["W_hh"]).any()
        assert (np.asarray(tree["b_hh"]) == 1).all()
        assert "W_hr" not in tree or not np.asarray(tree["W_hr"]).any()
    model = _nnx(case)
    paths = lambda tree: {jax.tree_util.keystr(k) for k, _ in
                          jax.tree_util.tree_leaves_with_path(tree)}
    assert paths(nnx.to_pure_dict(nnx.state(model, nnx.Param))) == paths(params)


@pytest.mark.parametrize("case", CASES)
def test_linen_equals_nnx_equals_functional(case):
    """Leading batch dims, ragged lengths (0 included), with and without an initial carry; the
    flat weights packed from the tree round-trip through `variables_from_flat`."""
    _, family, _, S = CASES[case]
    x = _x((*LEAD, T, I), seed=1)
    layer = _linen(case)
    variables = layer.init(jax.random.key(2), x)
    model = _nnx(case, rngs=nnx.Rngs(9)).load_params(variables["params"])
    flat_x = x.reshape(-1, T, I)
    for carry in (None, _carry(case, LEAD, 3)):
        got = layer.apply(variables, x, LENGTHS, carry, return_carry=True)
        _close(got, model(x, LENGTHS, carry, return_carry=True), 1e-6)
        y, state = got
        assert y.shape == (*LEAD, T, 2 * S)
        np.testing.assert_array_equal(np.asarray(y[0, 2]), 0)  # length 0: zeros, initial carry
        init = carry if carry is not None else jax.tree.map(jnp.zeros_like, state)
        for s, s0 in zip(jax.tree.leaves(state), jax.tree.leaves(init), strict=True):
            np.testing.assert_array_equal(np.asarray(s[:, 0, 2]), np.asarray(s0[:, 0, 2]))
        flat_carry = jax.tree.map(lambda a: a.reshape(a.shape[0], 6, a.shape[-1]), init)
        w, want = _functional(case, variables["params"], flat_x, flat_carry, LENGTHS.reshape(6))
        want_y, *want_state = want
        _close(y, want_y.reshape(y.shape), 1e-6)
        _close(state, jax.tree.map(lambda a: a.reshape((2 * L, *LEAD, a.shape[-1])),
                                   tuple(want_state) if family == "lstm" else want_state[0]),
               1e-6)
    kw = dict(proj_size=P) if family == "lstm" else {}
    again = type(layer).variables_from_flat(w, I, H, L, True, **kw)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), again, variables))


def _torch_module(torch, case):
    _, family, options, _ = CASES[case]
    if family == "lstm":
        return torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=True, proj_size=P)
    if family == "gru":
        return torch.nn.GRU(I, H, L, batch_first=True, bidirectional=True)
    return torch.nn.RNN(I, H, L, batch_first=True, bidirectional=True, **options)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("case", CASES)
def test_matches_pytorch_and_round_trips(case):
    torch = pytest.importorskip("torch", reason="needs torch (CPU)")
    _, family, options, _ = CASES[case]
    torch.manual_seed(0)
    mod = _torch_module(torch, case)
    lengths = np.array([6, 2, 5, 1, 3, 6])  # PyTorch's packed sequences refuse length 0
    x = _x((6, T, I), seed=4)
    carry = _carry(case, (6,), 5)
    t = lambda a: torch.tensor(np.asarray(a))
    with torch.no_grad():
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            t(x), torch.from_numpy(lengths), batch_first=True, enforce_sorted=False)
        out, state = mod(packed, tuple(map(t, carry)) if family == "lstm" else t(carry))
        want_y = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                        total_length=T)[0].numpy()
    want_state = tuple(s.numpy() for s in state) if family == "lstm" else state.numpy()
    sd = mod.state_dict()
    variables = type(_linen(case)).variables_from_torch(sd)
    got = _linen(case).apply(variables, x, lengths, carry, return_carry=True)
    model = getattr(pnnx, type(_linen(case)).__name__).from_torch(
        sd, **({} if family == "lstm" else options))
    assert model.deterministic is False and model.num_layers == L
    for y, s in (got, model(x, lengths, carry, return_carry=True)):
        np.testing.assert_allclose(np.asarray(y), want_y, atol=1e-5, rtol=1e-5)
        for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(want_state), strict=True):
            np.testing.assert_allclose(np.asarray(a), b, atol=1e-5, rtol=1e-5)
    for again in (type(_linen(case)).variables_to_torch(variables), model.to_torch_state_dict()):
        assert list(again) == list(sd)  # PyTorch's keys, in its order
        for k, v in sd.items():
            np.testing.assert_array_equal(again[k], v.numpy())
    # The other direction: our freshly initialised weights, loaded into PyTorch.
    fresh = _linen(case).init(jax.random.key(6), x)
    mod.load_state_dict({k: torch.from_numpy(v) for k, v in
                         type(_linen(case)).variables_to_torch(fresh).items()})
    with torch.no_grad():
        want = mod(t(x))[0].numpy()
    np.testing.assert_allclose(np.asarray(_linen(case).apply(fresh, x)), want, atol=1e-5,
                               rtol=1e-5)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "SimpleRNN"])
def test_nnx_train_and_eval_toggle_dropout(name):
    x = _x((*LEAD, T, I), seed=7)
    model = getattr(pnnx, name)(I, H, L, True, dropout=0.5, rngs=nnx.Rngs(0, dropout=1))
    assert model.deterministic is False  # as nnx.Dropout: training by default
    a, b = model(x), model(x)
    assert not np.allclose(np.asarray(a), np.asarray(b))  # a fresh mask per call
    model.eval()
    assert model.deterministic is True
    e = model(x)
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(e))
    assert not np.allclose(np.asarray(model(x, deterministic=False)), np.asarray(e))
    model.train()
    assert model.deterministic is False
    assert not np.allclose(np.asarray(model(x)), np.asarray(model(x)))
    np.testing.assert_array_equal(np.asarray(model(x, deterministic=True)), np.asarray(e))
    assert not np.allclose(np.asarray(a), np.asarray(e))
    # From a containing module, and through nnx.view, like nnx.Dropout.
    class Net(nnx.Module):
        def __init__(self, rnn):
            self.rnn = rnn
            self.drop = nnx.Dropout(0.5)

    net = Net(model)
    net.eval()
    assert net.rnn.deterministic is True and net.drop.deterministic is True
    net.train()
    assert net.rnn.deterministic is False
    view = nnx.view(net, deterministic=True)
    np.testing.assert_array_equal(np.asarray(view.rnn(x)), np.asarray(e))
    quiet = getattr(pnnx, name)(I, H, L, True, dropout=0.5, deterministic=True,
                                rngs=nnx.Rngs(0))
    quiet.load_params(model.params_tree())
    np.testing.assert_array_equal(np.asarray(quiet(x)), np.asarray(e))


def test_gru_under_jit_and_grad_linen_and_nnx():
    x = _x((4, T, I), seed=8)
    lengths = jnp.array([6, 3, 0, 1])
    layer = plinen.GRU(hidden_size=H)
    v = layer.init(jax.random.key(0), x)
    g = jax.jit(jax.grad(lambda v, x: jnp.sum(layer.apply(v, x, lengths) ** 2)))(v, x)
    assert jax.tree.structure(g) == jax.tree.structure(v)
    assert all(bool(jnp.all(jnp.isfinite(a))) and bool(jnp.any(a != 0))
               for a in jax.tree.leaves(g))
    model = pnnx.GRU(I, H, rngs=nnx.Rngs(1)).load_params(v["params"])
    grads = nnx.jit(nnx.grad(lambda m, x: jnp.sum(m(x, lengths) ** 2)))(model, x)
    _close(nnx.to_pure_dict(nnx.state(grads, nnx.Param)), g["params"], 1e-5)


def test_gru_16_bit_carry_is_float32_and_continues_a_sequence():
    layer = plinen.GRU(hidden_size=H, dtype=jnp.bfloat16)
    x = _x((4, T, I), seed=9)
    v = layer.init(jax.random.key(0), x)
    full, h = layer.apply(v, x, return_carry=True)
    assert full.dtype == jnp.bfloat16 and h.dtype == jnp.float32
    first, carry = layer.apply(v, x[:, :3], return_carry=True)
    second, h2 = layer.apply(v, x[:, 3:], initial_carry=carry, return_carry=True)
    # the same steps in two calls: the float32 carry loses nothing between them (a 16-bit one
    # would be off by up to half a bfloat16 ulp), and the outputs are the same bfloat16 numbers
    # but for a last-place rounding flip
    assert carry.dtype == jnp.float32
    tol = references.float32_tol(1e-6)
    np.testing.assert_allclose(np.asarray(h2), np.asarray(h), atol=tol, rtol=tol)
    assert_ulps(jnp.concatenate([first, second], 1), np.asarray(full, np.float32), jnp.bfloat16,
                1, "continued outputs")


def test_errors_name_the_argument_the_expected_and_the_got():
    x = _x((2, T, I))
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"`nonlinearity` must be one of .*got 'gelu'"):
        plinen.SimpleRNN(hidden_size=H, nonlinearity="gelu").init(key, x)
    with pytest.raises(ValueError, match=r"`nonlinearity` must be one of .*got 'gelu'"):
        pnnx.SimpleRNN(I, H, nonlinearity="gelu", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"`proj_size` must be smaller than `hidden_size`=5 .*"
                                         r"got 5"):
        plinen.LSTM(hidden_size=H, proj_size=H).init(key, x)
    with pytest.raises(ValueError, match=r"`proj_size` must be an integer >= 0; got -1"):
        pnnx.LSTM(I, H, proj_size=-1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"`proj_size` is not an argument of nnx.GRU \(only LSTM "
                                        r"has it\)"):
        pnnx.GRU(I, H, proj_size=2, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"`deterministic` must be a Python bool; got 'yes'"):
        pnnx.GRU(I, H, deterministic="yes", rngs=nnx.Rngs(0))
    # An LSTM state_dict (NumPy arrays, no torch needed) loaded into a GRU.
    lstm_vars = plinen.LSTM(hidden_size=H).init(key, x)
    lstm_sd = plinen.LSTM.variables_to_torch(lstm_vars)
    rows = r"`state_dict\['weight_hh_l0'\]` must have 3\*hidden_size rows for an nn.GRU; got " \
           r"shape \(20, 5\) \(it looks like an nn.LSTM\)"
    with pytest.raises(ValueError, match=rows):
        plinen.GRU.variables_from_torch(lstm_sd)
    with pytest.raises(ValueError, match=rows):
        pnnx.GRU.from_torch(lstm_sd)
    # An LSTM's parameters applied by a GRU layer.
    with pytest.raises(ValueError, match=r"`layer_0/forward/W_ih` must have shape \(15, 3\); got "
                                         r"\(20, 3\) \(expected for a GRU .*that is an LSTM's"):
        plinen.GRU(hidden_size=H).apply(lstm_vars, x)
    # A projected LSTM's parameters applied without proj_size.
    proj_vars = plinen.LSTM(hidden_size=H, proj_size=P).init(key, x)
    with pytest.raises(ValueError, match=r"`W_hr` is an LSTM projection: set proj_size=2"):
        plinen.LSTM(hidden_size=H).apply(proj_vars, x)
    # Carries: a GRU takes one array; a projected LSTM's h has P features.
    gru = plinen.GRU(hidden_size=H)
    gru_vars = gru.init(key, x)
    with pytest.raises(TypeError, match=r"`initial_carry` must be one array h \(the carry of a "
                                        r"GRU; an LSTM's is a pair \(h, c\)\); got a tuple"):
        gru.apply(gru_vars, x, initial_carry=(jnp.zeros((1, 2, H)), jnp.zeros((1, 2, H))))
    with pytest.raises(ValueError, match=r"`initial_carry` must have shape \(num_layers \* "
                                         r"num_directions, \*batch, hidden_size\)=\(1, 2, 5\)"):
        gru.apply(gru_vars, x, initial_carry=jnp.zeros((1, 3, H)))
    with pytest.raises(ValueError, match=r"`initial_carry\[0\]` must have shape .*proj_size\)="
                                         r"\(1, 2, 2\); got \(1, 2, 5\)"):
        plinen.LSTM(hidden_size=H, proj_size=P).apply(
            proj_vars, x, initial_carry=(jnp.zeros((1, 2, H)), jnp.zeros((1, 2, H))))


@pytest.mark.parametrize("case, cell", [("gru", nn.GRUCell), ("rnn_tanh", nn.SimpleCell)])
def test_loads_flax_gru_and_simple_cell_params(case, cell):
    x = _x((3, T, I), seed=10)
    rnn = nn.RNN(cell(H))
    flax_params = rnn.init(jax.random.key(11), x)
    want = rnn.apply(flax_params, x)
    layer = _linen(case, num_layers=1, bidirectional=False)
    got = layer.apply(type(layer).variables_from_flax(flax_params), x)
    tol = references.float32_tol(1e-5)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=tol, rtol=tol)
    model = getattr(pnnx, type(layer).__name__).from_flax(flax_params)
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(want), atol=tol, rtol=tol)


def _documented(doc, section="Args:"):
    """The argument names a Google-style docstring documents under `section` (an entry may give
    its type, ``name (int):``)."""
    body = ("\n" + inspect.cleandoc(doc)).split("\n" + section, 1)[1].split("\n\n", 1)[0]
    return [n for names in re.findall(r"^  (\w[\w, ]*?)(?: \([^)]*\))?:", body, re.M)
            for n in names.split(", ")]


@pytest.mark.parametrize("name", ["LSTM", "GRU", "SimpleRNN"])
def test_nnx_layers_document_every_argument(name):
    cls = getattr(pnnx, name)
    init = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "options")]
    options = list(_params.family(cls._FAMILY).layer_options)
    keyword = _documented(cls.__doc__, "Keyword Args:") if options else []
    assert sorted(_documented(cls.__doc__) + keyword) == sorted(init + options)
    call = [p for p in inspect.signature(cls.__call__).parameters if p != "self"]
    assert _documented(cls.__call__.__doc__) == call
    assert "Returns:" in cls.__call__.__doc__ and "Raises:" in cls.__call__.__doc__


@pytest.mark.parametrize("name", ["LSTM", "GRU", "SimpleRNN"])
def test_output_dtype_without_dtype_is_the_inputs_as_documented(name):
    for cls in (getattr(plinen, name), getattr(pnnx, name)):
        doc = " ".join(cls.__doc__.split())
        assert ("with ``dtype=None`` the inputs'" in doc or "None (default) computes in the "
                "inputs' dtype and returns outputs of that dtype" in doc), cls
    layer = getattr(plinen, name)(hidden_size=H)
    for dtype, want in ((jnp.bfloat16, jnp.bfloat16), (jnp.float16, jnp.float16),
                        (jnp.int32, jnp.float32), (jnp.bool_, jnp.float32)):
        x = jnp.ones((2, T, I), dtype)
        assert layer.apply(layer.init(jax.random.key(0), x), x).dtype == want
    model = getattr(pnnx, name)(I, H, rngs=nnx.Rngs(0))
    assert model(jnp.ones((2, T, I), jnp.bfloat16)).dtype == jnp.bfloat16

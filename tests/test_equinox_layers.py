"""The Equinox layers (`portable_rnn.equinox`): against Equinox's own cells looped with
`lax.scan` on shared weights (outputs, final states, gradients), against PyTorch, against the
Flax layers on one parameter tree; Equinox's conventions (pytree, `inference_mode`, filtered
transformations, serialisation, `vmap` over unbatched calls); and a short optax training run.
Bad input and JAX's global options are in `test_bad_input.py` and `test_configurations.py`.
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax import lax

eqx = pytest.importorskip("equinox", reason="needs equinox (the equinox extra)")
from portable_rnn import equinox as preqx  # noqa: E402
from portable_rnn import linen as plinen  # noqa: E402

CLASSES = {"lstm": preqx.LSTM, "gru": preqx.GRU}
CELLS = {"lstm": eqx.nn.LSTMCell, "gru": eqx.nn.GRUCell}


def _normal(key, shape):
    return jax.random.normal(jax.random.key(key), shape, jnp.float32)


def scan_cells(family, cells, x, lengths, state):
    """The reference: Equinox's cells, each looped over one sequence with `lax.scan` and
    `vmap`ped over the batch, as a user writes it. Ragged lengths by masking (the state stops
    at the last valid step; outputs past it are 0); the reverse direction reads each
    sequence's valid part backwards. `state`: the initial states (L*D, B, H) (h, and c for the
    LSTM). Returns the outputs (B, T, D*H) and the final states in the same form."""
    lstm = family == "lstm"
    D = len(cells[0])
    B, T, _ = x.shape
    t = jnp.arange(T)[None, :]
    valid = t < lengths[:, None]
    rev = jnp.where(valid, lengths[:, None] - 1 - t, t)  # an involution on each row
    finals, inp = [], x
    for l, layer in enumerate(cells):
        outs = []
        for d, cell in enumerate(layer):
            p = l * D + d
            s0 = tuple(s[p] for s in state) if lstm else state[0][p]
            xs = inp if d == 0 else jnp.take_along_axis(inp, rev[..., None], axis=1)

            def run(xs, s, mask, cell=cell):
                def step(s, xm):
                    x_t, m_t = xm
                    new = jax.tree.map(lambda a, b: jnp.where(m_t, a, b), cell(x_t, s), s)
                    return new, jnp.where(m_t, new[0] if lstm else new, 0.0)
                return lax.scan(step, s, (xs, mask))

            s_n, ys = jax.vmap(run)(xs, s0, valid)
            outs.append(ys if d == 0 else jnp.take_along_axis(ys, rev[..., None], axis=1))
            finals.append(s_n if lstm else (s_n,))
        inp = jnp.concatenate(outs, axis=-1)
    return inp, tuple(jnp.stack(s) for s in zip(*finals))


def _cells(family, layers, bidirectional, I, H, seed):
    keys = iter(jax.random.split(jax.random.key(seed), 2 * layers))
    out = []
    for l in range(layers):
        size = I if l == 0 else (2 if bidirectional else 1) * H
        out.append(tuple(CELLS[family](size, H, key=next(keys))
                         for _ in range(2 if bidirectional else 1)))
    return out


@given(data=st.data())
def test_matches_equinox_cells_under_scan_with_gradients(data):
    """Outputs, final states and every gradient (inputs, initial state, weights) of the layer
    built `from_eqx_cells` equal those of the cells looped with `lax.scan`."""
    family = data.draw(st.sampled_from(["lstm", "gru"]), "family")
    L = data.draw(st.sampled_from([1, 2]), "num_layers")
    bidir = data.draw(st.booleans(), "bidirectional")
    B, T = data.draw(st.sampled_from([1, 3]), "B"), data.draw(st.sampled_from([1, 4, 7]), "T")
    I, H = data.draw(st.sampled_from([2, 5]), "I"), data.draw(st.sampled_from([3, 6]), "H")
    lengths = np.array(data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B),
                                 "lengths"), np.int32)
    seed = data.draw(st.integers(0, 2 ** 16), "seed")
    D = 2 if bidir else 1
    cells = _cells(family, L, bidir, I, H, seed)
    model = CLASSES[family].from_eqx_cells(cells if bidir else [c[0] for c in cells],
                                           return_state=True)
    x = _normal(seed + 1, (B, T, I))
    n_states = 2 if family == "lstm" else 1
    state = tuple(_normal(seed + 2 + k, (L * D, B, H)) for k in range(n_states))
    cy = _normal(seed + 5, (B, T, D * H))
    cs = tuple(_normal(seed + 6 + k, (L * D, B, H)) for k in range(n_states))

    def loss_ours(model, x, state):
        y, s = model(x, lengths, state if family == "lstm" else state[0])
        s = s if family == "lstm" else (s,)
        return jnp.sum(y * cy) + sum(jnp.sum(a * b) for a, b in zip(s, cs)), (y, s)

    def loss_ref(cells, x, state):
        y, s = scan_cells(family, cells, x, jnp.asarray(lengths), state)
        return jnp.sum(y * cy) + sum(jnp.sum(a * b) for a, b in zip(s, cs)), (y, s)

    (_, (y, s)), g = eqx.filter_jit(eqx.filter_value_and_grad(
        lambda m, x, s: loss_ours(m, x, s), has_aux=True))(model, x, state)
    (_, (y_ref, s_ref)), g_ref = eqx.filter_jit(eqx.filter_value_and_grad(
        lambda c, x, s: loss_ref(c, x, s), has_aux=True))(cells, x, state)
    gx, gs = jax.grad(lambda x, s: loss_ours(model, x, s)[0], (0, 1))(x, state)
    gx_ref, gs_ref = jax.grad(lambda x, s: loss_ref(cells, x, s)[0], (0, 1))(x, state)
    close = lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4,
                                                    atol=1e-5)
    close(y, y_ref)
    for a, b in zip(s, s_ref, strict=True):
        close(a, b)
    close(gx, gx_ref)
    for a, b in zip(gs, gs_ref, strict=True):
        close(a, b)
    for l in range(L):
        for d, direction in enumerate(("forward", "reverse")[:D]):
            ours, ref = g.params[f"layer_{l}"][direction], g_ref[l][d]
            close(ours["W_ih"], ref.weight_ih)
            close(ours["W_hh"], ref.weight_hh)
            close(ours["b_ih"], ref.bias)  # b_ih enters as the cells' `bias` does
            if family == "lstm":  # bias = b_ih + b_hh
                close(ours["b_hh"], ref.bias)
            else:  # bias = b_ih + [b_hr, b_hz, 0]; bias_n = b_hn
                close(ours["b_hh"][:2 * H], ref.bias[:2 * H])
                close(ours["b_hh"][2 * H:], ref.bias_n)


@pytest.mark.parametrize("family", ["lstm", "gru"])
def test_cells_round_trip_and_equinox_gru_biases_are_folded_pytorch_biases(family):
    """`to_eqx_cells` gives cells computing the layer's function; Equinox's GRU biases are
    PyTorch's with b_hr and b_hz folded into `bias` and b_hn as `bias_n`; `from_eqx_cells`
    puts the cells' biases back as b_ih = bias, b_hh = [0, 0, bias_n] (LSTM: b_hh = 0)."""
    H = 4
    model = CLASSES[family](3, H, num_layers=2, bidirectional=True, key=jax.random.key(0))
    cells = model.to_eqx_cells()
    assert [type(c) for layer in cells for c in layer] == [CELLS[family]] * 4
    p = model.params["layer_1"]["reverse"]
    c = cells[1][1]
    if family == "gru":
        want_bias = np.asarray(p["b_ih"]) + np.r_[np.asarray(p["b_hh"])[:2 * H], np.zeros(H)]
        np.testing.assert_array_equal(np.asarray(c.bias_n), np.asarray(p["b_hh"])[2 * H:])
    else:
        want_bias = np.asarray(p["b_ih"]) + np.asarray(p["b_hh"])
    np.testing.assert_allclose(np.asarray(c.bias), want_bias, rtol=0, atol=0)
    again = CLASSES[family].from_eqx_cells(cells)
    back = again.params["layer_1"]["reverse"]
    np.testing.assert_array_equal(np.asarray(back["b_ih"]), np.asarray(c.bias))
    want_hh = np.zeros(len(want_bias), np.float32)
    if family == "gru":
        want_hh[2 * H:] = np.asarray(c.bias_n)
    np.testing.assert_array_equal(np.asarray(back["b_hh"]), want_hh)
    x = _normal(1, (2, 5, 3))
    np.testing.assert_allclose(np.asarray(again(x)), np.asarray(model(x)), rtol=1e-5, atol=1e-6)
    state = tuple(jnp.zeros((4, 2, H)) for _ in range(2 if family == "lstm" else 1))
    ref, _ = scan_cells(family, cells, x, jnp.array([5, 5]), state)
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(ref), rtol=1e-5, atol=1e-5)
    no_bias = CLASSES[family].from_eqx_cells(CELLS[family](3, H, use_bias=False,
                                                           key=jax.random.key(1)))
    assert not any(np.asarray(a).any() for a in (no_bias.params["layer_0"]["forward"]["b_ih"],
                                                 no_bias.params["layer_0"]["forward"]["b_hh"]))


def test_from_eqx_cells_errors_name_the_cells():
    lstm = eqx.nn.LSTMCell(3, 4, key=jax.random.key(0))
    with pytest.raises(TypeError, match=r"`cells` layer 0 forward must be an `eqx.nn.GRUCell`; "
                                        r"got LSTMCell"):
        preqx.GRU.from_eqx_cells([lstm])
    with pytest.raises(TypeError, match=r"`cells` must be an `eqx.nn.LSTMCell` or a non-empty"):
        preqx.LSTM.from_eqx_cells([])
    with pytest.raises(ValueError, match=r"alike for every layer; got \[2, 1\] cells per layer"):
        preqx.LSTM.from_eqx_cells([(lstm, lstm), lstm])
    second = eqx.nn.LSTMCell(5, 4, key=jax.random.key(1))  # layer 1 must read 4 features
    with pytest.raises(ValueError, match=r"`layer_1/forward/W_ih` must have shape \(16, 4\); "
                                         r"got \(16, 5\)"):
        preqx.LSTM.from_eqx_cells([lstm, second])


def test_equinox_gru_cell_equals_pytorch_gru_cell():
    """PyTorch's GRU weights, converted to Equinox's cell through the layer, give PyTorch's
    outputs when the cell is looped with `lax.scan`: the two formulas agree."""
    torch = pytest.importorskip("torch", reason="needs torch (CPU)")
    torch.manual_seed(0)
    mod = torch.nn.GRU(3, 5, batch_first=True)
    with torch.no_grad():
        for b in (mod.bias_ih_l0, mod.bias_hh_l0):  # PyTorch's small init: make biases matter
            b.normal_()
    x = _normal(2, (2, 6, 3))
    with torch.no_grad():
        want, h_n = mod(torch.tensor(np.asarray(x)))
    (cell,) = preqx.GRU.from_torch(mod.state_dict()).to_eqx_cells()
    y, s = scan_cells("gru", [(cell,)], x, jnp.array([6, 6]), (jnp.zeros((1, 2, 5)),))
    np.testing.assert_allclose(np.asarray(y), want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(s[0]), h_n.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("name, options", [("LSTM", dict(proj_size=2)), ("GRU", {}),
                                           ("SimpleRNN", dict(nonlinearity="relu"))])
def test_matches_pytorch_and_round_trips(name, options):
    torch = pytest.importorskip("torch", reason="needs torch (CPU)")
    torch.manual_seed(0)
    module = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "SimpleRNN": torch.nn.RNN}[name]
    mod = module(3, 5, 2, batch_first=True, bidirectional=True, **options)
    x = _normal(3, (4, 6, 3))
    with torch.no_grad():
        want = mod(torch.tensor(np.asarray(x)))[0].numpy()
    kw = {"nonlinearity": "relu"} if name == "SimpleRNN" else {}
    model = getattr(preqx, name).from_torch(mod.state_dict(), **kw)
    assert (model.input_size, model.hidden_size, model.num_layers, model.bidirectional) == \
        (3, 5, 2, True)
    assert getattr(model, "proj_size", 0) == options.get("proj_size", 0)
    np.testing.assert_allclose(np.asarray(model(x)), want, rtol=1e-5, atol=1e-5)
    sd = model.to_torch_state_dict()
    assert list(sd) == list(mod.state_dict())
    for k, v in mod.state_dict().items():
        np.testing.assert_array_equal(sd[k], v.numpy())
    if name == "LSTM":
        with pytest.raises(ValueError, match=r"`proj_size`=2: eqx.nn.LSTMCell has no projection"):
            model.to_eqx_cells()


@pytest.mark.parametrize("name", ["LSTM", "GRU", "SimpleRNN"])
def test_equals_the_flax_layer_on_the_same_parameter_tree(name):
    """One parameter tree: Linen's `params` set as the Equinox layer's `params` give the same
    outputs and states, leading batch dims, ragged lengths and an initial state included."""
    x = _normal(4, (2, 3, 5, 4))
    lengths = jnp.array([[5, 0, 2], [1, 5, 3]])
    layer = getattr(plinen, name)(hidden_size=6, num_layers=2, bidirectional=True)
    variables = layer.init(jax.random.key(0), x)
    model = getattr(preqx, name)(4, 6, num_layers=2, bidirectional=True, return_state=True,
                                 key=jax.random.key(1))
    model = eqx.tree_at(lambda m: m.params, model, variables["params"])
    h0 = _normal(5, (4, 2, 3, 6))
    state = (h0, _normal(6, (4, 2, 3, 6))) if name == "LSTM" else h0
    got = model(x, lengths, state)
    want = layer.apply(variables, x, lengths, state, return_carry=True)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_an_equinox_module_pytree_with_inference_mode_dropout_and_serialisation(tmp_path):
    model = preqx.LSTM(3, 8, num_layers=3, dropout=0.5, return_state=True,
                       key=jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)
    arrays = jax.tree.leaves(params)
    assert len(arrays) == 3 * 4 and all(isinstance(a, jax.Array) for a in arrays)
    assert jax.tree.leaves(model) == arrays + [False]  # and `inference`, as eqx.nn.Dropout's
    x = _normal(7, (2, 5, 3))
    y1 = model(x, key=jax.random.key(1))[0]
    assert not np.allclose(np.asarray(y1), np.asarray(model(x, key=jax.random.key(2))[0]))
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(model(x, key=jax.random.key(1))[0]))
    with pytest.raises(ValueError, match=r"`key` must be a PRNG key: dropout=0.5"):
        model(x)
    evaluating = eqx.nn.inference_mode(model)
    assert evaluating.inference is True and model.inference is False
    no_dropout = preqx.LSTM(3, 8, num_layers=3, return_state=True, key=jax.random.key(0))
    for a, b in zip(jax.tree.leaves(no_dropout.params), arrays, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same key's params
    want = no_dropout(x)[0]
    np.testing.assert_array_equal(np.asarray(evaluating(x)[0]), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(model(x, inference=True)[0]), np.asarray(want))
    training = eqx.nn.inference_mode(evaluating, value=False)
    with pytest.raises(ValueError, match="`key`"):
        training(x)
    with pytest.raises(ValueError, match="`key`"):
        evaluating(x, inference=False)
    path = tmp_path / "model.eqx"
    eqx.tree_serialise_leaves(path, evaluating)
    like = preqx.LSTM(3, 8, num_layers=3, dropout=0.5, return_state=True,
                      key=jax.random.key(9))
    loaded = eqx.tree_deserialise_leaves(path, like)
    assert loaded.inference is True
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(evaluating), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_natively_batched_vmap_over_unbatched_calls_and_a_continued_sequence():
    model = preqx.GRU(3, 6, num_layers=2, bidirectional=False, return_state=True,
                      key=jax.random.key(0))
    x = _normal(8, (4, 7, 3))
    lengths = jnp.array([7, 3, 0, 5])
    y, h = model(x, lengths)
    assert (y.shape, h.shape) == ((4, 7, 6), (2, 4, 6))
    y1, h1 = jax.vmap(lambda x, n: model(x, n))(x, lengths)  # unbatched calls under vmap
    np.testing.assert_allclose(np.asarray(y1), np.asarray(y), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(h1), np.asarray(jnp.swapaxes(h, 0, 1)), rtol=1e-6,
                               atol=1e-6)
    y0, h0 = model(x[0])  # one sequence: (T, I) -> (T, H), state (L, H)
    assert (y0.shape, h0.shape) == ((7, 6), (2, 6))
    np.testing.assert_allclose(np.asarray(y0), np.asarray(y[0]), rtol=1e-6, atol=1e-6)
    ya, ha = model(x[:, :4])  # a sequence in two calls, the state carried over
    yb, hb = model(x[:, 4:], state=ha)
    full_y, full_h = model(x)
    np.testing.assert_allclose(np.asarray(jnp.concatenate([ya, yb], 1)), np.asarray(full_y),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(hb), np.asarray(full_h), rtol=1e-5, atol=1e-6)


def test_bfloat16_compute_with_float32_params():
    model = preqx.LSTM(3, 8, dtype=jnp.bfloat16, return_state=True, key=jax.random.key(0))
    x = _normal(9, (2, 5, 3))
    y, (h, c) = model(x)
    assert (y.dtype, h.dtype, c.dtype) == (jnp.bfloat16, jnp.bfloat16, jnp.float32)
    want = preqx.LSTM(3, 8, key=jax.random.key(0))(x)  # float32: the same params
    np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(want), atol=3e-2)
    assert model.params["layer_0"]["forward"]["W_ih"].dtype == jnp.float32


def test_a_short_optax_training_run_lowers_the_loss():
    """A bidirectional two-layer LSTM and a linear head learn to tell, at every step, the sum
    of the sequence's inputs (a task that needs both directions)."""
    optax = pytest.importorskip("optax")

    class Model(eqx.Module):
        rnn: preqx.LSTM
        head: eqx.nn.Linear

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.rnn = preqx.LSTM(1, 16, num_layers=2, bidirectional=True, dropout=0.1,
                                  key=k1)
            self.head = eqx.nn.Linear(32, 1, key=k2)

        def __call__(self, x, lengths, *, key=None):
            return jax.vmap(jax.vmap(self.head))(self.rnn(x, lengths, key=key))[..., 0]

    data = np.random.default_rng(0)
    x = jnp.asarray(data.uniform(-1, 1, (32, 10, 1)), jnp.float32)
    lengths = jnp.asarray(data.integers(3, 11, 32))
    valid = jnp.arange(10)[None] < lengths[:, None]
    target = jnp.where(valid, jnp.sum(jnp.where(valid, x[..., 0], 0.0), axis=1, keepdims=True),
                       0.0)
    count = jnp.sum(valid).astype(jnp.float32)

    def loss(model, key):
        pred = model(x, lengths, key=key)
        return jnp.sum(jnp.where(valid, (pred - target) ** 2, 0.0)) / count

    model = Model(jax.random.key(0))
    tx = optax.adam(1e-2)
    opt_state = tx.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, opt_state, key):
        value, grads = eqx.filter_value_and_grad(loss)(model, key)
        updates, opt_state = tx.update(grads, opt_state, model)
        return eqx.apply_updates(model, updates), opt_state, value

    first = float(loss(eqx.nn.inference_mode(model), None))
    with jax.numpy_dtype_promotion("standard"):  # optax promotes implicitly
        for i in range(60):
            model, opt_state, _ = step(model, opt_state, jax.random.key(i))
    last = float(loss(eqx.nn.inference_mode(model), None))
    assert last < 0.2 * first, (first, last)


def test_import_portable_rnn_does_not_import_equinox_and_the_module_loads_lazily():
    code = """
import sys
import portable_rnn
assert "equinox" not in sys.modules and "equinox" in dir(portable_rnn)
print(portable_rnn.equinox.LSTM.__module__)
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.split()
    assert out == ["portable_rnn.equinox"]

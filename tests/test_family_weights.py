"""Converters of the whole family (LSTM, GRU, simple RNN) to and from Flax, Keras 3 and PyTorch.

Round trips are bit-identical; numerical equivalence is checked against the Flax cells
(``nn.RNN`` / ``nn.Bidirectional`` stacked by hand) and Keras layers on the JAX backend, with
weights moved both ways; every converter's errors name what was expected and what was given.
"""

import functools
import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import portable_rnn  # noqa: E402
from portable_rnn._src.recurrent import convert, layout  # noqa: E402
from portable_rnn._src.recurrent.families import family as _family  # noqa: E402

# Keras' Variable.__array__ lacks NumPy 2's `copy` keyword: `layer.get_weights()` warns. The
# conversions are the same on every platform: the tests run on the CPU.
pytestmark = [pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"),
    pytest.mark.cpu]

FAMILIES = ("lstm", "gru", "simple_rnn")
RUN = {"lstm": portable_rnn.lstm, "gru": portable_rnn.gru, "simple_rnn": portable_rnn.simple_rnn}
FLAX_CELL = {"lstm": nn.OptimizedLSTMCell, "gru": nn.GRUCell, "simple_rnn": nn.SimpleCell}
KERAS_LAYER = {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "SimpleRNN"}
ATOL = RTOL = 1e-5  # float32


def fn(family, what):
    return getattr(portable_rnn, f"{family}_weights_{what}")


def random_weights(family, I, H, L, bidir, seed):
    """Flat weights with every entry (biases included) random and of order 1."""
    n = layout.num_params(I, H, L, bidir, _family(family))
    return jnp.asarray(np.random.default_rng(seed).normal(size=n).astype(np.float32) * 0.5)


def one_bias(target, family, H):
    """Where `target` holds a gate's ``b_ih + b_hh`` as one bias: (side, rows), or None."""
    match target, family:
        case "keras", "gru":
            return None  # bias rows 0 and 1
        case "flax", "gru":
            return "ih", slice(0, 2 * H)  # r and z; n keeps b_in and b_hn
        case "flax", "lstm":
            return "hh", slice(None)
    return "ih", slice(None)


def canonical(w, family, target, I, H, L, bidir):
    """`w` with its biases where `target` keeps them (summed where it has one per gate)."""
    g = layout.unpack(w, I, H, L, bidir, _family(family), host=True)
    b_ih = [np.array(b) for b in g["b_ih"].values()]
    b_hh = [np.array(b) for b in g["b_hh"].values()]
    if (where := one_bias(target, family, H)) is not None:
        side, rows = where
        for p in range(len(b_ih)):
            total = b_ih[p][rows] + b_hh[p][rows]
            b_ih[p][rows], b_hh[p][rows] = (total, 0) if side == "ih" else (0, total)
    return layout.pack(dict(g, b_ih=b_ih, b_hh=b_hh), I, H, L, bidir, _family(family))


def random_like(tree, seed):
    """`tree` (arrays or ShapeDtypeStructs) with every leaf drawn from N(0, 1/4)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape) * 0.5, a.dtype), tree)


def assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def run_ours(family, x, w, I, H, L, bidir):
    """(y, h_n, c_n or None) of portable_rnn's function from zero states."""
    h0 = jnp.zeros((L * (2 if bidir else 1), x.shape[0], H), x.dtype)
    if family == "lstm":
        return RUN[family](x, h0, h0, w, None, I, H, L, 0.0, bidir)
    return (*RUN[family](x, h0, w, None, I, H, L, 0.0, bidir), None)


def assert_close(got, want):
    for g, e in zip(got, want):
        if e is not None:
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), atol=ATOL, rtol=RTOL)


# --- round trips ----------------------------------------------------------------------------------

CONFIGS = [(family, L, bidir) for family in FAMILIES for L in (1, 2) for bidir in (False, True)]


@pytest.mark.parametrize("target", ["flax", "keras"])
@pytest.mark.parametrize("family, L, bidir", CONFIGS)
def test_round_trips_are_bit_identical(target, family, L, bidir):
    I, H = 3, 4
    w = random_weights(family, I, H, L, bidir, seed=L + 2 * bidir)
    to, back = fn(family, f"to_{target}"), fn(family, f"from_{target}")
    foreign = to(w, I, H, L, bidir)
    assert len(foreign) == L
    flat = back(foreign)
    # flat -> foreign -> flat moves biases only where the target has one per gate (summed)
    np.testing.assert_array_equal(np.asarray(flat),
                                  np.asarray(canonical(w, family, target, I, H, L, bidir)))
    # and is the identity on weights that came from the target (no bias to move)
    np.testing.assert_array_equal(np.asarray(back(to(flat, I, H, L, bidir))), np.asarray(flat))
    assert_trees_equal(to(flat, I, H, L, bidir), foreign)  # foreign -> flat -> foreign
    if target == "keras" and family == "gru":  # Keras keeps both GRU biases: always exact
        np.testing.assert_array_equal(np.asarray(flat), np.asarray(w))


@pytest.mark.parametrize("family", FAMILIES)
def test_flax_trees_are_the_cells_own(family):
    """`*_to_flax` gives the tree Flax's own init gives (names, nesting, shapes)."""
    I, H = 3, 4
    x = jax.ShapeDtypeStruct((1, 2, I), jnp.float32)
    cell = FLAX_CELL[family]
    uni = jax.eval_shape(nn.RNN(cell(H)).init, jax.random.key(0), x)
    bi = jax.eval_shape(nn.Bidirectional(nn.RNN(cell(H)), nn.RNN(cell(H))).init,
                        jax.random.key(0), x)
    w = random_weights(family, I, H, 1, False, 0)
    wb = random_weights(family, I, H, 1, True, 0)
    shapes = lambda t: jax.tree.map(np.shape, t)  # noqa: E731
    assert shapes(fn(family, "to_flax")(w, I, H, 1, False)[0]) == shapes(uni)
    assert shapes(fn(family, "to_flax")(wb, I, H, 1, True)[0]) == shapes(bi)


def test_flax_layout_keeps_its_signature():
    """`convert.flax_layout(params, family)`: per-pseudo-layer lists and the five sizes."""
    I, H = 2, 3
    w = random_weights("gru", I, H, 2, True, 0)
    groups, sizes = convert.flax_layout(portable_rnn.gru_weights_to_flax(w, I, H, 2, True),
                                           _family("gru"))
    assert sizes == (I, H, 2, True, 0)
    assert sorted(groups) == ["W_hh", "W_ih", "b_hh", "b_ih"]
    assert all(isinstance(g, list) and len(g) == 4 for g in groups.values())
    assert groups["W_ih"][2].shape == (3 * H, 2 * H)
    b_hh = np.asarray(groups["b_hh"][0])
    assert not b_hh[:2 * H].any() and b_hh[2 * H:].any()  # Flax has b_hn, not b_hr / b_hz


def test_keras_gate_orders():
    """Keras' kernel blocks: LSTM i, f, c, o (ours i, f, g, o); GRU z, r, h (ours r, z, n)."""
    I, H = 2, 3
    for family, order in (("lstm", (0, 1, 2, 3)), ("gru", (1, 0, 2)), ("simple_rnn", (0,))):
        w = random_weights(family, I, H, 1, False, 1)
        g = layout.unpack(w, I, H, 1, False, _family(family), host=True)
        kernel, recurrent, bias = fn(family, "to_keras")(w, I, H, 1, False)[0]
        for k, ours in enumerate(order):
            rows = slice(ours * H, (ours + 1) * H)
            cols = slice(k * H, (k + 1) * H)
            np.testing.assert_array_equal(kernel[:, cols], np.asarray(g["W_ih"][0][rows]).T)
            np.testing.assert_array_equal(recurrent[:, cols], np.asarray(g["W_hh"][0][rows]).T)
            if family == "gru":
                np.testing.assert_array_equal(bias[0, cols], np.asarray(g["b_ih"][0][rows]))
                np.testing.assert_array_equal(bias[1, cols], np.asarray(g["b_hh"][0][rows]))


@pytest.mark.parametrize("family", FAMILIES)
def test_keras_without_bias(family):
    """A use_bias=False list (here a Bidirectional's) reads as zero biases, and goes back."""
    I, H = 2, 3
    w = random_weights(family, I, H, 1, True, 2)
    (full,) = fn(family, "to_keras")(w, I, H, 1, True)
    kernels = [full[0], full[1], full[3], full[4]]
    w0 = fn(family, "from_keras")(kernels)
    g, g_full = (layout.unpack(v, I, H, 1, True, _family(family), host=True) for v in (w0, w))
    for p in (0, 1):
        assert not np.asarray(g["b_ih"][p]).any() and not np.asarray(g["b_hh"][p]).any()
        for n in ("W_ih", "W_hh"):
            np.testing.assert_array_equal(np.asarray(g[n][p]), np.asarray(g_full[n][p]))
    assert_trees_equal(fn(family, "to_keras")(w0, I, H, 1, True, use_bias=False), [kernels])


# --- numerical equivalence: Flax ------------------------------------------------------------------

@st.composite
def configs(draw, max_layers=2):
    """A family and small shapes: B <= 3, T <= 6, I, H <= 5, L <= 2, bidirectional or not."""
    return dict(family=draw(st.sampled_from(FAMILIES)), B=draw(st.integers(1, 3)),
                T=draw(st.integers(1, 6)), I=draw(st.integers(1, 5)), H=draw(st.integers(1, 5)),
                L=draw(st.integers(1, max_layers)), bidir=draw(st.booleans()),
                seed=draw(st.integers(0, 2**16)))


# Every family runs at least once whatever hypothesis draws (stacked and bidirectional).
EXAMPLES = [dict(family=f, B=2, T=4, I=3, H=2, L=2, bidir=True, seed=k)
            for k, f in enumerate(FAMILIES)]


def with_examples(**overrides):
    def decorate(test):
        for cfg in EXAMPLES:
            test = example(cfg=dict(cfg, **overrides))(test)
        return test
    return decorate


def flax_layer(family, H, bidir):
    cell = FLAX_CELL[family]
    if bidir:
        return nn.Bidirectional(nn.RNN(cell(H)), nn.RNN(cell(H)), return_carry=True)
    return nn.RNN(cell(H), return_carry=True)


@functools.cache
def flax_runner(family, H, bidir):
    """Flax layers stacked by hand, jitted: (trees, x) -> (y, h_n, c_n or None), states in our
    (L*D, B, H) order."""
    layer = flax_layer(family, H, bidir)

    @jax.jit
    def run(trees, x):
        carries = []
        for tree in trees:
            carry, x = layer.apply(tree, x)
            carries += list(carry) if bidir else [carry]
        if family == "lstm":  # Flax's LSTM carry is (c, h)
            return x, jnp.stack([h for _, h in carries]), jnp.stack([c for c, _ in carries])
        return x, jnp.stack(carries), None
    return run


def run_flax(family, trees, x, H, bidir):
    return flax_runner(family, H, bidir)(trees, x)


@with_examples()
@given(cfg=configs())
def test_matches_flax_cells(cfg):
    family, B, T, I, H, L, bidir, seed = (cfg[k] for k in ("family", "B", "T", "I", "H", "L",
                                                          "bidir", "seed"))
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(B, T, I)), jnp.float32)
    # Flax -> ours: trees of Flax's own structure, every parameter (biases too) random
    trees = []
    for layer in range(L):
        inp = jax.ShapeDtypeStruct((B, T, I if layer == 0 else H * (2 if bidir else 1)),
                                   jnp.float32)
        tree = jax.eval_shape(flax_layer(family, H, bidir).init, jax.random.key(0), inp)
        trees.append(random_like(tree, seed + layer))
    w = fn(family, "from_flax")(trees)
    assert_close(run_ours(family, x, w, I, H, L, bidir), run_flax(family, trees, x, H, bidir))
    # ours -> Flax: every bias of ours random; b_hr / b_hz (GRU) and b_ih + b_hh are summed
    w = random_weights(family, I, H, L, bidir, seed)
    assert_close(run_ours(family, x, w, I, H, L, bidir),
                 run_flax(family, fn(family, "to_flax")(w, I, H, L, bidir), x, H, bidir))


def test_flax_bidirectional_with_one_shared_cell():
    """Flax stores a shared cell once, under forward_rnn (and writes backward_rnn whenever the
    directions have cells of their own): such a tree reads as shared, and `shared_cell` states
    which it must be."""
    B, T, I, H = 2, 4, 3, 5
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    cell = nn.GRUCell(H)
    rnn = nn.RNN(cell, return_carry=True)
    same_rnn = nn.Bidirectional(rnn, rnn, return_carry=True)
    same_cell = nn.Bidirectional(rnn, nn.RNN(cell, return_carry=True), return_carry=True)
    params = jax.eval_shape(same_rnn.init, jax.random.key(1), x)
    assert jax.tree.map(np.shape, params) == jax.tree.map(
        np.shape, jax.eval_shape(same_cell.init, jax.random.key(1), x))
    assert sorted(params["params"]) == ["forward_rnn"]
    params = random_like(params, seed=0)
    with pytest.raises(ValueError, match=r"without 'backward_rnn'.*`shared_cell=False`"):
        portable_rnn.gru_weights_from_flax(params, shared_cell=False)
    w = portable_rnn.gru_weights_from_flax(params)
    np.testing.assert_array_equal(w, portable_rnn.gru_weights_from_flax(params, shared_cell=True))
    (h_f, h_b), y = jax.jit(same_rnn.apply)(params, x)
    assert_close(run_ours("gru", x, w, I, H, 1, True), (y, jnp.stack([h_f, h_b]), None))
    two = random_like(jax.eval_shape(nn.Bidirectional(nn.RNN(nn.GRUCell(H)),
                                                      nn.RNN(nn.GRUCell(H))).init,
                                     jax.random.key(1), x), seed=1)
    with pytest.raises(ValueError, match=r"with a 'backward_rnn'.*`shared_cell=True` says"):
        portable_rnn.gru_weights_from_flax(two, shared_cell=True)
    w2 = portable_rnn.gru_weights_from_flax(two)
    np.testing.assert_array_equal(w2, portable_rnn.gru_weights_from_flax(two, shared_cell=False))


# --- numerical equivalence: Keras 3 on the JAX backend --------------------------------------------

def keras_or_skip():
    keras = pytest.importorskip("keras", reason="needs keras>=3 (the test extra)")
    if keras.backend.backend() != "jax":
        pytest.skip(f"keras was imported with the {keras.backend.backend()} backend")
    return keras


def keras_layer(family, H, bidir, input_shape):
    """A built Keras layer (return_sequences, return_state), Bidirectional when `bidir`."""
    keras = keras_or_skip()
    # zeros: cheaper to build than the default initialisers; the tests set every weight
    layer = getattr(keras.layers, KERAS_LAYER[family])(
        H, return_sequences=True, return_state=True, kernel_initializer="zeros",
        recurrent_initializer="zeros")
    layer = keras.layers.Bidirectional(layer) if bidir else layer
    layer.build(input_shape)
    return layer


def keras_runner(family, layer, bidir):
    """The layer's stateless call, jitted: x -> (y, h_n, c_n or None), states in our order.
    Reads the layer's variables at each call (after `set_weights`)."""
    per_direction = 2 if family == "lstm" else 1  # LSTM states: h, c

    @jax.jit
    def run(trainable, non_trainable, x):
        out, _ = layer.stateless_call(trainable, non_trainable, x)
        y, states = out[0], out[1:]
        hs = [states[d * per_direction] for d in range(2 if bidir else 1)]
        if family != "lstm":
            return y, jnp.stack(hs), None
        return y, jnp.stack(hs), jnp.stack([states[d * 2 + 1] for d in range(2 if bidir else 1)])

    def call(x):
        return run([v.value for v in layer.trainable_variables],
                   [v.value for v in layer.non_trainable_variables], x)
    return call


@with_examples(L=1)
@given(cfg=configs(max_layers=1))
def test_matches_keras_layers(cfg):
    """One Keras layer, or a Bidirectional one; weights moved both ways through set_weights."""
    family, B, T, I, H, bidir, seed = (cfg[k] for k in ("family", "B", "T", "I", "H", "bidir",
                                                       "seed"))
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(B, T, I)), jnp.float32)
    layer = keras_layer(family, H, bidir, (B, T, I))
    run = keras_runner(family, layer, bidir)
    # Keras -> ours: every weight random
    layer.set_weights([rng.normal(size=a.shape).astype(np.float32) * 0.5
                       for a in layer.get_weights()])
    w = fn(family, "from_keras")(layer.get_weights())
    assert_close(run_ours(family, x, w, I, H, 1, bidir), run(x))
    for other in ([layer.get_weights()], layer.weights):  # stacked form; Keras variables
        np.testing.assert_array_equal(np.asarray(fn(family, "from_keras")(other)), np.asarray(w))
    # ours -> Keras
    w = random_weights(family, I, H, 1, bidir, seed)
    (arrays,) = fn(family, "to_keras")(w, I, H, 1, bidir)
    layer.set_weights(arrays)
    assert_close(run_ours(family, x, w, I, H, 1, bidir), run(x))


def test_keras_gru_reset_after_false_points_to_the_classic_gru():
    keras = keras_or_skip()
    layer = keras.layers.GRU(4, reset_after=False)
    layer.build((1, 2, 3))
    with pytest.raises(ValueError, match=r"layer 0 bias has shape \(3\*H,\)=\(12,\): a Keras GRU "
                                         r"with reset_after=False, .* convert it with "
                                         r"classic_gru_weights_from_keras"):
        portable_rnn.gru_weights_from_keras(layer.get_weights())


# --- PyTorch state_dicts --------------------------------------------------------------------------

@pytest.mark.parametrize("module, family, extra", [
    ("GRU", "gru", {}), ("RNN", "simple_rnn", {}), ("RNN", "simple_rnn", {"bias": False}),
    ("LSTM", "lstm", {"proj_size": 2})])
def test_torch_state_dict_round_trips(module, family, extra):
    torch = pytest.importorskip("torch", reason="needs torch (CPU)")
    I, H, L = 3, 4, 2
    for bidir in (False, True):
        torch.manual_seed(0)
        mod = getattr(torch.nn, module)(I, H, L, bidirectional=bidir, batch_first=True, **extra)
        sd = mod.state_dict()
        w = fn(family, "from_torch")(sd)
        kwargs = {"proj_size": extra["proj_size"]} if "proj_size" in extra else {}
        back = fn(family, "to_torch")(w, I, H, L, bidir, **kwargs)
        if extra.get("bias") is False:  # zeros come back for the missing biases
            assert all(not back.pop(k).any() for k in list(back) if k.startswith("bias"))
        assert sorted(back) == sorted(sd)
        for k, v in sd.items():
            np.testing.assert_array_equal(back[k], v.numpy())


@pytest.mark.parametrize("family, proj_size", [("lstm", 0), ("lstm", 2), ("gru", 0),
                                               ("simple_rnn", 0)])
@pytest.mark.parametrize("bidir", [False, True])
def test_numpy_results_are_writable(family, proj_size, bidir):
    """`torch.from_numpy` warns on a read-only array (`np.asarray` of a JAX array is one), once
    per process: the flag is checked too."""
    torch = pytest.importorskip("torch", reason="needs torch (CPU)")
    from flax import nnx

    from portable_rnn import linen as plinen
    from portable_rnn import nnx as pnnx
    I, H, L = 3, 4, 2
    w = random_weights(family, I, H, L, bidir, 0) if not proj_size else \
        portable_rnn.init_lstm_weight(jax.random.key(0), I, H, L, bidir, proj_size=proj_size)
    kw = {"proj_size": proj_size} if proj_size else {}
    layer = getattr(plinen, KERAS_LAYER[family])(H, num_layers=L, bidirectional=bidir, **kw)
    model = getattr(pnnx, KERAS_LAYER[family])(I, H, num_layers=L, bidirectional=bidir,
                                               rngs=nnx.Rngs(0), **kw)
    results = [fn(family, "to_torch")(w, I, H, L, bidir, **kw),
               layer.variables_to_torch(layer.init(jax.random.key(0), jnp.zeros((1, 2, I)))),
               model.to_torch_state_dict()]
    if not proj_size:
        results.append(fn(family, "to_keras")(w, I, H, L, bidir))
    arrays = [a for r in results for a in jax.tree.leaves(r)]
    assert all(isinstance(a, np.ndarray) and a.flags.writeable for a in arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for a in arrays:
            torch.from_numpy(a)


def test_torch_gru_through_flax_and_keras():
    """nn.GRU's weights, moved to Flax's GRUCell and Keras' GRU, give nn.GRU's outputs."""
    torch = pytest.importorskip("torch", reason="needs torch (CPU)")
    B, T, I, H = 2, 5, 3, 4
    torch.manual_seed(0)
    mod = torch.nn.GRU(I, H, batch_first=True, bidirectional=True)
    x = np.random.default_rng(0).normal(size=(B, T, I)).astype(np.float32)
    with torch.no_grad():
        y, h = (t.numpy() for t in mod(torch.from_numpy(x)))
    w = portable_rnn.gru_weights_from_torch(mod.state_dict())
    want = (y, h, None)
    assert_close(run_flax("gru", portable_rnn.gru_weights_to_flax(w, I, H, 1, True),
                          jnp.asarray(x), H, True), want)
    layer = keras_layer("gru", H, True, x.shape)
    layer.set_weights(portable_rnn.gru_weights_to_keras(w, I, H, 1, True)[0])
    assert_close(keras_runner("gru", layer, True)(jnp.asarray(x)), want)


def test_projection_has_no_flax_or_keras_counterpart():
    w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 1, False, proj_size=2)
    for to in (portable_rnn.lstm_weights_to_flax, portable_rnn.lstm_weights_to_keras):
        target = "Flax" if to is portable_rnn.lstm_weights_to_flax else "Keras"
        with pytest.raises(ValueError, match=rf"`W_hr` \(proj_size=2\) cannot be represented in "
                                             rf"{target}: .* no projection"):
            to(w, 3, 4, 1, False, proj_size=2)


# --- bad input: every converter names what it expected and what it got --------------------------

BI, BH = 3, 4  # sizes of the bad-input cases


def flax_tree(family, bidir=False):
    """A fresh, valid one-layer Flax tree (plain dicts, safe to mutate)."""
    return fn(family, "to_flax")(random_weights(family, BI, BH, 1, bidir, 0), BI, BH, 1, bidir)[0]


def keras_list(family, bidir=False):
    return fn(family, "to_keras")(random_weights(family, BI, BH, 1, bidir, 0), BI, BH, 1, bidir)[0]


def cell_of(tree):
    return tree["params"]["cell"]


def with_(tree, edit):
    edit(tree)
    return tree


BAD = {
    # Flax trees
    "gru_from_lstm_tree": (
        "gru_weights_from_flax", lambda: dict(params=flax_tree("lstm")), ValueError,
        r"`params` layer 0 is not a GRUCell parameter tree: missing \['ir', 'hr', .*\]; got keys "
        r"\['hf', .*\] \(it looks like an LSTMCell/OptimizedLSTMCell: use lstm_weights_from_flax"),
    "simple_from_gru_tree": (
        "simple_rnn_weights_from_flax", lambda: dict(params=[flax_tree("gru")]), ValueError,
        r"not a SimpleCell parameter tree: missing \['i', 'h'\]; got keys \['hn', .*\] \(it "
        r"looks like a GRUCell: use gru_weights_from_flax\)"),
    "lstm_from_simple_tree": (
        "lstm_weights_from_flax", lambda: dict(params=cell_of(flax_tree("simple_rnn"))),
        ValueError, r"not an LSTMCell/OptimizedLSTMCell parameter tree: missing \['ii', .*\]; "
                    r"got keys \['h', 'i'\] \(it looks like a SimpleCell"),
    "gru_missing_bias": (
        "gru_weights_from_flax",
        lambda: dict(params=with_(flax_tree("gru"), lambda t: cell_of(t)["hn"].pop("bias"))),
        ValueError, r"not a GRUCell parameter tree: missing \['hn/bias'\]"),
    "gru_extra_bias": (
        "gru_weights_from_flax",
        lambda: dict(params=with_(flax_tree("gru"), lambda t: cell_of(t)["hr"].update(
            bias=np.zeros(BH, np.float32)))),
        ValueError, r"\['hr'\] have a bias, which Flax's GRUCell does not have \(its \['hn', 'in', "
                    r"'ir', 'iz'\] do\)"),
    "gru_kernel_shape": (
        "gru_weights_from_flax",
        lambda: dict(params=with_(flax_tree("gru"), lambda t: cell_of(t)["hz"].update(
            kernel=np.zeros((BH, BH + 1), np.float32)))),
        ValueError, r"hz/kernel must have shape \(4, 4\) \(\(H, H\), from ir/kernel and "
                    r"hr/kernel\); got \(4, 5\)"),
    "simple_bias_shape": (
        "simple_rnn_weights_from_flax",
        lambda: dict(params=with_(flax_tree("simple_rnn"), lambda t: cell_of(t)["i"].update(
            bias=np.zeros(BH + 1, np.float32)))),
        ValueError, r"`params` layer 0: i/bias must have shape \(H,\)=\(4,\); got \(5,\)"),
    "flax_not_a_dict": (
        "gru_weights_from_flax", lambda: dict(params=3), TypeError,
        r"`params` must be a Flax parameter dict or a list of them \(one per layer\); got int"),
    "flax_cell_not_a_dict": (
        "simple_rnn_weights_from_flax", lambda: dict(params={"params": {"cell": 3}}), TypeError,
        r"`params` layer 0 must be a Flax parameter dict; got int"),
    "flax_empty": (
        "simple_rnn_weights_from_flax", lambda: dict(params=[]), ValueError,
        r"`params` must hold at least one layer; got an empty sequence"),
    "flax_no_forward": (
        "gru_weights_from_flax",
        lambda: dict(params={"params": {"backward_rnn": flax_tree("gru")["params"]}},
                     shared_cell=True),
        ValueError, r"layer 0 is an nn.Bidirectional tree without 'forward_rnn'; got keys "
                    r"\['backward_rnn'\]"),
    "flax_no_backward": (
        "lstm_weights_from_flax",
        lambda: dict(params={"params": {"forward_rnn": flax_tree("lstm")["params"]}},
                     shared_cell=False),
        ValueError, r"layer 0 is an nn.Bidirectional tree without 'backward_rnn'; got keys "
                    r"\['forward_rnn'\]\. Flax stores .* unless `shared_cell=False` is right"),
    "flax_shared_cell_not_bool": (
        "gru_weights_from_flax", lambda: dict(params=flax_tree("gru"), shared_cell="yes"),
        TypeError, r"`shared_cell` must be a Python bool; got 'yes'"),
    "flax_mixed_directions": (
        "gru_weights_from_flax", lambda: dict(params=[flax_tree("gru", True), flax_tree("gru")]),
        ValueError, r"`params` mixes bidirectional and unidirectional layers: layer 1 has 1 "
                    r"direction\(s\), layer 0 has 2"),
    "to_flax_length": (
        "gru_weights_to_flax", lambda: dict(weights=jnp.zeros(7), input_size=BI,
                                            hidden_size=BH, num_layers=1, bidirectional=False),
        ValueError, r"`weights` must have shape \(get_num_params_in_gru\(\.\.\.\),\)=\(108,\) for "
                    r"input_size=3, hidden_size=4, num_layers=1, bidirectional=False; got \(7,\)"),
    "to_flax_size": (
        "simple_rnn_weights_to_flax", lambda: dict(weights=jnp.zeros(7), input_size=BI,
                                                   hidden_size=0, num_layers=1,
                                                   bidirectional=False),
        ValueError, r"`hidden_size` must be an integer >= 1; got 0"),
    "to_flax_projection": (
        "lstm_weights_to_flax", lambda: dict(weights=jnp.zeros(7), input_size=BI,
                                             hidden_size=BH, num_layers=1, bidirectional=False,
                                             proj_size=2),
        ValueError, r"`W_hr` \(proj_size=2\) cannot be represented in Flax: its "
                    r"LSTMCell/OptimizedLSTMCell has no projection"),
    # Keras lists
    "lstm_from_gru_list": (
        "lstm_weights_from_keras", lambda: dict(keras_weights=keras_list("gru")), ValueError,
        r"`keras_weights` layer 0 recurrent_kernel must have shape \(H, 4\*H\) for a Keras LSTM; "
        r"got \(4, 12\) \(it looks like a Keras GRU: use gru_weights_from_keras "
        r"\(reset_after=True\) or classic_gru_weights_from_keras \(reset_after=False\)\)"),
    "keras_count": (
        "gru_weights_from_keras", lambda: dict(keras_weights=keras_list("gru", True)[:5]),
        ValueError, r"layer 0 must hold a Keras GRU layer's weights \[kernel \(I, 3\*H\), "
                    r"recurrent_kernel \(H, 3\*H\), bias \(2, 3\*H\)\] .* got 5 arrays of shapes "
                    r"\[\(3, 12\), \(4, 12\), \(2, 12\), \(3, 12\), \(4, 12\)\]"),
    "keras_reset_after_false": (
        "gru_weights_from_keras",
        lambda: dict(keras_weights=keras_list("gru")[:2] + [np.zeros(12, np.float32)]),
        ValueError, r"layer 0 bias has shape \(3\*H,\)=\(12,\): a Keras GRU with "
                    r"reset_after=False, .* convert it with classic_gru_weights_from_keras"),
    "keras_reset_after_true_for_the_classic_gru": (
        "classic_gru_weights_from_keras", lambda: dict(keras_weights=keras_list("gru")),
        ValueError, r"layer 0 bias has shape \(2, 3\*H\)=\(2, 12\): a Keras GRU with "
                    r"reset_after=True, .* convert it with gru_weights_from_keras and run it "
                    r"with gru\."),
    "keras_string": (
        "simple_rnn_weights_from_keras", lambda: dict(keras_weights="kernel"), TypeError,
        r"`keras_weights` must be a list of arrays \(a Keras SimpleRNN layer's `get_weights\(\)`\)"
        r" or a list of such lists \(one per layer\); got str"),
    "keras_dict": (
        "simple_rnn_weights_from_keras", lambda: dict(keras_weights={"kernel": np.zeros(3)}),
        TypeError, r"`keras_weights` must be a list of arrays .* got dict"),
    "keras_empty": (
        "lstm_weights_from_keras", lambda: dict(keras_weights=[]), ValueError,
        r"`keras_weights` must hold at least one layer's weights; got an empty list"),
    "keras_mixed": (
        "lstm_weights_from_keras", lambda: dict(keras_weights=[np.zeros((3, 16)), [np.zeros(3)]]),
        TypeError, r"a list of arrays \(one layer\) or a list of lists of arrays \(one per "
                   r"layer\); got a list of \['list', 'ndarray'\]"),
    "keras_not_arrays": (
        "lstm_weights_from_keras", lambda: dict(keras_weights=[[1, 2, 3]]), TypeError,
        r"`keras_weights` layer 0 must be a list of arrays; got a list of \['int'\]"),
    "keras_stacked_rows": (
        "gru_weights_from_keras", lambda: dict(keras_weights=[keras_list("gru")] * 2), ValueError,
        r"`keras_weights` layer 1 kernel must have shape \(4, 12\) \(rows: num_directions \* "
        r"hidden_size\); got \(3, 12\)"),
    "keras_bias_shape": (
        "lstm_weights_from_keras",
        lambda: dict(keras_weights=keras_list("lstm")[:2] + [np.zeros(15, np.float32)]),
        ValueError, r"layer 0 bias must have shape \(16,\) for a Keras LSTM \(H=4 from "
                    r"recurrent_kernel\); got \(15,\)"),
    "keras_kernel_columns": (
        "lstm_weights_from_keras",
        lambda: dict(keras_weights=[np.zeros((3, 10), np.float32)] + keras_list("lstm")[1:]),
        ValueError, r"layer 0 kernel must have shape \(I, 4\*H\)=\(I, 16\) \(H=4 from "
                    r"recurrent_kernel\); got \(3, 10\)"),
    "keras_mixed_directions": (
        "simple_rnn_weights_from_keras",
        lambda: dict(keras_weights=[keras_list("simple_rnn", True), keras_list("simple_rnn")]),
        ValueError, r"`keras_weights` mixes bidirectional and unidirectional layers: layer 1 has "
                    r"1 direction\(s\), layer 0 has 2"),
    "to_keras_bias_dropped": (
        "simple_rnn_weights_to_keras",
        lambda: dict(weights=random_weights("simple_rnn", BI, BH, 1, True, 0), input_size=BI,
                     hidden_size=BH, num_layers=1, bidirectional=True, use_bias=False),
        ValueError, r"`use_bias`=False, but `b_ih\[0\]` \(layer 0, forward\) is not zero \(max "
                    r"\|b_ih\[0\]\| = .*\): a Keras layer with use_bias=False has no bias"),
    "to_keras_use_bias_type": (
        "lstm_weights_to_keras",
        lambda: dict(weights=random_weights("lstm", BI, BH, 1, False, 0), input_size=BI,
                     hidden_size=BH, num_layers=1, bidirectional=False, use_bias="no"),
        TypeError, r"`use_bias` must be a bool; got 'no'"),
    "to_keras_length": (
        "gru_weights_to_keras", lambda: dict(weights=jnp.zeros(7), input_size=BI,
                                             hidden_size=BH, num_layers=2, bidirectional=True),
        ValueError, r"`weights` must have shape \(get_num_params_in_gru\(\.\.\.\),\)=\(\d+,\) for "
                    r"input_size=3, hidden_size=4, num_layers=2, bidirectional=True; got \(7,\)"),
}


def test_bad_input_covers_every_converter():
    names = {f"{family}_weights_{way}_{target}" for family in FAMILIES
             for way in ("from", "to") for target in ("flax", "keras")}
    assert names <= {name for name, *_ in BAD.values()}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_expected_and_got(case):
    name, kwargs, exc, pattern = BAD[case]
    with pytest.raises(exc, match=pattern):
        getattr(portable_rnn, name)(**kwargs())

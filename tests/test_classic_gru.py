"""The classic GRU (Keras' ``GRU(reset_after=False)``): the op against a float64 loop written
here from the published equations and against Keras' own layer; its layers, converters and
routing decisions.

The loop (`loop`) shares no code with the package: Keras' equations, gates z, r, h, the reset
gate applied to ``h`` before the candidate's recurrent product, with the rounding of a 16-bit
computation placed where docs/semantics.md places it ("Dtypes").
"""

import os

import draws

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import portable_rnn  # noqa: E402
import references  # noqa: E402
from jaxpr_helpers import binds  # noqa: E402
from portable_rnn._src.recurrent.routes.pallas import route as pallas  # noqa: E402
from references import assert_ulps, round_gradient, round_to  # noqa: E402

# Keras' Variable.__array__ lacks NumPy 2's `copy` keyword: `layer.get_weights()` warns.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")

GPU = portable_rnn.Capabilities("gpu", 91300, (9, 0), "NVIDIA H100")
TPU = portable_rnn.Capabilities("tpu", None, None, "TPU v5 lite")
CPU = portable_rnn.Capabilities("cpu")


# --- the reference -----------------------------------------------------------------------------

def _sigmoid(v, xp):
    return 1.0 / (1.0 + xp.exp(-v))


def loop(x, h0, w, lengths, I, H, L, bidir, *, xp=np, dtype=None, rmask=None, dropout=None,
         gradient_dtype=None):
    """Keras' ``GRU(reset_after=False)`` step by step, every sequence of the batch together; a
    step at or past a sequence's length keeps its state. `w`: the flat weights, read in the
    documented layout (per pseudo-layer W_ih (3H, in), W_hh (3H, H), then every b_ih, b_hh;
    gates z, r, h). Returns (y (B, T, D*H) zero past each length, h_n (L*D, B, H)).

    `rmask` (L*D, K, B, H): recurrent dropout, gate block g's product reads ``v * rmask[p, g]``
    (``rmask[p, 0]`` when K = 1), where v is ``h`` for z and r and ``r * h`` for the candidate
    (Keras' ``r * (h * mask)``). `dropout` ``(keep, rate)``: layer l's output times
    ``keep[l] / (1 - rate)`` before layer l + 1. `dtype`: a 16-bit compute dtype, rounding the
    weight matrices, every product's operands and the outputs to it and the biases and the
    state to float32. `gradient_dtype` (xp=jax.numpy): the gradient of every product's output,
    of each layer's output and of the next layer's input rounded to it on the way back, as a
    bfloat16 backward does."""
    D = 2 if bidir else 1
    op = (lambda a: a) if dtype is None else (lambda a: round_to(a, dtype, xp))
    keep = (lambda a: a) if dtype is None else (lambda a: round_to(a, np.float32, xp))
    prod = (lambda a: a) if gradient_dtype is None else (
        lambda a: round_gradient(a, gradient_dtype))
    layers = references.flat_layers(w, 3, I, H, L, bidir)
    mats = [(op(W_ih), op(W_hh)) for W_ih, W_hh, _, _ in layers]
    biases = [keep(b_ih) + keep(b_hh) for _, _, b_ih, b_hh in layers]
    lengths = np.asarray(lengths)
    T = x.shape[1]
    inp, finals = op(x), []
    for layer in range(L):
        outs = []
        for d in range(D):
            p = layer * D + d
            (W_ih, W_hh), b = mats[p], biases[p]
            m = None if rmask is None else rmask[p]

            def masked(v, g, m=m):
                return v if m is None else v * m[g if m.shape[0] > 1 else 0]

            def step(h, inputs, W_ih=W_ih, W_hh=W_hh, b=b, masked=masked):
                x_t, valid = inputs
                a = prod(x_t @ W_ih.T) + b
                z = _sigmoid(a[:, :H] + prod(op(masked(h, 0)) @ W_hh[:H].T), xp)
                r = _sigmoid(a[:, H:2 * H] + prod(op(masked(h, 1)) @ W_hh[H:2 * H].T), xp)
                hh = xp.tanh(a[:, 2 * H:] + prod(op(masked(r * h, 2)) @ W_hh[2 * H:].T))
                new = keep(z * h + (1 - z) * hh)
                new = xp.where(valid, new, h)
                return new, xp.where(valid, op(new), 0 * new)

            h = keep(h0[p])
            valid = (np.arange(T)[:, None] < lengths[None, :])[..., None]  # (T, B, 1)
            if xp is np:
                out = [None] * T
                for t in (reversed(range(T)) if d else range(T)):
                    h, out[t] = step(h, (inp[:, t], valid[t]))
                out = np.stack(out, axis=1)
            else:
                h, out = jax.lax.scan(step, h, (xp.swapaxes(inp, 0, 1), valid), reverse=bool(d))
                out = xp.swapaxes(out, 0, 1)
            outs.append(out)
            finals.append(h)
        inp = references.next_input(outs, layer, L, dropout, op, prod, xp)
    return inp, xp.stack(finals)


def _f64(*arrays):
    return tuple(None if a is None else np.asarray(a, np.float64) for a in arrays)


def _inputs(B, T, I, H, L, bidir, seed, dtype=jnp.float32):
    D = 2 if bidir else 1
    k = jax.random.split(jax.random.key(seed), 3)
    x = draws.normal(k[0], (B, T, I), jnp.float32).astype(dtype)
    h0 = draws.normal(k[1], (L * D, B, H), jnp.float32)
    w = draws.init_weight(k[2], I, H, L, bidir, "classic_gru") * 2  # gates away from 1/2
    return x, h0, w


def _masks(key, rate, L, B, T, width):
    """The documented keep-masks between layers (docs/semantics.md, "Dropout")."""
    return [np.asarray(draws.bernoulli(jax.random.fold_in(key, l), 1 - rate,
                                       (B, T, width))) for l in range(L - 1)]


@st.composite
def cases(draw):
    """Shapes, ragged lengths from 0, directions, layers, dropout between layers and a
    recurrent dropout mask (one for every gate or one per gate)."""
    large = draw(st.booleans())
    B = draw(st.integers(1, 3))
    T = draw(st.integers(24, 48) if large else st.integers(1, 6))
    I = draw(st.integers(1, 8))
    H = draw(st.integers(16, 24) if large else st.integers(1, 5))
    L = draw(st.integers(1, 2))
    bidir = draw(st.booleans())
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    dropout = draw(st.sampled_from((0.0, 0.3)))
    rmask = draw(st.sampled_from((None, "one", "per_gate")))
    return dict(B=B, T=T, I=I, H=H, L=L, bidir=bidir, lengths=lengths, dropout=dropout,
                rmask=rmask, seed=draw(st.integers(0, 2**16)))


def _case(B, T, I, H, L, bidir, lengths, dropout=0.0, rmask=None, seed=0):
    return dict(B=B, T=T, I=I, H=H, L=L, bidir=bidir, lengths=lengths, dropout=dropout,
                rmask=rmask, seed=seed)


def _call(c, dtype=jnp.float32):
    """(x, h0, w, the op as a function of them, the reference's keyword arguments)."""
    x, h0, w = _inputs(c["B"], c["T"], c["I"], c["H"], c["L"], c["bidir"], c["seed"], dtype)
    D = 2 if c["bidir"] else 1
    key = jax.random.key(c["seed"] + 1)
    rm = None
    if c["rmask"]:
        k = 3 if c["rmask"] == "per_gate" else 1
        rm = draws.bernoulli(jax.random.key(c["seed"] + 2), 0.7,
                             (c["L"] * D, k, c["B"], c["H"])).astype(jnp.float32) / 0.7
        rm = rm.astype(dtype)  # the mask as passed, in the compute dtype
    lengths = np.asarray(c["lengths"], np.int32)
    rng = key if c["dropout"] else None

    def op(x, h0, w):
        mask = None if rm is None else (rm[:, 0] if rm.shape[1] == 1 else rm)
        return portable_rnn.classic_gru(x, h0, w, lengths, c["I"], c["H"], c["L"], c["dropout"],
                                        c["bidir"], dropout_rng=rng, recurrent_dropout_mask=mask)

    drop = None
    if c["dropout"] and c["L"] > 1:
        drop = (_masks(key, c["dropout"], c["L"], c["B"], c["T"], D * c["H"]), c["dropout"])
    ref = dict(lengths=lengths, I=c["I"], H=c["H"], L=c["L"], bidir=c["bidir"], dropout=drop,
               rmask=None if rm is None else np.asarray(rm, np.float64))
    return x, h0, w, op, ref


HARD = (
    _case(3, 5, 3, 4, 2, True, [5, 0, 2], dropout=0.3),  # a length 0, two bidirectional layers
    _case(2, 4, 2, 3, 1, False, [0, 0]),  # every length 0
    _case(2, 32, 5, 16, 2, True, [32, 11], rmask="per_gate", seed=3),  # long, a mask per gate
    _case(3, 6, 4, 5, 1, True, [6, 1, 3], rmask="one", seed=4),
)


@given(cases())
@example(HARD[0])
@example(HARD[1])
@example(HARD[2])
@example(HARD[3])
def test_float32_equals_the_float64_loop(c):
    x, h0, w, op, ref = _call(c)
    y, h_n = jax.jit(op)(x, h0, w)
    want_y, want_h = loop(*_f64(x, h0, w), ref["lengths"], ref["I"], ref["H"], ref["L"],
                          ref["bidir"], rmask=ref["rmask"], dropout=ref["dropout"])
    tol = references.float32_tol(2e-5)
    np.testing.assert_allclose(np.asarray(y), want_y, atol=tol, rtol=tol)
    np.testing.assert_allclose(np.asarray(h_n), want_h, atol=tol, rtol=tol)
    assert y.dtype == x.dtype and h_n.dtype == h0.dtype


@settings(max_examples=max(2, settings.default.max_examples // 2))
@given(cases())
@example(HARD[0])
@example(HARD[2])
def test_float64_gradients_equal_the_loop_s(c):
    """Under x64, the gradients of x, h_0 and the weights against autodiff of the loop."""
    x, h0, w, op, ref = _call(c)
    cot = np.random.default_rng(c["seed"]).normal(
        size=(c["B"], c["T"], (2 if c["bidir"] else 1) * c["H"]))

    def loss(f):
        def value(x, h0, w):
            y, h_n = f(x, h0, w)
            return jnp.sum(y * cot) + jnp.sum(jnp.sin(h_n))
        return value

    def mine(x, h0, w):
        return loop(x, h0, w, ref["lengths"], ref["I"], ref["H"], ref["L"], ref["bidir"],
                    xp=jnp, rmask=ref["rmask"], dropout=ref["dropout"])

    with references.float64():
        if ref["dropout"] is not None:  # the op draws its masks under x64: so does the loop
            D = 2 if c["bidir"] else 1
            ref["dropout"] = (_masks(jax.random.key(c["seed"] + 1), c["dropout"], c["L"],
                                     c["B"], c["T"], D * c["H"]), c["dropout"])
        args = tuple(jnp.asarray(a) for a in _f64(x, h0, w))
        got = jax.jit(jax.grad(loss(op), (0, 1, 2)))(*args)
        want = jax.jit(jax.grad(loss(mine), (0, 1, 2)))(*args)
        for g, r in zip(got, want):
            assert g.dtype == jnp.float64
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=1e-10, rtol=1e-10)


# --- 16 bits -----------------------------------------------------------------------------------

@pytest.mark.slow  # the default tier: test_low_precision's 16-bit test of the driver's paths
@settings(max_examples=max(2, settings.default.max_examples // 2))
@given(cases())
@example(_case(2, 64, 8, 32, 1, False, [64, 30], seed=5))  # long: the weights' gradient sums
@example(_case(3, 24, 5, 16, 2, True, [24, 0, 7], dropout=0.3, rmask="per_gate", seed=6))
def test_bfloat16_equals_the_rounded_float64_loop(c):
    """Outputs, the final state (float32, as passed) and the gradients of x, h_0 and the
    weights, within the documented 16-bit bounds (tests/test_low_precision.py): 2 bfloat16 ulps
    of each array's largest magnitude; the float32 state at 3/8."""
    dt = jnp.bfloat16
    x, h0, w, op, ref = _call(c, dt)
    y, h_n = jax.jit(op)(x, h0, w)
    assert y.dtype == dt and h_n.dtype == jnp.float32
    ref_args = (ref["lengths"], ref["I"], ref["H"], ref["L"], ref["bidir"])
    want_y, want_h = loop(*_f64(x, h0, w), *ref_args, dtype=dt, rmask=ref["rmask"],
                          dropout=ref["dropout"])
    as_bf16 = np.asarray(np.asarray(want_y).astype(dt), np.float64)
    assert_ulps(y, as_bf16, dt, references.RECURRENT_ULPS, "y")
    assert_ulps(h_n, want_h, dt, references.state_ulps(dt), "h_n")

    cot = np.asarray(np.random.default_rng(c["seed"]).normal(size=y.shape).astype(dt),
                     np.float32)

    def loss(f, rounded):
        def value(x, h0, w):
            y, h_n = f(x, h0, w)
            if rounded:  # the loop's output rounded to bfloat16, straight through
                y = round_to(y, dt, jnp)
            wide = jnp.float64 if rounded else jnp.float32
            return jnp.sum(y.astype(wide) * cot.astype(wide)) + jnp.sum(h_n.astype(wide))
        return value

    def mine(x, h0, w):
        return loop(x, h0, w, *ref_args, xp=jnp, dtype=dt, rmask=ref["rmask"],
                    dropout=ref["dropout"], gradient_dtype=dt)

    got = jax.jit(jax.grad(loss(op, False), (0, 1, 2)))(x, h0, w)
    with references.float64():
        want = jax.jit(jax.grad(loss(mine, True), (0, 1, 2)))(
            *(jnp.asarray(a) for a in _f64(x, h0, w)))
    for g, r, name in zip(got, want, ("dx", "dh_0", "dweights")):
        r = np.asarray(r)
        r = np.asarray(r.astype(g.dtype), np.float64) if g.dtype == dt else r
        assert_ulps(g, r, dt, references.RECURRENT_ULPS, name)


def test_bfloat16_kernels_are_held_in_float32_inside_the_loop():
    """JAX's backward loop accumulates the kernels' gradients step by step in the kernels'
    dtype: the cell holds them in float32 (rounded to bfloat16 first)."""
    x, h0, w = _inputs(2, 4, 3, 4, 1, False, 0, jnp.bfloat16)

    def f(w):
        return portable_rnn.classic_gru(x, h0, w, None, 3, 4, 1, 0.0, False)[0]

    (scan,) = binds(jax.make_jaxpr(f)(w).jaxpr, "scan")
    kernels = [v.aval for v in scan.invars if len(v.aval.shape) == 2]  # and the states
    assert kernels and all(a.dtype == jnp.float32 for a in kernels), kernels


# --- Keras' own layer --------------------------------------------------------------------------

def _keras():
    keras = pytest.importorskip("keras", reason="needs keras>=3 (the test extra)")
    if keras.backend.backend() != "jax":
        pytest.skip(f"keras was imported with the {keras.backend.backend()} backend")
    return keras


def _stock_stack(keras, w, I, H, L, bidir):
    """Keras' own ``GRU(reset_after=False)`` layers (Bidirectional when `bidir`) holding the
    flat weights `w` through `classic_gru_weights_to_keras`."""
    layers = []
    for l, arrays in enumerate(portable_rnn.classic_gru_weights_to_keras(w, I, H, L, bidir)):
        layer = keras.layers.GRU(H, reset_after=False, return_sequences=True, return_state=True)
        layer = keras.layers.Bidirectional(layer) if bidir else layer
        layer.build((None, None, I if l == 0 else (2 if bidir else 1) * H))
        layer.set_weights(arrays)
        layers.append(layer)
    return layers


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(cases())
@example(HARD[0])
@example(HARD[2])
def test_equals_keras_gru_reset_after_false(c):
    """The op against Keras' layers on the converted weights, lengths as Keras masks: the
    outputs at every valid step and the final states; the weights convert back exactly."""
    keras = _keras()
    c = dict(c, dropout=0.0, rmask=None)
    x, h0, w, op, ref = _call(c)
    L, H, D = c["L"], c["H"], 2 if c["bidir"] else 1
    y, h_n = jax.jit(op)(x, h0, w)
    mask = np.arange(c["T"])[None, :] < ref["lengths"][:, None]
    inp, finals = np.asarray(x), []
    for l, layer in enumerate(_stock_stack(keras, w, c["I"], H, L, c["bidir"])):
        states = [np.asarray(h0[l * D + d]) for d in range(D)]
        out = layer(inp, mask=mask, initial_state=states if c["bidir"] else states[0])
        inp, finals = np.asarray(out[0]), finals + [np.asarray(s) for s in out[1:]]
    valid = mask[..., None]
    np.testing.assert_allclose(np.where(valid, np.asarray(y), 0), np.where(valid, inp, 0),
                               atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(np.asarray(h_n), np.stack(finals), atol=2e-5, rtol=2e-5)
    back = portable_rnn.classic_gru_weights_from_keras(
        portable_rnn.classic_gru_weights_to_keras(w, c["I"], H, L, c["bidir"]))
    again = portable_rnn.classic_gru_weights_to_keras(back, c["I"], H, L, c["bidir"])
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(
            portable_rnn.classic_gru_weights_to_keras(w, c["I"], H, L, c["bidir"]))):
        np.testing.assert_array_equal(a, b)


def test_keras_layers_weights_convert_both_ways():
    """A stock layer's weights read by the converter compute the stock layer's function; ours
    written back are its weights, bit for bit."""
    keras = _keras()
    layer = keras.layers.GRU(4, reset_after=False, return_sequences=True,
                             bias_initializer="glorot_uniform")
    layer = keras.layers.Bidirectional(layer)
    layer.build((None, None, 3))
    w = portable_rnn.classic_gru_weights_from_keras(layer.get_weights())
    x = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)
    y, _ = portable_rnn.classic_gru(x, jnp.zeros((2, 2, 4)), w, None, 3, 4, 1, 0.0, True)
    np.testing.assert_allclose(np.asarray(y), np.asarray(layer(x)), atol=2e-5, rtol=2e-5)
    (arrays,) = portable_rnn.classic_gru_weights_to_keras(w, 3, 4, 1, True)
    for a, b in zip(arrays, layer.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("training", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_portable_keras_gru_runs_the_classic_gru(training):
    """``portable_rnn.keras.GRU(reset_after=False)`` computes the stock layer's outputs and
    gradients with the classic GRU (dropout and recurrent dropout in training: Keras' masks,
    one per gate), masks with holes and go_backwards included."""
    keras = _keras()
    from portable_rnn import keras as pk

    kwargs = dict(reset_after=False, dropout=0.3, recurrent_dropout=0.4, seed=5,
                  go_backwards=True, return_sequences=True, return_state=True)
    ours, stock = pk.GRU(3, **kwargs), keras.layers.GRU(3, **kwargs)
    rng = np.random.default_rng(1)
    for layer in (ours, stock):
        layer.build((3, 5, 4))
    weights = [rng.normal(size=a.shape).astype(np.float32) * 0.5 for a in ours.get_weights()]
    for layer in (ours, stock):
        layer.set_weights(weights)
    x = rng.normal(size=(3, 5, 4)).astype(np.float32)
    mask = np.array([[0, 1, 0, 1, 1], [1, 1, 0, 0, 1], [1, 0, 0, 0, 0]], bool)

    def outputs_and_grads(layer):
        trainable = [v.value for v in layer.trainable_variables]
        other = [v.value for v in layer.non_trainable_variables]

        def loss(trainable, x):
            out, _ = layer.stateless_call(trainable, other, x, mask=mask, training=training)
            return sum(jnp.sum(jnp.sin(o)) for o in out), out
        (_, out), grads = jax.value_and_grad(loss, (0, 1), has_aux=True)(trainable,
                                                                          jnp.asarray(x))
        return out, grads

    got, want = outputs_and_grads(ours), outputs_and_grads(stock)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=2e-5)
    d = ours.decision
    per_gate = getattr(ours.cell, "dropout_mask_count", None) is not None
    if training and not per_gate:  # older Keras also masks the state in the blend
        assert d.implementation == "keras" and "update-gate blend" in str(d), d
    else:
        assert d.op == "classic_gru" and d.implementation == "scan", d


def test_portable_keras_bidirectional_runs_one_call():
    keras = _keras()
    from portable_rnn import keras as pk

    ours = pk.Bidirectional(pk.GRU(3, reset_after=False, return_sequences=True))
    stock = keras.layers.Bidirectional(keras.layers.GRU(3, reset_after=False,
                                                        return_sequences=True))
    for layer in (ours, stock):
        layer.build((2, 4, 3))
    stock.set_weights(ours.get_weights())
    x = np.random.default_rng(2).normal(size=(2, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(stock(x)), atol=2e-5, rtol=2e-5)
    assert ours.decision.op == "classic_gru"
    assert "both directions in one bidirectional call" in ours.decision.notes


# --- layers made from the registry -------------------------------------------------------------

def test_linen_nnx_and_equinox_layers_compute_the_op():
    """``ClassicGRU`` in each layer module: the op's outputs and final state on the layer's
    parameters (two bidirectional layers, ragged)."""
    pytest.importorskip("equinox")
    from flax import nnx as fnnx

    from portable_rnn import equinox as preqx
    from portable_rnn import linen, nnx

    I, H, L = 3, 4, 2
    x, h0, w = _inputs(2, 5, I, H, L, True, 7)
    lengths = jnp.array([5, 2])
    want = portable_rnn.classic_gru(x, h0, w, lengths, I, H, L, 0.0, True)
    variables = linen.ClassicGRU.variables_from_flat(w, I, H, L, True)
    layer = linen.ClassicGRU(hidden_size=H, num_layers=L, bidirectional=True)
    got = {"linen": layer.apply(variables, x, lengths, h0, return_carry=True)}
    model = nnx.ClassicGRU(I, H, L, bidirectional=True, rngs=fnnx.Rngs(0))
    got["nnx"] = model.load_params(variables["params"])(x, lengths, h0, return_carry=True)
    eqx_model = preqx.ClassicGRU(I, H, L, bidirectional=True, return_state=True,
                                 key=jax.random.key(0))
    import equinox as eqx
    eqx_model = eqx.tree_at(lambda m: m.params, eqx_model, variables["params"])
    got["equinox"] = eqx_model(x, lengths, h0, inference=True)
    for name, (y, h_n) in got.items():
        np.testing.assert_allclose(np.asarray(y), np.asarray(want[0]), atol=1e-6, err_msg=name)
        np.testing.assert_allclose(np.asarray(h_n), np.asarray(want[1]), atol=1e-6,
                                   err_msg=name)
    assert not hasattr(preqx.ClassicGRU, "from_eqx_cells")  # eqx.nn.GRUCell is reset_after
    with pytest.raises(ValueError, match="the classic_gru cell has no PyTorch counterpart"):
        model.to_torch_state_dict()
    with pytest.raises(ValueError, match="the classic_gru cell has no PyTorch counterpart"):
        linen.ClassicGRU.variables_to_torch(variables)


def test_no_pytorch_or_flax_converters():
    """PyTorch's nn.GRU and Flax's GRUCell compute the other GRU: no converters to them."""
    names = set(portable_rnn.__all__)
    assert {"classic_gru_weights_from_keras", "classic_gru_weights_to_keras"} <= names
    assert not {n for n in names if n.startswith("classic_gru_weights_") and
                ("torch" in n or "flax" in n)}


# --- routes ------------------------------------------------------------------------------------

def _explain(caps, H=4, **kw):
    x, h0, w = _inputs(2, 3, 3, H, 1, False, 0)
    return portable_rnn.explain_classic_gru(x, h0, w, None, 3, H, 1, 0.0, False,
                                            capabilities=caps, **kw)


def test_no_cudnn_route_says_why():
    d = _explain(GPU)
    assert d.implementation == "scan" and d.op == "classic_gru"
    assert any("JAX exposes no cuDNN GRU (reset_after=False)" in r for r in d.rejected["cudnn"])
    assert d.rejected["cudnn_ffi"] == ("cuDNN has no classic_gru cell (no cudnnRNNMode_t "
                                       "computes it)",)
    for impl in ("cudnn", "cudnn_ffi"):
        with pytest.raises(ValueError, match="cuDNN"):
            _explain(GPU, implementation=impl)


def test_the_pallas_route_rejects_a_cell_without_a_backward_step():
    with pallas.interpret():
        d = _explain(TPU, H=128)
    assert d.implementation == "scan", d
    assert any("no hand-written backward step" in r for r in d.rejected["pallas"]), d


@pytest.mark.slow  # the driver's transforms: the LSTM's default-tier tests run them
def test_jit_vmap_and_grad_compose():
    I, H = 3, 4
    x, h0, w = _inputs(2, 5, I, H, 1, True, 8)
    xs = jnp.stack([x, -x])

    def f(x, w):
        y, h_n = portable_rnn.classic_gru(x, h0, w, jnp.array([5, 3]), I, H, 1, 0.0, True)
        return jnp.sum(y ** 2) + jnp.sum(h_n)

    got = jax.jit(jax.vmap(jax.grad(f, (0, 1)), (0, None)))(xs, w)
    for i in range(2):
        want = jax.grad(f, (0, 1))(xs[i], w)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(b), atol=1e-5, rtol=1e-5)


def test_own_products_pass_the_operands_gradient_unrounded():
    """The driver rounds an own-products cell's 16-bit operands (h, r * h) to the compute dtype
    with the gradient passed unrounded, as the hand-written backward passes ``dz W_hh^T`` in
    float32: the gradient of a product with respect to its operand is exactly ``dz W^T``.
    (Rounded per product, it measured 0.28-0.37 bfloat16 ulps off in dh_0 at T 128-256,
    against 0.16-0.22: inside the bounds, so checked here directly.)"""
    from portable_rnn._src.recurrent.driver import Products, RecurrentProducts

    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.normal(size=(4, 12)), jnp.float32)
    dz = jnp.asarray(rng.normal(size=(2, 8)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(2, 4)), jnp.float32)
    for masks in (None, jnp.asarray(rng.uniform(size=(3, 2, 4)), jnp.float32)):
        zh = RecurrentProducts.of(w, masks, Products(), jnp.float32, jnp.bfloat16, 3)
        got = jax.grad(lambda v, zh=zh: jnp.sum(zh(v, 1, 3) * dz))(v)
        blocks = [w[:, 4:8], w[:, 8:]]
        scale = [1.0, 1.0] if masks is None else [masks[1], masks[2]]
        want = sum(s * (dz[:, 4 * g:4 * g + 4] @ blocks[g].T) for g, s in enumerate(scale))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
        assert not np.allclose(np.asarray(got), np.asarray(want.astype(jnp.bfloat16),
                                                            np.float32), rtol=1e-6, atol=1e-6)

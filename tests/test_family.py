"""GRU, simple RNN and projected LSTM: routing, float64, dropout, lengths and transforms.

The property-based equivalences (NumPy loop, autodiff of a loop, PyTorch, bfloat16, vmap,
sharding) are in `test_equivalence_matrix.py`; here are the facts stated once each.
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import family_helpers as fam
import portable_rnn
import references
from portable_rnn._src.recurrent import layout
from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan
from portable_rnn._src.recurrent.families import family as _family
from portable_rnn._src.recurrent.gru import cell as _cell_gru
from portable_rnn._src.recurrent.lstm import cell as _cell_lstm
from portable_rnn._src.recurrent.routes.scan import scan_options
from portable_rnn._src.recurrent.simple_rnn import cell as _cell_simple_rnn

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
CPU = portable_rnn.Capabilities("cpu")
S = jax.ShapeDtypeStruct
B, T, I, H, P, L = 3, 5, 4, 3, 2, 2
LENGTHS = np.array([5, 2, 0], np.int32)


def _explain(kind, caps, dtype=jnp.float32, **kw):
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, False, 0, dtype)
    if kind == "lstm_proj":
        return portable_rnn.explain_lstm(x, *states, w, None, I, H, L, 0.0, False,
                                         capabilities=caps, proj_size=P, **kw)
    if kind == "gru":
        return portable_rnn.explain_gru(x, *states, w, None, I, H, L, 0.0, False,
                                        capabilities=caps, **kw)
    return portable_rnn.explain_simple_rnn(x, *states, w, None, I, H, L, 0.0, False,
                                           capabilities=caps, nonlinearity=kind[4:], **kw)


@pytest.mark.parametrize("kind, why", [
    ("gru", "JAX exposes no cuDNN GRU"), ("rnn_tanh", "JAX exposes no cuDNN RNN"),
    ("lstm_proj", f"proj_size={P}: jaxlib's cuDNN LSTM call has no projection")])
def test_gpu_routes_to_scan_and_says_why(kind, why):
    d = _explain(kind, GPU)
    assert d.implementation == "scan" and d.op == fam.FAMILY[kind]
    assert any(why in r for r in d.rejected["cudnn"]), d
    assert why in str(d)
    assert not d.platforms  # one path everywhere: no per-platform branches
    with pytest.raises(ValueError, match=why):
        _explain(kind, GPU, implementation="cudnn")
    with portable_rnn.policy(on_fallback="error"), pytest.raises(portable_rnn.FallbackError,
                                                                 match=why):
        x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, False, 0)
        fam.call(kind, x, states, w, None, I, H, P, L, False, capabilities=GPU)


def test_lstm_without_projection_still_routes_to_cudnn_on_a_gpu():
    x, (h0,), w = fam.make_inputs("gru", B, T, I, H, 0, L, False, 0)
    w = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, L, False)
    with portable_rnn.policy(lstm="cudnn"):
        d = portable_rnn.explain_lstm(x, h0, h0, w, None, I, H, L, 0.0, False, capabilities=GPU)
    assert d.implementation == "cudnn", d


@pytest.mark.parametrize("kind", fam.KINDS)
def test_cpu_decision_and_16_bit_notes(kind):
    d = _explain(kind, CPU, dtype=jnp.bfloat16)
    assert d.implementation == "scan"
    assert "platform is 'cpu'" in d.rejected["cudnn"][0]
    state = "cell state" if kind == "lstm_proj" else "hidden state"
    assert any(f"accumulate in float32, {state} in float32" in n for n in d.notes), d.notes


@pytest.mark.parametrize("kind", fam.KINDS)
def test_float64_matches_numpy_tightly_and_finite_differences(kind):
    """Bidirectional, two layers, ragged with a length 0; one jitted function throughout."""
    with references.float64():
        x, states, w = fam.make_inputs(kind, 2, 4, I, H, P, 2, True, 4, jnp.float64)
        lengths = np.array([4, 0], np.int32)
        w = w.astype(jnp.float64)
        f = jax.jit(lambda x, s, w: fam.call(kind, x, s, w, lengths, I, H, P, 2, True))
        got = f(x, states, w)
        assert all(a.dtype == jnp.float64 for a in jax.tree.leaves(got))
        want = fam.reference(kind, x, states, w, lengths, I, H, P, 2, True)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(a), b, atol=1e-12, rtol=1e-12)
        check_grads(f, (x, states, w), order=1, modes=["rev"], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kind", fam.KINDS)
def test_dropout_between_layers_follows_the_lstm_mask_rule(kind):
    """Two layers with dropout == layer 0, the documented mask on its output, layer 1."""
    rate, rng = 0.4, jax.random.key(7)
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, 2, True, 1)
    family, proj = fam.FAMILY[kind], P if kind == "lstm_proj" else 0
    got = fam.call(kind, x, states, w, LENGTHS, I, H, P, 2, True, dropout=rate, dropout_rng=rng)
    groups = layout.unpack(w, I, H, 2, True, _family(family), proj)
    size = proj or H

    def layer(l, inp, in_size):
        g = {n: [a[p] for p in (2 * l, 2 * l + 1)] for n, a in groups.items()}
        wl = layout.pack(g, in_size, H, 1, True, _family(family), proj)
        return fam.call(kind, inp, tuple(s[2 * l:2 * l + 2] for s in states), wl, LENGTHS,
                        in_size, H, P, 1, True)

    y0, f0 = layer(0, x, I)
    keep = draws.bernoulli(jax.random.fold_in(rng, 0), 1 - rate, y0.shape)
    y1, f1 = layer(1, jnp.where(keep, y0 / (1 - rate), 0), 2 * size)
    want = (y1, tuple(jnp.concatenate([a, b]) for a, b in zip(f0, f1)))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-6)
    other = fam.call(kind, x, states, w, LENGTHS, I, H, P, 2, True, dropout=rate,
                     dropout_rng=jax.random.key(8))
    assert not np.allclose(np.asarray(other[0]), np.asarray(got[0]))


@pytest.mark.parametrize("kind", fam.KINDS)
def test_lengths_of_any_integer_dtype_length_zero_and_no_steps(kind):
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, True, 2)
    want = fam.call(kind, x, states, w, LENGTHS, I, H, P, L, True)
    for dtype in (np.uint8, np.int64, np.int16):
        got = fam.call(kind, x, states, w, LENGTHS.astype(dtype), I, H, P, L, True)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    y, finals = want
    assert not np.asarray(y[2]).any() and not np.asarray(y[1, 2:]).any()
    for s, s0 in zip(finals, states):  # length 0: the initial state, exactly
        np.testing.assert_array_equal(np.asarray(s[:, 2]), np.asarray(s0[:, 2]))
    y, finals = fam.call(kind, x[:, :0], states, w, np.zeros(B, np.int32), I, H, P, L, True)
    assert y.shape == (B, 0, 2 * (P if kind == "lstm_proj" else H))
    for s, s0 in zip(finals, states):
        np.testing.assert_array_equal(np.asarray(s), np.asarray(s0))


@pytest.mark.parametrize("kind", fam.KINDS)
def test_nan_padding_never_reaches_results_or_gradients(kind):
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, True, 3)
    valid = (np.arange(T)[None, :] < LENGTHS[:, None])[..., None]
    dirty = jnp.where(valid, x, jnp.nan)

    def loss(x, s, w):
        y, finals = fam.call(kind, x, s, w, LENGTHS, I, H, P, L, True)
        return jnp.sum(y ** 2) + sum(jnp.sum(f ** 2) for f in finals)
    clean_g = jax.grad(loss, (0, 1, 2))(x, states, w)
    dirty_g = jax.grad(loss, (0, 1, 2))(dirty, states, w)
    assert np.isfinite(float(loss(dirty, states, w)))
    np.testing.assert_allclose(float(loss(dirty, states, w)), float(loss(x, states, w)))
    for a, b in zip(jax.tree.leaves(dirty_g), jax.tree.leaves(clean_g)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


@pytest.mark.parametrize("kind", fam.KINDS)
def test_jit_grad_and_checkpoint_compose(kind):
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, True, 5)

    def loss(x, s, w):
        y, finals = fam.call(kind, x, s, w, LENGTHS, I, H, P, L, True)
        return jnp.sum(jnp.sin(y)) + sum(jnp.sum(f) for f in finals)
    want = jax.grad(loss, (0, 1, 2))(x, states, w)
    for f in (jax.jit(jax.grad(loss, (0, 1, 2))), jax.grad(jax.checkpoint(loss), (0, 1, 2))):
        for a, b in zip(jax.tree.leaves(f(x, states, w)), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-6)


def test_family_argument_errors_name_the_argument():
    x, (h0,), w = fam.make_inputs("rnn_tanh", B, T, I, H, 0, L, False, 0)
    with pytest.raises(ValueError, match=r"`nonlinearity` must be one of 'tanh', 'relu'.*'gelu'"):
        portable_rnn.simple_rnn(x, h0, w, None, I, H, L, 0.0, False, nonlinearity="gelu")
    wl = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, L, False)
    with pytest.raises(ValueError, match=r"`proj_size` must be smaller than `hidden_size`=3"):
        portable_rnn.lstm(x, h0, h0, wl, None, I, H, L, 0.0, False, proj_size=3)
    wp = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, L, False, proj_size=P)
    with pytest.raises(ValueError, match=r"`h_0`.*proj_size\)=\(2, 3, 2\).*\(2, 3, 3\)"):
        portable_rnn.lstm(x, h0, h0, wp, None, I, H, L, 0.0, False, proj_size=P)
    with pytest.raises(ValueError, match=r"`weights`.*get_num_params_in_gru"):
        portable_rnn.gru(x, h0, w, None, I, H, L, 0.0, False)


@pytest.mark.parametrize("kind", ("gru", "rnn_relu", "lstm_proj", "lstm"))
def test_input_projection_inside_the_loop_matches_the_gemm_before_it(kind):
    """The CPU option `project_in_loop` (a matmul per step) computes what the GEMM over all steps
    before the loop computes: outputs, final states and every gradient, two bidirectional
    layers with ragged lengths."""
    proj = P if kind == "lstm_proj" else 0
    family = fam.FAMILY.get(kind, "lstm")
    cell = {"gru": _cell_gru.GRUCell, "lstm": lambda: _cell_lstm.LSTMCell(proj),
            "simple_rnn": lambda: _cell_simple_rnn.SimpleRNNCell(kind[4:])}[family]()
    x, states, w = fam.make_inputs("lstm_proj" if kind == "lstm" else kind, B, T, I, H, proj,
                                   L, True, 0)

    def run(in_loop):
        def f(x, states, w):
            config = ScanConfig(cell, I, H, L, True, proj_size=proj, project_in_loop=in_loop)
            y, finals = rnn_scan(config, x, tuple(states), w, jnp.asarray(LENGTHS))
            return y, finals
        out = f(x, states, w)
        grads = jax.grad(lambda *a: sum(jnp.sum(jnp.sin(t)) for t in jax.tree.leaves(f(*a))),
                         argnums=(0, 1, 2))(x, states, w)
        return out, grads

    got, want = run(True), run(False)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)


class _LSTMCellNotInPlace(_cell_lstm.LSTMCell):
    dz_inplace = None


class _GRUCellNotInPlace(_cell_gru.GRUCell):
    dz_inplace = None


@pytest.mark.parametrize("bidirectional", (False, True))
@pytest.mark.parametrize("family", ("lstm", "gru"))
def test_backward_writes_dz_over_the_saved_factors(family, bidirectional):
    """The backward loop writes each step's input-projection gradient over the factors the
    forward saved for that step (`dz_inplace`: the LSTM's and the GRU's ``q``): every gradient
    equals the one computed with a separate stacked gradient (bit for bit for the LSTM; for the
    bidirectional GRU, XLA fuses the two programs differently: within float32 rounding), and the
    compiled fwd+bwd needs that stack's size (T*B*G*H*4 bytes per direction, less XLA's
    alignment) less temporary memory."""
    b, t, i, h = 8, 64, 16, 32
    d = 2 if bidirectional else 1
    gates, init, cells, num_states = {
        "lstm": (4, portable_rnn.init_lstm_weight,
                 (_cell_lstm.LSTMCell(), _LSTMCellNotInPlace()), 2),
        "gru": (3, portable_rnn.init_gru_weight, (_cell_gru.GRUCell(), _GRUCellNotInPlace()), 1),
    }[family]
    x = draws.normal(jax.random.key(0), (b, t, i))
    w = init(jax.random.key(1), i, h, 1, bidirectional)
    h0 = jnp.zeros((d, b, h))
    states = (h0,) * num_states
    lengths = jnp.asarray(np.arange(b) * t // b + 1, jnp.int32)

    def grad_fn(cell):
        def loss(x, w):
            y, _ = rnn_scan(ScanConfig(cell, i, h, 1, bidirectional), x, states, w, lengths)
            return jnp.sum(jnp.sin(y))
        return jax.jit(jax.grad(loss, argnums=(0, 1)))

    inplace, separate = (grad_fn(c) for c in cells)
    for a, c in zip(inplace(x, w), separate(x, w)):
        if family == "lstm":
            np.testing.assert_array_equal(a, c)
        else:
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)

    def temp(fn):
        return fn.lower(x, w).compile().memory_analysis().temp_size_in_bytes
    if temp(separate) == 0:
        pytest.skip("this platform's compiler reports no temporary memory (XLA:TPU's "
                    "memory_analysis): the gradients were checked, the saving is not measurable")
    assert temp(separate) - temp(inplace) >= 0.95 * d * t * b * gates * h * 4


def test_cpu_scan_options_per_cell():
    """On CPUs the GRU always projects inside the loop; the simple RNN and the float32 and
    bfloat16 LSTM from batch 8; elsewhere (other platforms, the float16 LSTM) the GEMM runs
    before the loop. bfloat16 products are native and fenced on CPUs, float16 operands go as
    float32; 16-bit values are stacked in float32 there; other platforms get 16-bit as is."""
    def options(cell, batch, dtype=jnp.float32, caps=CPU):
        return scan_options(cell, S((batch, T, I), dtype), caps)

    def in_loop(*args, **kw):
        return options(*args, **kw)["project_in_loop"]

    gru, lstm, rnn = _cell_gru.GRUCell(), _cell_lstm.LSTMCell(), _cell_simple_rnn.SimpleRNNCell()
    assert in_loop(gru, 1) and in_loop(gru, 1, jnp.bfloat16)
    assert not in_loop(lstm, 4) and in_loop(lstm, 8) and in_loop(lstm, 8, jnp.bfloat16)
    assert not in_loop(lstm, 8, jnp.float16)
    assert not in_loop(rnn, 4) and in_loop(rnn, 8)
    assert not any(in_loop(c, 32, caps=GPU) for c in (gru, lstm, rnn))
    f32 = np.dtype(np.float32)
    assert options(lstm, 8, jnp.bfloat16) == dict(
        matmul_dtype=None, fence_products=True, stack_dtype=f32, project_in_loop=True)
    assert options(lstm, 8, jnp.float16) == dict(
        matmul_dtype=f32, fence_products=False, stack_dtype=f32, project_in_loop=False)
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
        gpu = options(lstm, 8, dtype, GPU)
        assert gpu["matmul_dtype"] is gpu["stack_dtype"] is None and not gpu["fence_products"]
    cpu32 = options(lstm, 8)
    assert cpu32["matmul_dtype"] is cpu32["stack_dtype"] is None and not cpu32["fence_products"]


@pytest.mark.parametrize("kind, proj, gates", [
    pytest.param("gru", 0, 3, marks=pytest.mark.slow), ("rnn_relu", 0, 0), ("lstm_proj", P, 4)])
def test_recurrent_dropout_mask_matches_a_loop_with_masked_recurrent_products(kind, proj, gates):
    """Float64, two bidirectional layers, ragged with a length 0, one mask or one per gate:
    outputs and final states against the NumPy loop whose recurrent products read ``h * mask``,
    gradients against autodiff of the same loop."""
    with references.float64():
        x, states, w = fam.make_inputs(kind, B, T, I, H, proj, L, True, 3, jnp.float64)
        w = w.astype(jnp.float64)
        shape = (L * 2,) + ((gates,) if gates else ()) + (B, proj or H)
        rm = draws.bernoulli(jax.random.key(2), 0.6, shape).astype(jnp.float64) / 0.6
        rm_ref = rm if gates else rm[:, None]

        def ours(x, s, w, rm=rm):
            return fam.call(kind, x, s, w, LENGTHS, I, H, proj, L, True,
                            recurrent_dropout_mask=rm)
        got = jax.jit(ours)(x, states, w)
        want = fam.reference(kind, x, states, w, LENGTHS, I, H, proj, L, True,
                             recurrent_mask=rm_ref)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(a), b, atol=1e-12, rtol=1e-12)
        # The mask matters: without it the outputs differ.
        assert not np.allclose(jax.jit(ours)(x, states, w, None)[0], got[0])

        def loss(fn):
            return lambda x, s, w: sum(jnp.sum(jnp.sin(t)) for t in jax.tree.leaves(fn(x, s, w)))
        ref = loss(lambda x, s, w: fam.reference(kind, x, s, w, LENGTHS, I, H, proj, L, True,
                                                 xp=jnp, recurrent_mask=rm_ref))
        want_g = jax.jit(jax.grad(ref, (0, 1, 2)))(x, states, w)
        got_g = jax.jit(jax.grad(loss(ours), (0, 1, 2)))(x, states, w)
        for a, b in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-11, rtol=1e-11)


def test_recurrent_dropout_mask_routes_the_lstm_to_scan_and_is_checked():
    x, states, w = fam.make_inputs("lstm_proj", B, T, I, H, 0, L, False, 0)
    rm = jnp.ones((L, B, H))
    d = portable_rnn.explain_lstm(x, *states, w, None, I, H, L, 0.0, False, capabilities=GPU,
                                  recurrent_dropout_mask=rm)
    assert d.implementation == "scan", d
    assert any("has no recurrent dropout" in r for r in d.rejected["cudnn"]), d
    assert any("recurrent product reads h * mask" in n for n in d.notes), d
    # A mask of ones changes nothing (up to float32 rounding: the masked step is another
    # program, which XLA may fuse and contract differently).
    got = portable_rnn.lstm(x, *states, w, None, I, H, L, 0.0, False, recurrent_dropout_mask=rm)
    want = portable_rnn.lstm(x, *states, w, None, I, H, L, 0.0, False)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    gx, (gh,), gw = fam.make_inputs("gru", B, T, I, H, 0, L, True, 0)
    with pytest.raises(ValueError, match=r"`recurrent_dropout_mask` must have shape "
                                         r"\(num_layers \* num_directions, batch, hidden_size\)="
                                         r"\(4, 3, 3\), or .*gates.*=\(4, 3, 3, 3\) for "
                                         r"one mask per gate; got \(2, 3, 3\)"):
        portable_rnn.gru(gx, gh, gw, None, I, H, L, 0.0, True, recurrent_dropout_mask=rm)
    with pytest.raises(TypeError, match=r"`recurrent_dropout_mask` must have a floating dtype"):
        portable_rnn.simple_rnn(x, states[0], portable_rnn.init_simple_rnn_weight(
            jax.random.key(0), I, H, L, False), None, I, H, L, 0.0, False,
            recurrent_dropout_mask=rm > 0)

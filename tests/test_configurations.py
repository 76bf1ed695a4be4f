"""Every public function and layer under JAX's global configuration options.

Each cell runs one case (forward and gradient) under one option, eagerly or under `jit`, and must
give the result of an independent float64 computation of the same loss within the dtype's
tolerance: `references.loop_rnn` for the recurrent cases and layers, `references.attention` for
attention (also inside the Flax module), both differentiated by JAX under `jax.enable_x64`. The
converters and the decisions, which compute nothing numerically, must give the default
configuration's result (conftest's: strict dtype promotion) exactly; shapes and dtypes are
always the default configuration's. Shapes are tiny and each case is one function, so the
module stays fast.
"""

import contextlib
import functools
import importlib.util
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import portable_rnn
import references
from cudnn_emulation import emulated_cudnn_attention
from portable_rnn import linen as plinen
from portable_rnn import nnx as pnnx
from portable_rnn._src.recurrent import layout as _weights
from portable_rnn._src.recurrent.families import family as _family

# The Equinox case runs where the `equinox` extra is installed (skipped with that reason else).
NEEDS = {"equinox_lstm": "equinox"}
if importlib.util.find_spec("equinox") is not None:
    import equinox as eqx

    from portable_rnn import equinox as preqx

GPU = portable_rnn.Capabilities("gpu", 91000, (9, 0), "NVIDIA H100")

# name -> (jax.config options, input dtype, tolerance against the default configuration).
# The default configuration is conftest's, with strict dtype promotion: every cell runs under
# jax_numpy_dtype_promotion="strict" unless its options say otherwise.
CONFIGS = {
    "x64_float32": ({"jax_enable_x64": True}, "float32", 1e-5),
    "x64_float64": ({"jax_enable_x64": True}, "float64", 1e-5),
    "rank_promotion_raise": ({"jax_numpy_rank_promotion": "raise"}, "float32", 1e-5),
    "dtype_promotion_standard": ({"jax_numpy_dtype_promotion": "standard"}, "float32", 1e-5),
    "debug_nans": ({"jax_debug_nans": True}, "float32", 1e-5),
    "debug_infs": ({"jax_debug_infs": True}, "float32", 1e-5),
    "matmul_bfloat16": ({"jax_default_matmul_precision": "bfloat16"}, "float32", 2e-2),
    "matmul_tensorfloat32": ({"jax_default_matmul_precision": "tensorfloat32"}, "float32", 2e-3),
    "matmul_float32": ({"jax_default_matmul_precision": "float32"}, "float32", 1e-5),
    "disable_jit": ({"jax_disable_jit": True}, "float32", 1e-5),
    "transfer_guard_disallow": ({"jax_transfer_guard": "disallow"}, "float32", 1e-5),
}


@contextlib.contextmanager
def configured(options):
    saved = {name: getattr(jax.config, name) for name in options}
    try:
        for name, value in options.items():
            jax.config.update(name, value)
        yield
    finally:
        for name, value in saved.items():
            jax.config.update(name, value)


# --- cases: each builds (function, NumPy arguments); the function returns a pytree ------------

B, T, I, H = 2, 3, 3, 4
LENGTHS = np.array([3, 1], np.int32)
rng = np.random.default_rng(0)
X = rng.standard_normal((B, T, I), np.float32)
Q = rng.standard_normal((2, 8, 4, 8), np.float32)
KV = rng.standard_normal((2, 8, 2, 8), np.float32)
BIAS = rng.standard_normal((1, 4, 8, 8), np.float32)
MASK = np.tril(np.ones((8, 8), bool)) | np.eye(8, k=3, dtype=bool)
MASK[2] = False  # a query row that sees no key


def _recurrent(name, n_states):
    fn, init = {"lstm": (portable_rnn.lstm, portable_rnn.init_lstm_weight),
                "gru": (portable_rnn.gru, portable_rnn.init_gru_weight),
                "simple_rnn": (portable_rnn.simple_rnn,
                               portable_rnn.init_simple_rnn_weight)}[name]
    w = np.asarray(init(jax.random.key(0), I, H, 1, True))
    h0 = np.zeros((2, B, H), np.float32)

    def f(x, w, h0, lengths):
        def loss(x, w):
            out = fn(x, *(h0,) * n_states, w, lengths, I, H, 1, 0.0, True)
            return sum(jnp.sum(o ** 2) for o in out)
        return jax.value_and_grad(loss, (0, 1))(x, w)
    return f, (X, w, h0, LENGTHS)


def _attention(implementation):
    def f(q, k, v, bias, mask, lengths):
        def loss(q, k, v, bias):
            out = portable_rnn.dot_product_attention(
                q, k, v, bias, mask, is_causal=implementation != "cudnn",
                key_value_seq_lengths=None if implementation == "cudnn" else lengths,
                implementation=implementation, capabilities=GPU if implementation == "cudnn"
                else None)
            out = out.astype(jnp.float32) if out.dtype.itemsize < 4 else out
            return jnp.sum(out ** 2)
        if implementation == "cudnn":
            bias = mask = None
        return jax.value_and_grad(loss, (0, 1, 2))(q, k, v, bias)
    return f, (Q, KV, KV * 0.5, BIAS, MASK, np.array([8, 5], np.int32))


def _linen_lstm():
    layer = plinen.LSTM(hidden_size=H, bidirectional=True)
    params = jax.tree.map(np.asarray, layer.init(jax.random.key(0), X)["params"])

    def f(params, x, lengths):
        return jax.value_and_grad(
            lambda p, x: jnp.sum(layer.apply({"params": p}, x, lengths) ** 2), (0, 1))(params, x)
    return f, (params, X, LENGTHS)


def _nnx_gru():
    graphdef, state = nnx.split(pnnx.GRU(I, H, rngs=nnx.Rngs(0)))
    state = jax.tree.map(np.asarray, state)

    def f(state, x):
        def loss(state, x):
            return jnp.sum(nnx.merge(graphdef, state)(x) ** 2)
        return jax.value_and_grad(loss, (0, 1))(state, x)
    return f, (state, X)


def _equinox_lstm():
    """The Equinox layer through Equinox's own filtered transformations; arguments: its arrays
    (the parameter tree) and the inputs."""
    model = preqx.LSTM(I, H, bidirectional=True, return_state=True, key=jax.random.key(0))
    arrays, static = eqx.partition(model, eqx.is_array)
    arrays = jax.tree.map(np.asarray, arrays)

    def f(arrays, x, lengths):
        def loss(model, x):
            y, (h, _) = model(x, lengths)
            return jnp.sum(y ** 2) + jnp.sum(h ** 2)
        value, (grads, dx) = eqx.filter_value_and_grad(lambda mx: loss(*mx))(
            (eqx.combine(arrays, static), x))
        return value, eqx.filter(grads, eqx.is_array), dx
    return f, (arrays, X, LENGTHS)


def _attention_fn():
    layer = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8,
                                            attention_fn=plinen.attention_fn)
    x = Q[:, :, 0]  # (2, 8, 8)
    params = jax.tree.map(np.asarray, layer.init(jax.random.key(0), x)["params"])

    def f(params, x, mask):
        return jax.value_and_grad(lambda p, x: jnp.sum(
            layer.apply({"params": p}, x, mask=mask[None, None]) ** 2), (0, 1))(params, x)
    return f, (params, x, MASK)


def _converters():
    torch_sd = portable_rnn.lstm_weights_to_torch(_recurrent("lstm", 2)[1][1], I, H, 1, True)
    flax_params = nn.RNN(nn.OptimizedLSTMCell(H)).init(jax.random.key(0), X)["params"]
    flax_params = jax.tree.map(np.asarray, flax_params)

    gru = np.asarray(portable_rnn.init_gru_weight(jax.random.key(1), I, H, 1, False))

    def f(torch_sd, flax_params, gru):
        return (portable_rnn.lstm_weights_from_torch(torch_sd),
                portable_rnn.lstm_weights_from_flax(flax_params),
                portable_rnn.gru_weights_to_torch(gru, I, H, 1, False))
    return f, (torch_sd, flax_params, gru)


def _explain():
    def f(x, q):
        x, q = (jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, q))
        h0 = jax.ShapeDtypeStruct((2, B, H), x.dtype)
        w = jax.ShapeDtypeStruct((portable_rnn.get_num_params_in_lstm(I, H, 1, True),), x.dtype)
        wg = jax.ShapeDtypeStruct((portable_rnn.get_num_params_in_gru(I, H, 1, True),), x.dtype)
        decisions = (portable_rnn.explain_lstm(x, h0, h0, w, None, I, H, 1, 0.0, True),
                     portable_rnn.explain_gru(x, h0, wg, None, I, H, 1, 0.0, True),
                     portable_rnn.explain_attention(q, q, q, capabilities=GPU))
        return [(d.implementation, sorted(d.rejected)) for d in decisions]
    return f, (X, Q)


CASES = {
    "lstm": lambda: _recurrent("lstm", 2),
    "gru": lambda: _recurrent("gru", 1),
    "simple_rnn": lambda: _recurrent("simple_rnn", 1),
    "attention_xla": lambda: _attention("xla"),
    "attention_chunked": lambda: _attention("chunked"),
    "attention_cudnn": lambda: _attention("cudnn"),
    "linen_lstm": _linen_lstm,
    "nnx_gru": _nnx_gru,
    "equinox_lstm": _equinox_lstm,
    "linen_attention_fn": _attention_fn,
    "converters": _converters,
    "explain": _explain,
}
ARRAYS_ONLY = ("converters", "explain")  # plain functions of their arguments: no jit
LOW_PRECISION = {"attention_cudnn": jnp.bfloat16}  # cuDNN attention is 16-bit only
_DEFAULT = {}
_FLOAT64 = {}


# --- float64 references: the same losses, computed by `references` ---------------------------

def _loop(family, x, states, groups, lengths, bidirectional):
    """`references.loop_rnn`, one layer, differentiable (jax.numpy)."""
    return references.loop_rnn(family, x, states, groups, lengths, 1, bidirectional, xp=jnp)


def _groups(directions):
    """PyTorch-layout weights of one layer's directions (dicts W_ih, W_hh, b_ih, b_hh), as
    `loop_rnn`'s per-pseudo-layer groups."""
    return {n: {p: d[n] for p, d in enumerate(directions)} for n in directions[0]}


def _recurrent_float64(name, n_states):
    family = {"lstm": "lstm", "gru": "gru", "simple_rnn": "simple_rnn"}[name]

    def f(x, w, h0, lengths):
        def loss(x, w):
            groups = _weights.unpack(w, I, H, 1, True, _family(family))
            y, finals = _loop(family, x, (h0,) * n_states, groups, lengths, True)
            return sum(jnp.sum(o ** 2) for o in (y, *finals))
        return jax.value_and_grad(loss, (0, 1))(x, w)
    return f


def _attention_float64(implementation):
    def f(q, k, v, bias, mask, lengths):
        cudnn = implementation == "cudnn"
        B, T, N, Hd = q.shape
        vis = references.attention_visibility(
            B, N, T, k.shape[1], mask=None if cudnn else mask, is_causal=not cudnn,
            kv_len=None if cudnn else lengths)

        def loss(q, k, v, bias):
            out = references.attention(q, k, v, None if cudnn else bias, scale=1 / np.sqrt(Hd),
                                       visibility=vis, xp=jnp)
            return jnp.sum(out ** 2)
        return jax.value_and_grad(loss, (0, 1, 2))(q, k, v, bias)
    return f


def _linen_lstm_float64(params, x, lengths):
    def loss(p, x):
        zeros = jnp.zeros((2, B, H), x.dtype)
        groups = _groups([p["layer_0"]["forward"], p["layer_0"]["reverse"]])
        return jnp.sum(_loop("lstm", x, (zeros, zeros), groups, lengths, True)[0] ** 2)
    return jax.value_and_grad(loss, (0, 1))(params, x)


def _nnx_gru_float64(state, x):
    def loss(state, x):
        layer = {n: v[...] for n, v in state["layer_0"]["forward"].items()}
        zeros = jnp.zeros((1, x.shape[0], H), x.dtype)
        y = _loop("gru", x, (zeros,), _groups([layer]), np.full(x.shape[0], x.shape[1]), False)[0]
        return jnp.sum(y ** 2)
    return jax.value_and_grad(loss, (0, 1))(state, x)


def _equinox_lstm_float64(arrays, x, lengths):
    def loss(arrays, x):
        p = arrays.params["layer_0"]
        zeros = jnp.zeros((2, B, H), x.dtype)
        y, (h, _) = _loop("lstm", x, (zeros, zeros), _groups([p["forward"], p["reverse"]]),
                          lengths, True)
        return jnp.sum(y ** 2) + jnp.sum(h ** 2)
    value, (grads, dx) = jax.value_and_grad(loss, (0, 1))(arrays, x)
    return value, grads, dx


def _reference_attention_fn(query, key, value, bias=None, mask=None, **unused):
    """Flax's `attention_fn` arguments, computed by `references.attention` (no dropout)."""
    B, T, N, Hd = query.shape
    vis = jnp.ones((B, N, T, key.shape[1]), bool)
    if mask is not None:
        vis = vis & mask
    return references.attention(query, key, value, bias, scale=1 / np.sqrt(Hd), visibility=vis,
                                xp=jnp)


def _attention_fn_float64(params, x, mask):
    layer = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8,
                                            attention_fn=_reference_attention_fn)
    return jax.value_and_grad(lambda p, x: jnp.sum(
        layer.apply({"params": p}, x, mask=mask[None, None]) ** 2), (0, 1))(params, x)


FLOAT64 = {
    "lstm": _recurrent_float64("lstm", 2),
    "gru": _recurrent_float64("gru", 1),
    "simple_rnn": _recurrent_float64("simple_rnn", 1),
    "attention_xla": _attention_float64("xla"),
    "attention_chunked": _attention_float64("chunked"),
    "attention_cudnn": _attention_float64("cudnn"),
    "linen_lstm": _linen_lstm_float64,
    "nnx_gru": _nnx_gru_float64,
    "equinox_lstm": _equinox_lstm_float64,
    "linen_attention_fn": _attention_fn_float64,
}


@functools.cache
def _built(case):
    """The case's function and NumPy arguments, built once (in the default configuration)."""
    return CASES[case]()


def _inputs(case, dtype):
    fn, args = _built(case)
    dtype = LOW_PRECISION.get(case, dtype)
    args = jax.tree.map(lambda a: a.astype(dtype) if a.dtype == np.float32 else a, args)
    return fn, args


def _emulation(case):
    return emulated_cudnn_attention() if case == "attention_cudnn" else contextlib.nullcontext()


def _default(case):
    """The case in the default configuration: the shapes and dtypes every cell must give, and
    the values of the cases that compute nothing numerically."""
    if case not in _DEFAULT:
        fn, args = _inputs(case, np.float32)
        with _emulation(case):
            run = fn if case in ARRAYS_ONLY else jax.jit(fn)
            _DEFAULT[case] = jax.tree.map(np.asarray, run(*args))
    return _DEFAULT[case]


def _float64(case):
    """The case's values from its float64 reference, on the values the case's inputs hold."""
    if case not in FLOAT64:
        return _default(case)
    if case not in _FLOAT64:
        _, args = _inputs(case, np.float32)
        with references.float64():  # eagerly: lengths and masks stay NumPy arrays
            args = jax.tree.map(lambda a: np.asarray(a, np.float64)
                                if jnp.issubdtype(a.dtype, jnp.floating) else a, args)
            _FLOAT64[case] = jax.tree.map(np.asarray, FLOAT64[case](*args))
    return _FLOAT64[case]


def _check(got, want, tol):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        if not isinstance(w, np.ndarray) or w.dtype.kind not in "fc":
            assert np.array_equal(g, w)
            continue
        g = np.asarray(g, np.float64)
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * (1 + np.abs(w).max()))


# Which cases run under which option, and how. Compiling dominates the run time (about a second
# per compiled cell, every operation compiled on its own in an eager one), so the matrix is
# chosen, not a full product:
# - options that change how every function is traced (x64, promotion rules) trace every case
#   ("trace": `jax.eval_shape` of forward and gradient, shapes and dtypes checked) and run a few;
# - debug_nans/debug_infs check each operation only outside jit: they run eagerly;
# - disable_jit runs the loops in Python; the transfer guard is about a jitted computation.
ALL = list(CASES)
TRACED = ["x64_float64", "rank_promotion_raise", "dtype_promotion_standard"]
RUN = {
    "x64_float32": [("lstm", "jit"), ("attention_chunked", "jit"), ("converters", "eager"),
                    ("explain", "eager")],
    "x64_float64": [("lstm", "jit"), ("attention_xla", "jit"), ("nnx_gru", "jit"),
                    ("equinox_lstm", "jit")],
    "rank_promotion_raise": [("gru", "jit"), ("linen_attention_fn", "jit")],
    "dtype_promotion_standard": [("linen_lstm", "jit")],
    "debug_nans": [("simple_rnn", "eager")],
    "debug_infs": [("attention_xla", "eager"), ("attention_chunked", "eager")],
    "matmul_bfloat16": [("attention_xla", "jit"), ("lstm", "jit")],
    "matmul_tensorfloat32": [("simple_rnn", "jit")],
    "matmul_float32": [("attention_chunked", "jit")],
    "disable_jit": [("simple_rnn", "eager")],
    "transfer_guard_disallow": [("lstm", "jit"), ("attention_cudnn", "jit"), ("nnx_gru", "jit"),
                                ("equinox_lstm", "jit")],
}
CELLS = [(config, case, "trace" if case not in ARRAYS_ONLY else "eager")
         for config in TRACED for case in ALL]
CELLS += [(config, case, mode) for config, runs in RUN.items() for case, mode in runs
          if (config, case, "eager") not in CELLS]


def _params(cells):
    """The cells as pytest params, skipped at collection where a case's extra is missing. float64
    computations run on the host's CPU (marker `cpu`): an accelerator without float64 units (a
    TPU) emulates them, compiling for tens of seconds per case."""
    out = []
    for cell in cells:
        case = cell[1] if isinstance(cell, tuple) else cell
        need = NEEDS.get(case)
        marks = ((pytest.mark.skip(reason=f"needs {need}, which is not installed"),)
                 if need and importlib.util.find_spec(need) is None else ())
        if isinstance(cell, tuple) and CONFIGS[cell[0]][1] == "float64":
            marks = (*marks, pytest.mark.cpu)
        out.append(pytest.param(*(cell if isinstance(cell, tuple) else (cell,)), marks=marks))
    return out


def test_matrix_covers_every_case_and_option():
    assert set(RUN) == set(CONFIGS)
    assert {case for _, case, _ in CELLS} == set(CASES)
    assert set(FLOAT64) | set(ARRAYS_ONLY) == set(CASES)  # a reference for every computation


@pytest.mark.parametrize("case", _params(sorted(FLOAT64)))
def test_the_default_configuration_matches_the_float64_reference(case):
    """The references are of the same losses (what every cell is held to)."""
    tol = 2e-2 if case in LOW_PRECISION else references.float32_tol(1e-5)
    _check(_default(case), _float64(case), tol)


@pytest.mark.parametrize(("config", "case", "mode"), _params(CELLS))
def test_configuration(config, case, mode):
    options, dtype, tol = CONFIGS[config]
    want = _default(case)
    tol = max(tol, 2e-2 if case in LOW_PRECISION else 0)
    if dtype == "float32":
        tol = references.float32_tol(tol)
    fn, args = _inputs(case, np.float32)
    guarded = options.get("jax_transfer_guard") == "disallow"
    with _emulation(case):
        if guarded:  # the guard is for the computation: inputs are placed, results read after
            args = jax.device_put(args)
        with configured(options):
            if dtype != "float32":
                fn, args = _inputs(case, np.dtype(dtype))
            run = {"jit": jax.jit(fn), "eager": fn, "trace": partial(jax.eval_shape, fn)}[mode]
            got = run(*args)
            if not guarded and mode != "trace":
                got = jax.tree.map(np.asarray, got)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert (g.shape, g.dtype) == (w.shape, _expected_dtype(w.dtype, dtype, case))
    if mode != "trace":
        _check(jax.tree.map(np.asarray, got), _float64(case), tol)


def _expected_dtype(reference, dtype, case):
    """float64 inputs give float64 results where float32 ones give float32 (not cuDNN's)."""
    if dtype == "float64" and reference == np.float32 and case not in LOW_PRECISION:
        return np.dtype(np.float64)
    return reference

"""`portable_rnn.keras` layers against the stock Keras layers (JAX backend), on shared weights.

Part of the expected values are ported from keras-team/keras `keras/src/layers/rnn/lstm_test.py`,
`gru_test.py` and `simple_rnn_test.py` (Apache 2.0).
"""

import contextlib
import os
import subprocess
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

keras = pytest.importorskip("keras", reason="needs keras>=3 (the test extra)")
if keras.backend.backend() != "jax":
    pytest.skip(f"keras was imported with the {keras.backend.backend()} backend",
                allow_module_level=True)

import references  # noqa: E402
from portable_rnn import keras as pk  # noqa: E402

# Keras' Variable.__array__ lacks NumPy 2's `copy` keyword: `layer.get_weights()` warns.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")

B, T, I, H = 3, 5, 4, 3
F32 = references.float32_tol(1e-5)  # float32 results against Keras' (the platform's floor)
RIGHT = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
HOLES = np.array([[0, 1, 0, 1, 1], [1, 1, 0, 0, 1], [1, 0, 0, 0, 0]], bool)
CONST = dict(kernel_initializer=keras.initializers.Constant(0.01),
             recurrent_initializer=keras.initializers.Constant(0.02),
             bias_initializer=keras.initializers.Constant(0.03))


def data(seed=0, shape=(B, T, I)):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def pair(name, shape=(B, T, I), weights_seed=0, wrap=None, **kwargs):
    """Ours and the stock layer, built, with the same random weights; `wrap(module, layer)`
    wraps each (module: `pk` for ours, `keras.layers` for the stock one)."""
    layers = [getattr(mod, name)(H, **kwargs) for mod in (pk, keras.layers)]
    if wrap is not None:
        layers = [wrap(mod, layer) for mod, layer in zip((pk, keras.layers), layers)]
    for layer in layers:
        layer.build(shape)
    rng = np.random.default_rng(weights_seed)
    weights = [rng.normal(size=w.shape).astype(np.float32) * 0.5 if w.dtype.kind == "f" else w
               for w in layers[0].get_weights()]  # not the dropout seed
    for layer in layers:
        layer.set_weights(weights)
    return layers


def outputs_and_grads(layer, x, **call):
    """The layer's outputs, and the gradients of a random projection of them with respect to
    the trainable variables and `x`."""
    trainable = [v.value for v in layer.trainable_variables]
    other = [v.value for v in layer.non_trainable_variables]

    def loss(trainable, x):
        out, _ = layer.stateless_call(trainable, other, x, **call)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        total = sum(jnp.sum(o * jnp.cos(jnp.arange(1, o.size + 1, dtype=o.dtype).reshape(o.shape)))
                    for o in out)
        return total.astype(jnp.float32), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
        trainable, jnp.asarray(x))
    return out, grads


def zero_states(layer):  # layer.reset_state() fails in keras 3.0.1 with jax 0.10
    for v in layer.states:
        v.assign(np.zeros(v.shape, np.float32))


def assert_close(a, b, atol=1e-5):
    atol = references.float32_tol(atol)
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u, np.float32), np.asarray(v, np.float32),
                                   atol=atol, rtol=atol)


CASES = {
    "any mask+state": (dict(return_sequences=True, return_state=True), dict(mask=HOLES)),
    "backwards+right-padded+zero output": (
        dict(return_sequences=True, go_backwards=True, zero_output_for_mask=True),
        dict(mask=RIGHT)),
    "backwards+no bias+dropout": (
        dict(go_backwards=True, use_bias=False, dropout=0.4, seed=3), dict(training=True)),
}


@pytest.mark.parametrize("name, case", [
    ("LSTM", "any mask+state"), ("LSTM", "backwards+no bias+dropout"),
    ("GRU", "any mask+state"), ("GRU", "backwards+right-padded+zero output"),
    ("SimpleRNN", "backwards+no bias+dropout"),
])
def test_matches_stock_layer(name, case):
    """Outputs, states and gradients (weights and inputs) equal the stock layer's."""
    kwargs, call = CASES[case]
    ours, stock = pair(name, **kwargs)
    x = data()
    assert_close(outputs_and_grads(ours, x, **call), outputs_and_grads(stock, x, **call))
    assert ours.decision.implementation in ("scan", "cudnn")
    assert stock.get_config() | {"name": None} == ours.get_config() | {"name": None}


def test_stateful_batches():
    x0, x1 = data(1), data(2)
    ours, stock = pair("GRU", shape=(B, T, I), stateful=True, return_sequences=True)
    for x in (x0, x1):  # the second batch starts from the first one's final state
        assert_close(ours(x), stock(x))
    for layer in (ours, stock):
        zero_states(layer)
    assert_close(ours(x1), stock(x1))


BIDIRECTIONAL = {
    "any mask+state": (dict(return_sequences=True, return_state=True), "concat", dict(mask=HOLES)),
    "right-padded, last output": (dict(), "sum", dict(mask=RIGHT)),
    "no merge": (dict(return_sequences=True, return_state=True), None, dict(mask=HOLES)),
    "no mask": (dict(return_sequences=True), "ave", dict()),
    "last output+state": (dict(return_state=True), "mul", dict(mask=HOLES)),
}


def bidirectional_pair(name, merge_mode="concat", wrappers=None, **kwargs):
    """`pk.Bidirectional(pk.<name>)` and the stock pair (`wrappers`: other wrapper classes for
    ours and the stock layer), built, with the same random weights."""
    wrappers = dict(zip((pk, keras.layers), wrappers or (None, None)))
    return pair(name, weights_seed=4, **kwargs, wrap=lambda mod, layer: (
        wrappers[mod] or mod.Bidirectional)(layer, merge_mode=merge_mode))


@pytest.mark.parametrize("name, case", [
    ("LSTM", "any mask+state"), ("GRU", "right-padded, last output"), ("SimpleRNN", "no merge"),
    ("LSTM", "no mask"), ("GRU", "last output+state"),
])
def test_bidirectional_runs_one_call(name, case):
    """Both directions in one bidirectional call: outputs, states and gradients equal the stock
    wrapper's around the stock layers, for each merge mode, masks with holes and fully masked
    rows, the last output or all of them."""
    kwargs, merge_mode, call = BIDIRECTIONAL[case]
    ours, stock = bidirectional_pair(name, merge_mode, **kwargs)
    x = data(7)
    assert_close(outputs_and_grads(ours, x, **call), outputs_and_grads(stock, x, **call))
    d = ours.decision
    assert d.implementation in ("scan", "cudnn"), d
    assert "both directions in one bidirectional call" in d.notes, d


def test_bidirectional_initial_state_and_mixed_precision():
    ours, stock = bidirectional_pair("LSTM", return_sequences=True, return_state=True)
    rng = np.random.default_rng(8)
    states = [rng.normal(size=(B, H)).astype(np.float32) for _ in range(4)]
    x = data(9)
    call = dict(initial_state=states, mask=HOLES)
    assert_close(outputs_and_grads(ours, x, **call), outputs_and_grads(stock, x, **call))
    policy = "mixed_bfloat16"
    low = pk.Bidirectional(pk.GRU(H, return_sequences=True, dtype=policy), dtype=policy)
    low.build((B, T, I))
    (stock,) = bidirectional_pair("GRU", return_sequences=True)[1:]
    low.set_weights(stock.get_weights())
    y = low(x, mask=RIGHT)
    assert y.dtype == "bfloat16" and all(v.dtype == "float32" for v in low.weights)
    assert_close(y, stock(x, mask=RIGHT), atol=3e-2)


def test_bidirectional_two_calls_with_a_reason():
    """Dropout in training (Keras draws each direction's masks) runs the two layers, each on
    portable_rnn; the stock wrapper around portable_rnn layers also calls each layer."""
    kwargs = dict(dropout=0.3, recurrent_dropout=0.2, seed=5, return_sequences=True)
    ours, stock = bidirectional_pair("LSTM", **kwargs)
    x = data(3)
    call = dict(training=True, mask=HOLES)
    assert_close(outputs_and_grads(ours, x, **call), outputs_and_grads(stock, x, **call))
    d = ours.decision
    assert d.implementation == "scan", d
    assert "both directions in one bidirectional call" not in d.notes, d
    assert any("two calls: dropout in training" in n for n in d.notes), d
    ours, stock = bidirectional_pair("GRU", wrappers=(keras.layers.Bidirectional, None))
    assert_close(outputs_and_grads(ours, x, mask=HOLES), outputs_and_grads(stock, x, mask=HOLES))
    assert ours.forward_layer.decision.implementation in ("scan", "cudnn")


def test_bidirectional_saves_and_loads(tmp_path):
    def saved(layers):
        inputs = keras.Input((T, I))
        model = keras.Model(inputs, layers.Bidirectional(layers.GRU(H))(inputs))
        path = str(tmp_path / f"{layers.__name__}.keras")
        model.save(path)
        return model, path

    try:
        keras.saving.load_model(saved(keras.layers)[1])
    except ValueError as e:  # keras 3.0.1: "Layer 'gru_cell' expected 3 variables, ... 0"
        pytest.skip(f"keras {keras.__version__} cannot reload its own Bidirectional: {e}")
    model, path = saved(pk)
    loaded = keras.saving.load_model(path)
    layer = loaded.layers[1]
    assert type(layer) is pk.Bidirectional and type(layer.backward_layer) is pk.GRU
    x = data()
    assert_close(loaded(x), model(x))


@pytest.mark.parametrize("name, policy", [("LSTM", "mixed_bfloat16"), ("GRU", "mixed_float16")])
def test_mixed_precision(name, policy):
    """16-bit compute, float32 variables: within 3e-2 of the float32 stock layer (documented in
    docs/layers.md; Keras' own 16-bit loop keeps its state in 16 bits, portable_rnn in float32)."""
    ours = getattr(pk, name)(H, return_sequences=True, dtype=policy)
    (stock,) = pair(name, return_sequences=True)[1:]
    ours.build((B, T, I))
    ours.set_weights(stock.get_weights())
    x = data()
    y = ours(x, mask=RIGHT)
    assert y.dtype == policy.removeprefix("mixed_")
    assert all(v.dtype == "float32" for v in ours.weights)
    assert_close(y, stock(x, mask=RIGHT), atol=3e-2)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "SimpleRNN"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_integer_inputs_are_promoted_as_the_stock_layers_do(name, policy):
    """Integer and bool inputs run in the compute dtype, as the stock cells' first product with
    the kernel promotes them: the stock layer's outputs and states, alone and bidirectional."""
    x = np.random.default_rng(3).integers(-3, 4, size=(B, T, I))
    tol = 1e-5 if policy == "float32" else 3e-2  # 16-bit: the stock loop's state is 16-bit
    for wrap in (None, lambda mod, layer: mod.Bidirectional(layer)):
        ours, stock = pair(name, wrap=wrap, return_sequences=True, return_state=True,
                           dtype=policy)
        for ints in (x.astype(np.int32), x.astype(np.int8), x > 0):
            got = ours(ints, mask=HOLES)
            with jax.numpy_dtype_promotion("standard"):  # the stock cells promote implicitly
                want = stock(ints, mask=HOLES)
            assert [g.dtype for g in got] == [w.dtype for w in want]
            assert_close(got, want, atol=tol)
        assert ours.decision.implementation in ("scan", "cudnn"), ours.decision


@pytest.mark.parametrize("name", ["LSTM", "GRU", "SimpleRNN"])
def test_dropout_and_recurrent_dropout_in_training(name):
    """Keras' masks, one per sequence or (newer Keras, LSTM and GRU) one per gate, on the input
    and on the recurrent product: outputs and gradients equal the stock layer's, with masks and
    go_backwards. Where the stock layer's GRU also masks the state in its update-gate blend
    (older Keras), the stock loop runs and says why."""
    kwargs = dict(dropout=0.3, recurrent_dropout=0.4, seed=5, go_backwards=True,
                  return_sequences=True, return_state=True)
    ours, stock = pair(name, weights_seed=2, **kwargs)
    x = data(3)
    call = dict(training=True, mask=HOLES)
    got, want = outputs_and_grads(ours, x, **call), outputs_and_grads(stock, x, **call)
    assert_close(got, want)
    d = ours.decision
    assert not np.allclose(got[0][0], outputs_and_grads(ours, x, mask=HOLES)[0][0])
    per_gate = getattr(ours.cell, "dropout_mask_count", None) is not None
    if name == "GRU" and not per_gate:
        assert d.implementation == "keras" and "update-gate blend" in str(d), d
    else:
        assert d.implementation == "scan", d
        assert any("recurrent product reads h * mask" in n for n in d.notes), d
        assert per_gate == any("one input mask per gate" in n for n in d.notes), d


@pytest.mark.parametrize("name, kwargs, call, reason", [
    ("GRU", dict(reset_after=False, recurrent_activation="hard_sigmoid"), dict(),
     "recurrent_activation=hard_sigmoid"),
    ("LSTM", dict(activation="relu"), dict(), "activation=relu"),
    ("SimpleRNN", dict(activation="sigmoid"), dict(), "activation=sigmoid"),
])
def test_falls_back_to_the_stock_loop_with_a_reason(name, kwargs, call, reason):
    ours, stock = pair(name, weights_seed=1, **kwargs, return_sequences=True)
    x = data()
    assert_close(ours(x, **call), stock(x, **call))
    d = ours.decision
    assert d.implementation == "keras" and d.fell_back
    assert any(reason in r for r in d.rejected["portable_rnn"]), d
    assert reason in str(d)


def test_relu_simple_rnn_and_recurrent_dropout_at_inference_stay_on_portable_rnn():
    for name, kwargs in (("SimpleRNN", dict(activation="relu")),
                         ("LSTM", dict(recurrent_dropout=0.3))):
        ours, stock = pair(name, **kwargs)
        assert_close(ours(data()), stock(data()))
        assert ours.decision.implementation != "keras"


def test_other_backends_defer_to_the_stock_layer(monkeypatch):
    ours, stock = pair("LSTM")
    monkeypatch.setattr(keras.backend, "backend", lambda: "tensorflow")
    assert_close(ours(data()), stock(data()))
    assert ours.decision is None


def test_use_cudnn_true_names_the_reasons():
    if "use_cudnn" not in keras.layers.GRU.__init__.__code__.co_varnames:
        pytest.skip(f"keras {keras.__version__} has no use_cudnn argument")
    with pytest.raises(ValueError, match="cudnn"):
        pk.GRU(H, use_cudnn=True)(data())


def test_save_load_and_stock_weights(tmp_path):
    def model(layers):
        inputs = keras.Input((T, I))
        return keras.Model(inputs, keras.layers.Dense(2)(layers.LSTM(H)(inputs)))

    ours = model(pk)
    path = str(tmp_path / "m.keras")
    ours.save(path)
    x = data()
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.layers[1], pk.LSTM)
    assert_close(loaded(x), ours(x))
    stock = model(keras.layers)
    stock.load_weights(path)
    assert_close(stock(x), ours(x))
    assert type(stock.layers[1]) is keras.layers.LSTM


def test_fit_lowers_the_loss(monkeypatch):
    if not hasattr(jax, "spmd_mode"):  # keras 3.0.1's fit calls it; jax 0.10 removed it
        monkeypatch.setattr(jax, "spmd_mode", lambda mode: contextlib.nullcontext(),
                            raising=False)
    inputs = keras.Input((T, I))
    y = pk.LSTM(8)(keras.layers.Masking()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(y))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    x, target = data(5, (16, T, I)), np.random.default_rng(6).normal(size=(16, 1))
    loss = model.fit(x, target, epochs=5, batch_size=16, verbose=0).history["loss"]
    assert loss[-1] < 0.7 * loss[0], loss


def test_import_portable_rnn_does_not_import_keras():
    code = "import sys, portable_rnn; assert 'keras' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


KERAS_JSON = ("import json, os; json.dump({{'backend': {!r}}}, "
              "open(os.environ['KERAS_HOME'] + '/keras.json', 'w'))")


@pytest.mark.parametrize("setup, env, want", [
    ("", {}, "jax"),  # a new user: no keras.json, no KERAS_BACKEND, TensorFlow not needed
    (KERAS_JSON.format("tensorflow"), {}, "jax"),  # what Keras writes there by itself
    (KERAS_JSON.format("numpy"), {}, "numpy"),  # a backend chosen in keras.json
    ("", {"KERAS_BACKEND": "numpy"}, "numpy"),  # chosen in the environment
    ("import os; os.environ['KERAS_BACKEND'] = 'numpy'; import keras", {}, "numpy"),  # imported
])
def test_importing_the_layers_defaults_keras_to_jax(tmp_path, setup, env, want):
    """`from portable_rnn import keras` picks the JAX backend unless Keras is imported already
    or its backend was chosen (KERAS_BACKEND, or keras.json naming one other than Keras' own
    default, which Keras writes there by itself)."""
    code = (f"{setup}\nfrom portable_rnn import keras as pk\nimport keras\n"
            "print(keras.backend.backend(), pk.LSTM.__name__)")
    environ = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    environ.update(env, KERAS_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=environ, check=True,
                         capture_output=True, text=True).stdout
    assert out.split() == [want, "LSTM"]


def test_layer_modules_load_on_first_attribute_access():
    """`portable_rnn.linen`, `.nnx` and `.keras` work after `import portable_rnn` alone (as
    `flax.linen` after `import flax`), without importing any of them at `import portable_rnn`;
    without Keras, `portable_rnn.keras` is a missing attribute that names Keras, and
    `from portable_rnn import keras` the ModuleNotFoundError it always was."""
    code = """
import sys
import portable_rnn
assert not {"keras", "flax.linen", "flax.nnx", "portable_rnn.linen"} & set(sys.modules)
assert {"linen", "nnx", "keras"} <= set(dir(portable_rnn))
print(portable_rnn.linen.LSTM.__module__, portable_rnn.nnx.GRU.__module__,
      portable_rnn.keras.SimpleRNN.__module__)
try:
    portable_rnn.lstmm
except AttributeError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    assert out == ["portable_rnn.linen portable_rnn.nnx portable_rnn.keras",
                   "module 'portable_rnn' has no attribute 'lstmm'"]
    no_keras = """
import sys
sys.modules["keras"] = None  # as if Keras were not installed
import portable_rnn
assert not hasattr(portable_rnn, "keras")
try:
    portable_rnn.keras
except AttributeError as e:
    print(e)
try:
    from portable_rnn import keras
except ModuleNotFoundError as e:
    print(type(e).__name__, e.name)
"""
    out = subprocess.run([sys.executable, "-c", no_keras], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    assert out[0].startswith("module 'portable_rnn' has no attribute 'keras': portable_rnn.keras "
                             "needs 'keras'"), out
    assert out[1] == "ModuleNotFoundError keras", out


# --- ported from keras-team/keras keras/src/layers/rnn/*_test.py ------------------------------

SEQ = np.arange(72).reshape((3, 6, 4)).astype("float32")
SEQ24 = np.arange(24).reshape((2, 4, 3)).astype("float32")


@pytest.mark.parametrize("name, kwargs, expected", [
    ("LSTM", dict(), [0.6288687, 0.86899155, 0.9460773]),
    ("LSTM", dict(go_backwards=True), [0.35622165, 0.74789524, 0.8872726]),
    ("LSTM", dict(unroll=True), [0.6288687, 0.86899155, 0.9460773]),
    ("LSTM", dict(unit_forget_bias=False), [0.57019705, 0.8661914, 0.9459622]),
    ("LSTM", dict(use_bias=False), [0.54986924, 0.86226785, 0.9443936]),
    ("GRU", dict(), [0.5217289, 0.6371659, 0.39384964]),
])
def test_keras_correctness(name, kwargs, expected):
    out = getattr(pk, name)(3, **CONST, **kwargs)(SEQ)
    np.testing.assert_allclose(out, np.repeat(np.array(expected)[:, None], 3, 1), atol=F32)


def test_keras_simple_rnn_correctness():
    out = pk.SimpleRNN(4, **CONST)(np.arange(24).reshape((2, 3, 4)).astype("float32"))
    np.testing.assert_allclose(out, np.repeat([[0.405432], [0.73605347]], 4, 1), atol=F32)


def test_keras_statefulness_and_initial_state():
    layer = pk.LSTM(4, stateful=True, **CONST)
    seq = np.arange(24).reshape((2, 3, 4)).astype("float32")
    for _ in range(2):
        layer(seq)
        np.testing.assert_allclose(layer(seq), np.repeat([[0.3124785], [0.6863672]], 4, 1),
                                   atol=F32)
        zero_states(layer)
    h0 = np.arange(4).reshape((2, 2)).astype("float32")
    out = pk.LSTM(2, **CONST)(SEQ24, initial_state=[h0, h0])
    np.testing.assert_allclose(out, [[0.20574439, 0.3558822], [0.64930826, 0.66276]], atol=F32)
    out = pk.GRU(2, go_backwards=True, **CONST)(SEQ24, initial_state=h0)
    np.testing.assert_allclose(out, [[0.13486053, 0.23261218], [0.78257304, 0.9691353]],
                               atol=F32)


def test_keras_masking():
    mask = np.array([[True, True, True, False], [True, True, False, False]])
    out = pk.LSTM(2, return_sequences=True, **CONST)(SEQ24, mask=mask)
    np.testing.assert_allclose(out[1, :, 0], [0.14185596, 0.28556206, 0.28556206, 0.28556206],
                               atol=F32)
    out = pk.LSTM(2, return_sequences=True, zero_output_for_mask=True, **CONST)(SEQ24, mask=mask)
    np.testing.assert_allclose(out[0, :, 0], [0.0158891, 0.05552048, 0.11755939, 0.0], atol=F32)
    backwards = np.array([[False, True, True, True], [False, False, True, True]])
    out = pk.LSTM(2, go_backwards=True, **CONST)(SEQ24, mask=backwards)
    np.testing.assert_allclose(out, [[0.15341201, 0.15341201], [0.3844719, 0.3844719]],
                               atol=F32)
    holes = np.array([[True, True, False, True], [True, False, False, True]])
    out = pk.GRU(2, return_sequences=True, **CONST)(SEQ24, mask=holes)
    np.testing.assert_allclose(out[0, :, 0], [0.03606692, 0.09497581, 0.09497581, 0.19393763],
                               atol=F32)
    out = pk.SimpleRNN(2, return_sequences=True, **CONST)(SEQ24, mask=holes)
    np.testing.assert_allclose(out[0, :, 0], [0.0599281, 0.15122814, 0.15122814, 0.32394567],
                               atol=F32)


def test_keras_bidirectional_output_shape():
    """keras `bidirectional_test.py::test_output_shape`: integer inputs, every merge mode, with
    and without states; the shapes are the stock wrapper's (Keras 3.0's `compute_output_shape`
    fails for some of these)."""
    x = np.array([[[101, 202], [303, 404]]])
    for merge_mode in ["ave", "concat", "mul", "sum", None]:
        for return_state in (True, False):
            layers = [mod.Bidirectional(mod.LSTM(2, return_state=return_state),
                                        merge_mode=merge_mode) for mod in (pk, keras.layers)]
            with jax.numpy_dtype_promotion("standard"):  # the stock cells promote implicitly
                want = jax.tree.map(jnp.shape, layers[1](x))
            assert jax.tree.map(jnp.shape, layers[0](x)) == want
            assert layers[0].decision.implementation in ("scan", "cudnn"), layers[0].decision

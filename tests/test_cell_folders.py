"""A cell is one folder plus one registry line: outside its folder, a family's name appears only
in the registry (`recurrent/families.py`) and the few files of `ALLOWED`, and the generic code
reads every per-family fact from its `Family` (read from every module's tokens): the functions,
`portable_rnn`'s exports and the layers are made from the registry. A family that lacks a peer
(no PyTorch module, no Keras layer, no cuDNN mode) is told apart with a message, and a new op's
preference is a `policy` keyword without an edit of the dispatcher."""

from __future__ import annotations

import ast
import dataclasses
import io
import pathlib
import tokenize
import types

import jax
import numpy as np
import pytest

import portable_rnn
from portable_rnn._src.core import dispatch, native
from portable_rnn._src.recurrent.families import FAMILIES
from portable_rnn._src.recurrent.ops import OPS
from portable_rnn._src.recurrent.routes.cudnn_ffi import call as ffi_call
from portable_rnn._src.recurrent.routes.cudnn_ffi import route as ffi_route

pytestmark = pytest.mark.cpu  # about the package's sources and messages

PACKAGE = pathlib.Path(portable_rnn.__file__).resolve().parent
RECURRENT = PACKAGE / "_src" / "recurrent"

# Where a family's name belongs outside its folder: the registry of cells.
REGISTRIES = {"_src/recurrent/families.py"}
# Files that still name families, each with the reason.
ALLOWED = {
    # policy(lstm=None, attention=None, ...): the public signature's positional arguments; every
    # other op's preference is a keyword derived from the registry of routes.
    "_src/core/dispatch.py": {"lstm"},
    # The documentation's rule tables: every family's tables and rows come from the registry;
    # the cases about one family's own options and routes name it (the LSTM's jaxlib cuDNN
    # variants and Pallas limits, a GRU call with a dot algorithm).
    "_src/tools/rules.py": {"lstm", "gru"},
    # The self-test's case table: every family's cases come from the registry (`family_cases`);
    # `SPECIFIC_CASES` names the families of the cases about their own routes and options (the
    # LSTM's cuDNN and projection cases, the simple RNN's relu).
    "_src/tools/selftest.py": {"lstm", "simple_rnn"},
}


def names_in(path: pathlib.Path) -> set[str]:
    """The registered families' names that appear in `path` as an identifier or as a string
    literal of exactly that name."""
    found = set()
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        value = tok.string
        if tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):  # an f-string: its parts are not literals
                continue
        if tok.type in (tokenize.NAME, tokenize.STRING) and value in FAMILIES:
            found.add(value)
    return found


def test_the_scanner_finds_identifiers_and_literals(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('x = {"gru": 1}\nfrom a.lstm import b\ny = "simple_rnn is"\n'
                      'z = init_gru_weight\n"""about the lstm"""\n')
    assert names_in(source) == {"gru", "lstm"}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_is_named_only_in_its_folder_and_the_registries(name):
    own = RECURRENT / name
    naming = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if own in path.parents or rel in REGISTRIES:
            continue
        if name in names_in(path) and name not in ALLOWED.get(rel, ()):
            naming.append(rel)
    assert not naming, f"{name!r} is named outside its folder and the registry in: {naming}"


def test_the_allow_list_is_current():
    """An allowed file that no longer names a family leaves the list."""
    stale = {rel: names - names_in(PACKAGE / rel) for rel, names in ALLOWED.items()}
    assert not any(stale.values()), f"names no longer found: {stale}"


def test_every_family_is_registered_with_its_folder():
    assert set(OPS) == set(FAMILIES)
    for name, fam in FAMILIES.items():
        assert (RECURRENT / name / "family.py").is_file()
        assert OPS[name].family is fam


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_float64_reference_shares_no_code_with_the_cell(name):
    """A family's reference step imports the generic reference loop and JAX, nothing else of
    the package: the self-test compares the cell with something that is not the cell."""
    tree = ast.parse((RECURRENT / name / "reference.py").read_text())
    imported = {(node.level, node.module) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.level}
    assert imported == {(2, "reference")}, imported


# --- peers a family may lack --------------------------------------------------------------------

def _without(name, **peers):
    return dataclasses.replace(FAMILIES[name], **peers)


def test_a_family_without_a_pytorch_module_says_so():
    fam = _without("gru", torch_module=None)
    w = np.zeros(OPS["gru"].num_params(2, 3, 1, False), np.float32)
    from portable_rnn._src.recurrent import convert
    with pytest.raises(ValueError, match=r"^the gru cell has no PyTorch counterpart\.$"):
        convert.weights_to_torch(w, 2, 3, 1, False, "", fam)
    with pytest.raises(ValueError, match="no PyTorch counterpart"):
        convert.torch_layout({}, "", fam)


def test_a_family_without_a_keras_layer_says_so():
    fam = _without("simple_rnn", keras_layer=None)
    w = np.zeros(OPS["simple_rnn"].num_params(2, 3, 1, False), np.float32)
    from portable_rnn._src.recurrent import keras_weights
    with pytest.raises(ValueError, match=r"^the simple_rnn cell has no Keras counterpart\.$"):
        keras_weights.weights_to_keras(w, 2, 3, 1, False, fam)
    with pytest.raises(ValueError, match="no Keras counterpart"):
        keras_weights.keras_layout([], fam)


def test_a_family_without_a_flax_cell_says_so():
    fam = _without("lstm", flax_cells=None, flax_cell=None)
    w = np.zeros(OPS["lstm"].num_params(2, 3, 1, False), np.float32)
    from portable_rnn._src.recurrent import convert
    with pytest.raises(ValueError, match="the lstm cell has no Flax counterpart"):
        convert.weights_to_flax(w, 2, 3, 1, False, fam)


@dataclasses.dataclass(frozen=True)
class _Cell:
    family: object
    nonlinearity: str = "tanh"


@pytest.mark.parametrize("name, options, mode", [
    ("lstm", {}, 2), ("gru", {}, 3),
    ("simple_rnn", dict(nonlinearity="relu"), 0), ("simple_rnn", dict(nonlinearity="tanh"), 1),
])
def test_cudnn_modes_are_cudnns(name, options, mode):
    """cudnnRNNMode_t (cudnn.h): CUDNN_RNN_RELU 0, CUDNN_RNN_TANH 1, CUDNN_LSTM 2, CUDNN_GRU 3."""
    assert ffi_call.mode_of(_Cell(FAMILIES[name], **options)) == mode
    assert ffi_call.family_rejects(FAMILIES[name]) == []


def test_a_family_without_a_cudnn_mode_is_refused_with_a_reason():
    fam = _without("gru", cudnn_mode=None)
    assert ffi_call.family_rejects(fam) == [
        "cuDNN has no gru cell (no cudnnRNNMode_t computes it)"]
    # the route asks for the mode only once the build succeeded: a refusal, not a KeyError
    with pytest.raises(native.Unavailable, match="cuDNN has no gru cell"):
        ffi_call.mode_of(_Cell(fam))
    # and the route refuses it first, whatever the machine
    gpu = portable_rnn.Capabilities("gpu", 91300, (9, 0), "NVIDIA H100")
    assert ffi_route.rejects(types.SimpleNamespace(family=fam), gpu) == (
        "cuDNN has no gru cell (no cudnnRNNMode_t computes it)",)


def test_a_family_without_a_cudnn_cell_has_a_cudnn_route_that_says_so():
    """``cudnn_name`` None: the ``cudnn`` route rejects every call on every machine with that
    one reason (no "cuDNN None", no KeyError)."""
    from portable_rnn._src.recurrent.routes import cudnn
    fam = _without("gru", cudnn_name=None, cudnn_mode=None)
    gpu = portable_rnn.Capabilities("gpu", 91300, (9, 0), "NVIDIA H100")
    for caps in (gpu, portable_rnn.Capabilities("cpu")):
        assert cudnn.ROUTE.rejects(types.SimpleNamespace(family=fam), caps) == (
            "cuDNN has no gru cell (no cudnnRNNMode_t computes it): there is no cuDNN kernel to "
            "call",)


# --- policy keywords from the registry ----------------------------------------------------------

def test_a_registered_op_is_a_policy_keyword():
    scan = dispatch.Route("scan", rejects=lambda call, caps: (), notes=lambda call, caps: (),
                          run=None)
    dispatch.register("toy_rnn", scan)
    try:
        assert dispatch.current_policy().toy_rnn is None
        with portable_rnn.policy(toy_rnn="scan") as p:
            assert p.toy_rnn == "scan" and p.lstm is None
        with pytest.raises(ValueError, match=r"`toy_rnn` must be one of 'scan'; got 'x'"):
            portable_rnn.policy(toy_rnn="x")
    finally:
        dispatch._ROUTES.pop("toy_rnn")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'toy_rnn'"):
        portable_rnn.policy(toy_rnn="scan")


def test_policy_keywords_keep_working():
    with portable_rnn.policy("cudnn", "xla", gru="scan", simple_rnn="pallas",
                             lstm_low_precision="upcast") as outer:
        assert (outer.lstm, outer.attention, outer.gru, outer.simple_rnn) == (
            "cudnn", "xla", "scan", "pallas")
        assert outer.lstm_low_precision == "upcast"
        with portable_rnn.policy(gru="cudnn_ffi") as inner:  # the enclosing settings stay
            assert (inner.lstm, inner.gru, inner.lstm_low_precision) == (
                "cudnn", "cudnn_ffi", "upcast")
        assert dispatch.current_policy() == outer
    assert dispatch.current_policy().lstm_low_precision == "scan"  # the registered default
    with pytest.raises(AttributeError):
        dispatch.current_policy().no_such_op  # noqa: B018


def test_the_lstm_option_comes_from_its_folder():
    assert FAMILIES["lstm"].policy_options == {"lstm_low_precision": ("scan", "upcast")}
    assert dispatch._OPTIONS["lstm_low_precision"] == ("scan", "upcast")


def test_a_layer_checks_the_options_its_family_registers():
    with pytest.raises(ValueError, match="`nonlinearity` must be one of 'tanh', 'relu'"):
        portable_rnn.linen.SimpleRNN(hidden_size=4, nonlinearity="gelu").init(
            jax.random.key(0), np.zeros((1, 2, 3), np.float32))


# --- a registered family gets its functions and layers, with no edit outside its folder -------

def _toy(monkeypatch, **facts):
    """A family registered as a new folder would be: the GRU's cell and equations under another
    name, with `facts` changed. The registry's dicts are patched back after the test."""
    from portable_rnn._src.recurrent import families, functions, ops
    from portable_rnn._src.recurrent.cell import Folder
    from portable_rnn._src.recurrent.gru import FOLDER

    fam = dataclasses.replace(FAMILIES["gru"], name="toy_gru", title="ToyGRU", **facts)
    folder = Folder(fam, FOLDER.cell, FOLDER.float64)
    made = functions.make(folder)
    for name in made:
        monkeypatch.delitem(vars(functions), name)  # what `make` added, taken out again
    monkeypatch.setitem(dispatch._ROUTES, "toy_gru", dispatch._ROUTES.pop("toy_gru"))
    monkeypatch.setitem(families.FOLDERS, fam.name, folder)
    monkeypatch.setitem(families.FAMILIES, fam.name, fam)
    op = ops.Op(fam, made["toy_gru"], made["explain_toy_gru"], made["get_num_params_in_toy_gru"],
                made["init_toy_gru_weight"], folder.float64, (), made)
    monkeypatch.setitem(ops.OPS, fam.name, op)
    return fam, made


def test_a_registered_family_gets_its_functions(monkeypatch):
    fam, made = _toy(monkeypatch, flax_cells=None, flax_cell=None)
    assert list(made) == [
        "toy_gru", "explain_toy_gru", "get_num_params_in_toy_gru", "init_toy_gru_weight",
        "unpack_toy_gru_weights", "pack_toy_gru_weights", "toy_gru_weights_from_torch",
        "toy_gru_weights_to_torch", "toy_gru_weights_from_keras", "toy_gru_weights_to_keras"]
    assert "Examples:" in made["toy_gru"].__doc__ and "toy_gru_weights_from_flax" not in made
    w = made["init_toy_gru_weight"](jax.random.key(0), 3, 4, 1, True)
    x, h0 = np.ones((2, 5, 3), np.float32), np.zeros((2, 2, 4), np.float32)
    args = (w, np.array([5, 2]), 3, 4, 1, 0.0, True)
    want = portable_rnn.gru(x, h0, *args)  # the same cell: the same numbers
    got = made["toy_gru"](x, h0, *args)
    for g, r in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
    assert made["explain_toy_gru"](x, h0, *args).op == "toy_gru"
    with pytest.raises(TypeError, match=r"^toy_gru\(\) missing a required argument: 'x'"):
        made["toy_gru"]()
    with pytest.raises(TypeError, match=r"toy_gru_weights_to_torch\(\) got an unexpected keyword "
                                        r"argument 'proj_size'"):
        made["toy_gru_weights_to_torch"](w, 3, 4, 1, True, proj_size=2)


def test_a_registered_family_gets_its_layers(monkeypatch):
    pytest.importorskip("equinox")
    import flax

    from portable_rnn import equinox, linen, nnx  # imported before the toy is registered
    fam, _ = _toy(monkeypatch, eqx_cell=None)

    made = {}
    for module in (linen, nnx, equinox):
        namespace = {"__name__": module.__name__}
        assert module._classes(namespace, [fam]) == ["ToyGRU"]
        made[module] = namespace["ToyGRU"]
        assert made[module].__module__ == module.__name__
        assert "Examples:" in made[module].__doc__ and "toy_gru" in made[module].__doc__
    x = np.ones((2, 5, 3), np.float32)
    layer = made[linen](hidden_size=4)
    variables = layer.init(jax.random.key(0), x)
    same = portable_rnn.linen.GRU(hidden_size=4)
    np.testing.assert_array_equal(np.asarray(layer.apply(variables, x)),
                                  np.asarray(same.apply(variables, x)))
    model = made[nnx](3, 4, rngs=flax.nnx.Rngs(0))
    assert model(x).shape == (2, 5, 4)
    assert not hasattr(made[equinox], "from_eqx_cells")  # Equinox has no such cell
    assert made[equinox](3, 4, key=jax.random.key(0))(x).shape == (2, 5, 4)


def test_a_new_layer_option_needs_no_edit_outside_the_folder(monkeypatch):
    """A family's own layer option (here ``gain``, which this toy's cell ignores) becomes an
    attribute of its Linen, NNX and Equinox layers and a field of their `Config`, with the
    family's default where not given; another family's layer refuses it by name."""
    pytest.importorskip("equinox")
    import flax

    from portable_rnn import equinox, linen, nnx
    from portable_rnn._src.layers import params

    fam, _ = _toy(monkeypatch, layer_options={"gain": 1.0}, call_options=(),
                  option_docs={"gain": ("float", "a toy option")})
    made = {}
    for module in (linen, nnx, equinox):
        namespace = {"__name__": module.__name__}
        module._classes(namespace, [fam])
        made[module] = namespace["ToyGRU"]
    assert params.config_of(made[linen](hidden_size=4, gain=2.0)).option("gain") == 2.0
    assert params.config_of(made[linen](hidden_size=4)).option("gain") == 1.0
    assert made[nnx](3, 4, gain=2.0, rngs=flax.nnx.Rngs(0)).gain == 2.0
    assert made[equinox](3, 4, gain=3.0, key=jax.random.key(0)).gain == 3.0
    assert params.Config.make("toy_gru", 4).options == (("gain", 1.0),)
    with pytest.raises(TypeError, match=r"`gain` is not an argument of nnx\.GRU"):
        portable_rnn.nnx.GRU(3, 4, gain=2.0, rngs=flax.nnx.Rngs(0))


def test_a_family_claims_a_keras_variant_by_its_config(monkeypatch):
    """A second family for ``keras.layers.GRU``, claiming ``reset_after=False``: the generated
    layer runs it for such layers, the GRU for ``reset_after=True``, and the stock loop for a
    configuration no family claims."""
    keras = pytest.importorskip("keras")
    from portable_rnn import keras as pkeras  # imported before the toy is registered

    # Keras' reset_after=False GRU keeps one bias row
    fam, _ = _toy(monkeypatch, keras_config={"reset_after": False}, keras_bias_rows=1)

    both = pkeras._layer("GRU", (FAMILIES["gru"], fam))
    x = np.ones((2, 5, 3), np.float32)
    for reset_after, op in ((True, "gru"), (False, "toy_gru")):
        layer = both(4, reset_after=reset_after)
        layer(x)
        assert layer._family == op and layer.decision.op == op, layer.decision
        assert layer.decision.implementation != "keras", layer.decision
    alone = pkeras._layer("GRU", (FAMILIES["gru"],))(4, reset_after=False)
    assert keras.ops.shape(alone(x)) == (2, 4)
    assert alone.decision.implementation == "keras"
    (reason,) = alone.decision.rejected["portable_rnn"]
    assert reason == ("reset_after=False: no portable_rnn family computes keras.layers.GRU so "
                      "configured (they compute gru: reset_after=True)")

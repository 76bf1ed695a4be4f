"""A cell is one folder plus one registry line: outside its folder, a family's name appears only
in the registries and the public re-exports, and the generic code reads every per-family fact
from its `Family` (read from every module's tokens). A family that lacks a peer (no PyTorch
module, no Keras layer, no cuDNN mode) is told apart with a message, and a new op's preference
is a `policy` keyword without an edit of the dispatcher."""

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
from portable_rnn._src.recurrent.cudnn_ffi import call as ffi_call
from portable_rnn._src.recurrent.cudnn_ffi import route as ffi_route
from portable_rnn._src.recurrent.families import FAMILIES
from portable_rnn._src.recurrent.ops import OPS

pytestmark = pytest.mark.cpu  # about the package's sources and messages

PACKAGE = pathlib.Path(portable_rnn.__file__).resolve().parent
RECURRENT = PACKAGE / "_src" / "recurrent"

# Where a family's name belongs outside its folder: the registries and the public re-exports
# (the package's functions, and the layer modules' classes per family).
REGISTRIES = {"_src/recurrent/families.py", "_src/recurrent/ops.py"}
PUBLIC = {"__init__.py", "linen.py", "nnx.py", "keras.py", "equinox.py"}
# Files that still name families, each with the reason.
ALLOWED = {
    # policy(lstm=None, attention=None, ...): the public signature's positional arguments; every
    # other op's preference is a keyword derived from the registry of routes.
    "_src/core/dispatch.py": {"lstm"},
    # The documentation's rule tables: a case per family (the LSTM's jaxlib cuDNN variants and
    # the projected LSTM among them), titled per family.
    "_src/tools/rules.py": {"lstm", "gru", "simple_rnn"},
    # The self-test's case table: the cases of each family (the LSTM's cuDNN cases among them);
    # ops, weights and float64 references come from the registry.
    "_src/tools/selftest.py": {"lstm", "gru", "simple_rnn"},
    # Measurements, written by benchmarks/tpu_recurrent_kernel.py: the shape classes measured
    # (a family without a row is left to the scan path by the automatic choice).
    "_src/recurrent/pallas_table.py": {"lstm", "gru"},
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
        if own in path.parents or rel in REGISTRIES | PUBLIC:
            continue
        if name in names_in(path) and name not in ALLOWED.get(rel, ()):
            naming.append(rel)
    assert not naming, (f"{name!r} is named outside its folder, the registries and the public "
                        f"modules in: {naming}")


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

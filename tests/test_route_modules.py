"""A route is one module named after it, plus one registry line: each op's routes live in its
``routes/`` folder (`attention/routes/`, `recurrent/routes/`), one module (or package) per
registered route, and `routes.ROUTES` is the registry. Outside its module a route's name appears
only in the files of `ALLOWED`, each with the reason, so a reader finds a route by listing one
folder and a new route needs no edit elsewhere (the toy routes below)."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import pathlib
import sys
import textwrap
import tokenize

import numpy as np
import pytest

import portable_rnn
from portable_rnn._src.attention import routes as attention_routes
from portable_rnn._src.core import dispatch
from portable_rnn._src.recurrent import routes as recurrent_routes
from portable_rnn._src.recurrent.families import FAMILIES

pytestmark = pytest.mark.cpu  # about the package's sources and its registry

PACKAGE = pathlib.Path(portable_rnn.__file__).resolve().parent
FOLDERS = {"attention": attention_routes, "recurrent": recurrent_routes}
NAMES = {op: tuple(r.name for r in m.ROUTES) for op, m in FOLDERS.items()}
ALL_NAMES = {n for names in NAMES.values() for n in names}

# Where a route's name may appear outside its own module, with the reason.
ALLOWED = {
    # The routing model's cost terms and stated rules: which route a rule prefers, and the
    # variants (block sizes, the input projection's place) each timed route has.
    "_src/attention/cost.py": {"chunked", "cudnn", "flash", "splash", "xla"},
    "_src/recurrent/cost.py": {"cudnn", "pallas", "scan"},
    # The LSTM's policy option `lstm_low_precision`: "scan" (the default) or "upcast" to cuDNN.
    "_src/recurrent/lstm/family.py": {"scan"},
    # Keras' `use_cudnn` argument maps to a route: True -> "cudnn", False -> "scan".
    "keras.py": {"cudnn", "scan"},
    # The documentation's rule tables and the self-test's cases about one route's own rules.
    "_src/tools/rules.py": {"cudnn", "pallas"},
    "_src/tools/selftest.py": {"cudnn", "cudnn_ffi", "pallas", "scan", "splash", "xla"},
    # XLA's FFI header path (xla/ffi/api/ffi.h), not the route.
    "_src/core/native.py": {"xla"},
}


def literals_in(path: pathlib.Path) -> set[str]:
    """The route names that appear in `path` as a string literal of exactly that name."""
    found = set()
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type != tokenize.STRING:
            continue
        try:
            value = ast.literal_eval(tok.string)
        except (ValueError, SyntaxError):  # an f-string: its parts are not literals
            continue
        if value in ALL_NAMES:
            found.add(value)
    return found


def own_files(op: str, name: str) -> set[str]:
    """The route's module, or every file of its package."""
    base = PACKAGE / "_src" / op / "routes"
    files = [base / f"{name}.py"] if (base / f"{name}.py").is_file() else \
        sorted((base / name).rglob("*.py"))
    return {p.relative_to(PACKAGE).as_posix() for p in files}


def files_naming(name: str) -> list[str]:
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                  if name in literals_in(p))


def test_the_scanner_finds_literals_only(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('a = "splash"\nb = splash\nc = f"{x}scan"\nd = "scan path"\ne = "xla"\n')
    assert literals_in(source) == {"splash", "xla"}


@pytest.mark.parametrize("op", sorted(FOLDERS))
def test_the_routes_folder_holds_the_registered_routes_and_nothing_else(op):
    folder = PACKAGE / "_src" / op / "routes"
    entries = {p.stem if p.is_file() else p.name for p in folder.iterdir()
               if p.name != "__init__.py" and not p.name.startswith((".", "__pycache__"))}
    assert entries == set(NAMES[op])


@pytest.mark.parametrize("op", sorted(FOLDERS))
def test_each_route_is_defined_in_the_module_named_after_it(op):
    for route in FOLDERS[op].ROUTES:
        module = inspect.getmodule(route.rejects).__name__
        assert module.startswith(f"portable_rnn._src.{op}.routes.{route.name}"), (
            route.name, module)
        owner = importlib.import_module(f"portable_rnn._src.{op}.routes.{route.name}")
        assert owner.ROUTE is route


def test_every_op_registers_its_folders_routes_in_order():
    assert tuple(dispatch.implementations("attention")) == NAMES["attention"]
    for name in FAMILIES:
        assert tuple(dispatch.implementations(name)) == NAMES["recurrent"]


@pytest.mark.parametrize("name", sorted(ALL_NAMES))
def test_a_route_is_named_only_in_its_module_and_the_allowed_files(name):
    own = set().union(*(own_files(op, name) for op, names in NAMES.items() if name in names))
    elsewhere = [rel for rel in files_naming(name)
                 if rel not in own and name not in ALLOWED.get(rel, ())]
    assert not elsewhere, f"{name!r} is named outside its module and the allow list: {elsewhere}"


def test_the_allow_list_is_current():
    """An allowed file that no longer names a route leaves the list."""
    stale = {rel: names - literals_in(PACKAGE / rel) for rel, names in ALLOWED.items()}
    assert not any(stale.values()), f"names no longer found: {stale}"


# --- a toy route: its module plus one registry line ---------------------------------------------

TOY = '''
"""A toy route: the scan route's run under another name, for the calls of even batch."""
from portable_rnn._src.core import dispatch
from portable_rnn._src.recurrent.routes import scan

ran = []


def _run(d, call, *args):
    ran.append(call.batch)
    return scan.ROUTE.run(d, call, *args)


ROUTE = dispatch.Route(
    "toy", rejects=lambda call, caps: () if call.batch % 2 == 0 else ("odd batch",),
    notes=lambda call, caps: ("the toy route",), run=_run)
'''


def test_a_toy_recurrent_route_is_its_module_and_one_registry_line(tmp_path, monkeypatch):
    (tmp_path / "toy_route.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    toy = importlib.import_module("toy_route")
    monkeypatch.setattr(recurrent_routes, "ROUTES", (toy.ROUTE, *recurrent_routes.ROUTES))
    monkeypatch.setitem(dispatch._ROUTES, "gru", dispatch._ROUTES["gru"])
    dispatch.register("gru", *recurrent_routes.ROUTES)  # as `functions.make` does at import
    assert dispatch.implementations("gru")[0] == "toy"
    w = portable_rnn.init_gru_weight(portable_rnn_key(), 3, 4, 1, False)
    x, h0 = np.ones((2, 5, 3), np.float32), np.zeros((1, 2, 4), np.float32)
    d = portable_rnn.explain_gru(x, h0, w, None, 3, 4, 1, 0.0, False)
    assert d.implementation == "toy" and "the toy route" in d.notes
    got = portable_rnn.gru(x, h0, w, None, 3, 4, 1, 0.0, False)
    want = portable_rnn.gru(x, h0, w, None, 3, 4, 1, 0.0, False, implementation="scan")
    assert toy.ran == [2]
    for g, r in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
    odd = portable_rnn.explain_gru(x[:1], h0[:, :1], w, None, 3, 4, 1, 0.0, False)
    assert odd.implementation != "toy" and odd.rejected["toy"] == ("odd batch",)
    with portable_rnn.policy(gru="toy"):  # a policy keyword value with no edit elsewhere
        assert portable_rnn.explain_gru(x, h0, w, None, 3, 4, 1, 0.0, False).implementation \
            == "toy"
    sys.modules.pop("toy_route")


def test_a_toy_attention_route_is_its_module_and_one_registry_line(tmp_path, monkeypatch):
    (tmp_path / "toy_attention.py").write_text(textwrap.dedent('''
        from portable_rnn._src.attention.routes import xla
        from portable_rnn._src.core import dispatch

        ROUTE = dispatch.Route("toy", rejects=lambda call, caps: (),
                               notes=lambda call, caps: ("the toy route",), run=xla.ROUTE.run)
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    toy = importlib.import_module("toy_attention")
    monkeypatch.setattr(attention_routes, "ROUTES", (toy.ROUTE, *attention_routes.ROUTES))
    monkeypatch.setitem(dispatch._ROUTES, "attention", dispatch._ROUTES["attention"])
    dispatch.register("attention", *attention_routes.ROUTES)  # as `attention.api` does
    q = np.ones((1, 4, 2, 8), np.float32)
    d = portable_rnn.explain_attention(q, q, q)
    assert d.implementation == "toy" and "the toy route" in d.notes
    np.testing.assert_array_equal(
        np.asarray(portable_rnn.dot_product_attention(q, q, q)),
        np.asarray(portable_rnn.dot_product_attention(q, q, q, implementation="xla")))
    sys.modules.pop("toy_attention")


def portable_rnn_key():
    import jax

    return jax.random.key(0)

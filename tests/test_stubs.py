"""The public modules' type stubs (``portable_rnn/*.pyi``): they are the generator's output for
the registry as it is, each signature in them is the runtime one, and a typed use of the API
(`tests/typing/usage.py`) and the examples type-check with no error.

The generator is `portable_rnn._src.tools.stubs`; regenerate the stubs with
``python -m portable_rnn._src.tools.stubs``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import pathlib
import shutil
import subprocess
import sys

import jax.numpy as jnp
import pytest

import portable_rnn
from portable_rnn._src.core import dispatch
from portable_rnn._src.recurrent.families import FAMILIES
from portable_rnn._src.tools import stubs

pytestmark = pytest.mark.cpu  # about the package's surface

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYER_MODULES = tuple(stubs.LAYER_MODULES)
_P = inspect.Parameter
_KINDS = {"posonlyargs": _P.POSITIONAL_ONLY, "args": _P.POSITIONAL_OR_KEYWORD,
          "kwonlyargs": _P.KEYWORD_ONLY}


def _needs_extras() -> None:
    for extra in ("keras", "equinox"):
        if importlib.util.find_spec(extra) is None:
            pytest.skip(f"the stubs are written from every layer module: needs {extra} (the "
                        f"{extra} extra)")


def _module(name: str):
    if name in ("keras", "equinox") and importlib.util.find_spec(name) is None:
        pytest.skip(f"needs {name} (the {name} extra)")
    return portable_rnn if name == "__init__" else importlib.import_module(f"portable_rnn.{name}")


def _stub(name: str) -> ast.Module:
    return ast.parse((ROOT / "portable_rnn" / f"{name}.pyi").read_text())


@dataclasses.dataclass
class StubParameter:
    name: str
    kind: inspect._ParameterKind
    default: ast.expr | None  # None: no default


def _stub_parameters(node: ast.FunctionDef) -> list[StubParameter]:
    """A stub function's parameters, in order, with their kinds and default expressions."""
    a = node.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [StubParameter(p.arg, _P.POSITIONAL_ONLY if p in a.posonlyargs
                         else _P.POSITIONAL_OR_KEYWORD, d) for p, d in zip(positional, defaults)]
    if a.vararg:
        out.append(StubParameter(a.vararg.arg, _P.VAR_POSITIONAL, None))
    out += [StubParameter(p.arg, _P.KEYWORD_ONLY, d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append(StubParameter(a.kwarg.arg, _P.VAR_KEYWORD, None))
    return out


def _same_default(stub: ast.expr | None, runtime) -> bool:
    """Whether a stub's default expression is the runtime default (``...`` stands for any)."""
    if stub is None:
        return runtime is _P.empty
    if runtime is _P.empty:
        return False
    if isinstance(stub, ast.Constant) and stub.value is Ellipsis:
        return True
    value = eval(ast.unparse(stub), {"jnp": jnp})  # the stub's own text
    return value is runtime or (type(value) is type(runtime) and value == runtime)


def assert_same_signature(stub: ast.FunctionDef, obj, options: dict | None = None) -> None:
    """The stub's parameters are `obj`'s: names, kinds and defaults in order. `options`: the
    keyword-only parameters (name -> default) that the stub writes in place of `obj`'s
    ``**kwargs``."""
    runtime = list(inspect.signature(obj).parameters.values())
    written = _stub_parameters(stub)
    if options is not None:
        assert runtime[-1].kind is _P.VAR_KEYWORD, (stub.name, runtime)
        runtime = runtime[:-1]
        extra, written = written[len(runtime):], written[:len(runtime)]
        assert {p.name for p in extra} == set(options), (stub.name, extra, options)
        for p in extra:
            assert p.kind is _P.KEYWORD_ONLY and _same_default(p.default, options[p.name]), p
    assert [p.name for p in written] == [p.name for p in runtime], stub.name
    for w, r in zip(written, runtime):
        assert w.kind == r.kind, (stub.name, w.name, w.kind, r.kind)
        assert _same_default(w.default, r.default), (stub.name, w.name, r.default)


def _docstring(node) -> str | None:
    return ast.get_docstring(node, clean=True)


@pytest.fixture(scope="module")
def generated() -> dict[pathlib.Path, str]:
    """What the generator writes for the registry as it is, by path."""
    _needs_extras()
    return stubs.stubs()


@pytest.mark.parametrize("name", ["__init__", *LAYER_MODULES])
def test_stubs_are_current(name, generated):
    """The checked-in stub is what the generator writes for the registry as it is."""
    path = ROOT / "portable_rnn" / f"{name}.pyi"
    assert path.read_text() == generated[path], (
        f"{path.name} is out of date: run `python -m portable_rnn._src.tools.stubs`")


def test_check_mode_reports_a_stale_stub(tmp_path, monkeypatch, capsys):
    _needs_extras()
    monkeypatch.setattr(stubs, "PACKAGE", tmp_path / "portable_rnn")
    (tmp_path / "portable_rnn").mkdir()
    assert stubs.main(["--check"]) == 1
    assert "__init__.pyi: out of date" in capsys.readouterr().out
    assert stubs.main([]) == 0 and stubs.main(["--check"]) == 0
    assert not list(tmp_path.glob("portable_rnn/*.py"))


def test_package_stub_functions_match_runtime():
    tree = _stub("__init__")
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    exported = next(n for n in tree.body if isinstance(n, ast.Assign)
                    and n.targets[0].id == "__all__")
    assert ast.literal_eval(exported.value) == portable_rnn.__all__
    for name in portable_rnn.__all__:
        obj = getattr(portable_rnn, name)
        if isinstance(obj, type):  # the classes are re-exported from their modules
            assert not hasattr(obj, "_FAMILY") and name not in functions
            continue
        stub = functions[name]
        assert _docstring(stub) == inspect.getdoc(obj), name
        if name == "policy":  # its **settings: every other op and every registered option
            options = {op: None for op in FAMILIES if op not in inspect.signature(obj).parameters}
            assert_same_signature(stub, obj, {**options, **dict.fromkeys(dispatch._OPTIONS)})
        else:
            assert_same_signature(stub, obj)


def test_package_stub_declares_the_layer_modules():
    """``portable_rnn.linen`` is imported on first use; the stub declares it, so that
    ``import portable_rnn; portable_rnn.linen.LSTM`` type-checks."""
    imported = {a.name for n in _stub("__init__").body if isinstance(n, ast.ImportFrom)
                and n.module == "portable_rnn" for a in n.names if a.asname == a.name}
    assert imported == set(portable_rnn._LAYER_MODULES)


def test_route_names_are_literals():
    text = (ROOT / "portable_rnn" / "__init__.pyi").read_text()
    for fam in FAMILIES:
        routes = ", ".join(f'"{r}"' for r in dispatch.implementations(fam))
        assert f"implementation: Literal[{routes}] | None = None" in text
        assert f"    {fam}: Literal[{routes}] | None = None" in text  # policy's keyword
    routes = ", ".join(f'"{r}"' for r in dispatch.implementations("attention"))
    assert f"implementation: Literal[{routes}] | None = None" in text
    for option, values in dispatch._OPTIONS.items():
        assert f"{option}: Literal[{', '.join(f'{v!r}' for v in values)}]".replace(
            "'", '"') in text


def _stub_classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _stub_mro(name: str, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """A stub class and the stub classes it derives from, nearest first."""
    out, todo = [], [name]
    while todo:
        node = classes[todo.pop(0)]
        out.append(node)
        todo += [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
    return out


@pytest.mark.parametrize("module_name", LAYER_MODULES)
def test_layer_stubs_match_runtime(module_name):
    """Each class's fields (Linen), constructor (NNX, Equinox; its ``**options`` written out
    as the family's options), methods and docstrings, and each function, are the runtime's."""
    module = _module(module_name)
    tree = _stub(module_name)
    classes = _stub_classes(tree)
    exported = next(n for n in tree.body if isinstance(n, ast.Assign)
                    and n.targets[0].id == "__all__")
    assert ast.literal_eval(exported.value) == module.__all__
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in module.__all__:
        obj = getattr(module, name)
        if not isinstance(obj, type):
            assert_same_signature(functions[name], obj)
            assert _docstring(functions[name]) == inspect.getdoc(obj)
            continue
        mro = _stub_mro(name, classes)
        assert _docstring(mro[0]) == inspect.getdoc(obj), name
        fam = FAMILIES.get(getattr(obj, "_FAMILY", ""))
        members = {}
        for node in reversed(mro):
            members.update({m.name: m for m in node.body if isinstance(m, ast.FunctionDef)})
        fields = [m for node in reversed(mro) for m in node.body
                  if isinstance(m, ast.AnnAssign)]
        if module_name == "linen":  # a dataclass: its fields are the constructor
            runtime = [f for f in dataclasses.fields(obj) if f.name not in ("parent", "name")]
            assert [f.target.id for f in fields] == [f.name for f in runtime], name
            for stub_field, field in zip(fields, runtime):
                assert _same_default(stub_field.value, field.default
                                     if field.default is not dataclasses.MISSING else _P.empty)
        elif module_name in ("nnx", "equinox"):
            options = {o: fam.layer_options[o] for o in stubs.LAYER_MODULES[module_name].options(
                obj, fam)}
            assert_same_signature(members["__init__"], obj.__init__, options)
        for method, stub in members.items():
            if method == "__init__":
                continue
            raw = inspect.getattr_static(obj, method)
            fn = raw.fget if isinstance(raw, property) else getattr(raw, "__func__", raw)
            assert_same_signature(stub, fn)
            assert _docstring(stub) == inspect.getdoc(fn), (name, method)


# The type checkers, as `.ci/run` runs basedpyright: on the typed usage file and the examples.
TARGETS = ["tests/typing/usage.py", "examples"]


def _checker(name: str) -> list[str]:
    if name == "mypy":
        if importlib.util.find_spec("mypy") is None:
            pytest.skip("mypy is not installed (pip install mypy)")
        return [sys.executable, "-m", "mypy"]
    executable = shutil.which(name, path=str(pathlib.Path(sys.executable).parent)) or \
        shutil.which(name)
    if executable is None:
        pytest.skip(f"{name} is not installed (pip install {name})")
    return [executable, "--pythonpath", sys.executable]


@pytest.mark.parametrize("checker", ["basedpyright", "pyright", "mypy"])
def test_usage_and_examples_type_check(checker, tmp_path):
    """No error from the checker on a typed use of the whole API (whose deliberate mistakes
    must each be reported: ``# type: ignore`` comments that suppress nothing are errors there)
    and on the examples."""
    _needs_extras()
    if checker == "pyright" and shutil.which("basedpyright", path=str(pathlib.Path(
            sys.executable).parent)):
        pytest.skip("basedpyright runs pyright's checks (test_..._type_check[basedpyright])")
    command = _checker(checker)
    if checker == "mypy":
        command += ["--cache-dir", str(tmp_path / "mypy")]
    result = subprocess.run(command + TARGETS, cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr

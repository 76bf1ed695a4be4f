"""The public modules' type stubs, written from the live objects.

The per-family functions (`portable_rnn.gru`, ``explain_gru``, ...) and layer classes
(`portable_rnn.linen.GRU`, ...) are made at import from the registry of cells, so pyright, mypy,
IDEs and the API reference cannot see them in the source. The stubs next to the public modules
(``portable_rnn/__init__.pyi``, ``linen.pyi``, ``nnx.pyi``, ``equinox.pyi``, ``keras.pyi``)
declare every public name with its signature (parameters, kinds, defaults, annotations, return
type) and its docstring, read from the objects the registry made (`inspect.signature`,
``__doc__``). Route names are ``Literal`` types (`dispatch.implementations`), and `policy` lists
every keyword its ``**settings`` takes.

Where the runtime gives no annotation (the functions the registry makes annotate only their
sizes), the stubs take one from `_PARAMETER_TYPES` by the parameter's name and from
`_RETURN_TYPES` by the function's role; an annotation written in the source is copied as
written, its names imported as the source imports them, so that no annotation depends on how a
Python or JAX version prints a type. `tests/test_stubs.py` checks that the checked-in stubs are
this module's output and that each stub's signature is the runtime one.

    python -m portable_rnn._src.tools.stubs          # rewrites the stubs
    python -m portable_rnn._src.tools.stubs --check  # exit status 1 when one is out of date
"""

from __future__ import annotations

import argparse
import ast
import builtins
import dataclasses
import functools
import importlib
import inspect
import json
import pathlib
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from ..core import dispatch
from ..recurrent.families import FAMILIES

PACKAGE = pathlib.Path(__file__).resolve().parents[2]  # portable_rnn/
WIDTH = 100  # ruff's line length
_P = inspect.Parameter

# The names that the annotations of the two tables below use, and how a stub imports each.
_TABLE_IMPORTS = {
    "Any": "from typing import Any",
    "ArrayLike": "from jax.typing import ArrayLike",
    "Callable": "from collections.abc import Callable",
    "Capabilities": "from portable_rnn._src.core.capabilities import Capabilities",
    "DTypeLike": "from jax.typing import DTypeLike",
    "Decision": "from portable_rnn._src.core.dispatch import Decision",
    "Mapping": "from collections.abc import Mapping",
    "Sequence": "from collections.abc import Sequence",
    "jax": "import jax",
    "lax": "from jax import lax",
    "np": "import numpy as np",
}
_GROUPS = "Mapping[int, ArrayLike] | Sequence[ArrayLike]"  # per-pseudo-layer arrays
# An annotation by parameter name, for a public function or method whose parameter the runtime
# leaves unannotated; ``| None`` is added for a default of None. The families' initial states
# (``h_0``, ``c_0``, ...) are arrays too.
_PARAMETER_TYPES = {
    "x": "ArrayLike", "inputs": "ArrayLike", "weights": "ArrayLike",
    "query": "ArrayLike", "key": "ArrayLike", "value": "ArrayLike", "bias": "ArrayLike",
    "mask": "ArrayLike",
    "seq_lengths": "ArrayLike | None", "query_seq_lengths": "ArrayLike",
    "key_value_seq_lengths": "ArrayLike", "recurrent_dropout_mask": "ArrayLike",
    "scale": "float | ArrayLike", "is_causal": "bool", "local_window_size": "int | tuple[int, int]",
    "dropout": "float", "dropout_rate": "float", "broadcast_dropout": "bool",
    "deterministic": "bool", "return_carry": "bool", "force_fp32_for_softmax": "bool",
    "dropout_rng": "jax.Array", "rng": "jax.Array",
    "precision": "lax.PrecisionLike", "capabilities": "Capabilities",
    "dtype": "DTypeLike", "param_dtype": "DTypeLike",
    "W_ih": _GROUPS, "W_hh": _GROUPS, "W_hr": _GROUPS, "b_ih": f"{_GROUPS} | None",
    "b_hh": f"{_GROUPS} | None",
    "state_dict": "Mapping[str, Any]", "prefix": "str", "keras_weights": "Sequence[Any]",
    "params": "Any", "flax_params": "Any", "shared_cell": "bool", "use_bias": "bool",
}
# The explanations take `jax.ShapeDtypeStruct`s wherever the op takes an array.
_SHAPES_TOO = " | jax.ShapeDtypeStruct"
# A return annotation by function name, ``{n}`` a family's name: the function's role.
_RETURN_TYPES = {
    "explain_{n}": "Decision",
    "get_num_params_in_{n}": "int",
    "init_{n}_weight": "jax.Array",
    "unpack_{n}_weights": "tuple[dict[int, jax.Array], ...]",
    "pack_{n}_weights": "jax.Array",
    "{n}_weights_from_torch": "jax.Array",
    "{n}_weights_to_torch": "dict[str, np.ndarray]",
    "{n}_weights_from_flax": "jax.Array",
    "{n}_weights_to_flax": "list[dict[str, Any]]",
    "{n}_weights_from_keras": "jax.Array",
    "{n}_weights_to_keras": "list[list[np.ndarray]]",
    "attention_fn": "jax.Array",
}
# The modules whose objects a default may name (``dtype=jnp.float32``), and their imports.
_DEFAULT_MODULES = {"jnp": "import jax.numpy as jnp"}


# --- imports and annotations -----------------------------------------------------------------

@functools.cache
def _bindings(module_name: str) -> dict[str, tuple]:
    """How the top level of a module's source binds each name: ``("import", line)`` for an
    import (as a stub writes it), ``("alias", expr)`` for ``name = <dotted name>``, or
    ``("defined", module)`` for a class or function it defines."""
    module = sys.modules[module_name]
    tree = ast.parse(inspect.getsource(module))
    package = module_name if hasattr(module, "__path__") else module_name.rpartition(".")[0]
    out: dict[str, tuple] = {}
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import):
            for a in node.names:
                name = a.asname or a.name.partition(".")[0]
                line = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
                out[name] = ("import", line)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            source = node.module or ""
            if node.level:  # relative: the absolute name, as a stub outside the package needs
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([source] if source else []))
            for a in node.names:
                line = f"from {source} import {a.name}" + (f" as {a.asname}" if a.asname else "")
                out[a.asname or a.name] = ("import", line)
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            out[node.name] = ("defined", module_name)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, (ast.Name, ast.Attribute))):
            out[node.targets[0].id] = ("alias", node.value)
    return out


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements of a module's top level, those inside its ``try`` and ``if`` blocks
    too (``try: import equinox as eqx``)."""
    for node in body:
        if isinstance(node, (ast.Try, ast.If)):
            yield from _top_level(node.body)
        else:
            yield node


class Imports:
    """The import lines the stub of module `own` needs, by the name each binds; two lines
    binding one name are an error (a stub has one namespace)."""

    def __init__(self, own: str) -> None:
        self.own = own
        self.lines: dict[str, str] = {}

    def add(self, name: str, line: str) -> None:
        """Imports `name` with `line`; a re-export (``import A as A``) covers a plain import of
        the same name; a name of the stub's own module needs none."""
        if line == f"from {self.own} import {name}":
            return
        old = self.lines.get(name, line)
        if line == f"{old} as {name}":
            old = self.lines[name] = line
        if self.lines.setdefault(name, line) != line and old != f"{line} as {name}":
            raise ValueError(f"{name!r} is imported both as {self.lines[name]!r} and {line!r}")

    def render(self) -> str:
        """The import block as ruff's isort writes it: the standard library, third parties,
        then portable_rnn; in each, ``import`` lines before ``from`` lines, by module; a
        module's aliased names one per line, the others on one line, by their first name."""
        sections: dict[int, list[tuple]] = {}
        modules: dict[str, list[str]] = {}
        for line in self.lines.values():
            words = line.split()
            if words[0] == "import":
                sections.setdefault(_section(words[1]), []).append(((0, words[1].lower()), line))
            else:
                modules.setdefault(words[1], []).append(" ".join(words[3:]))
        for module, names in modules.items():
            plain = sorted((n for n in names if " as " not in n), key=_isort_key)
            for group in [[n] for n in names if " as " in n] + ([plain] if plain else []):
                key = (1, module.lower(), _isort_key(group[0]))
                sections.setdefault(_section(module), []).append(
                    (key, _wrapped_import(module, group)))
        return "\n\n".join("\n".join(line for _, line in sorted(sections[s]))
                           for s in sorted(sections))


def _section(module: str) -> int:
    """The import section of a module: the standard library, a third party, portable_rnn."""
    top = module.partition(".")[0]
    return 0 if top in sys.stdlib_module_names else 2 if top == "portable_rnn" else 1


def _isort_key(name: str) -> tuple:
    """ruff's isort order of imported names: constants, classes, the rest."""
    first = name.split()[0]
    kind = 0 if first.isupper() and len(first) > 1 else 1 if first[:1].isupper() else 2
    return (kind, first.lower(), name)


def _wrapped_import(module: str, names: list[str]) -> str:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= WIDTH:
        return line
    return f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"


def _resolve(tree: ast.expr, module_name: str, imports: Imports) -> ast.expr:
    """`tree` (an annotation or a base class, as the source of `module_name` writes it) with
    its names imported into the stub; a local alias (``Array = jax.Array``) is replaced by its
    value."""

    class Names(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id in vars(builtins) or node.id == "None":
                return node
            kind, value = _bindings(module_name).get(node.id, (None, None))
            if kind == "alias":
                return _resolve(value, module_name, imports)
            if kind == "import":
                imports.add(node.id, value)
            elif kind == "defined":
                imports.add(node.id, f"from {value} import {node.id}")
            else:
                raise ValueError(f"{module_name}: cannot tell where {node.id!r} comes from")
            return node

    return Names().visit(tree)


def _table_annotation(text: str, imports: Imports) -> str:
    for node in ast.walk(ast.parse(text, mode="eval")):
        if isinstance(node, ast.Name) and node.id not in vars(builtins):
            imports.add(node.id, _TABLE_IMPORTS[node.id])
    return text


def _annotation(annotation: Any, module_name: str, imports: Imports) -> str:
    """A runtime annotation as the stub writes it: the source text of a string annotation (the
    package writes ``from __future__ import annotations``), or a builtin type's name."""
    if isinstance(annotation, str):
        return ast.unparse(_resolve(ast.parse(annotation, mode="eval").body, module_name,
                                    imports))
    if isinstance(annotation, type) and getattr(builtins, annotation.__name__, None) is annotation:
        return annotation.__name__
    raise ValueError(f"{module_name}: no stub text for the annotation {annotation!r}")


def _literal(values: Iterable[str]) -> str:
    return "Literal[" + ", ".join(json.dumps(v) for v in values) + "]"


def _default(value: Any, imports: Imports) -> str:
    """A default as the stub writes it: a literal, a named object of `_DEFAULT_MODULES`
    (``jnp.float32``), else ``...``."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    for alias, line in _DEFAULT_MODULES.items():
        module = importlib.import_module(line.split()[1])
        if getattr(module, getattr(value, "__name__", ""), None) is value:
            imports.add(alias, line)
            return f"{alias}.{value.__name__}"
    return "..."


# --- functions ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Context:
    """What a signature's annotations depend on: `routes`, the names ``implementation`` takes
    (None: it has no routes to name); `options`, the family's option types
    (`Family.option_docs`); `shapes_too`, whether arrays may be `jax.ShapeDtypeStruct`s (the
    explanations)."""

    routes: tuple[str, ...] | None = None
    options: tuple[tuple[str, str], ...] = ()
    shapes_too: bool = False


def _family_context(fam, shapes_too: bool = False) -> Context:
    return Context(dispatch.implementations(fam.name),
                   tuple((o, kind) for o, (kind, _) in fam.option_docs.items()), shapes_too)


_STATES = {s for fam in FAMILIES.values() for s in fam.states}
_ARRAYS = {"x", "query", "key", "value", "bias", "mask", "weights", "seq_lengths",
           "query_seq_lengths", "key_value_seq_lengths", "recurrent_dropout_mask", *_STATES}


def _parameter(p: inspect.Parameter, module_name: str, ctx: Context, imports: Imports) -> str:
    """One parameter as a stub writes it: ``name: annotation = default``."""
    stars = {_P.VAR_POSITIONAL: "*", _P.VAR_KEYWORD: "**"}.get(p.kind, "")
    options = dict(ctx.options)
    text = None
    if p.name == "implementation" and ctx.routes is not None:
        imports.add("Literal", "from typing import Literal")
        text = f"{_literal(ctx.routes)} | None"
    elif p.name in options:
        text = _table_annotation(options[p.name], imports)
    elif p.annotation is not _P.empty:
        text = _annotation(p.annotation, module_name, imports)
    elif p.name in _PARAMETER_TYPES or p.name in _STATES:
        text = _table_annotation(_PARAMETER_TYPES.get(p.name, "ArrayLike"), imports)
        if ctx.shapes_too and p.name in _ARRAYS:
            imports.add("jax", "import jax")
            text = text.replace(" | None", "") + _SHAPES_TOO + (
                " | None" if text.endswith(" | None") else "")
    if text not in (None, "Any") and p.default is None and "None" not in text.split(" | "):
        text += " | None"
    out = stars + p.name + ("" if text is None else f": {text}")
    if p.default is not _P.empty:
        out += (" = " if text is not None else "=") + _default(p.default, imports)
    return out


def _parameters(sig: inspect.Signature, module_name: str, ctx: Context, imports: Imports,
                options: list[str] | None = None) -> list[str]:
    """The parameters, with ``/`` and ``*`` where the kinds change; `options` (keyword-only
    parameters, written already) replace a ``**options``."""
    out: list[str] = []
    star = False
    params = list(sig.parameters.values())
    for i, p in enumerate(params):
        if p.kind is _P.VAR_KEYWORD and options is not None:
            out += (["*"] if options and not star else []) + options
            continue
        if p.kind is _P.KEYWORD_ONLY and not star:
            out.append("*")
        star = star or p.kind in (_P.KEYWORD_ONLY, _P.VAR_POSITIONAL)
        out.append(_parameter(p, module_name, ctx, imports))
        if p.kind is _P.POSITIONAL_ONLY and (i + 1 == len(params)
                                            or params[i + 1].kind is not _P.POSITIONAL_ONLY):
            out.append("/")
    return out


def _docstring(doc: str | None, indent: int) -> list[str]:
    """A docstring as stub lines, `indent` spaces in (a raw string where it holds a
    backslash)."""
    if not doc:
        return []
    text = inspect.cleandoc(doc)
    if '"""' in text:
        raise ValueError(f"a docstring holds triple quotes: {text[:60]!r}")
    pad = " " * indent
    prefix = 'r"""' if "\\" in text else '"""'
    lines = text.split("\n")
    if len(lines) == 1 and text[-1] not in '"\\' and len(pad + prefix + text) + 3 <= WIDTH:
        return [f'{pad}{prefix}{text}"""']
    body = [f"{pad}{prefix}{lines[0]}"] + [f"{pad}{line}" if line else "" for line in lines[1:]]
    return body + [f'{pad}"""']


def _def(name: str, params: list[str], returns: str | None, doc: str | None, indent: int,
         decorators: Iterable[str] = ()) -> list[str]:
    """A function's stub: its head on one line where it fits, else one parameter per line;
    its body the docstring, or ``...``."""
    pad = " " * indent
    arrow = f" -> {returns}" if returns else ""
    lines = [f"{pad}@{d}" for d in decorators]
    head = f"{pad}def {name}({', '.join(params)}){arrow}:"
    if len(head) + 4 > WIDTH:  # with its body, `` ...``, where it has no docstring
        inner = " " * (indent + 4)
        head = f"{pad}def {name}(\n" + "".join(f"{inner}{p},\n" for p in params) + \
            f"{pad}){arrow}:"
    body = _docstring(doc, indent + 4)
    return lines + ((head + "\n" + "\n".join(body)) if body else head + " ...").split("\n")


def _families_by_function() -> dict[str, Any]:
    """The family of each per-family function, by the function's name."""
    return {pattern.format(n=fam.name): fam for fam in FAMILIES.values()
            for pattern in ("{n}", *_RETURN_TYPES) if "{n}" in pattern}


def _context_of_function(name: str) -> Context:
    """The context of a public function: its family's (an explanation's arrays may be shapes),
    or attention's routes."""
    fam = _families_by_function().get(name)
    if fam is not None:
        return _family_context(fam, shapes_too=name.startswith("explain_"))
    if name in ("dot_product_attention", "explain_attention", "attention_fn"):
        return Context(dispatch.implementations("attention"),
                       shapes_too=name == "explain_attention")
    return Context()


def _returns(name: str, obj: Callable, module_name: str, imports: Imports) -> str | None:
    """A public function's return annotation: the runtime's, else its role's
    (`_RETURN_TYPES`; the op returns its outputs and one array per state)."""
    annotation = inspect.signature(obj).return_annotation
    if annotation is not inspect.Signature.empty:
        return _annotation(annotation, module_name, imports)
    fam = _families_by_function().get(name)
    if name in FAMILIES:  # the op: its outputs and each final state
        imports.add("jax", "import jax")
        return f"tuple[{', '.join(['jax.Array'] * (1 + len(fam.states)))}]"
    for pattern, text in _RETURN_TYPES.items():
        if pattern.format(n=fam.name if fam else "") == name:
            return _table_annotation(text, imports)
    return None


def function_stub(name: str, obj: Callable, imports: Imports) -> list[str]:
    """The stub of a public function `name` (`obj`), with its docstring."""
    module_name = obj.__module__
    params = _parameters(inspect.signature(obj), module_name, _context_of_function(name),
                         imports)
    return _def(name, params, _returns(name, obj, module_name, imports), obj.__doc__, 0)


def policy_stub(imports: Imports) -> list[str]:
    """`policy`, its ``**settings`` written out: each other op's preference (a ``Literal`` of
    its routes) and each registered option (a ``Literal`` of its values)."""
    obj, ctx = dispatch.policy, Context()
    sig = inspect.signature(obj)
    imports.add("Literal", "from typing import Literal")
    # The ops of the public functions (its positional arguments', and every family's) and every
    # registered option (the dispatcher's registry, which `policy` reads).
    ops = [n for n in sig.parameters if n in dispatch._ROUTES]
    routes = {op: dispatch.implementations(op) for op in dict.fromkeys([*ops, *FAMILIES])}
    values = {**routes, "on_fallback": dispatch.ON_FALLBACK}
    settings = [f"{op}: {_literal(r)} | None = None" for op, r in routes.items()
                if op not in sig.parameters]
    settings += [f"{o}: {_literal(v)} | None = None" for o, v in dispatch._OPTIONS.items()]
    params = [f"{p.partition(':')[0]}: {_literal(values[p.partition(':')[0]])} | None = None"
              if p.partition(":")[0] in values else p
              for p in _parameters(sig, obj.__module__, ctx, imports, options=settings)]
    returns = _annotation(sig.return_annotation, obj.__module__, imports)
    return _def("policy", params, returns, obj.__doc__, 0)


# --- layer classes -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LayerModule:
    """How a layer module's classes are written: `fields`, whether a class declares its
    attributes as dataclass fields (Linen, Equinox), `defaults`, whether the fields' defaults
    are the constructor's (Linen); `options`, which of the family's ``layer_options`` a class
    the registry made takes as keywords of its ``__init__`` (its ``**options``), or None where
    the class has no ``__init__`` of its own."""

    fields: bool
    defaults: bool = False
    options: Callable[[type, Any], list[str]] | None = None


def _own_fields(cls: type) -> list[str]:
    """The annotated attributes that a class the registry made declares (not its framework's:
    Flax adds ``parent`` and ``name`` to each module's annotations)."""
    framework = {n for c in cls.__mro__[1:] if not c.__module__.startswith("portable_rnn")
                 for n in vars(c).get("__annotations__", {})} | {"parent", "name"}
    return [n for n in vars(cls).get("__annotations__", {}) if n not in framework]


LAYER_MODULES = {
    "linen": LayerModule(fields=True, defaults=True),
    "nnx": LayerModule(fields=False, options=lambda cls, fam: list(fam.layer_options)),
    # An Equinox layer's options are its static fields (the initialisers are not: replace
    # those leaves with `eqx.tree_at`).
    "equinox": LayerModule(fields=True, options=lambda cls, fam: _own_fields(cls)),
    "keras": LayerModule(fields=False),
}


def _class_node(cls: type) -> ast.ClassDef | None:
    """The class's statement in its module's source; None for a class the registry made."""
    tree = ast.parse(inspect.getsource(sys.modules[cls.__module__]))
    return next((n for n in tree.body if isinstance(n, ast.ClassDef)
                 and n.name == cls.__qualname__), None)


def _base(base: type, cls: type, node: ast.ClassDef | None, imports: Imports) -> str:
    """How the stub names a base class: as the class statement does, or (a class the registry
    made) by its name in the module, or in a module the module imports (``keras.layers.LSTM``)."""
    module = sys.modules[cls.__module__]
    if node is not None:
        for expr in node.bases:
            if eval(ast.unparse(expr), vars(module)) is base:  # the class statement's own text
                return ast.unparse(_resolve(expr, module.__name__, imports))
    if vars(module).get(base.__name__) is base:
        return base.__name__
    for alias, value in sorted(vars(module).items()):
        if isinstance(value, types.ModuleType) and not alias.startswith("_"):
            for path in (base.__name__, f"layers.{base.__name__}"):
                obj: Any = value
                for part in path.split("."):
                    obj = getattr(obj, part, None)
                if obj is base:
                    _resolve(ast.Name(alias), module.__name__, imports)
                    return f"{alias}.{path}"
    raise ValueError(f"no name for {base!r}, a base of {cls!r}")


def _field(name: str, cls: type, ctx: Context, imports: Imports, with_default: bool) -> str:
    """A dataclass field (with the runtime class's default, `with_default`)."""
    default = _P.empty
    field = getattr(cls, "__dataclass_fields__", {}).get(name)
    if with_default and field is not None and field.default is not dataclasses.MISSING:
        default = field.default
    p = _P(name, _P.KEYWORD_ONLY, default=default, annotation=vars(cls)["__annotations__"][name])
    return "    " + _parameter(p, cls.__module__, ctx, imports)


def _instance_attributes(cls: type, node: ast.ClassDef, ctx: Context,
                         imports: Imports) -> list[str]:
    """The public attributes that a source class's ``__init__`` sets (``self.name = ...``),
    declared for a class that has no dataclass fields (NNX): a parameter's annotation where the
    value is the parameter, the type where it is ``bool(...)``, ``int(...)`` or ``float(...)``,
    else ``Any``."""
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    if init is None:
        return []
    params = inspect.signature(vars(cls)["__init__"]).parameters
    out: dict[str, str] = {}
    for stmt in init.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Attribute)
                and isinstance(stmt.targets[0].value, ast.Name)
                and stmt.targets[0].value.id == "self"):
            continue
        name, value = stmt.targets[0].attr, stmt.value
        if name.startswith("_") or name in out:
            continue
        text = f"{name}: Any"
        if isinstance(value, ast.Name) and value.id in params:
            text = _parameter(params[value.id].replace(name=name, default=_P.empty),
                              cls.__module__, ctx, imports)
        elif (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
              and value.func.id in ("bool", "int", "float")):
            text = f"{name}: {value.func.id}"
        if text.endswith(": Any") or ":" not in text:
            imports.add("Any", "from typing import Any")
            text = f"{name}: Any"
        out[name] = f"    {text}"
    return list(out.values())


def _methods(cls: type, node: ast.ClassDef, ctx: Context, imports: Imports) -> list[list[str]]:
    """The stubs of the methods and properties that a class of the source defines: the public
    ones, its ``__init__`` and ``__call__``; not a framework's method it overrides (Keras'
    ``call``, or a mixin's ``inner_loop``, which the classes made from it override: the
    framework types those)."""
    classes, todo = [], [cls]
    while todo:  # the class and every class of its module derived from it
        classes.append(todo.pop())
        todo += [c for c in classes[-1].__subclasses__() if c.__module__ == cls.__module__]
    framework = {n for c in classes for base in c.__mro__
                 if not base.__module__.startswith("portable_rnn")
                 for n in vars(base) if not n.startswith("__")}
    out = []
    for item in node.body:
        if not isinstance(item, ast.FunctionDef) or item.name in framework or (
                item.name.startswith("_") and item.name not in ("__init__", "__call__")):
            continue
        raw = vars(cls)[item.name]
        fn, decorators = raw, []
        if isinstance(raw, property):
            fn, decorators = raw.fget, ["property"]
        elif isinstance(raw, (classmethod, staticmethod)):
            fn, decorators = raw.__func__, [type(raw).__name__]
        sig = inspect.signature(fn)
        returns = "None" if item.name == "__init__" else None
        if sig.return_annotation is not inspect.Signature.empty:
            returns = _annotation(sig.return_annotation, cls.__module__, imports)
        out.append(_def(item.name, _parameters(sig, cls.__module__, ctx, imports), returns,
                        fn.__doc__, 4, decorators))
    return out


def _init_with_options(cls: type, fam, spec: LayerModule, ctx: Context,
                       imports: Imports) -> list[str]:
    """The ``__init__`` of a class the registry made: its base's, with ``**options`` written
    out as the family's keyword options."""
    options = [_parameter(_P(n, _P.KEYWORD_ONLY, default=fam.layer_options[n]), cls.__module__,
                          ctx, imports) for n in spec.options(cls, fam)]
    params = _parameters(inspect.signature(cls.__init__), cls.__module__, ctx, imports,
                         options=options)
    return _def("__init__", params, "None", None, 4)


def class_stub(cls: type, spec: LayerModule, imports: Imports) -> list[str]:
    """The stub of a layer module's class: a class of the source (a shared base) as the source
    writes it, or a class the registry made, with its family's options and routes."""
    node = _class_node(cls)
    name = getattr(cls, "_FAMILY", None) or next(
        (f.name for f in getattr(cls, "_families", ())), None)
    if node is not None or name is None:  # shared by every family: the union of their routes
        routes = tuple(dict.fromkeys(r for n in FAMILIES for r in dispatch.implementations(n)))
        ctx = Context(routes)
    else:
        ctx = _family_context(FAMILIES[name])
    bases = [_base(b, cls, node, imports) for b in cls.__bases__ if b is not object]
    lines = [f"class {cls.__qualname__}" + (f"({', '.join(bases)})" if bases else "") + ":"]
    lines += _docstring(cls.__doc__, 4)
    if len(lines) > 1:
        lines.append("")
    members: list[list[str]] = []
    if node is not None:
        if spec.fields:
            members += [[_field(item.target.id, cls, ctx, imports, spec.defaults)]
                        for item in node.body if isinstance(item, ast.AnnAssign)
                        and isinstance(item.target, ast.Name)]
        else:
            members += [[line] for line in _instance_attributes(cls, node, ctx, imports)]
        members += _methods(cls, node, ctx, imports)
    else:
        if spec.fields:
            members += [[_field(f, cls, ctx, imports, spec.defaults)] for f in _own_fields(cls)]
        if spec.options is not None:
            members.append(_init_with_options(cls, FAMILIES[name], spec, ctx, imports))
    for member in members:
        if len(member) > 1 and lines[-1] != "":  # a blank line before each method
            lines.append("")
        lines += member
    if lines[-1] == "":
        lines.pop()
    if len(lines) == 1:
        lines[0] += " ..."
    return lines


# --- the stub files ----------------------------------------------------------------------------

_HEADER = ("# Written by `python -m portable_rnn._src.tools.stubs` from the live objects; "
           "do not edit.")


def _module_text(module: types.ModuleType, imports: Imports, blocks: list[list[str]]) -> str:
    """A stub file: a header, the module's docstring, the imports, then the blocks, one blank
    line apart. A docstring line longer than ruff's limit stays as the runtime writes it (the
    file then tells ruff so)."""
    parts = ["\n".join(_docstring(module.__doc__, 0)), imports.render()]
    parts += ["\n".join(block) for block in blocks]
    text = "\n\n".join(p for p in parts if p) + "\n"
    header = [_HEADER] + (["# ruff: noqa: E501"] if any(len(line) > WIDTH
                                                       for line in text.split("\n")) else [])
    return "\n".join(header) + "\n" + text


def _all(names: Iterable[str]) -> list[str]:
    line = "__all__ = [" + ", ".join(json.dumps(n) for n in names) + "]"
    if len(line) <= WIDTH:
        return [line]
    return ["__all__ = ["] + [f"    {json.dumps(n)}," for n in names] + ["]"]


def package_stub() -> str:
    """``portable_rnn/__init__.pyi``: the classes re-exported, every function written out,
    the lazily imported layer modules declared."""
    import portable_rnn

    imports = Imports(portable_rnn.__name__)
    blocks: list[list[str]] = []
    for name in portable_rnn.__all__:
        obj = getattr(portable_rnn, name)
        if isinstance(obj, type):
            imports.add(name, f"from {obj.__module__} import {name} as {name}")
        elif obj is dispatch.policy:
            blocks.append(policy_stub(imports))
        else:
            blocks.append(function_stub(name, obj, imports))
    for name in portable_rnn._LAYER_MODULES:
        imports.add(name, f"from portable_rnn import {name} as {name}")
    head = ["__version__: str"]  # its value is the source's alone (a release changes it)
    return _module_text(portable_rnn, imports, [head, *blocks, _all(portable_rnn.__all__)])


def layer_module_stub(name: str) -> str:
    """``portable_rnn/<name>.pyi`` of a layer module: its functions, the classes the registry
    made and the source's classes they derive from (their shared base first)."""
    module = importlib.import_module(f"portable_rnn.{name}")
    spec, imports = LAYER_MODULES[name], Imports(module.__name__)
    blocks, classes = [], []
    for public in module.__all__:
        obj = getattr(module, public)
        if isinstance(obj, type):
            classes += [c for c in reversed(obj.__mro__) if c.__module__ == module.__name__
                        and c not in classes]
        else:
            blocks.append(function_stub(public, obj, imports))
    blocks += [class_stub(c, spec, imports) for c in classes]
    return _module_text(module, imports, [*blocks, _all(module.__all__)])


def stubs() -> dict[pathlib.Path, str]:
    """Every stub file's path and text."""
    out = {PACKAGE / "__init__.pyi": package_stub()}
    for name in LAYER_MODULES:
        out[PACKAGE / f"{name}.pyi"] = layer_module_stub(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a stub differs from what it would be")
    args = parser.parse_args(argv)
    stale = []
    for path, text in stubs().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in stale:
        verb = "out of date" if args.check else "written"
        print(f"{path.relative_to(PACKAGE.parent)}: {verb}")
    if args.check and stale:
        print("Regenerate them with: python -m portable_rnn._src.tools.stubs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Griffe extensions for the API reference: the docstrings as `help()` shows them, in Markdown.

- `RuntimeDocstrings`: the reference reads the package by static analysis; this documents what
  ``help()`` shows. For every function and class defined at the top of a module of the package,
  it imports the object and, when its runtime ``__doc__`` differs from the source text (none
  does: `tests/test_api.py` checks that docstrings are written, not completed at import),
  documents the runtime one. An object that cannot be imported fails the build.
- `GeneratedMembers`: the per-family functions (`portable_rnn.gru`, ...) and layer classes
  (`portable_rnn.linen.GRU`, ...) are made at import from the registry of cells, so static
  analysis does not see them. For every name of a module's runtime ``__all__`` that the source
  does not define, it adds a function (the runtime signature) or a class (the runtime bases,
  whose members the reference inherits) with the runtime docstring.
- `ShapeProducts`: the docstrings write shapes as plain text, ``(L*D, B, H)``, where Markdown
  would read two such stars as emphasis. It escapes a ``*`` between two word characters (or
  brackets) outside code (inline code, doctest examples).
"""

from __future__ import annotations

import importlib
import inspect
import re

import griffe

_CODE_SPAN = re.compile(r"(``.+?``|`[^`]+`)")
_PRODUCT_STAR = re.compile(r"(?<=[\w)\]])\*(?=[\w(\[])")


def _objects(module: griffe.Module):
    """Every module of the package, and the functions and classes defined at their top."""
    modules = [module]
    while modules:
        mod = modules.pop()
        modules += [m for m in mod.modules.values() if not m.is_alias]
        yield mod, [m for m in mod.members.values()
                    if not m.is_alias and (m.is_function or m.is_class)]


_KINDS = {inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
          inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
          inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
          inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
          inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword}


def _annotation(a) -> str | None:
    if a is inspect.Parameter.empty:
        return None
    return a if isinstance(a, str) else getattr(a, "__name__", repr(a))


def _made(name: str, obj, parent: griffe.Module) -> griffe.Object | None:
    """A griffe function or class for a runtime object the source does not define."""
    doc = griffe.Docstring(inspect.getdoc(obj) or "", parent=None)
    if inspect.isclass(obj):
        bases = [f"{b.__module__}.{b.__qualname__}" for b in obj.__bases__]
        made = griffe.Class(name, bases=bases, docstring=doc, parent=parent)
    elif callable(obj):
        parameters = griffe.Parameters(*(
            griffe.Parameter(p.name, kind=_KINDS[p.kind], annotation=_annotation(p.annotation),
                             default=None if p.default is inspect.Parameter.empty
                             else repr(p.default))
            for p in inspect.signature(obj).parameters.values()))
        made = griffe.Function(name, parameters=parameters, docstring=doc, parent=parent)
    else:
        return None
    doc.parent = made
    return made


class GeneratedMembers(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for module, _ in _objects(pkg):
            runtime = importlib.import_module(module.path)
            for name in getattr(runtime, "__all__", ()):
                if name not in module.members:
                    made = _made(name, getattr(runtime, name), module)
                    if made is not None:
                        module.set_member(name, made)


class RuntimeDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for module, members in _objects(pkg):
            runtime = importlib.import_module(module.path)
            for member in members:
                doc = inspect.getdoc(getattr(runtime, member.name))
                if doc and (member.docstring is None or member.docstring.value != doc):
                    old = member.docstring  # its parser and options: the configured style
                    member.docstring = griffe.Docstring(
                        doc, lineno=old.lineno if old else None, parent=member,
                        parser=old.parser if old else None,
                        parser_options=old.parser_options if old else None)


def escape_products(text: str) -> str:
    """`text` with ``A*B`` written ``A\\*B`` outside code spans and doctest examples."""
    lines, in_example = [], False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_example = True
        elif not stripped:
            in_example = False
        if not in_example:
            line = "".join(part if i % 2 else _PRODUCT_STAR.sub(r"\\*", part)
                           for i, part in enumerate(_CODE_SPAN.split(line)))
        lines.append(line)
    return "\n".join(lines)


class ShapeProducts(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for module, members in _objects(pkg):
            for obj in [module, *members, *(m for c in members if c.is_class
                                            for m in c.members.values() if not m.is_alias)]:
                if obj.docstring is not None:
                    obj.docstring.value = escape_products(obj.docstring.value)

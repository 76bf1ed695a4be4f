"""Griffe extensions for the API reference: the docstrings as `help()` shows them, in Markdown.

- `RuntimeDocstrings`: the reference reads the package by static analysis; this documents what
  ``help()`` shows. For every function and class defined at the top of a module of the package,
  it imports the object and, when its runtime ``__doc__`` differs from the source text (none
  does: `tests/test_api.py` checks that docstrings are written, not completed at import),
  documents the runtime one. An object that cannot be imported fails the build.
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

"""A Griffe extension: the docstrings that `help()` shows, where the code completes them.

The API reference reads the package by static analysis, but a few docstrings are completed when
their module is imported (`portable_rnn.gru` and `simple_rnn` share their argument list; the NNX
and Keras layers share theirs). For every function and class defined at the top of a module of
the package, this extension imports it and, when its runtime ``__doc__`` differs from the source
text, documents the runtime one. An object that cannot be imported fails the build.
"""

from __future__ import annotations

import importlib
import inspect

import griffe


class RuntimeDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for module in [pkg, *_submodules(pkg)]:
            runtime = importlib.import_module(module.path)
            for name, member in module.members.items():
                if member.is_alias or not (member.is_function or member.is_class):
                    continue
                doc = inspect.getdoc(getattr(runtime, name))
                if doc and (member.docstring is None or member.docstring.value != doc):
                    member.docstring = griffe.Docstring(
                        doc, lineno=member.docstring.lineno if member.docstring else None,
                        parent=member)


def _submodules(module: griffe.Module) -> list[griffe.Module]:
    out = []
    for member in module.modules.values():
        if not member.is_alias:
            out += [member, *_submodules(member)]
    return out

"""The names ``implementation=`` takes come from one place, the dispatcher's route registry
(`dispatch.implementations`): every public function's and layer's accepted values and the
docstrings that list them agree with it."""

from __future__ import annotations

import inspect
import re

import jax
import jax.numpy as jnp
import pytest

import portable_rnn
from portable_rnn._src.core import dispatch

OPS = {"lstm": portable_rnn.lstm, "gru": portable_rnn.gru, "simple_rnn": portable_rnn.simple_rnn,
       "attention": portable_rnn.dot_product_attention}
QUOTED = re.compile(r'``"(\w+)"``')


def argument_text(obj, name: str) -> str:
    """The entry of argument `name` in `obj`'s docstring (Google style: up to the next line
    indented as little as the entry's first)."""
    lines = inspect.getdoc(obj).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(name + ":"))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (len(lines[end]) - len(lines[end].lstrip()) > indent
                                and lines[end].strip()):
        end += 1
    return "\n".join(lines[start:end])


def quoted_names(text: str) -> tuple[str, ...]:
    """The ``"name"`` literals of `text`, each once, in order of first appearance."""
    return tuple(dict.fromkeys(QUOTED.findall(text)))


def test_argument_text_reads_one_entry():
    def f():
        """Doc.

        Args:
          a: first, ``"x"``
            continued ``"y"``.
          implementation: ``"p"`` or
            ``"q"``.
          b: ``"z"``.
        """
    assert quoted_names(argument_text(f, "implementation")) == ("p", "q")
    assert quoted_names(argument_text(f, "a")) == ("x", "y")


def test_registry_order_is_preference():
    assert dispatch.implementations("lstm") == ("cudnn", "cudnn_ffi", "pallas", "scan")
    for op in OPS:
        assert dispatch.implementations(op) == tuple(dispatch.routes(op))
        assert dispatch.implementations(op)[-1] in ("scan", "xla")  # serves every call


@pytest.mark.parametrize("op", OPS)
def test_function_docstring_lists_the_registry(op):
    """The functional docstrings list exactly the registry's names, in its order."""
    assert quoted_names(argument_text(OPS[op], "implementation")) == dispatch.implementations(op)


@pytest.mark.parametrize("op", OPS)
def test_policy_takes_the_registry(op):
    for name in dispatch.implementations(op):
        with portable_rnn.policy(**{op: name}) as p:
            assert getattr(p, op) == name
    with pytest.raises(ValueError, match=f"`{op}` must be") as err:
        portable_rnn.policy(**{op: "nope"})
    assert tuple(re.findall(r"'(\w+)'", str(err.value)))[:-1] == dispatch.implementations(op)


LAYERS = [(module, family, name) for module in ("linen", "nnx", "equinox")
          for family, name in (("lstm", "LSTM"), ("gru", "GRU"), ("simple_rnn", "SimpleRNN"))]


def make_layer(module: str, name: str, implementation):
    """Builds (Linen: initialises, abstractly) a small layer with `implementation`."""
    cls = getattr(__import__(f"portable_rnn.{module}", fromlist=[name]), name)
    if module == "linen":
        return jax.eval_shape(cls(hidden_size=4, implementation=implementation).init,
                              jax.random.key(0), jnp.ones((2, 3, 3)))
    if module == "nnx":
        from flax import nnx
        return cls(3, 4, implementation=implementation, rngs=nnx.Rngs(0))
    return cls(3, 4, implementation=implementation, key=jax.random.key(0))


@pytest.mark.parametrize("module,family,name", LAYERS)
def test_layer_takes_the_registry(module, family, name):
    """A layer accepts exactly its family's registered names: an unknown one is refused with
    the registry's list, and each registered one passes the name check (a route that cannot
    serve the call on this machine may still refuse it, with its reasons)."""
    with pytest.raises(ValueError, match="`implementation` must be None") as err:
        make_layer(module, name, "nope")
    assert tuple(re.findall(r"'(\w+)'", str(err.value)))[:-1] == dispatch.implementations(family)
    for implementation in dispatch.implementations(family):
        try:
            make_layer(module, name, implementation)
        except ValueError as e:
            assert f"implementation={implementation!r} cannot serve" in str(e), str(e)


@pytest.mark.parametrize("module", ["linen", "nnx", "equinox"])
def test_layer_docstrings_name_only_registered_routes(module):
    mod = __import__(f"portable_rnn.{module}", fromlist=["LSTM"])
    for family, name in (("lstm", "LSTM"), ("gru", "GRU"), ("simple_rnn", "SimpleRNN")):
        doc = inspect.getdoc(getattr(mod, name))
        if "implementation:" in doc:
            names = set(quoted_names(argument_text(getattr(mod, name), "implementation")))
            assert names <= set(dispatch.implementations(family)), (module, name, names)

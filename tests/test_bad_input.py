"""Bad input to every public function and layer: one mutation of a valid call per example.

Each target has a valid base call. A hypothesis strategy per *kind* of bad input draws one
mutation of it (which argument, which wrong rank/size/dtype/value), so each example checks one
thing. Every mutation must raise a `ValueError`/`TypeError` whose message names the argument, says
what was expected and what was got, and must do so at trace time: eagerly, under `jax.jit`
(tracing only) and under `jax.eval_shape` alike, never an opaque error from deep inside JAX.
`explain_*` also take `jax.ShapeDtypeStruct`s. Inputs with a defined result (zero-sized batch,
T = 0, T = 1, no heads, zero head dim) are checked to give it. Last, out-of-range `seq_lengths`:
a ValueError when concrete, clipping when traced, and a checkify error under `checkify`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import checkify

import portable_rnn
from portable_rnn import linen as plinen
from portable_rnn import nnx as pnnx
from portable_rnn._src.core.dispatch import routes
from portable_rnn._src.recurrent.families import FAMILIES

pytestmark = pytest.mark.cpu  # argument checks: the same on every platform

# The Equinox layers' cases where the `equinox` extra is installed.
HAS_EQUINOX = importlib.util.find_spec("equinox") is not None
if HAS_EQUINOX:
    from portable_rnn import equinox as preqx

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
CPU = portable_rnn.Capabilities("cpu")
ATTENTION_ROUTES = ("cudnn", "splash", "flash", "chunked", "xla")


@dataclasses.dataclass(frozen=True)
class Bad:
    """One mutation: argument overrides, the error and regexes its message must all contain.

    `traced_ok`: the input is only wrong when concrete (out-of-range lengths); traced, it has a
    defined result (clipping) and must not raise.
    """

    over: dict
    exc: type
    patterns: tuple[str, ...]
    traced_ok: bool = False


@dataclasses.dataclass(frozen=True)
class Target:
    call: Callable[[dict], Any]  # runs the public function on a full argument dict
    base: Callable[[], dict]
    kinds: dict[str, Callable[[Callable], Bad]]  # kind -> (draw -> Bad)
    modes: tuple[str, ...] = ("eager", "jit", "eval_shape")


def esc(value) -> str:
    return re.escape(str(value))


def _is_array(a) -> bool:
    return isinstance(a, (jax.Array, np.ndarray))


def run(mode: str, call, kw: dict):
    """Calls `call(kw)` eagerly, traced by `jax.jit`, under `jax.eval_shape`, or with every array
    replaced by a `jax.ShapeDtypeStruct` ("sds")."""
    if mode == "eager":
        return call(kw)
    leaves, tree = jax.tree.flatten(kw, is_leaf=lambda a: a is None or _is_array(a))
    if mode == "sds":
        return call(jax.tree.unflatten(tree, [jax.ShapeDtypeStruct(a.shape, a.dtype)
                                              if _is_array(a) else a for a in leaves]))
    where = [i for i, a in enumerate(leaves) if _is_array(a)]

    def f(*values):
        new = list(leaves)
        for i, v in zip(where, values):
            new[i] = v
        out = call(jax.tree.unflatten(tree, new))
        return out if all(_is_array(a) for a in jax.tree.leaves(out)) else None  # a Decision

    values = [leaves[i] for i in where]
    return jax.jit(f).trace(*values) if mode == "jit" else jax.eval_shape(f, *values)


def check_bad(target: Target, bad: Bad) -> None:
    kw = {**target.base(), **bad.over}
    for mode in target.modes:
        if bad.traced_ok and mode != "eager":
            run(mode, target.call, kw)  # traced (or abstract): the defined result, no error
            continue
        with pytest.raises(bad.exc) as info:
            run(mode, target.call, kw)
        assert type(info.value) in (ValueError, TypeError), (mode, info.value)
        message = str(info.value)
        for pattern in bad.patterns:
            assert re.search(pattern, message), (mode, pattern, message)


# --- shared drawing helpers -------------------------------------------------------------------

BAD_SIZES = [0, -1, 2.5, "3", True, None]


def bad_size(draw, name, low=1):
    value = draw(st.sampled_from(BAD_SIZES))
    return Bad({name: value}, ValueError, (f"`{name}`", f"integer >= {low}", esc(repr(value))))


def bad_name(draw, name, valid):
    value = draw(st.one_of(st.sampled_from(["", "nope", "CUDNN", "auto", 3]),
                           st.text("abcxyz", min_size=1, max_size=6)).filter(
        lambda v: v not in valid))
    return Bad({name: value}, ValueError,
               (f"`{name}`", ", ".join(repr(v) for v in valid), esc(repr(value))))


def bad_key(draw, name):
    value, exc, got = draw(st.sampled_from([
        (5, TypeError, "got int 5"),
        (jnp.ones(2), TypeError, r"got a float32 array of shape \(2,\)"),
        (jnp.zeros((2, 2), jnp.uint32), TypeError, r"got a uint32 array of shape \(2, 2\)"),
        (jax.random.split(jax.random.key(0), 3), ValueError, r"key array of shape \(3,\)"),
    ]))
    return Bad({name: value}, exc, (f"`{name}`", "PRNG key", got))


def with_over(bad: Bad, **over) -> Bad:
    """`bad` with more (valid) argument overrides that make the mutated argument matter."""
    return dataclasses.replace(bad, over={**bad.over, **over})


def not_array(draw, name):
    value = draw(st.sampled_from([None, "abc", object()]))
    return Bad({name: value}, TypeError, (f"`{name}`", "must be an array", "got"))


INT_DTYPES = [jnp.int8, jnp.int32, jnp.uint8, jnp.bool_, jnp.complex64]

# --- lstm / explain_lstm ----------------------------------------------------------------------

B, T, I, H, L = 2, 3, 2, 3, 2
NW = portable_rnn.get_num_params_in_lstm(I, H, L, False)
STATE = (L, B, H)
STATE_LEGEND = r"\(num_layers \* num_directions, batch, hidden_size\)"


def lstm_base():
    return dict(x=jnp.zeros((B, T, I)), h_0=jnp.zeros(STATE), c_0=jnp.zeros(STATE),
                weights=jnp.zeros(NW), seq_lengths=jnp.array([T, 1]), input_size=I,
                hidden_size=H, num_layers=L, dropout=0.0, bidirectional=False)


LSTM_POSITIONAL = ("x", "h_0", "c_0", "weights", "seq_lengths", "input_size", "hidden_size",
                   "num_layers", "dropout", "bidirectional")


def lstm_call(fn):
    def call(kw):
        kw = dict(kw)
        positional = [kw.pop(k) for k in LSTM_POSITIONAL]
        return fn(*positional, **kw)
    return call


def _x_rank(draw):
    shape = draw(st.sampled_from([(), (B,), (B, T), (B, T, I, 1), (1, B, T, I, 1)]))
    return Bad({"x": jnp.zeros(shape)}, ValueError,
               ("`x`", r"\(batch, time, input_size\) \(rank 3\)", f"rank {len(shape)}"))


def _x_features(draw):
    features = draw(st.sampled_from([1, 3, 7]))
    return Bad({"x": jnp.zeros((B, T, features))}, ValueError,
               ("`x`", f"input_size={I}", esc((B, T, features))))


def _x_dtype(draw):
    dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
    return Bad({"x": jnp.zeros((B, T, I), dtype)}, TypeError, ("`x`", "floating", str(dtype)))


def _x_batch(draw):
    batch = draw(st.sampled_from([1, 3, 5]))
    return Bad({"x": jnp.zeros((batch, T, I))}, ValueError,
               ("`h_0`", STATE_LEGEND + esc(f"={(L, batch, H)}"), esc(STATE)))


def _state_shape(draw):
    name = draw(st.sampled_from(["h_0", "c_0"]))
    shape = list(STATE)
    dim = draw(st.integers(0, 2))
    shape[dim] += draw(st.sampled_from([-1, 1, 2]))
    shape = draw(st.sampled_from([tuple(shape), STATE[1:], STATE + (1,)]))
    return Bad({name: jnp.zeros(shape)}, ValueError,
               (f"`{name}`", STATE_LEGEND + esc(f"={STATE}"), esc(shape)))


def _state_dtype(draw):
    name = draw(st.sampled_from(["h_0", "c_0"]))
    dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
    return Bad({name: jnp.zeros(STATE, dtype)}, TypeError, (f"`{name}`", "floating", str(dtype)))


def _size_mismatch(draw):
    """A size argument that disagrees with the arrays: the first array it contradicts says so."""
    name, value, arg, expected = draw(st.sampled_from([
        ("input_size", I + 1, "`x`", f"input_size={I + 1}"),
        ("hidden_size", H + 2, "`h_0`", esc((L, B, H + 2))),
        ("num_layers", L + 1, "`h_0`", esc((L + 1, B, H))),
        ("bidirectional", True, "`h_0`", esc((2 * L, B, H))),
    ]))
    return Bad({name: value}, ValueError, (arg, expected, "got"))


def _weights_length(draw):
    n = NW + draw(st.sampled_from([-5, -1, 1, 4, 40]))
    return Bad({"weights": jnp.zeros(n)}, ValueError, ("`weights`", esc(f"=({NW},)"), esc((n,))))


def _weights_rank(draw):
    shape = draw(st.sampled_from([(), (NW, 1), (1, NW)]))
    return Bad({"weights": jnp.zeros(shape)}, ValueError,
               ("`weights`", esc(f"=({NW},)"), esc(shape)))


def _weights_dtype(draw):
    dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
    return Bad({"weights": jnp.zeros(NW, dtype)}, TypeError,
               ("`weights`", "floating", str(dtype)))


def lengths_dtype(draw, name, batch):
    dtype = np.dtype(draw(st.sampled_from([jnp.float32, jnp.float16, jnp.bool_])))
    return Bad({name: jnp.ones(batch, dtype)}, TypeError, (f"`{name}`", "integer", str(dtype)))


def lengths_shape(draw, name, batch):
    shape = draw(st.sampled_from([(), (batch + 1,), (batch, 1), (1, batch)]))
    return Bad({name: jnp.ones(shape, jnp.int32)}, ValueError,
               (f"`{name}`", esc(f"(batch,)=({batch},)"), esc(shape)))


def lengths_range(draw, name, batch, axis, steps):
    value = draw(st.one_of(st.integers(-50, -1), st.integers(steps + 1, steps + 100)))
    where = draw(st.integers(0, batch - 1))
    lengths = np.ones(batch, np.int32)
    lengths[where] = value
    return Bad({name: jnp.asarray(lengths)}, ValueError,
               (f"`{name}`", esc(f"[0, {axis}={steps}]"), esc([value]), esc([where])),
               traced_ok=True)


def lengths_not_array(draw, name, batch):
    value = draw(st.sampled_from([[1] * batch, "3", 3]))
    return Bad({name: value}, TypeError, (f"`{name}`", "must be an array", "got"))


def _bidirectional(draw):
    value = draw(st.sampled_from([1, 0, "yes", None]))
    return Bad({"bidirectional": value}, TypeError,
               ("`bidirectional`", "bool", esc(repr(value))))


def _dropout(draw):
    value = draw(st.sampled_from([-0.1, 1.5, float("nan"), "a", None]))
    return Bad({"dropout": value}, ValueError, ("`dropout`", r"\[0, 1\]", esc(repr(value))))


def _dropout_without_key(draw):
    rate = draw(st.sampled_from([0.1, 0.5, 1.0]))
    return Bad({"dropout": rate}, ValueError, (f"`dropout`={rate}", "dropout_rng", "random key"))


def _precision(draw):
    value = draw(st.sampled_from(["nope", 3, ("highest",) * 3, jnp.float32]))
    return Bad({"precision": value}, ValueError,
               ("`precision`", r"a `jax.lax.Precision`", esc(repr(value))))


def explicit_cudnn_on_cpu(draw, op):
    return Bad({"implementation": "cudnn", "capabilities": CPU}, ValueError,
               (f"implementation='cudnn' cannot serve this {op} call", "platform is 'cpu'"))


def _capabilities(draw):
    value = draw(st.sampled_from(["gpu", {"platform": "gpu"}, 3]))
    return Bad({"capabilities": value}, TypeError,
               ("`capabilities`", "portable_rnn.Capabilities", type(value).__name__))


def _proj_size(draw):
    value = draw(st.sampled_from([-1, 2.5, "3", True, None, H, H + 1]))
    if value in (H, H + 1) and not isinstance(value, bool):
        return Bad({"proj_size": value}, ValueError,
                   ("`proj_size`", f"smaller than `hidden_size`={H}", f"got {value}"))
    return Bad({"proj_size": value}, ValueError, ("`proj_size`", "integer >= 0",
                                                  esc(repr(value))))


def _recurrent_mask(draw):
    """Shapes no family takes (the LSTM's and GRU's per-gate masks have 4 or 3 gates), or an
    integer dtype."""
    if draw(st.booleans()):
        dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
        return Bad({"recurrent_dropout_mask": jnp.zeros(STATE, dtype)}, TypeError,
                   ("`recurrent_dropout_mask`", "floating", str(dtype)))
    shape = draw(st.sampled_from([(L + 1, B, H), (L, B, H + 1), (B, H), (L, 5, B, H)]))
    return Bad({"recurrent_dropout_mask": jnp.zeros(shape)}, ValueError,
               ("`recurrent_dropout_mask`", esc(f"={STATE}"), esc(f"got {shape}")))


LSTM_KINDS = {
    "proj_size": _proj_size,
    "recurrent_mask": _recurrent_mask,
    "x_rank": _x_rank,
    "x_features": _x_features,
    "x_dtype": _x_dtype,
    "x_not_array": lambda d: not_array(d, "x"),
    "batch_mismatch": _x_batch,
    "state_shape": _state_shape,
    "state_dtype": _state_dtype,
    "state_not_array": lambda d: not_array(d, d(st.sampled_from(["h_0", "c_0"]))),
    "size_mismatch": _size_mismatch,
    "weights_length": _weights_length,
    "weights_rank": _weights_rank,
    "weights_dtype": _weights_dtype,
    "weights_not_array": lambda d: not_array(d, "weights"),
    "lengths_dtype": lambda d: lengths_dtype(d, "seq_lengths", B),
    "lengths_shape": lambda d: lengths_shape(d, "seq_lengths", B),
    "lengths_range": lambda d: lengths_range(d, "seq_lengths", B, "T", T),
    "lengths_not_array": lambda d: lengths_not_array(d, "seq_lengths", B),
    "sizes": lambda d: bad_size(d, d(st.sampled_from(["input_size", "hidden_size",
                                                      "num_layers"]))),
    "bidirectional": _bidirectional,
    "dropout": _dropout,
    "dropout_without_key": _dropout_without_key,
    "dropout_rng": lambda d: with_over(bad_key(d, "dropout_rng"), dropout=0.5),
    "precision": _precision,
    "implementation": lambda d: bad_name(d, "implementation", tuple(routes("lstm"))),
    "explicit_cudnn": lambda d: explicit_cudnn_on_cpu(d, "lstm"),
    "capabilities": _capabilities,
}

# --- the other families (gru, simple_rnn, ...: one state; slstm: four) -------------------------
# The checks are the LSTM's (`recurrent.api.check_args`); these targets run every LSTM kind that
# applies, with the family's own weights length and states, at fewer examples each.

OTHERS = tuple(name for name in FAMILIES if name != "lstm")
FAMILY_NW = {f: getattr(portable_rnn, f"get_num_params_in_{f}")(I, H, L, False) for f in OTHERS}


def _reset_gate(draw):
    value = draw(st.sampled_from(["yes", 1, None]))
    return Bad({"reset_gate": value}, TypeError, ("`reset_gate`", "Python bool", esc(repr(value))))


# The bad values of each option another family's call or layers take beyond the shared
# arguments (`Family.call_options`, `Family.layer_options`): a family with an option not
# listed here fails at collection, by name.
OPTION_KINDS = {
    "nonlinearity": lambda d: bad_name(d, "nonlinearity", ("tanh", "relu")),
    "reset_gate": _reset_gate,
    "num_heads": lambda d: bad_size(d, "num_heads"),
}
for _family in OTHERS:
    for _option in {*FAMILIES[_family].call_options, *FAMILIES[_family].layer_options}:
        assert _option in OPTION_KINDS, f"{_family}'s option {_option!r}: add its bad values"


def family_positional(family):
    return ("x", *FAMILIES[family].states, "weights", "seq_lengths", "input_size",
            "hidden_size", "num_layers", "dropout", "bidirectional")


def family_base(family):
    def base():
        states = {s: jnp.zeros(STATE) for s in FAMILIES[family].states}
        return dict(x=jnp.zeros((B, T, I)), **states,
                    weights=jnp.zeros(FAMILY_NW[family]), seq_lengths=jnp.array([T, 1]),
                    input_size=I, hidden_size=H, num_layers=L, dropout=0.0, bidirectional=False)
    return base


def family_call(fn, family):
    def call(kw):
        kw = dict(kw)
        positional = [kw.pop(k) for k in family_positional(family)]
        return fn(*positional, **kw)
    return call


def family_kinds(family):
    nw = FAMILY_NW[family]
    states = FAMILIES[family].states
    kinds = {k: v for k, v in LSTM_KINDS.items()
             if not k.startswith(("state_", "weights_", "proj_size", "explicit_cudnn"))}

    def state_shape(draw):
        name = draw(st.sampled_from(states))
        shape = draw(st.sampled_from([(L + 1, B, H), (L, B + 1, H), (L, B, H + 1), STATE[1:]]))
        return Bad({name: jnp.zeros(shape)}, ValueError,
                   (f"`{name}`", STATE_LEGEND + esc(f"={STATE}"), esc(shape)))

    def state_dtype(draw):
        name = draw(st.sampled_from(states))
        dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
        return Bad({name: jnp.zeros(STATE, dtype)}, TypeError,
                   (f"`{name}`", "floating", str(dtype)))

    def weights_length(draw):
        shape = draw(st.sampled_from([(nw - 1,), (nw + 4,), (nw, 1), ()]))
        return Bad({"weights": jnp.zeros(shape)}, ValueError,
                   ("`weights`", f"get_num_params_in_{family}", esc(f"=({nw},)"), esc(shape)))

    kinds.update(
        state_shape=state_shape, state_dtype=state_dtype,
        state_not_array=lambda d: not_array(d, d(st.sampled_from(states))),
        weights_length=weights_length,
        weights_dtype=lambda d: Bad({"weights": jnp.zeros(nw, np.int32)}, TypeError,
                                    ("`weights`", "floating", "int32")),
        weights_not_array=lambda d: not_array(d, "weights"),
        implementation=lambda d: bad_name(d, "implementation", tuple(routes(family))),
        explicit_cudnn=lambda d: explicit_cudnn_on_cpu(d, family),
        explicit_cudnn_on_gpu=lambda d: Bad(
            {"implementation": "cudnn", "capabilities": GPU}, ValueError,
            (f"cannot serve this {family} call", "JAX exposes no cuDNN", "LSTM-only")))
    kinds.update({option: OPTION_KINDS[option] for option in FAMILIES[family].call_options})
    if FAMILIES[family].cudnn_name is None:  # no cuDNN cell: the one reason, on every machine
        no_cell = f"cuDNN has no {family} cell"
        kinds["explicit_cudnn"] = lambda d: Bad(
            {"implementation": "cudnn", "capabilities": CPU}, ValueError,
            (f"cannot serve this {family} call", no_cell))
        kinds["explicit_cudnn_on_gpu"] = lambda d: Bad(
            {"implementation": "cudnn", "capabilities": GPU}, ValueError,
            (f"cannot serve this {family} call", no_cell))
    return kinds


# --- dot_product_attention / explain_attention ------------------------------------------------

AB, AT, AS, AN, AK, AH = 2, 3, 4, 4, 2, 8
QS, KS = (AB, AT, AN, AH), (AB, AS, AK, AH)
LOGITS = (AB, AN, AT, AS)


def attention_base():
    return dict(query=jnp.zeros(QS), key=jnp.zeros(KS), value=jnp.zeros(KS))


def attention_call(fn):
    def call(kw):
        kw = dict(kw)
        q, k, v = kw.pop("query"), kw.pop("key"), kw.pop("value")
        return fn(q, k, v, **kw)
    return call


def _qkv_rank(draw):
    name = draw(st.sampled_from(["query", "key", "value"]))
    shape = draw(st.sampled_from([(), (AH,), (AT, AH), (1, AB, AT, AN, AH)]))
    return Bad({name: jnp.zeros(shape)}, ValueError,
               (f"`{name}`", r"\(B, T, N, H\) or \(T, N, H\)", esc(shape)))


def _qkv_rank_mismatch(draw):
    name = draw(st.sampled_from(["query", "key", "value"]))
    shape = (QS if name == "query" else KS)[1:]
    return Bad({name: jnp.zeros(shape)}, ValueError,
               ("`query`, `key` and `value`", "same rank", esc(shape)))


def _qkv_dtype(draw):
    """Integer and bool operands (complex ones are attention's too: all three complex runs)."""
    name = draw(st.sampled_from(["query", "key", "value"]))
    dtype = np.dtype(draw(st.sampled_from([d for d in INT_DTYPES if d is not jnp.complex64])))
    shape = QS if name == "query" else KS
    return Bad({name: jnp.zeros(shape, dtype)}, TypeError, (f"`{name}`", "floating", str(dtype)))


def _qkv_dtype_mismatch(draw):
    name = draw(st.sampled_from(["query", "key", "value"]))
    dtype = np.dtype(draw(st.sampled_from([jnp.bfloat16, jnp.float16])))
    shape = QS if name == "query" else KS
    return Bad({name: jnp.zeros(shape, dtype)}, TypeError,
               ("`query`, `key` and `value`", "one dtype", str(dtype)))


def _kv_mismatch(draw):
    """key/value disagreeing with query (batch, head dim) or with each other."""
    which = draw(st.sampled_from(["batch", "head_dim", "value"]))
    if which == "value":
        shape = list(KS)
        shape[draw(st.integers(0, 3))] += draw(st.sampled_from([1, 3]))
        return Bad({"value": jnp.zeros(shape)}, ValueError,
                   ("`value`", "shape of `key` " + esc(KS), esc(tuple(shape))))
    shape = (AB + 1, AS, AK, AH) if which == "batch" else (AB, AS, AK, AH * 2)
    return Bad({"key": jnp.zeros(shape), "value": jnp.zeros(shape)}, ValueError,
               ("`key`", esc(f"B={AB} and H={AH}"), esc(shape)))


def _heads(draw):
    k = draw(st.sampled_from([0, 3, 8]))
    shape = (AB, AS, k, AH)
    return Bad({"key": jnp.zeros(shape), "value": jnp.zeros(shape)}, ValueError,
               (f"query heads N={AN}", "`query`",
                f"multiple of the number of key/value heads K={k}", "`key` " + esc(shape)))


def _extra_shape(draw):
    name = draw(st.sampled_from(["bias", "mask"]))
    shape = list(LOGITS)
    dim = draw(st.integers(0, 3))
    shape[dim] = LOGITS[dim] + draw(st.sampled_from([1, 2]))
    shape = draw(st.sampled_from([tuple(shape), tuple(shape[dim:])]))
    dtype = jnp.bool_ if name == "mask" else jnp.float32
    return Bad({name: jnp.zeros(shape, dtype)}, ValueError,
               (f"`{name}`", esc(f"(B, N, T, S)={LOGITS}"), esc(shape)))


def _extra_rank(draw):
    name = draw(st.sampled_from(["bias", "mask"]))
    shape = (1,) * draw(st.integers(1, 2)) + LOGITS
    dtype = jnp.bool_ if name == "mask" else jnp.float32
    return Bad({name: jnp.zeros(shape, dtype)}, ValueError,
               (f"`{name}`", "at most 4 dimensions", esc(shape)))


def _mask_dtype(draw):
    dtype = np.dtype(draw(st.sampled_from([jnp.int32, jnp.float32, jnp.uint8, jnp.bfloat16])))
    return Bad({"mask": jnp.ones((AT, AS), dtype)}, TypeError, ("`mask`", "boolean", str(dtype)))


def _bias_dtype(draw):
    """Integer, bool, and complex with real operands."""
    dtype = np.dtype(draw(st.sampled_from([jnp.int32, jnp.bool_, jnp.uint8, jnp.complex64])))
    return Bad({"bias": jnp.zeros((AT, AS), dtype)}, TypeError, ("`bias`", "floating", str(dtype)))


def _extra_not_array(draw):
    name = draw(st.sampled_from(["bias", "mask"]))
    value = draw(st.sampled_from(["abc", object()]))
    return Bad({name: value}, TypeError, (f"`{name}`", "must be an array", "got"))


def _attention_lengths(draw, kind):
    name, axis, steps = draw(st.sampled_from([("query_seq_lengths", "T", AT),
                                              ("key_value_seq_lengths", "S", AS)]))
    if kind == "range":
        return lengths_range(draw, name, AB, axis, steps)
    return {"dtype": lengths_dtype, "shape": lengths_shape,
            "not_array": lengths_not_array}[kind](draw, name, AB)


def _scale(draw):
    value, exc, expected = draw(st.sampled_from([
        ("a", TypeError, "Python float"), (jnp.ones(2), TypeError, "scalar array"),
        (True, TypeError, "Python float"), (float("nan"), ValueError, "finite"),
        (float("inf"), ValueError, "finite"), (-float("inf"), ValueError, "finite")]))
    return Bad({"scale": value}, exc, ("`scale`", expected, "got"))


def _is_causal(draw):
    value = draw(st.sampled_from([1, "yes", None, 0.0]))
    return Bad({"is_causal": value}, TypeError, ("`is_causal`", "bool", esc(repr(value))))


def _window(draw):
    value = draw(st.sampled_from([-1, (1, -1), (1, 2, 3), "big", 1.5, (1.0, 2), True]))
    return Bad({"local_window_size": value}, ValueError,
               ("`local_window_size`", r"an int >= 0 or a pair \(left, right\)", "got"))


ATTENTION_KINDS = {
    "qkv_rank": _qkv_rank,
    "qkv_rank_mismatch": _qkv_rank_mismatch,
    "qkv_dtype": _qkv_dtype,
    "qkv_dtype_mismatch": _qkv_dtype_mismatch,
    "qkv_not_array": lambda d: not_array(d, d(st.sampled_from(["query", "key", "value"]))),
    "kv_mismatch": _kv_mismatch,
    "heads": _heads,
    "bias_mask_shape": _extra_shape,
    "bias_mask_rank": _extra_rank,
    "mask_dtype": _mask_dtype,
    "bias_dtype": _bias_dtype,
    "bias_mask_not_array": _extra_not_array,
    "lengths_dtype": lambda d: _attention_lengths(d, "dtype"),
    "lengths_shape": lambda d: _attention_lengths(d, "shape"),
    "lengths_range": lambda d: _attention_lengths(d, "range"),
    "lengths_not_array": lambda d: _attention_lengths(d, "not_array"),
    "scale": _scale,
    "is_causal": _is_causal,
    "local_window_size": _window,
    "implementation": lambda d: bad_name(d, "implementation", ATTENTION_ROUTES),
    "explicit_cudnn": lambda d: explicit_cudnn_on_cpu(d, "attention"),
    "capabilities": _capabilities,
}

# --- policy -----------------------------------------------------------------------------------

POLICY_NAMES = {"lstm": tuple(routes("lstm")), "gru": tuple(routes("gru")),
                "simple_rnn": tuple(routes("simple_rnn")), "attention": ATTENTION_ROUTES,
                "on_fallback": ("silent", "warn", "error"),
                "lstm_low_precision": ("scan", "upcast")}


def policy_call(kw):
    manager = portable_rnn.policy(**kw)  # raises here, before the block
    with manager:
        raise AssertionError("unreachable: the policy was accepted")


def _checkify_lengths(d):
    value = d(st.sampled_from([1, "yes", 0.0]))
    return Bad({"checkify_lengths": value}, TypeError,
               ("`checkify_lengths`", "bool", esc(repr(value))))


POLICY_KINDS = {
    **{name: (lambda n: lambda d: bad_name(d, n, POLICY_NAMES[n]))(name) for name in POLICY_NAMES},
    "capabilities": _capabilities,
    "checkify_lengths": _checkify_lengths,
}

# --- weight helpers ---------------------------------------------------------------------------

SIZES = dict(input_size=I, hidden_size=H, num_layers=L, bidirectional=False)


def _sizes_kind(d):
    return bad_size(d, d(st.sampled_from(["input_size", "hidden_size", "num_layers"])))


def _sizes_bidirectional(d):
    value = d(st.sampled_from([1, "yes", None]))
    return Bad({"bidirectional": value}, TypeError, ("`bidirectional`", "bool", esc(repr(value))))


def _init_dtype(draw):
    dtype = np.dtype(draw(st.sampled_from([jnp.int32, jnp.uint8, jnp.bool_])))
    return Bad({"dtype": dtype}, TypeError, ("`dtype`", "floating", str(dtype)))


def _unpack_weights(draw):
    shape = draw(st.sampled_from([(NW - 1,), (NW + 3,), (NW, 1), ()]))
    return Bad({"weights": jnp.zeros(shape)}, ValueError, ("`weights`", esc(f"=({NW},)"),
                                                           esc(shape)))


def groups():
    """Valid per-pseudo-layer lists for pack_lstm_weights (two layers, forward only)."""
    W = portable_rnn.unpack_lstm_weights(jnp.zeros(NW), I, H, L, False)
    return {name: [g[p] for p in range(L)] for name, g in zip(("W_ih", "W_hh", "b_ih", "b_hh"),
                                                              W)}


def _pack_shape(draw):
    name = draw(st.sampled_from(["W_ih", "W_hh", "b_ih", "b_hh"]))
    p = draw(st.integers(0, L - 1))
    g = groups()[name]
    shape = list(g[p].shape)
    shape[draw(st.integers(0, len(shape) - 1))] += draw(st.sampled_from([-1, 1]))
    g[p] = jnp.zeros(shape)
    return Bad({name: g}, ValueError, (f"`{name}\\[{p}\\]`", esc(groups()[name][p].shape),
                                       esc(tuple(shape))))


def _pack_count(draw):
    name = draw(st.sampled_from(["W_ih", "W_hh", "b_ih", "b_hh"]))
    g = groups()[name]
    g = draw(st.sampled_from([g[:1], g + g[:1]]))
    return Bad({name: g}, ValueError, (f"`{name}`", f"hold {L} arrays", f"got {len(g)}"))


def _pack_keys(draw):
    name = draw(st.sampled_from(["W_ih", "W_hh"]))
    g = groups()[name]
    keys = draw(st.sampled_from([(1, 2), (0, 0.5), ("a", "b")]))
    return Bad({name: dict(zip(keys, g))}, ValueError,
               (f"`{name}`", f"keys 0..{L - 1}", "got"))


def _pack_not_sequence(draw):
    name = draw(st.sampled_from(["W_ih", "W_hh"]))
    value, got = draw(st.sampled_from([(None, "NoneType"), (jnp.zeros((4 * H, I)), "an array"),
                                       (3, "int")]))
    return Bad({name: value}, TypeError, (f"`{name}`", f"sequence or dict of {L} arrays", got))


def _pack_dtype(draw):
    name = draw(st.sampled_from(["W_ih", "W_hh", "b_ih", "b_hh"]))
    dtype = draw(st.sampled_from([jnp.bfloat16, jnp.float16]))
    g = groups()[name]
    g[0] = g[0].astype(dtype)
    return Bad({name: g}, TypeError, ("`W_ih`, `W_hh`, `b_ih` and `b_hh`", "one dtype",
                                      np.dtype(dtype).name))


def _pack_int(draw):
    dtype = np.dtype(draw(st.sampled_from([jnp.int32, jnp.uint8])))
    return Bad({k: [a.astype(dtype) for a in g] for k, g in groups().items()}, TypeError,
               ("`W_ih`, `W_hh`, `b_ih` and `b_hh`", "floating", str(dtype)))


def torch_dict():
    return portable_rnn.lstm_weights_to_torch(jnp.zeros(NW), I, H, L, False)


def _torch_not_mapping(draw):
    value = draw(st.sampled_from([[1, 2], "weights", None, jnp.zeros(3)]))
    return Bad({"state_dict": value}, TypeError, ("`state_dict`", "mapping", "got"))


def _torch_no_keys(draw):
    value = draw(st.sampled_from([{}, {"fc.weight": np.zeros(2)}]))
    return Bad({"state_dict": value}, ValueError, ("`state_dict`", "weight_ih_l0", "got"))


def _torch_missing(draw):
    sd = torch_dict()
    key = draw(st.sampled_from(sorted(k for k in sd if not k.startswith("bias"))))
    del sd[key]
    return Bad({"state_dict": sd}, ValueError, ("`state_dict`", "missing", esc(key)))


def _torch_shape(draw):
    sd = torch_dict()
    key = draw(st.sampled_from(sorted(k for k in sd if k.endswith("l1") or k.startswith("bias"))))
    shape = list(sd[key].shape)
    shape[draw(st.integers(0, len(shape) - 1))] += draw(st.sampled_from([-1, 2]))
    expected = sd[key].shape
    sd[key] = np.zeros(shape, np.float32)
    return Bad({"state_dict": sd}, ValueError,
               (f"`state_dict\\['{key}'\\]`", esc(expected), esc(tuple(shape))))


def _torch_proj(draw):
    """Projection weights the other matrices do not fit (W_hh must then be (4H, P))."""
    sd = torch_dict()
    key = draw(st.sampled_from(["weight_hr_l0", "weight_hr_l0_reverse", "weight_hr_l1"]))
    sd[key] = np.zeros((2, H))
    if key == "weight_hr_l0":
        return Bad({"state_dict": sd}, ValueError,
                   (r"`state_dict\['weight_hh_l0'\]`", esc((4 * H, 2)), esc((4 * H, H))))
    return Bad({"state_dict": sd}, ValueError, ("`state_dict`", "projection", "weight_hr_l0"))


def flax_params():
    """The parameter tree of Flax's ``nn.RNN(nn.OptimizedLSTMCell(H))`` (fresh dicts)."""
    cell = {f"i{g}": {"kernel": np.zeros((I, H), np.float32)} for g in "ifgo"}
    cell.update({f"h{g}": {"kernel": np.zeros((H, H), np.float32),
                           "bias": np.zeros(H, np.float32)} for g in "ifgo"})
    return {"params": {"cell": cell}}


def _flax_not_tree(draw):
    value = draw(st.sampled_from(["params", 3, None, jnp.zeros(3), ["params"]]))
    return Bad({"params": value}, TypeError, ("`params`", "Flax parameter dict", "got"))


def _flax_missing_gate(draw):
    params = flax_params()
    gate = draw(st.sampled_from(sorted(params["params"]["cell"])))
    del params["params"]["cell"][gate]
    layers = draw(st.sampled_from([params, [params]]))
    return Bad({"params": layers}, ValueError,
               ("`params` layer 0", "LSTMCell/OptimizedLSTMCell", esc(gate)))


def _flax_bidirectional_half(draw):
    """A backward_rnn alone; a forward_rnn alone (a shared cell) where `shared_cell=False`."""
    part, other = draw(st.sampled_from([("forward_rnn", "backward_rnn"),
                                        ("backward_rnn", "forward_rnn")]))
    over = {"params": {"params": {part: flax_params()["params"]}}}
    if part == "forward_rnn":
        over["shared_cell"] = False
    return Bad(over, ValueError, ("`params` layer 0", "nn.Bidirectional", other))


def weights_target(fn, base, kinds, modes=("eager",)):
    return Target(lambda kw: fn(**kw), base, kinds, modes)


# --- Flax layers ------------------------------------------------------------------------------

LX = (2, 3, T, I)  # two batch dims
LAYER = dict(hidden_size=H, num_layers=L)


def bad_dtype_attribute(draw, name):
    dtype = np.dtype(draw(st.sampled_from([jnp.int32, jnp.uint8, jnp.bool_])))
    return Bad({name: dtype}, TypeError, (f"`{name}`", "floating", dtype.name))


def _rngs(draw):
    value = draw(st.sampled_from([None, 0, jax.random.key(0)]))
    return Bad({"rngs": value}, TypeError, ("`rngs`", "nnx.Rngs", type(value).__name__))


def _layer_config_kinds(nnx_style: bool, family: str = "lstm"):
    kinds = {
        "sizes": lambda d: bad_size(d, d(st.sampled_from(["hidden_size", "num_layers"]))),
        "bidirectional": _sizes_bidirectional,
        "dropout": _dropout,
        "dtype": lambda d: bad_dtype_attribute(d, "dtype"),
        "param_dtype": lambda d: bad_dtype_attribute(d, "param_dtype"),
        "implementation": lambda d: bad_name(d, "implementation", tuple(routes(family))),
    }
    if nnx_style:
        kinds["in_features"] = lambda d: bad_size(d, "in_features")
        kinds["rngs"] = _rngs
    return kinds


def linen_config_call(kw):
    kw = dict(kw)
    x = kw.pop("x")
    return plinen.LSTM(**kw).init(jax.random.key(0), x)


def nnx_config_call(kw):
    kw = dict(kw)
    kw.setdefault("rngs", nnx.Rngs(0))
    return pnnx.LSTM(**kw)


def _inputs_rank(draw):
    shape = draw(st.sampled_from([(), (I,)]))
    return Bad({"inputs": jnp.zeros(shape)}, ValueError,
               ("`inputs`", r"\(\.\.\., T, I\) \(rank >= 2\)", esc(shape)))


def _inputs_features(draw):
    shape = LX[:-1] + (draw(st.sampled_from([1, 3, 5])),)
    return Bad({"inputs": jnp.zeros(shape)}, ValueError,
               ("`inputs`", f"input_size={I}", esc(shape)))


def _inputs_dtype(draw):  # integers and bools are promoted to param_dtype, as in Flax
    dtype = np.dtype(jnp.complex64)
    return Bad({"inputs": jnp.zeros(LX, dtype)}, TypeError, ("`inputs`", "floating", str(dtype)))


def _layer_lengths(draw):
    which = draw(st.sampled_from(["dtype", "shape", "range"]))
    if which == "dtype":
        return lengths_dtype(draw, "seq_lengths", LX[:2])
    if which == "range":
        value = draw(st.sampled_from([-1, T + 1, 100]))
        lengths = np.ones(LX[:2], np.int32)
        lengths[1, 2] = value
        return Bad({"seq_lengths": jnp.asarray(lengths)}, ValueError,
                   ("`seq_lengths`", esc(f"[0, T={T}]"), esc([value])), traced_ok=True)
    shape = draw(st.sampled_from([(2,), (3, 2), (2, 3, 1), (6,)]))
    return Bad({"seq_lengths": jnp.ones(shape, jnp.int32)}, ValueError,
               ("`seq_lengths`", esc("(*batch,)=(2, 3)"), esc(shape)))


def _carry(draw):
    state = (L, 2, 3, H)
    which = draw(st.sampled_from(["h", "c", "pair", "none"]))
    if which in ("h", "c"):
        shape = draw(st.sampled_from([(L, 6, H), (L, 2, 3, H + 1), (L + 1, 2, 3, H)]))
        carry = [jnp.zeros(state), jnp.zeros(state)]
        i = 0 if which == "h" else 1
        carry[i] = jnp.zeros(shape)
        return Bad({"initial_carry": tuple(carry)}, ValueError,
                   (f"`initial_carry\\[{i}\\]`", esc(f"={state}"), esc(shape)))
    if which == "pair":
        value = draw(st.sampled_from([(jnp.zeros(state),), (jnp.zeros(state),) * 3]))
        return Bad({"initial_carry": value}, TypeError,
                   ("`initial_carry`", r"a pair \(h, c\)", f"length {len(value)}"))
    value = jnp.zeros(state)
    return Bad({"initial_carry": value}, TypeError,
               ("`initial_carry`", r"a pair \(h, c\)", esc(f"an array of shape {state}")))


LAYER_CALL_KINDS = {
    "inputs_rank": _inputs_rank,
    "inputs_features": _inputs_features,
    "inputs_dtype": _inputs_dtype,
    "inputs_not_array": lambda d: not_array(d, "inputs"),
    "seq_lengths": _layer_lengths,
    "initial_carry": _carry,
}


def layer_call_base():
    return dict(inputs=jnp.zeros(LX), seq_lengths=None, initial_carry=None)


@functools.cache
def _linen(name):
    """A Linen layer of class `name` with its variables, made on first use (not at collection),
    eagerly where that use is traced."""
    layer = getattr(plinen, name)(**LAYER)
    with jax.ensure_compile_time_eval():
        return layer, layer.init(jax.random.key(0), jnp.zeros(LX))


@functools.cache
def _nnx(name):
    with jax.ensure_compile_time_eval():
        return getattr(pnnx, name)(I, H, num_layers=L, rngs=nnx.Rngs(0))


def linen_call(kw, name="LSTM"):
    layer, variables = _linen(name)
    return layer.apply(variables, kw["inputs"], kw["seq_lengths"], kw["initial_carry"])


def nnx_call(kw, name="LSTM"):
    return _nnx(name)(kw["inputs"], kw["seq_lengths"], kw["initial_carry"])


# attention_fn (Flax's signature; any batch dims)
FQ, FK = (2, 3, AT, AN, AH), (2, 3, AS, AK, AH)


def flax_attention_base():
    return dict(query=jnp.zeros(FQ), key=jnp.zeros(FK), value=jnp.zeros(FK))


def _fa_rank(draw):
    name = draw(st.sampled_from(["query", "key", "value"]))
    shape = draw(st.sampled_from([(), (AH,), (AN, AH)]))
    return Bad({name: jnp.zeros(shape)}, ValueError,
               (f"`{name}`", r"\(\*batch, T, N, H\) \(rank >= 3\)", esc(shape)))


def _fa_batch(draw):
    name = draw(st.sampled_from(["key", "value"]))
    shape = draw(st.sampled_from([(3, 2, AS, AK, AH), (6, AS, AK, AH), (2, 1, AS, AK, AH)]))
    over = {name: jnp.zeros(shape)}
    if name == "key":
        over["value"] = jnp.zeros(shape)
    if len(shape) != 5:  # Flax's phrase first, as its own attention checks
        return Bad(over, ValueError, ("`query`, `key` and `value`", "same rank", esc(shape)))
    return Bad(over, ValueError, (f"`{name}`", esc("batch dims of `query` (2, 3)"),
                                  "batch dims must match", esc(shape)))


def _fa_extra(draw):
    name = draw(st.sampled_from(["mask", "bias"]))
    shape = draw(st.sampled_from([(3, 2, AN, AT, AS), (1, 2, 3, AN, AT, AS), (2, 2, AN, AT, AS)]))
    dtype = jnp.bool_ if name == "mask" else jnp.float32
    return Bad({name: jnp.zeros(shape, dtype)}, ValueError,
               (f"`{name}`", esc("(*batch, N, T, S) with batch=(2, 3)"), esc(shape)))


def _fa_dropout_rate(draw):
    value = draw(st.sampled_from([-0.5, 1.5, float("nan")]))
    return Bad({"dropout_rate": value, "deterministic": False,
                "dropout_rng": jax.random.key(0)}, ValueError,
               ("`dropout_rate`", r"\[0, 1\]", esc(repr(value))))


def _fa_dropout_rng(draw):
    return with_over(bad_key(draw, "dropout_rng"), dropout_rate=0.1, deterministic=False)


def flax_attention_call(fn):
    def call(kw):
        kw = dict(kw)
        return fn(kw.pop("query"), kw.pop("key"), kw.pop("value"), **kw)
    return call


FLAX_ATTENTION_KINDS = {
    "rank": _fa_rank,
    "batch_mismatch": _fa_batch,
    "mask_bias_batch": _fa_extra,
    "not_array": lambda d: not_array(d, d(st.sampled_from(["query", "key", "value"]))),
    "dropout_rate": _fa_dropout_rate,
    "dropout_without_key": lambda d: Bad(
        {"dropout_rate": d(st.sampled_from([0.1, 0.9])), "deterministic": False}, ValueError,
        ("attention dropout", "`dropout_rng`", "dropout_rate=")),
    "dropout_rng": _fa_dropout_rng,
    "dtype": lambda d: bad_dtype_attribute(d, "dtype"),
    "implementation": lambda d: bad_name(d, "implementation", ATTENTION_ROUTES),
}

# --- the matrix -------------------------------------------------------------------------------

TARGETS = {
    "lstm": Target(lstm_call(portable_rnn.lstm), lstm_base, LSTM_KINDS),
    "explain_lstm": Target(lstm_call(portable_rnn.explain_lstm), lstm_base, LSTM_KINDS,
                           modes=("eager", "jit", "sds")),
    "dot_product_attention": Target(attention_call(portable_rnn.dot_product_attention),
                                    attention_base, ATTENTION_KINDS),
    "explain_attention": Target(attention_call(portable_rnn.explain_attention), attention_base,
                                ATTENTION_KINDS, modes=("eager", "jit", "sds")),
    "policy": Target(policy_call, dict, POLICY_KINDS, modes=("eager",)),
    "get_num_params_in_lstm": weights_target(
        portable_rnn.get_num_params_in_lstm, lambda: dict(SIZES),
        {"sizes": _sizes_kind, "bidirectional": _sizes_bidirectional}),
    "init_lstm_weight": weights_target(
        portable_rnn.init_lstm_weight, lambda: dict(SIZES, rng=jax.random.key(0)),
        {"sizes": _sizes_kind, "bidirectional": _sizes_bidirectional,
         "rng": lambda d: bad_key(d, "rng"), "dtype": _init_dtype},
        modes=("eager", "eval_shape")),
    "unpack_lstm_weights": weights_target(
        portable_rnn.unpack_lstm_weights, lambda: dict(SIZES, weights=jnp.zeros(NW)),
        {"sizes": _sizes_kind, "weights": _unpack_weights,
         "weights_not_array": lambda d: not_array(d, "weights")},
        modes=("eager", "jit", "eval_shape")),
    "pack_lstm_weights": weights_target(
        portable_rnn.pack_lstm_weights, lambda: dict(SIZES, **groups()),
        {"sizes": _sizes_kind, "shape": _pack_shape, "count": _pack_count, "keys": _pack_keys,
         "not_sequence": _pack_not_sequence, "mixed_dtype": _pack_dtype, "int_dtype": _pack_int},
        modes=("eager", "jit", "eval_shape")),
    "lstm_weights_to_torch": weights_target(
        portable_rnn.lstm_weights_to_torch, lambda: dict(SIZES, weights=jnp.zeros(NW)),
        {"sizes": _sizes_kind, "weights": _unpack_weights}),
    "lstm_weights_from_torch": weights_target(
        portable_rnn.lstm_weights_from_torch, lambda: dict(state_dict=torch_dict()),
        {"not_mapping": _torch_not_mapping, "no_keys": _torch_no_keys, "missing": _torch_missing,
         "shape": _torch_shape, "proj_size": _torch_proj}),
    "lstm_weights_from_flax": weights_target(
        portable_rnn.lstm_weights_from_flax, lambda: dict(params=flax_params()),
        {"not_tree": _flax_not_tree,
         "empty": lambda d: Bad({"params": []}, ValueError, ("`params`", "at least one layer",
                                                             "empty")),
         "missing_gate": _flax_missing_gate, "bidirectional_half": _flax_bidirectional_half}),
    "linen.LSTM(config)": Target(linen_config_call, lambda: dict(LAYER, x=jnp.zeros(LX)),
                                 _layer_config_kinds(False), modes=("eager", "eval_shape")),
    "linen.LSTM(call)": Target(linen_call, layer_call_base, LAYER_CALL_KINDS),
    "nnx.LSTM(config)": Target(nnx_config_call, lambda: dict(LAYER, in_features=I),
                               _layer_config_kinds(True), modes=("eager",)),
    "nnx.LSTM(call)": Target(nnx_call, layer_call_base, LAYER_CALL_KINDS),
    "linen.attention_fn": Target(flax_attention_call(plinen.attention_fn), flax_attention_base,
                                 FLAX_ATTENTION_KINDS),
    "nnx.attention_fn": Target(flax_attention_call(pnnx.attention_fn), flax_attention_base,
                               FLAX_ATTENTION_KINDS),
}
PAIRS = [(t, k) for t, target in TARGETS.items() for k in target.kinds]


# The rest of the family: the same checks through shared code, so fewer examples per kind.

def family_groups(family):
    unpack = getattr(portable_rnn, f"unpack_{family}_weights")
    W = unpack(jnp.zeros(FAMILY_NW[family]), I, H, L, False)
    return {name: [g[p] for p in range(L)] for name, g in zip(("W_ih", "W_hh", "b_ih", "b_hh"), W)}


def family_weight_kinds(family):
    nw = FAMILY_NW[family]
    module = FAMILIES[family].torch_module
    rows = FAMILIES[family].gates

    def unpack_weights(draw):
        shape = draw(st.sampled_from([(nw - 1,), (nw + 3,), (nw, 1), ()]))
        return Bad({"weights": jnp.zeros(shape)}, ValueError,
                   ("`weights`", esc(f"=({nw},)"), esc(shape)))

    def pack_shape(draw):
        name = draw(st.sampled_from(["W_ih", "W_hh", "b_ih", "b_hh"]))
        g = family_groups(family)[name]
        expected = g[0].shape
        shape = (expected[0] + draw(st.sampled_from([-1, 1])),) + expected[1:]
        g[0] = jnp.zeros(shape)
        return Bad({name: g}, ValueError, (f"`{name}\\[0\\]`", esc(expected), esc(shape)))

    def pack_count(draw):
        name = draw(st.sampled_from(["W_ih", "b_hh"]))
        g = family_groups(family)[name][:1]
        return Bad({name: g}, ValueError, (f"`{name}`", f"hold {L} arrays", "got 1"))

    def torch_missing(draw):
        sd = family_torch_dict(family)
        key = draw(st.sampled_from(sorted(k for k in sd if k.startswith("weight"))))
        del sd[key]
        return Bad({"state_dict": sd}, ValueError, ("`state_dict`", "missing", esc(key)))

    def torch_other_family(draw):
        sd = draw(st.sampled_from(["lstm", "gru", "simple_rnn"]).filter(lambda f: f != family))
        sd = torch_dict() if sd == "lstm" else family_torch_dict(sd)
        return Bad({"state_dict": sd}, ValueError,
                   ("weight_hh_l0", f"{rows}\\*hidden_size rows for an {module}", "looks like"))

    sizes = {"sizes": _sizes_kind, "bidirectional": _sizes_bidirectional}
    torch = {
        f"{family}_weights_to_torch": ({"sizes": _sizes_kind, "weights": unpack_weights},
                                       ("eager",)),
        f"{family}_weights_from_torch": ({"not_mapping": _torch_not_mapping,
                                          "no_keys": _torch_no_keys, "missing": torch_missing,
                                          "other_family": torch_other_family}, ("eager",)),
    } if module else {}  # PyTorch has no MGU
    return {**torch,
        f"get_num_params_in_{family}": (sizes, ("eager",)),
        f"init_{family}_weight": (dict(sizes, rng=lambda d: bad_key(d, "rng"), dtype=_init_dtype),
                                  ("eager", "eval_shape")),
        f"unpack_{family}_weights": ({"sizes": _sizes_kind, "weights": unpack_weights},
                                     ("eager", "jit")),
        f"pack_{family}_weights": ({"sizes": _sizes_kind, "shape": pack_shape, "count": pack_count,
                                    "int_dtype": lambda d: Bad(
                                        {k: [a.astype(np.int32) for a in g]
                                         for k, g in family_groups(family).items()}, TypeError,
                                        ("`W_ih`, `W_hh`, `b_ih` and `b_hh`", "floating"))},
                                   ("eager", "jit")),
    }


def family_torch_dict(family):
    to_torch = getattr(portable_rnn, f"{family}_weights_to_torch")
    return to_torch(jnp.zeros(FAMILY_NW[family]), I, H, L, False)


def _family_weight_base(name, family):
    if name.startswith("init_"):
        return lambda: dict(SIZES, rng=jax.random.key(0))
    if name.startswith(("unpack_", f"{family}_weights_to_torch")):
        return lambda: dict(SIZES, weights=jnp.zeros(FAMILY_NW[family]))
    if name.startswith("pack_"):
        return lambda: dict(SIZES, **family_groups(family))
    if name.endswith("from_torch"):
        return lambda: dict(state_dict=family_torch_dict(family))
    return lambda: dict(SIZES)


def _one_carry(draw):
    state = (L, 2, 3, H)
    if draw(st.booleans()):
        shape = draw(st.sampled_from([(L, 6, H), (L, 2, 3, H + 1), (L + 1, 2, 3, H)]))
        return Bad({"initial_carry": jnp.zeros(shape)}, ValueError,
                   ("`initial_carry`", esc(f"={state}"), esc(shape)))
    return Bad({"initial_carry": (jnp.zeros(state),) * 2}, TypeError,
               ("`initial_carry`", "one array h", "an LSTM's is a pair"))


ONE_CARRY_CALL_KINDS = dict(LAYER_CALL_KINDS, initial_carry=_one_carry)


def _tuple_carry(parts):
    """`_carry` for a family of more than two states, ``parts`` their names (h, c, n, m)."""
    def draw_bad(draw):
        state = (L, 2, 3, H)
        which = draw(st.sampled_from(["one", "count", "array"]))
        if which == "one":
            i = draw(st.integers(0, len(parts) - 1))
            shape = draw(st.sampled_from([(L, 6, H), (L, 2, 3, H + 1), (L + 1, 2, 3, H)]))
            carry = [jnp.zeros(state) for _ in parts]
            carry[i] = jnp.zeros(shape)
            return Bad({"initial_carry": tuple(carry)}, ValueError,
                       (f"`initial_carry\\[{i}\\]`", esc(f"={state}"), esc(shape)))
        what = esc(f"a tuple ({', '.join(parts)})")
        if which == "count":
            n = draw(st.sampled_from([1, 2, len(parts) + 1]))
            return Bad({"initial_carry": (jnp.zeros(state),) * n}, TypeError,
                       ("`initial_carry`", what, f"length {n}"))
        return Bad({"initial_carry": jnp.zeros(state)}, TypeError,
                   ("`initial_carry`", what, esc(f"an array of shape {state}")))
    return draw_bad


def carry_call_kinds(family):
    """The layer call's kinds for a family's carry: one array h, the LSTM's pair (h, c), or a
    longer tuple (the sLSTM's (h, c, n, m))."""
    parts = [s.removesuffix("_0") for s in FAMILIES[family].states]
    if len(parts) == 1:
        return ONE_CARRY_CALL_KINDS
    if family == "lstm":
        return LAYER_CALL_KINDS
    return dict(LAYER_CALL_KINDS, initial_carry=_tuple_carry(parts))


def _family_layers():
    out = {}
    for family in OTHERS:
        name = FAMILIES[family].class_name
        extra = {option: OPTION_KINDS[option] for option in FAMILIES[family].layer_options}
        config = _layer_config_kinds(False, family)
        config.update(extra)
        linen_cls, nnx_cls = getattr(plinen, name), getattr(pnnx, name)

        def linen_config(kw, cls=linen_cls):
            kw = dict(kw)
            x = kw.pop("x")
            return cls(**kw).init(jax.random.key(0), x)

        def nnx_config(kw, cls=nnx_cls):
            return cls(**dict(kw, rngs=nnx.Rngs(0)))

        nnx_kinds = dict(_layer_config_kinds(True, family), **{k: config[k] for k in extra})
        del nnx_kinds["rngs"]
        out[f"linen.{name}(config)"] = Target(linen_config, lambda: dict(LAYER, x=jnp.zeros(LX)),
                                              config, modes=("eager", "eval_shape"))
        out[f"nnx.{name}(config)"] = Target(nnx_config, lambda: dict(LAYER, in_features=I),
                                            nnx_kinds, modes=("eager",))
        out[f"linen.{name}(call)"] = Target(functools.partial(linen_call, name=name),
                                            layer_call_base, carry_call_kinds(family))
        out[f"nnx.{name}(call)"] = Target(functools.partial(nnx_call, name=name),
                                          layer_call_base, carry_call_kinds(family))
    return out


FAMILY_TARGETS = {}
for _family in OTHERS:
    FAMILY_TARGETS[_family] = Target(family_call(getattr(portable_rnn, _family), _family),
                                     family_base(_family), family_kinds(_family))
    FAMILY_TARGETS[f"explain_{_family}"] = Target(
        family_call(getattr(portable_rnn, f"explain_{_family}"), _family), family_base(_family),
        family_kinds(_family), modes=("eager", "jit", "sds"))
    for _name, (_kinds, _modes) in family_weight_kinds(_family).items():
        FAMILY_TARGETS[_name] = weights_target(getattr(portable_rnn, _name),
                                               _family_weight_base(_name, _family), _kinds,
                                               _modes)
FAMILY_TARGETS.update(_family_layers())


def _keras_kinds(family):
    G = FAMILIES[family].gates
    good = [np.zeros((I, G * H), np.float32), np.zeros((H, G * H), np.float32)]

    def count(draw):
        n = draw(st.sampled_from([1, 5]))
        arrays = (good * 3)[:n]
        return Bad({"keras_weights": arrays}, ValueError,
                   ("`keras_weights` layer 0", "Bidirectional", f"got {n} arrays"))

    def recurrent_shape(draw):
        shape = draw(st.sampled_from([(H, G * H + 1), (H + 1, G * H)]))
        return Bad({"keras_weights": [good[0], np.zeros(shape, np.float32)]}, ValueError,
                   ("`keras_weights` layer 0", "recurrent_kernel", esc(shape)))

    kinds = {
        "not_list": lambda d: Bad({"keras_weights": d(st.sampled_from(["w", 3, None]))},
                                  TypeError, ("`keras_weights`", "list of arrays", "got")),
        "empty": lambda d: Bad({"keras_weights": []}, ValueError,
                               ("`keras_weights`", "at least one layer", "empty")),
        "count": count, "recurrent_shape": recurrent_shape,
    }
    if family == "gru":
        kinds["reset_before"] = lambda d: Bad(
            {"keras_weights": good + [np.zeros(G * H, np.float32)]}, ValueError,
            ("reset_after=False", "classic_gru_weights_from_keras", esc(f"({G * H},)")))
    if family == "classic_gru":
        kinds["reset_after"] = lambda d: Bad(
            {"keras_weights": good + [np.zeros((2, G * H), np.float32)]}, ValueError,
            ("reset_after=True", "gru_weights_from_keras", esc(f"(2, {G * H})")))
    return kinds


def _flax_family_kinds(family):
    cell = FAMILIES[family].flax_cells
    return {
        "not_tree": _flax_not_tree,
        "empty": lambda d: Bad({"params": []}, ValueError, ("`params`", "at least one layer",
                                                            "empty")),
        "lstm_tree": lambda d: Bad({"params": flax_params()}, ValueError,
                                   ("`params` layer 0", cell, "got keys")),
    }


for _family, _nw in (("lstm", NW), *FAMILY_NW.items()):
    _sizes_weights = {"sizes": _sizes_kind,
                      "weights": (lambda nw: lambda d: Bad(
                          {"weights": jnp.zeros(nw + 1)}, ValueError,
                          ("`weights`", esc(f"=({nw},)"), esc((nw + 1,)))))(_nw)}
    _fam = FAMILIES[_family]
    for _to in [t for t, peer in (("flax", _fam.flax_cell), ("keras", _fam.keras_layer)) if peer]:
        FAMILY_TARGETS[f"{_family}_weights_to_{_to}"] = weights_target(
            getattr(portable_rnn, f"{_family}_weights_to_{_to}"),
            (lambda nw: lambda: dict(SIZES, weights=jnp.zeros(nw)))(_nw), _sizes_weights)
    if _fam.keras_layer:
        FAMILY_TARGETS[f"{_family}_weights_from_keras"] = weights_target(
            getattr(portable_rnn, f"{_family}_weights_from_keras"),
            (lambda f: lambda: dict(keras_weights=getattr(portable_rnn, f"{f}_weights_to_keras")(
                jnp.zeros(FAMILY_NW.get(f, NW)), I, H, L, False)))(_family),
            _keras_kinds(_family))
    if _family != "lstm" and _fam.flax_cell:
        FAMILY_TARGETS[f"{_family}_weights_from_flax"] = weights_target(
            getattr(portable_rnn, f"{_family}_weights_from_flax"),
            (lambda f: lambda: dict(params=getattr(portable_rnn, f"{f}_weights_to_flax")(
                jnp.zeros(FAMILY_NW[f]), I, H, L, False)))(_family), _flax_family_kinds(_family))


# --- Equinox layers ---------------------------------------------------------------------------
# The call's arguments are `x` and `state` (Flax's `inputs` and `initial_carry`): the same kinds,
# renamed; the configuration adds `input_size`, `key`, `return_state` and `inference`.

def renamed(kinds: dict, names: dict[str, str]) -> dict:
    """`kinds` with the arguments `names` renames, in the overrides and the messages."""
    def wrap(kind):
        def draw_bad(draw):
            bad = kind(draw)
            over = {names.get(k, k): v for k, v in bad.over.items()}
            patterns = tuple(functools.reduce(lambda p, n: p.replace(f"`{n[0]}", f"`{n[1]}"),
                                              names.items(), pattern)
                             for pattern in bad.patterns)
            return dataclasses.replace(bad, over=over, patterns=patterns)
        return draw_bad
    return {k: wrap(v) for k, v in kinds.items()}


EQX_NAMES = {"inputs": "x", "initial_carry": "state"}


def _eqx_bool(name, values=(1, "yes", None)):
    def draw_bad(draw):
        value = draw(st.sampled_from(values))
        return Bad({name: value}, TypeError, (f"`{name}`", "bool", esc(repr(value))))
    return draw_bad


def _eqx_missing_key(draw):
    return Bad({"key": None}, ValueError, ("`key`", "PRNG key", "dropout=0.5", "got None"))


def _eqx_layers():
    out = {}
    for family in FAMILIES:
        name = FAMILIES[family].class_name
        extra = ({"proj_size": _proj_size} if family == "lstm" else
                 {option: OPTION_KINDS[option] for option in FAMILIES[family].layer_options})
        cls = getattr(preqx, name)
        config = dict(_layer_config_kinds(False), **extra)
        config.update(input_size=lambda d: bad_size(d, "input_size"),
                      key=lambda d: bad_key(d, "key"),
                      return_state=_eqx_bool("return_state"), inference=_eqx_bool("inference"))
        out[f"equinox.{name}(config)"] = Target(
            lambda kw, cls=cls: cls(**kw),
            lambda: dict(input_size=I, **LAYER, key=jax.random.key(0)), config,
            modes=("eager",))
        model = cls(I, H, num_layers=L, dropout=0.5, key=jax.random.key(0))
        calls = renamed(carry_call_kinds(family), EQX_NAMES)
        calls.update(key=lambda d: bad_key(d, "key"), missing_key=_eqx_missing_key,
                     inference=lambda d: with_over(_eqx_bool("inference", (1, "yes"))(d), key=None))
        out[f"equinox.{name}(call)"] = Target(
            lambda kw, m=model: m(kw["x"], kw["seq_lengths"], kw["state"], key=kw["key"],
                                  inference=kw.get("inference")),
            lambda: dict(x=jnp.zeros(LX), seq_lengths=None, state=None, key=jax.random.key(1)),
            calls)
    return out


if HAS_EQUINOX:
    FAMILY_TARGETS.update(_eqx_layers())
FAMILY_PAIRS = [(t, k) for t, target in FAMILY_TARGETS.items() for k in target.kinds]


@pytest.mark.parametrize("target", [*TARGETS, *FAMILY_TARGETS])
def test_base_call_is_valid(target):
    t = TARGETS.get(target) or FAMILY_TARGETS[target]
    if target == "policy":
        with portable_rnn.policy(**t.base()):
            return
    for mode in t.modes:  # tracing proves the shapes valid; "eager" would compile
        if mode != "eager" or len(t.modes) == 1 or target.endswith("(config)"):
            run(mode, t.call, t.base())


@pytest.mark.parametrize("target, kind", PAIRS, ids=[f"{t}-{k}" for t, k in PAIRS])
@given(data=st.data())
def test_bad_input(target, kind, data):
    t = TARGETS[target]
    check_bad(t, t.kinds[kind](data.draw))


@pytest.mark.parametrize("target, kind", FAMILY_PAIRS, ids=[f"{t}-{k}" for t, k in FAMILY_PAIRS])
@settings(max_examples=3)
@given(data=st.data())
def test_bad_input_to_the_rest_of_the_family(target, kind, data):
    t = FAMILY_TARGETS[target]
    check_bad(t, t.kinds[kind](data.draw))


def test_matrix_covers_every_public_function_and_layer():
    covered = {name.split("(")[0].split(".")[-1] for name in [*TARGETS, *FAMILY_TARGETS]}
    public = set(portable_rnn.__all__) - {"Capabilities", "Decision", "FallbackError",
                                          "FallbackWarning", "capabilities"}
    assert public <= covered
    layers = {f"{api}.{fam.class_name}({part})" for api in ("linen", "nnx")
              for fam in FAMILIES.values() for part in ("config", "call")}
    assert layers | {"linen.attention_fn", "nnx.attention_fn"} <= {*TARGETS, *FAMILY_TARGETS}


@pytest.mark.skipif(not HAS_EQUINOX, reason="needs equinox, which is not installed")
def test_matrix_covers_the_equinox_layers():
    layers = {f"equinox.{fam.class_name}({part})" for fam in FAMILIES.values()
              for part in ("config", "call")}
    assert layers <= set(FAMILY_TARGETS)


def test_traced_static_arguments_are_rejected_with_advice():
    base = lstm_base()
    for name in ("input_size", "hidden_size", "num_layers"):
        with pytest.raises(TypeError, match=f"`{name}` must be a static Python int, not a traced"):
            jax.jit(lambda n, name=name: lstm_call(portable_rnn.lstm)({**base, name: n}))(3)
    with pytest.raises(TypeError, match=r"`dropout` must be a static Python float"):
        jax.jit(lambda p: lstm_call(portable_rnn.lstm)({**base, "dropout": p}))(0.5)


# --- defined results for edge inputs ------------------------------------------------------------

@pytest.mark.parametrize("batch, steps", [(0, T), (B, 0), (0, 0), (B, 1)])
@pytest.mark.parametrize("lengths", ["none", "given"])
def test_lstm_empty_and_single_step_shapes(batch, steps, lengths):
    """Zero-sized batch and T = 0 are defined: empty outputs, and h_n, c_n = h_0, c_0 (T = 0)."""
    kw = dict(lstm_base(), x=jnp.ones((batch, steps, I)), h_0=jnp.ones((L, batch, H)),
              c_0=jnp.full((L, batch, H), 2.0),
              seq_lengths=None if lengths == "none" else jnp.full((batch,), steps, jnp.int32))
    for mode in ("eager", "eval_shape"):
        y, h, c = run(mode, lstm_call(portable_rnn.lstm), kw)
        assert (y.shape, h.shape, c.shape) == ((batch, steps, H), (L, batch, H), (L, batch, H))
    y, h, c = lstm_call(portable_rnn.lstm)(kw)
    if steps == 0:
        np.testing.assert_array_equal(np.asarray(h), 1.0)
        np.testing.assert_array_equal(np.asarray(c), 2.0)
    assert bool(jnp.isfinite(y).all())


@pytest.mark.parametrize("impl", ["xla", "chunked"])
@pytest.mark.parametrize("shapes", [
    ((0, AT, AN, AH), (0, AS, AK, AH)),  # zero-sized batch
    ((AB, 0, AN, AH), KS),               # no queries
    (QS, (AB, 0, AK, AH)),               # no keys: every row sees nothing -> 0
    ((AB, AT, 0, AH), KS),               # no query heads
    ((AB, AT, AN, 0), (AB, AS, AK, 0)),  # zero head dim (default scale would be 1/sqrt(0))
    ((AB, 1, AN, AH), (AB, 1, AK, AH)),  # T = S = 1
])
def test_attention_empty_shapes_give_zeros(impl, shapes):
    q, k = jnp.ones(shapes[0]), jnp.ones(shapes[1])
    for mode in ("eager", "eval_shape"):
        out = run(mode, attention_call(portable_rnn.dot_product_attention),
                  dict(query=q, key=k, value=k, implementation=impl, is_causal=True))
        assert out.shape == q.shape
    out = portable_rnn.dot_product_attention(q, k, k, implementation=impl)
    if k.shape[1] == 0 or out.size == 0:
        assert not bool(out.any())
    else:
        np.testing.assert_allclose(np.asarray(out), 1.0)


def test_flax_attention_fn_with_dropout_and_empty_keys_gives_zeros():
    q, k = jnp.ones(FQ), jnp.ones((2, 3, 0, AK, AH))
    out = plinen.attention_fn(q, k, k, dropout_rate=0.5, deterministic=False,
                              dropout_rng=jax.random.key(0))
    assert out.shape == FQ and not bool(out.any())


# --- seq_lengths out of range: concrete raise, traced clip, checkify reports -------------------

def _lstm_with_lengths(lengths):
    kw = dict(lstm_base(), x=jax.random.normal(jax.random.key(1), (B, T, I)),
              weights=portable_rnn.init_lstm_weight(jax.random.key(2), I, H, L, False),
              seq_lengths=lengths)
    return lstm_call(portable_rnn.lstm)(kw)


_lstm_jit = jax.jit(_lstm_with_lengths)
_lstm_checked = jax.jit(checkify.checkify(_lstm_with_lengths, errors=checkify.user_checks))


def _attention_with_lengths(q_len, kv_len):
    return portable_rnn.dot_product_attention(
        *(jax.random.normal(jax.random.key(i), s) for i, s in enumerate((QS, KS, KS))),
        query_seq_lengths=q_len, key_value_seq_lengths=kv_len, implementation="xla")


_attention_jit = jax.jit(_attention_with_lengths)


def test_traced_lstm_lengths_are_clipped():
    """Under jit, a length above T means the whole sequence and a negative one means empty."""
    got = _lstm_jit(jnp.array([T + 50, -7]))
    want = _lstm_jit(jnp.array([T, 0]))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_traced_attention_lengths_are_clipped():
    np.testing.assert_array_equal(
        np.asarray(_attention_jit(jnp.array([AT + 9, -1]), jnp.array([-4, 99]))),
        np.asarray(_attention_jit(jnp.array([AT, 0]), jnp.array([0, AS]))))


def test_narrow_integer_lengths_are_not_wrapped_when_t_exceeds_their_range():
    """uint8 lengths with T > 255: the clip bound 300 must not wrap around to 44 in uint8."""
    steps = 300
    q = jnp.ones((1, steps, 1, 4))
    lengths = jnp.array([255], jnp.uint8)
    out = portable_rnn.dot_product_attention(q, q, q, query_seq_lengths=lengths)
    rows = np.asarray(jnp.any(out[0] != 0, axis=(-1, -2)))
    assert rows.sum() == 255 and rows[:255].all()
    traced = jax.jit(lambda s: portable_rnn.dot_product_attention(q, q, q, query_seq_lengths=s))
    np.testing.assert_array_equal(np.asarray(traced(lengths)), np.asarray(out))


@pytest.mark.parametrize("lengths, bad", [([T + 1, 1], True), ([1, -2], True), ([T, 0], False)])
def test_checkify_reports_out_of_range_traced_lstm_lengths(lengths, bad):
    with portable_rnn.policy(checkify_lengths=True):
        err, out = _lstm_checked(jnp.array(lengths))
    if not bad:
        assert err.get() is None
        return
    assert re.search(r"`seq_lengths` must lie in \[0, T=3\]; got \[ ?-?\d+ +-?\d+\]", err.get())
    with pytest.raises(checkify.JaxRuntimeError, match="`seq_lengths` must lie in"):
        err.throw()
    want = _lstm_jit(jnp.clip(jnp.array(lengths), 0, T))  # the result is still clipped
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(want[0]), rtol=1e-6, atol=1e-6)


def test_checkify_reports_attention_lengths_and_under_vmap():
    f = _attention_with_lengths
    checked = jax.jit(checkify.checkify(f, errors=checkify.user_checks))
    with portable_rnn.policy(checkify_lengths=True):
        err, _ = checked(jnp.array([1, 2]), jnp.array([AS + 1, 0]))
        assert "`key_value_seq_lengths` must lie in [0, S=4]" in err.get()
        err, _ = checked(jnp.array([-1, 2]), jnp.array([1, 0]))
        assert "`query_seq_lengths` must lie in [0, T=3]" in err.get()
        err, _ = checked(jnp.array([1, 2]), jnp.array([1, 0]))
        assert err.get() is None
        batched = jax.jit(checkify.checkify(jax.vmap(f, in_axes=(0, None)),
                                            errors=checkify.user_checks))
        err, _ = batched(jnp.array([[1, 2], [3, 9]]), jnp.array([1, 0]))
    assert "`query_seq_lengths` must lie in [0, T=3]" in err.get()


def test_length_checks_are_opt_in_and_free_outside_checkify():
    """By default traced lengths carry no check: no effect in the program (so `jax.export` can
    serialize it) and checkify reports nothing. With the policy, nothing of the check reaches
    the compiled program outside checkify."""
    lengths = jnp.array([T + 1, 1])
    assert not jax.make_jaxpr(_lstm_with_lengths)(lengths).effects
    assert not jax.make_jaxpr(_attention_with_lengths)(lengths, lengths).effects
    assert jax.jit(checkify.checkify(_lstm_with_lengths, errors=checkify.user_checks))(
        lengths)[0].get() is None
    with portable_rnn.policy(checkify_lengths=True):  # new functions: JAX caches traces
        assert jax.make_jaxpr(lambda s: _lstm_with_lengths(s))(lengths).effects
        hlo = jax.jit(lambda s: _lstm_with_lengths(s)).lower(lengths).as_text()
    assert "callback" not in hlo.lower()

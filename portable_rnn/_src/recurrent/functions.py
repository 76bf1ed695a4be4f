"""Each registered family's functional API, made from its `Folder`: the op (`portable_rnn.gru`),
``explain_gru``, the weight functions and the converters for the peers the family has, each
with its signature and a docstring written from the family's facts.

`ops` makes them once per family; `portable_rnn` re-exports them. A function made here lives in
this module's namespace too, so that ``--doctest-modules`` runs its examples.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from ..core import checks, dispatch
from ..core.checks import own_rank_promotion
from . import api, cost, routes
from .cell import HEADS, Family, Folder, own_products
from .convert import weights_from_flax, weights_from_torch, weights_to_flax, weights_to_torch
from .keras_weights import weights_from_keras, weights_to_keras
from .layout import NAMES, init_weight, num_params, pack, unpack

_P = inspect.Parameter
_SIZES = ("input_size", "hidden_size", "num_layers", "bidirectional")
_SIZE_TYPES = {"input_size": int, "hidden_size": int, "num_layers": int, "bidirectional": bool,
               "remat_every": int}
_SIZES_DOC = """      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2)."""
_SHAPES = "Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions."
_IMPORTS = ">>> import jax, jax.numpy as jnp, portable_rnn"


def wrapped(text: str, indent: int, first: str = "") -> str:
    """`text` as docstring lines of at most 96 characters, `indent` spaces in, after `first`
    (an argument's ``name: ``, whose continuation lines go two spaces further in)."""
    if not text:
        return ""
    pad = " " * indent
    return textwrap.fill(first + text, 96, initial_indent=pad,
                         subsequent_indent=pad + ("  " if first else ""))


def _params(*spec) -> list[inspect.Parameter]:
    """Parameters from ``(name, kind)`` or ``(name, kind, default)`` tuples, or a name: a
    positional one without default (a size gets its annotation)."""
    out = []
    for item in spec:
        name, kind, *default = (item, _P.POSITIONAL_OR_KEYWORD) if isinstance(item, str) else item
        out.append(_P(name, kind, default=default[0] if default else _P.empty,
                      annotation=_SIZE_TYPES.get(name, _P.empty)))
    return out


def _function(name: str, parameters, doc: str, body: Callable, wrap=None) -> Callable:
    """A public function `name` with these parameters and docstring that binds its arguments
    (a wrong call raises Python's TypeError, naming the function) and calls `body` with them."""
    signature = inspect.Signature(parameters)

    def function(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}() {e}") from None
        bound.apply_defaults()
        return body(**bound.arguments)

    if wrap is not None:
        function = wrap(function)
    function.__name__ = function.__qualname__ = name
    function.__module__ = __name__  # where they are defined: doctest runs their examples here
    function.__signature__ = signature
    function.__doc__ = doc  # the only docstrings not written in the source: made from facts
    globals()[name] = function
    return function


# --- the op and its explanation --------------------------------------------------------------

def _op_parameters(fam: Family) -> list[inspect.Parameter]:
    kw = _P.KEYWORD_ONLY
    options = [(n, kw, fam.layer_options[n]) for n in fam.call_options]
    return _params("x", *fam.states, "weights", "seq_lengths", *_SIZES[:2], "num_layers",
                   "dropout", "bidirectional", ("precision", _P.POSITIONAL_OR_KEYWORD, None),
                   ("dropout_rng", kw, None), ("implementation", kw, None),
                   ("capabilities", kw, None), *options, ("recurrent_dropout_mask", kw, None),
                   ("remat_every", kw, None))


def _checked_options(folder: Folder, a: dict[str, Any]) -> int:
    """The family's own options checked, first (before any array is read); returns the
    projection's size (0 for a family without one)."""
    for name, check in folder.option_checks:
        check(a[name])
    if not folder.family.projection:
        return 0
    return checks.static_int("proj_size", a["proj_size"], low=0)


def _checked_call(folder: Folder, a: dict[str, Any]) -> api.Call:
    """The op's checks, in order: the family's options, the static arguments, the arrays."""
    fam = folder.family
    proj = _checked_options(folder, a)
    hidden = a["hidden_size"] if isinstance(a["hidden_size"], int) else None
    sizes = (proj or hidden,) + (hidden,) * (len(fam.states) - 1)
    cell = folder.make_cell(**{n: int(a[n]) if n == "proj_size" else a[n]
                               for n in fam.call_options})
    options = api.check_options(
        fam, cell, input_size=a["input_size"], hidden_size=a["hidden_size"],
        num_layers=a["num_layers"], dropout=a["dropout"], bidirectional=a["bidirectional"],
        precision=a["precision"], implementation=a["implementation"],
        remat_every=a["remat_every"], **({"proj_size": a["proj_size"]} if fam.projection else {}),
        **_h(fam, a))
    states = [(n, a[n], size) for n, size in zip(fam.states, sizes)]
    return api.check_args(options, a["x"], states, a["weights"], a["seq_lengths"],
                          a["dropout_rng"], a["recurrent_dropout_mask"])


def _run(folder: Folder, **a):
    fam = folder.family
    _checked_options(folder, a)
    arrays = api.as_arrays(**{n: a[n] for n in ("x", *fam.states, "weights",
                                               "recurrent_dropout_mask")})
    a.update(zip(("x", *fam.states, "weights", "recurrent_dropout_mask"), arrays))
    call = _checked_call(folder, a)
    return api.run(call, a["capabilities"], a["x"], tuple(a[n] for n in fam.states),
                   a["weights"], a["seq_lengths"], a["dropout_rng"], a["recurrent_dropout_mask"])


def _explain(folder: Folder, **a) -> dispatch.Decision:
    return api.decide(_checked_call(folder, a), a["capabilities"])


def _finals(fam: Family) -> list[str]:
    return [s.replace("_0", "_n") for s in fam.states]


def _op_doc(folder: Folder) -> str:
    fam, n = folder.family, folder.family.name
    states, finals = fam.states, _finals(fam)
    torch = f" with PyTorch ``{fam.torch_module}(batch_first=True)`` semantics" \
        if fam.torch_module else ""
    order = ", ordered layer 0 forward, layer 0 reverse, layer 1 forward, ..."
    docs = fam.state_docs or ("hidden state",) + (
        f"{fam.wide_state.split()[0]} state",) * (len(states) - 1)
    state_args = "\n".join(
        wrapped(f"initial {doc}, (L*D, B, H){order if i == 0 else ''}.", 6, f"{s}: ")
        for i, (s, doc) in enumerate(zip(states, docs, strict=True)))
    listed = [f'``"{r.name}"`` ({r.summary(fam)})' for r in routes.ROUTES]
    implementation = wrapped(
        f"None (automatic; see `explain_{n}` and `policy`) or one of, in order of preference: "
        f"{', '.join(listed[:-1])} or {listed[-1]}. The automatic choice takes a fused "
        "route only where its benchmark shows it faster than the scan path. A route asked for "
        "that cannot serve the call raises, with every reason.", 6, "implementation: ")
    per_gate = (f" (L*D, {fam.gates}, B, H): one mask per gate, in the order {fam.gate_names}, "
                f"for that gate's block of ``W_hh h`` (Keras 3's {fam.keras_layer} with "
                "``recurrent_dropout``)." if fam.gates > 1 and fam.keras_layer else "")
    options = "".join("\n" + wrapped(fam.option_docs[o][1], 6, f"{o}: ")
                      for o in fam.call_options)
    remat = wrapped(
        "segment checkpointing of a gradient, every ``remat_every`` steps (an int >= 1): the "
        "forward keeps each layer's states only at the start of each segment and the backward "
        "runs each segment's forward again before its backward, so that a gradient keeps T / "
        "remat_every states and one segment's residuals instead of every step's, for the time "
        "of one more forward. None (automatic): segments of about sqrt(T) steps where the "
        "residuals of every step would take more than the policy's share of one device's "
        "memory (``policy(recurrent_memory_fraction=...)``, a quarter by default), else none; "
        "``policy(remat_every=...)`` sets it for the calls that do not pass it (a layer's). "
        f"`explain_{n}` says which and why. The steps are the same: the outputs, final states "
        "and initial states' gradients come out as without segments (up to how XLA compiles a "
        "segment's products); the gradients of ``x`` and the weights are products and sums per "
        "segment, the same terms summed in another order.", 6, "remat_every: ")
    zeros = " = ".join(states) + " = jnp.zeros((L, B, H), jnp.bfloat16)"
    return f"""A multi-layer (bidirectional) {fam.display.split(' ', 1)[1]}{torch}.

{wrapped(fam.formula, 4)}

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
{state_args}
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_{n}(I, H, L, bidirectional)``; layout in `unpack_{n}_weights`
        (PyTorch's and cuDNN's: all matrices of every pseudo-layer, then all biases).
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every
        path.
{implementation}
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).{options}
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step; the rest of the step, the carried state and the final
        state use the unmasked ``h``).{per_gate} Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.
{remat}

    Returns:
      ``(y, {', '.join(finals)})``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length;
      {', '.join(f'``{f}``' for f in finals)} (L*D, B, H), the states at each sequence's last
      valid step (the initial states for length 0), in the initial states' dtypes, so they can
      be fed back as a carry. For 16-bit inputs, matmuls accumulate in float32 and the
      {fam.wide_state} is carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      {_IMPORTS}
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> {zeros}
      >>> lengths = jnp.array([5, 2])
      >>> y, *final = portable_rnn.{n}(x, {', '.join(states)}, w, lengths, I, H, L, 0.0, False)
      >>> y.shape, y.dtype, [s.shape for s in final], bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), {[(1, 2, 4)] * len(states)}, True)
    """


def _explain_doc(fam: Family) -> str:
    n, k = fam.name, len(fam.states)
    return f"""The routing decision `{n}` would make for these arguments, with reasons.

    Runs nothing.

    Takes the arguments of `{n}`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `{n}`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      {_IMPORTS}
      >>> S = jax.ShapeDtypeStruct
      >>> cpu = portable_rnn.Capabilities("cpu", None, None, "cpu")
      >>> n = portable_rnn.get_num_params_in_{n}(32, 64, 1, False)
      >>> d = portable_rnn.explain_{n}(
      ...     S((8, 10, 32), jnp.float32), *[S((1, 8, 64), jnp.float32)] * {k},
      ...     S((n,), jnp.float32), None, 32, 64, 1, 0.0, False, capabilities=cpu)
      >>> d.implementation, d.rejected["pallas"][0].split(":")[0]
      ('scan', "platform is 'cpu'")
    """


# --- the weight layout -------------------------------------------------------------------------

def _proj(fam: Family, kind=_P.KEYWORD_ONLY) -> list[tuple]:
    return [("proj_size", kind, 0)] if fam.projection else []


def _p(fam: Family, a: dict[str, Any]) -> tuple:
    return (a["proj_size"],) if fam.projection else ()


def _heads(fam: Family) -> list[tuple]:
    return [(HEADS, _P.KEYWORD_ONLY, 1)] if HEADS in fam.call_options else []


def _h(fam: Family, a: dict[str, Any]) -> dict[str, Any]:
    return {HEADS: a[HEADS]} if HEADS in fam.call_options else {}


HEADS_LAYOUT = (
    "With ``num_heads=NH > 1`` (a block-diagonal recurrence, FlashRNN's heads of ``DH = H / NH`` "
    "units) ``W_hh[p]`` is (NH, {G}*DH, DH): head ``k``'s matrix, gate blocks of DH rows in the "
    "order above, reading units ``k*DH`` to ``(k+1)*DH - 1`` of ``h``; gate ``g`` of unit ``k*DH "
    "+ j`` adds ``W_hh[p][k, g*DH + j] @ h[k*DH:(k+1)*DH]``. ``W_ih`` and the biases are as "
    "without heads. NH = 1 is the dense layout.")


def _layout_functions(fam: Family, heads: bool) -> dict[str, Callable]:
    """`heads`: whether the family's cell runs ``num_heads > 1`` (the layout note)."""
    n, G, title = fam.name, fam.gates, fam.class_name
    sizes = [a for a in _SIZES]
    names = "``(W_ih, W_hh, b_ih, b_hh)``" + (
        " (and ``W_hr`` with ``proj_size``)" if fam.projection else "")
    w_hr = " ``W_hr`` is required with ``proj_size``." if fam.projection else ""
    proj_doc = (" With ``proj_size=P > 0`` (PyTorch's projections) ``W_hh[p]`` is (GH, P) and "
                "``W_hr[p]`` (P, H), stored after each pseudo-layer's ``W_hh``.".replace(
                    "GH", f"{G}H") if fam.projection else "")
    if heads:
        proj_doc += f"\n\n{wrapped(HEADS_LAYOUT.format(G=G), 4)}"
    made = {}
    made[f"get_num_params_in_{n}"] = _function(
        f"get_num_params_in_{n}", _params(*sizes, *_proj(fam, _P.POSITIONAL_OR_KEYWORD),
                                          *_heads(fam)),
        f"""Length of the flat weight vector of {fam.display} (gates {fam.gate_names}; the
    cuDNN/PyTorch layout of `unpack_{n}_weights`).

    Examples:
      >>> import portable_rnn
      >>> portable_rnn.get_num_params_in_{n}(3, 4, 1, False)  # {G}H * (I + H + 2)
      {G * 4 * 9}
    """,
        lambda **a: num_params(*(a[s] for s in _SIZES), fam, *_p(fam, a), **_h(fam, a)))
    made[f"init_{n}_weight"] = _function(
        f"init_{n}_weight",
        _params("rng", *sizes, ("dtype", _P.POSITIONAL_OR_KEYWORD, jnp.float32), *_proj(fam),
                *_heads(fam)),
        f"""Flat {title} weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's
    {f'``{fam.torch_module}``' if fam.torch_module else 'recurrent modules'} (and, for the LSTM
    without projection, bit-identical to ``jax.experimental.rnn.init_lstm_weight`` for the same
    key and the default ``dtype``).

    Examples:
      {_IMPORTS}
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), 3, 4, 1, False)
      >>> w.shape, w.dtype, bool(jnp.abs(w).max() <= 0.5)
      (({G * 36},), dtype('float32'), True)
    """,
        lambda **a: init_weight(a["rng"], *(a[s] for s in _SIZES), a["dtype"], fam,
                                *_p(fam, a), **_h(fam, a)))
    made[f"unpack_{n}_weights"] = _function(
        f"unpack_{n}_weights", _params("weights", *sizes, *_proj(fam), *_heads(fam)),
        f"""Splits the flat vector into {names}, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is ({G}H, in), ``W_hh[p]`` ({G}H, H), ``b_ih[p]`` and ``b_hh[p]`` ({G}H,), gates
    {fam.gate_names}; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else
    ``p = layer``; the flat order is all matrices, then all biases.{proj_doc}

    Examples:
      {_IMPORTS}
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), 3, 4, 2, True)
      >>> W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_{n}_weights(w, 3, 4, 2, True)
      >>> W_ih[0].shape, W_ih[2].shape, W_hh[3].shape, b_hh[1].shape
      (({G * 4}, 3), ({G * 4}, 8), ({G * 4}, 4), ({G * 4},))
    """,
        lambda **a: _unpacked(a, fam))
    made[f"pack_{n}_weights"] = _function(
        f"pack_{n}_weights",
        _params("W_ih", "W_hh", "b_ih", "b_hh", *sizes,
                *([("W_hr", _P.KEYWORD_ONLY, None)] if fam.projection else []),
                *_proj(fam), *_heads(fam)),
        f"""Inverse of `unpack_{n}_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros).{w_hr}

    Examples:
      {_IMPORTS}
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), 3, 4, 2, True)
      >>> groups = portable_rnn.unpack_{n}_weights(w, 3, 4, 2, True)
      >>> bool((portable_rnn.pack_{n}_weights(*groups, 3, 4, 2, True) == w).all())
      True
    """,
        lambda **a: pack({k: a.get(k) for k in NAMES if k in a}, *(a[s] for s in _SIZES), fam,
                         *_p(fam, a), **_h(fam, a)))
    return made


def _unpacked(a, fam):
    g = unpack(a["weights"], *(a[s] for s in _SIZES), fam, *_p(fam, a), **_h(fam, a))
    return tuple(g[k] for k in NAMES if k in g)


# --- the converters, for the peers the family has ----------------------------------------------

_TO_ARGS = f"""    Args:
      weights: the flat weight vector, (P,).
{_SIZES_DOC}"""


def _torch_functions(fam: Family) -> dict[str, Callable]:
    n, module = fam.name, fam.torch_module
    return {f"{n}_weights_from_torch": _function(
        f"{n}_weights_from_torch",
        _params("state_dict", ("prefix", _P.KEYWORD_ONLY, ""), ("dtype", _P.KEYWORD_ONLY, None)),
        f"""Flat weights from a PyTorch ``{module}`` state_dict (tensors or arrays).

    torch is not needed.

    Sizes, layer count and direction count{' and ``proj_size``' if fam.projection else ''} are
    read from the keys and shapes. ``prefix`` selects one module inside a bigger model's
    state_dict (e.g. ``"encoder.rnn."``). Without biases (``bias=False``) zeros are used.
    ``dtype`` casts the result (default: the state_dict's dtype).

    Examples:
      {_IMPORTS}
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), 3, 4, 1, True)
      >>> sd = portable_rnn.{n}_weights_to_torch(w, 3, 4, 1, True, prefix="rnn.")
      >>> bool((portable_rnn.{n}_weights_from_torch(sd, prefix="rnn.") == w).all())
      True
    """,
        lambda **a: weights_from_torch(a["state_dict"], a["prefix"], a["dtype"], fam)),
        f"{n}_weights_to_torch": _function(
        f"{n}_weights_to_torch",
        _params("weights", *_SIZES, ("prefix", _P.KEYWORD_ONLY, ""), *_proj(fam)),
        f"""A PyTorch ``{module}`` state_dict (NumPy arrays) from the flat weights.

    Load it with ``module.load_state_dict({{k: torch.from_numpy(v) for k, v in sd.items()}})``.

    Examples:
      {_IMPORTS}
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), 3, 4, 1, False)
      >>> sorted(portable_rnn.{n}_weights_to_torch(w, 3, 4, 1, False))
      ['bias_hh_l0', 'bias_ih_l0', 'weight_hh_l0', 'weight_ih_l0']
    """,
        lambda **a: weights_to_torch(a["weights"], *(a[s] for s in _SIZES), a["prefix"], fam,
                                     *_p(fam, a)))}


def _flax_functions(fam: Family) -> dict[str, Callable]:
    n, cell = fam.name, fam.flax_cell
    cells = " | ".join(f"nn.{c}" for c in fam.flax_cells.split("/"))
    dense = ", ".join(f"``{i}``/``{h}``" for i, h in fam.flax_dense)
    return {f"{n}_weights_from_flax": _function(
        f"{n}_weights_from_flax",
        _params("params", ("shared_cell", _P.KEYWORD_ONLY, None), ("dtype", _P.KEYWORD_ONLY, None)),
        f"""Flat {fam.class_name} weights from Flax ``nn.RNN({cells})`` parameters.

{wrapped(f"{_SHAPES} The cell's Dense layers per gate ({fam.gate_names}): {dense}. "
          + fam.flax_note, 4)}

    Args:
      params: one layer's tree (``{{'params': {{'cell': ...}}}}``, ``{{'cell': ...}}`` or the
        cell dict itself), an ``nn.Bidirectional`` tree (``{{'forward_rnn': ...,
        'backward_rnn': ...}}``, optionally under ``'params'``), or a sequence of those for
        stacked layers, first layer first. Sizes, layer and direction counts are read from the
        kernels.
      shared_cell: whether an ``nn.Bidirectional``'s two RNNs share one cell (the same
        ``nn.RNN`` or cell object). Flax stores such a tree once, under ``'forward_rnn'``, and
        always writes ``'backward_rnn'`` otherwise, so None (the default) reads a tree without
        ``'backward_rnn'`` as shared: both directions get the same weights. True or False
        states it, and a tree that says otherwise is an error.
      dtype: casts the result; default: the parameters' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_{n}_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold {fam.flax_cells} parameters (the error names the missing
        Dense layers, and the cell it looks like), a kernel or bias has the wrong shape, or
        layers disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> rnn = nn.Bidirectional(nn.RNN({cell}(4)), nn.RNN({cell}(4)))
      >>> params = rnn.init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> w = portable_rnn.{n}_weights_from_flax(params)
      >>> w.shape == (portable_rnn.get_num_params_in_{n}(3, 4, 1, True),)
      True
    """,
        lambda **a: weights_from_flax(a["params"], fam, a["shared_cell"], a["dtype"])),
        f"{n}_weights_to_flax": _function(
        f"{n}_weights_to_flax", _params("weights", *_SIZES, *_proj(fam)),
        f"""Flax ``nn.RNN({cells})`` parameters from flat {fam.class_name} weights.

    {_SHAPES} See `{n}_weights_from_flax` for where the biases go.

{_TO_ARGS}{_PROJ_PEER.format(peer="Flax") if fam.projection else ''}

    Returns:
      One Flax variable dict per layer: ``{{'params': {{'cell': ...}}}}``, or when bidirectional
      ``{{'params': {{'forward_rnn': {{'cell': ...}}, 'backward_rnn': {{'cell': ...}}}}}}``
      (two RNNs, not shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN({cell})`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays
      in the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), 3, 4, 2, False)
      >>> x = jnp.ones((1, 5, 3))
      >>> for tree in portable_rnn.{n}_weights_to_flax(w, 3, 4, 2, False):
      ...     x = nn.RNN({cell}(4)).apply(tree, x)
      >>> x.shape
      (1, 5, 4)
    """,
        lambda **a: weights_to_flax(a["weights"], *(a[s] for s in _SIZES), fam, *_p(fam, a)))}


_PROJ_PEER = "\n      proj_size: must be 0: a projection (PyTorch's ``proj_size``) has no {peer} " \
    "counterpart."


def _keras_functions(fam: Family) -> dict[str, Callable]:
    n, layer, G = fam.name, fam.keras_layer, fam.gates
    config = "".join(f", {k}={v!r}" for k, v in fam.keras_config.items())
    keras = f"``keras.layers.{layer}({config[2:]})``"
    bias = f"({fam.keras_bias_rows}, {G}H)" if fam.keras_bias_rows > 1 else f"({G}H,)"
    bias_doc = f"np.zeros(({fam.keras_bias_rows}, {G} * H))" if fam.keras_bias_rows > 1 \
        else f"np.zeros({G} * H)"
    bias_shape = f"({fam.keras_bias_rows}, {G * 4})" if fam.keras_bias_rows > 1 else f"({G * 4},)"
    keras_order = ", ".join(fam.gate_names.split(", ")[k] for k in fam.keras_order) \
        if G > 1 else fam.gate_names
    return {f"{n}_weights_from_keras": _function(
        f"{n}_weights_from_keras",
        _params("keras_weights", ("dtype", _P.KEYWORD_ONLY, None)),
        f"""Flat {fam.class_name} weights from the weights of Keras 3 {keras} layers.

{wrapped(f"{_SHAPES} Keras lists ``[kernel (I, {G}H), recurrent_kernel (H, {G}H), "
          f"bias {bias}]``, the kernels ``W_ih.T`` and ``W_hh.T`` with the gate blocks in the "
          f"order of our {keras_order}. " + fam.keras_note, 4)}

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_{n}_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected).

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, {G} * H)), np.ones((H, {G} * H)), {bias_doc}]
      >>> portable_rnn.{n}_weights_from_keras(layer + layer).shape == (  # a Bidirectional's
      ...     portable_rnn.get_num_params_in_{n}(I, H, 1, True),)
      True
    """,
        lambda **a: weights_from_keras(a["keras_weights"], fam, a["dtype"])),
        f"{n}_weights_to_keras": _function(
        f"{n}_weights_to_keras",
        _params("weights", *_SIZES, *_proj(fam), ("use_bias", _P.KEYWORD_ONLY, True)),
        f"""Weights for Keras 3 {keras} layers from flat {fam.class_name} weights.

    {_SHAPES} Each layer gets ``[kernel (I or D*H, {G}H), recurrent_kernel (H, {G}H), bias
    {bias}]``, gates in Keras' order; see `{n}_weights_from_keras`.

{_TO_ARGS}{_PROJ_PEER.format(peer="Keras") if fam.projection else ''}
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.{layer}`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.

    Examples:
      {_IMPORTS}
      >>> w = portable_rnn.init_{n}_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.{n}_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, {G * 4}), (4, {G * 4}), {bias_shape}]
    """,
        lambda **a: weights_to_keras(a["weights"], *(a[s] for s in _SIZES), fam, *_p(fam, a),
                                     use_bias=a["use_bias"]))}


def _runs_heads(folder: Folder) -> bool:
    """Whether the family takes ``num_heads`` and its cell multiplies by the driver's recurrent
    products (a cell computing its own, `own_products`, has no heads)."""
    fam = folder.family
    if HEADS not in fam.call_options:
        return False
    return not own_products(folder.make_cell(**{o: fam.layer_options[o] for o in
                                                fam.call_options}))


# --- one family's functions ----------------------------------------------------------------------

def make(folder: Folder) -> dict[str, Callable]:
    """Registers the family's routes and makes its public functions, by name: the op first,
    then ``explain_<name>``, the layout's functions and the converters of its peers."""
    fam, n = folder.family, folder.family.name
    dispatch.register(n, *routes.ROUTES)
    cost.group(n)
    made = {
        n: _function(n, _op_parameters(fam), _op_doc(folder),
                     lambda **a: _run(folder, **a), wrap=own_rank_promotion),
        f"explain_{n}": _function(f"explain_{n}", _op_parameters(fam), _explain_doc(fam),
                                  lambda **a: _explain(folder, **a)),
        **_layout_functions(fam, _runs_heads(folder)),
    }
    if fam.torch_module:
        made.update(_torch_functions(fam))
    if fam.flax_cell:
        made.update(_flax_functions(fam))
    if fam.keras_layer:
        made.update(_keras_functions(fam))
    return made

"""Equinox layers: one per registered recurrent family (`LSTM`, `GRU` ...), each an
``eqx.Module`` over one call of the family's function (`portable_rnn.lstm`, `gru` ...).

``equinox.nn`` has single-step cells (``LSTMCell``, ``GRUCell``) that a model loops with
``lax.scan``: one direction, one layer, no lengths. These layers run every layer and direction
of a stacked, optionally bidirectional network in one call (the fused scan path with its
hand-written backward pass, or cuDNN where it serves the call), with ragged ``seq_lengths``,
dropout between layers, an initial state and the final state.

They are pytrees of their parameters and hold no framework state: ``eqx.filter_jit``,
``eqx.filter_grad``, ``eqx.tree_at``, ``eqx.nn.inference_mode`` and
``eqx.tree_serialise_leaves`` work on them as on any Equinox module. Inputs are batch-first
with any number of leading batch dims, none included: ``x`` (T, I) is one sequence and
``jax.vmap`` over such calls works too.

Importing this module imports Equinox (the ``equinox`` extra); ``import portable_rnn`` does not.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ._src.core.extras import missing_extra

try:
    import equinox as eqx
except ModuleNotFoundError as e:  # the `equinox` extra is not installed
    raise missing_extra(e, "equinox", "Equinox")  # noqa: B904 - its cause is set
from jaxtyping import Array, PRNGKeyArray  # an Equinox dependency

from ._src.core import checks as _checks
from ._src.layers import cells as _cells
from ._src.layers import docs as _docs
from ._src.layers import params as _params

_NAMES = ("x", "state")  # the call's names of the inputs and of the initial state


class _Recurrent(eqx.Module):
    """What every family's layer shares: fields, construction, the call, converters.

    A subclass (`_layer` makes one per registered family) sets ``_FAMILY`` and declares its own
    static fields (the family's ``layer_options`` but the initialisers), which arrive at
    ``__init__`` as keyword options.
    """

    _FAMILY = ""

    params: dict[str, dict[str, dict[str, Array]]]
    input_size: int = eqx.field(static=True)
    hidden_size: int = eqx.field(static=True)
    num_layers: int = eqx.field(static=True)
    bidirectional: bool = eqx.field(static=True)
    dropout: float = eqx.field(static=True)
    dtype: Any = eqx.field(static=True)
    param_dtype: Any = eqx.field(static=True)
    precision: Any = eqx.field(static=True)
    implementation: str | None = eqx.field(static=True)
    return_state: bool = eqx.field(static=True)
    inference: bool

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bidirectional: bool = False, dropout: float = 0.0, dtype: Any = None,
                 param_dtype: Any = jnp.float32, precision: Any = None,
                 implementation: str | None = None, return_state: bool = False,
                 inference: bool = False, *, key: PRNGKeyArray, **options):
        _checks.static_int("input_size", input_size)
        layer = f"equinox.{type(self).__name__}"
        if "projection_init" in options:  # initialisers: replace leaves with eqx.tree_at
            raise TypeError(f"`projection_init` is not an argument of {layer}; set `W_hr` with "
                            "`eqx.tree_at` after construction.")
        options = _params.cell_options(self._FAMILY, options, layer)
        options.pop("projection_init", None)
        cfg = _params.Config.make(self._FAMILY, hidden_size, num_layers, bidirectional,
                                  dropout, dtype, param_dtype, precision, implementation,
                                  **options)
        _params.check_config(cfg)
        _checks.static_bool("return_state", return_state)
        _checks.static_bool("inference", inference)
        _checks.prng_key("key", key)
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.bidirectional = bool(bidirectional)
        self.dropout = float(dropout)
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.implementation = implementation
        self.return_state = bool(return_state)
        self.inference = bool(inference)
        for name, value in options.items():  # proj_size, nonlinearity
            setattr(self, name, value)
        inits = _params.initializers(None, None, None)
        self.params = {f"layer_{l}": _params.init_layer(jax.random.fold_in(key, l), l,
                                                        input_size, cfg, inits)
                       for l in range(num_layers)}

    def __check_init__(self):
        cfg = self._config()
        _params.check_config(cfg)
        _params.check_tree(self.params, self.input_size, cfg)

    def _config(self) -> _params.Config:
        return _params.config_of(self)

    def __call__(self, x: Array, seq_lengths: Array | None = None, state=None, *,
                 key: PRNGKeyArray | None = None, inference: bool | None = None):
        """Runs every layer and direction over the sequences.

        Shapes: ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers, ``D``
        directions, ``S`` the output size per direction (``proj_size`` for a projected LSTM,
        else ``H``); ``...`` any leading batch dims, none included.

        Args:
          x: (..., T, I), batch-first.
          seq_lengths: (...,) valid lengths (any integer dtype, 0 allowed), or None for all T.
          state: the initial state: LSTM ``(h, c)`` with h (L*D, ..., S) and c (L*D, ..., H);
            SLSTM ``(h, c, n, m)``, each (L*D, ..., H); the other families' ``h`` (L*D, ...,
            H). Zeros by default: the LSTM's and SLSTM's h in the computation dtype and their
            other states, like the one-state families' h, in float32 for a 16-bit computation
            dtype (else in the computation dtype).
          key: keyword-only; a PRNG key for the dropout between layers, needed when it runs
            (``dropout > 0``, ``num_layers > 1``, not inference) and ignored otherwise.
          inference: keyword-only; True: no dropout; None (default): the layer's
            ``inference`` field (which ``eqx.nn.inference_mode`` sets), as
            ``eqx.nn.Dropout``.

        Returns:
          The outputs (..., T, D*S) in the computation dtype (``dtype``, or with ``dtype=None``
          the inputs'), zero past each length; with ``return_state=True``, ``(outputs,
          state)``: the final state in the form and dtypes of ``state``, taken at each
          sequence's last valid step (the initial state for a length of 0).

        Raises:
          ValueError, TypeError: for inputs of the wrong shape, dtype or value, or dropout
            without a ``key``; the message names the argument, what was expected and what was
            given.
        """
        inference = _checks.static_bool("inference",
                                        self.inference if inference is None else inference)
        rng = None
        if self.dropout > 0 and self.num_layers > 1 and not inference:
            if key is None:
                raise ValueError(
                    f"`key` must be a PRNG key: dropout={self.dropout} between the "
                    f"{self.num_layers} layers runs when not in inference mode; got None. Pass "
                    "`key=`, or `inference=True` (or `eqx.nn.inference_mode(model)`).")
            _checks.prng_key("key", key)
            rng = key
        return _params.apply(self.params, x, seq_lengths, state, self._config(),
                             dropout_rng=rng, return_carry=self.return_state, names=_NAMES)

    @classmethod
    def _with_params(cls, tree, input_size: int, hidden_size: int, num_layers: int,
                     bidirectional: bool, key, kwargs, what: str):
        """A layer of these sizes (and `kwargs`) holding `tree`, checked against them; `what`
        names the argument the tree came from, for the messages."""
        model = cls(input_size, hidden_size, num_layers, bidirectional,
                    key=jax.random.key(0) if key is None else key, **kwargs)
        tree = jax.tree.map(lambda a: jnp.asarray(a, model.param_dtype), tree)
        _params.check_tree(tree, input_size, model._config(), what)
        return eqx.tree_at(lambda m: m.params, model, tree)

    @classmethod
    def from_torch(cls, state_dict, *, prefix: str = "", key: PRNGKeyArray | None = None,
                   **kwargs):
        """A layer with the sizes and weights of a state_dict of the family's PyTorch module
        (``nn.LSTM`` for `LSTM`, ``proj_size`` included; pass the options a state_dict does not
        store, such as a ``nn.RNN``'s ``nonlinearity``; tensors or arrays; `prefix` selects a
        submodule's keys).
        `kwargs` are further constructor arguments; `key` is unused but by the constructor's
        initialisation, which the loaded weights replace."""
        tree, (input_size, hidden_size, num_layers, bidirectional, proj_size) = \
            _params.from_torch(state_dict, prefix, cls._FAMILY)
        if proj_size:
            kwargs.setdefault("proj_size", proj_size)
        return cls._with_params(tree, input_size, hidden_size, num_layers, bidirectional, key,
                                kwargs, "state_dict")

    def to_torch_state_dict(self, *, prefix: str = "") -> dict:
        """A state_dict of the family's PyTorch module (NumPy arrays) of these weights, in
        PyTorch's key order."""
        return _params.to_torch(self.params, prefix, self._FAMILY)


class _CellStack(_Recurrent):
    """Conversion from and to stacks of Equinox's single-step cells (the family's
    `Family.eqx_cell`)."""

    _CELL = None  # the family's Equinox cell class, eqx.nn.<Family.eqx_cell>

    @classmethod
    def from_eqx_cells(cls, cells, *, key: PRNGKeyArray | None = None, **kwargs):
        """A layer computing what a stack of Equinox cells computes when looped over time.

        Args:
          cells: one cell (one layer, one direction), or a sequence with one entry per layer,
            each a cell or a pair ``(forward, reverse)`` of cells (bidirectional: every layer
            a pair; the reverse cell reads the sequence backwards, and each layer past the
            first reads the concatenated outputs of both). Cells without biases
            (``use_bias=False``) give zero biases.
          key: unused but by the constructor's initialisation, which the cells' weights
            replace.
          **kwargs: further constructor arguments (``dropout``, ``dtype``, ...).

        Returns:
          The layer, its parameters in ``param_dtype`` (float32 unless given).

        Raises:
          TypeError, ValueError: for cells of another type, or of sizes that do not stack.
        """
        cell_name = f"eqx.nn.{cls._CELL.__name__}"
        layers = [cells] if isinstance(cells, cls._CELL) else cells
        if isinstance(layers, (str, bytes)) or not hasattr(layers, "__len__") or not layers:
            raise TypeError(f"`cells` must be an `{cell_name}` or a non-empty sequence of them "
                            f"(or of (forward, reverse) pairs); got {layers!r:.80}.")
        layers = [tuple(l) if isinstance(l, (tuple, list)) else (l,) for l in layers]
        directions = len(layers[0])
        if directions not in (1, 2) or any(len(l) != directions for l in layers):
            raise ValueError(f"`cells` must hold one cell per layer, or a (forward, reverse) "
                             f"pair per layer, alike for every layer; got "
                             f"{[len(l) for l in layers]} cells per layer.")
        tree = {}
        for n, layer in enumerate(layers):
            for direction, cell in zip(_params.DIRECTIONS, layer):
                if not isinstance(cell, cls._CELL):
                    raise TypeError(f"`cells` layer {n} {direction} must be an `{cell_name}`; "
                                    f"got {type(cell).__name__}.")
                arrays = _cells.from_cell(cls._FAMILY, cell.weight_ih, cell.weight_hh,
                                          cell.bias, getattr(cell, "bias_n", None))
                tree.setdefault(f"layer_{n}", {})[direction] = arrays
        first = layers[0][0]
        return cls._with_params(tree, first.input_size, first.hidden_size, len(layers),
                                directions == 2, key, kwargs, "cells")

    def to_eqx_cells(self) -> list:
        """The stack of Equinox cells that computes what this layer computes (no lengths, no
        dropout: a cell has neither), in the form `from_eqx_cells` reads: one entry per layer,
        a cell or, bidirectional, a ``(forward, reverse)`` pair. Each cell has biases and this
        layer's ``param_dtype``. With heads (``num_heads > 1``), each cell's ``weight_hh`` is
        the dense block-diagonal matrix the heads compute (`from_eqx_cells` reads it back as a
        layer without heads, computing the same function).

        Raises:
          ValueError: for a projected LSTM (``proj_size > 0``): Equinox's cell has no
            projection.
        """
        if getattr(self, "proj_size", 0):
            raise ValueError(f"`proj_size`={self.proj_size}: eqx.nn.{self._CELL.__name__} has no "
                             f"projection (W_hr); only an {type(self).__name__} with "
                             "proj_size=0 converts to Equinox cells.")
        out = []
        for l in range(self.num_layers):
            pair = []
            for direction in _params.DIRECTIONS[:2 if self.bidirectional else 1]:
                arrays = _cells.to_cell(self._FAMILY, self.params[f"layer_{l}"][direction])
                size = arrays["weight_ih"].shape[1]
                cell = self._CELL(size, self.hidden_size, use_bias=True,
                                  dtype=self.param_dtype, key=jax.random.key(0))
                names = sorted(arrays)
                cell = eqx.tree_at(lambda c, names=names: [getattr(c, n) for n in names], cell,
                                   [arrays[n].astype(self.param_dtype) for n in names])
                pair.append(cell)
            out.append(tuple(pair) if self.bidirectional else pair[0])
        return out


def _options(fam) -> list[str]:
    """The family's options that are fields: all but the initialisers (which `eqx.tree_at`
    replaces)."""
    return [k for k in fam.layer_options if not k.endswith("_init")]


def _base(fam) -> type:
    """The conversion from and to Equinox's cells where Equinox has the family's cell."""
    return _CellStack if fam.eqx_cell else _Recurrent


def _fields(fam) -> dict[str, Any]:
    fields = {"__annotations__": dict.fromkeys(_options(fam), "Any"),
              **{k: eqx.field(static=True) for k in _options(fam)}}
    if fam.eqx_cell:
        fields["_CELL"] = getattr(eqx.nn, fam.eqx_cell)
    return fields


def _classes(namespace, families=None) -> list[str]:
    """Makes the families' layers (default: every registered family's) into `namespace`."""
    return _params.make_layers(namespace, _base,
                               lambda fam: _docs.equinox_doc(fam, _options(fam)), _fields,
                               families)


__all__ = _classes(globals())

"""Flax NNX layers: one per registered recurrent family (`LSTM`, `GRU` ..., as the
`portable_rnn` functions), and `attention_fn` (for `nnx.MultiHeadAttention`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from ._src.core import checks as _checks
from ._src.layers import docs as _docs
from ._src.layers import params as _params
from ._src.layers.flax_attention import flax_attention_fn as attention_fn


def _options(module, in_features, rngs, options: dict) -> tuple[dict, Callable | None]:
    """A layer's or cell's checks of `in_features` and `rngs`, and its family's keyword
    `options` checked by name (`params.cell_options`), less the projection's initialiser (which
    it returns beside them)."""
    _checks.static_int("in_features", in_features)
    if not isinstance(rngs, nnx.Rngs):
        raise TypeError(f"`rngs` must be an `nnx.Rngs`; got {type(rngs).__name__}.")
    options = _params.cell_options(module._FAMILY, options, f"nnx.{type(module).__name__}")
    return options, options.pop("projection_init", None)


class _Recurrent(nnx.Module):
    """What every family's layer shares: construction, the call and the loaders.

    A subclass (`_layer` makes one per registered family) sets ``_FAMILY``; its own keyword
    options (the family's ``layer_options``) arrive as ``**options``, are checked by name, and
    become attributes.
    """

    _FAMILY = ""

    def __init__(self, in_features: int, hidden_size: int, num_layers: int = 1,
                 bidirectional: bool = False, dropout: float = 0.0, dtype: Any = None,
                 param_dtype: Any = jnp.float32, precision: Any = None,
                 implementation: str | None = None, kernel_init: Callable | None = None,
                 recurrent_kernel_init: Callable | None = None,
                 bias_init: Callable | None = None, *, deterministic: bool = False,
                 rngs: nnx.Rngs, **options):
        options, projection_init = _options(self, in_features, rngs, options)
        cfg = _params.Config.make(self._FAMILY, hidden_size, num_layers, bidirectional,
                                  dropout, dtype, param_dtype, precision, implementation,
                                  **options)
        _params.check_config(cfg)
        _checks.static_bool("deterministic", deterministic)
        self.in_features = in_features
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.dropout = dropout
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.implementation = implementation
        for name, value in options.items():  # proj_size, nonlinearity
            setattr(self, name, value)
        self.deterministic = bool(deterministic)
        self.rngs = rngs.fork() if dropout > 0 and num_layers > 1 else None
        inits = _params.initializers(kernel_init, recurrent_kernel_init, bias_init,
                                         projection_init)
        key = rngs.params()
        for layer in range(num_layers):
            tree = _params.init_layer(jax.random.fold_in(key, layer), layer, in_features,
                                          cfg, inits)
            setattr(self, f"layer_{layer}", _as_state(tree))

    def _config(self) -> _params.Config:
        return _params.config_of(self)

    def set_view(self, deterministic: bool | None = None):
        """Used by ``nnx.view(model, deterministic=...)``, as for ``nnx.Dropout``.

        Args:
          deterministic: if True, no dropout between layers.
        """
        if deterministic is not None:
            self.deterministic = deterministic

    def params_tree(self):
        """The parameters as plain arrays, in the tree the Linen layer uses."""
        return {f"layer_{l}": {d: {n: v[...] for n, v in p.items()}
                               for d, p in getattr(self, f"layer_{l}").items()}
                for l in range(self.num_layers)}

    def load_params(self, tree):
        """Sets the parameters from a tree (e.g. Linen ``variables["params"]``); returns self."""
        linen = f"linen.{type(self).__name__}"
        for l in range(self.num_layers):
            for d, p in getattr(self, f"layer_{l}").items():
                for n, v in p.items():
                    try:
                        new = jnp.asarray(tree[f"layer_{l}"][d][n])
                    except (KeyError, TypeError, IndexError):
                        raise ValueError(f"`tree` must hold `layer_{l}/{d}/{n}` (the parameter "
                                         f"tree of `{linen}`); it does not.") from None
                    if new.shape != v[...].shape:
                        raise ValueError(f"`layer_{l}/{d}/{n}` must have shape {v[...].shape}; "
                                         f"got {new.shape}.")
                    v[...] = new.astype(v[...].dtype)
        return self

    def to_torch_state_dict(self, *, prefix: str = ""):
        """A state_dict of the family's PyTorch module (NumPy arrays) of this model's
        weights."""
        return _params.to_torch(self.params_tree(), prefix, self._FAMILY)

    def __call__(self, inputs, seq_lengths=None, initial_carry=None, *,
                 deterministic: bool | None = None, return_carry=False):
        """Runs the layer, as the Linen layer's call.

        Shapes: ``T`` time, ``I`` input size (``in_features``), ``H`` hidden size, ``L``
        layers, ``D`` directions, ``S`` the output size per direction (``proj_size`` for a
        projected LSTM, else ``H``).

        Args:
          inputs: (..., T, I): any leading batch dims.
          seq_lengths: (...,) valid lengths (any integer dtype), or None for all T.
          initial_carry: as the Linen layer's: ``h``, or the family's tuple of states (the
            LSTM's ``(h, c)``, the SLSTM's ``(h, c, n, m)``); zeros by default, the wide states
            in float32 for a 16-bit computation dtype.
          deterministic: True: no dropout; False: dropout between layers, drawn from the
            ``dropout`` stream of the `nnx.Rngs` given at construction; None (default): the
            model's ``deterministic`` attribute (``model.eval()`` sets it to True,
            ``model.train()`` to False).
          return_carry: also return the final carry, in the form and dtypes of
            ``initial_carry``.

        Returns:
          Outputs (..., T, D*S) in the computation dtype (``dtype``, or with ``dtype=None`` the
          inputs'), zero past each length; with ``return_carry``, ``(outputs, carry)``.

        Raises:
          ValueError, TypeError: for inputs of the wrong shape, dtype or value; the message
            names the argument, what was expected and what was given.
        """
        if deterministic is None:
            deterministic = self.deterministic
        deterministic = _checks.static_bool("deterministic", deterministic)
        rng = None
        if self.rngs is not None and not deterministic:
            rng = self.rngs.dropout()
        return _params.apply(self.params_tree(), inputs, seq_lengths, initial_carry,
                                 self._config(), dropout_rng=rng, return_carry=return_carry)

    @classmethod
    def from_torch(cls, state_dict, *, prefix: str = "", rngs: nnx.Rngs | None = None,
                   **kwargs):
        """A model with the weights and sizes of a state_dict of the family's PyTorch module
        (``nn.LSTM`` for `LSTM`, ``proj_size`` included; pass the options a state_dict does
        not store, such as a ``nn.RNN``'s ``nonlinearity``); `kwargs` are further constructor
        arguments."""
        tree, (input_size, hidden_size, num_layers, bidirectional, proj_size) = \
            _params.from_torch(state_dict, prefix, cls._FAMILY)
        if proj_size:
            kwargs.setdefault("proj_size", proj_size)
        model = cls(input_size, hidden_size, num_layers, bidirectional,
                    rngs=rngs or nnx.Rngs(0), **kwargs)
        return model.load_params(tree)

    @classmethod
    def from_flax(cls, flax_params, *, shared_cell: bool | None = None,
                  rngs: nnx.Rngs | None = None, **kwargs):
        """A model with the weights and sizes of Flax ``nn.RNN`` params of the matching cell
        (one layer, an ``nn.Bidirectional`` tree, or a sequence of layers). An
        ``nn.Bidirectional`` whose two RNNs share one cell is stored once, under
        ``'forward_rnn'``: read as shared by default; ``shared_cell=True`` or ``False`` states
        which it must be."""
        tree, (input_size, hidden_size, num_layers, bidirectional, _) = _params.from_flax(
            flax_params, cls._FAMILY, shared_cell=shared_cell)
        model = cls(input_size, hidden_size, num_layers, bidirectional,
                    rngs=rngs or nnx.Rngs(0), **kwargs)
        return model.load_params(tree)


def _as_state(tree):
    return nnx.Dict({d: nnx.Dict({n: nnx.Param(a) for n, a in p.items()})
                     for d, p in tree.items()})


def _classes(namespace, families=None) -> list[str]:
    """Makes the families' models (default: every registered family's) into `namespace`."""
    return _params.make_layers(namespace, lambda fam: _Recurrent, _docs.nnx_doc,
                               families=families)


class _Cell(nnx.Module):
    """What every family's step cell shares (the NNX twin of `portable_rnn.linen`'s): one step
    of the family's one-layer model, the carry in and out, for ``nnx.RNN``, ``nnx.scan`` and
    streaming (`_cells` makes one per registered family, ``<Layer>Cell``).
    """

    _FAMILY = ""

    def __init__(self, in_features: int, hidden_features: int, *, dtype: Any = None,
                 param_dtype: Any = jnp.float32, precision: Any = None,
                 implementation: str | None = None, kernel_init: Callable | None = None,
                 recurrent_kernel_init: Callable | None = None,
                 bias_init: Callable | None = None, carry_init: Callable | None = None,
                 rngs: nnx.Rngs, **options):
        options, projection_init = _options(self, in_features, rngs, options)
        self.in_features = in_features
        self.features = hidden_features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.implementation = implementation
        for name, value in options.items():
            setattr(self, name, value)
        cfg = self._config()
        _params.check_config(cfg)
        self.carry_init = carry_init
        self.rngs = rngs
        inits = _params.initializers(kernel_init, recurrent_kernel_init, bias_init,
                                     projection_init)
        default = _params.uniform_init(hidden_features)
        for name, shape in cfg.shapes(in_features)[0].items():
            setattr(self, name, nnx.Param((inits.get(name) or default)(
                rngs.params(), shape, param_dtype)))

    @property
    def hidden_features(self) -> int:
        return self.features

    def _config(self) -> _params.Config:
        return _params.cell_config(self)

    def __call__(self, carry, inputs):
        """One step: ``(carry, output)`` from the states (`initialize_carry`'s, each (*batch,
        size)) and `inputs` (*batch, I); the output (*batch, S) is the new ``h``."""
        cfg = self._config()
        params = {n: getattr(self, n)[...] for n in cfg.shapes(self.in_features)[0]}
        return _params.cell_step(params, carry, inputs, cfg)

    def initialize_carry(self, input_shape, rngs: nnx.Rngs | None = None,
                         carry_init: Callable | None = None):
        """The initial carry for inputs of shape `input_shape` (*batch, I), by `carry_init`
        (else the cell's, else zeros; drawing from the ``carry`` stream of `rngs`, else of the
        cell's), in the dtypes of the layer's default carry."""
        init = carry_init or self.carry_init
        key = None
        if init is not None:
            key = (rngs if rngs is not None else self.rngs).carry()
        dtype = self.dtype if self.dtype is not None else self.param_dtype
        return _params.cell_carry(self._config(), tuple(input_shape[:-1]), dtype, init, key)

    @property
    def num_feature_axes(self) -> int:
        return 1


def _cells(namespace) -> list[str]:
    """Makes every registered family's step cell into `namespace`."""
    return _params.make_layers(namespace, lambda fam: _Cell, _docs.nnx_cell_doc, suffix="Cell")


__all__ = ["attention_fn", *_classes(globals()), *_cells(globals())]

"""Flax Linen layers: one per registered recurrent family (`LSTM`, `GRU` ..., as the
`portable_rnn` functions), and `attention_fn` (for `nn.MultiHeadDotProductAttention`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from ._src.layers import docs as _docs
from ._src.layers import params as _params
from ._src.layers.flax_attention import flax_attention_fn as attention_fn


class _Recurrent(nn.Module):
    """What every family's layer shares: attributes, the call and the loaders.

    A subclass (`_layer` makes one per registered family) sets ``_FAMILY`` and declares the
    family's ``layer_options`` as its own attributes.
    """

    _FAMILY = ""

    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    implementation: str | None = None
    kernel_init: Callable | None = None
    recurrent_kernel_init: Callable | None = None
    bias_init: Callable | None = None

    def _config(self) -> _params.Config:
        return _params.config_of(self)

    @nn.compact
    def __call__(self, inputs, seq_lengths=None, initial_carry=None, *, deterministic=True,
                 return_carry=False):
        """Runs the layer.

        Shapes: ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers, ``D``
        directions, ``S`` the output size per direction (``proj_size`` for a projected LSTM,
        else ``H``).

        Args:
          inputs: (..., T, I): any leading batch dims.
          seq_lengths: (...,) valid lengths (any integer dtype), or None for all T.
          initial_carry: the family's initial states: one array ``h`` (L*D, ..., S), or a
            tuple of them in the family's order (the LSTM's ``(h, c)``, c (L*D, ..., H); the
            SLSTM's ``(h, c, n, m)``). Zeros by default: the states the family keeps wide
            (`Family.wide_state`: the LSTM's c, the SLSTM's c, n, m, the GRU's h) in float32
            for a 16-bit computation dtype, any other in the computation dtype.
          deterministic: no dropout when True.
          return_carry: also return the final carry, in the form of ``initial_carry``.

        Returns:
          Outputs (..., T, D*S) in the computation dtype (``dtype``, or with ``dtype=None``
          the inputs'), zero past each length; with ``return_carry``, also the carry, in the
          dtypes of ``initial_carry``.

        Raises:
          ValueError, TypeError: for attributes or inputs of the wrong shape, dtype or value;
            the message names the argument, what was expected and what was given.
        """
        cfg = self._config()
        _params.check_config(cfg)
        existing = None  # the parameters, when they exist already: checked before use
        if self.has_variable("params", "layer_0"):
            existing = nn.meta.unbox(self.variables["params"])
        inputs = _params.check_inputs(inputs, _params.input_size_of(existing),
                                          self.dtype, self.param_dtype)
        if existing is not None:
            _params.check_tree(existing, inputs.shape[-1], cfg)
        inits = _params.initializers(self.kernel_init, self.recurrent_kernel_init,
                                         self.bias_init, getattr(self, "projection_init", None))
        params = {}
        for layer in range(self.num_layers):
            params[f"layer_{layer}"] = self.param(
                f"layer_{layer}", _params.init_layer, layer, inputs.shape[-1], cfg, inits)
        rng = None
        if self.dropout > 0 and self.num_layers > 1 and not deterministic:
            rng = self.make_rng("dropout")
        return _params.apply(params, inputs, seq_lengths, initial_carry, cfg,
                                 dropout_rng=rng, return_carry=return_carry)

    @classmethod
    def variables_from_torch(cls, state_dict, *, prefix: str = "", param_dtype=jnp.float32):
        """``{"params": ...}`` for this layer from a state_dict of the family's PyTorch module
        (``nn.LSTM`` for `LSTM`, ...; tensors or arrays)."""
        return {"params": _params.from_torch(state_dict, prefix, cls._FAMILY,
                                                 param_dtype)[0]}

    @classmethod
    def variables_to_torch(cls, variables, *, prefix: str = ""):
        """A PyTorch state_dict (NumPy arrays) from this layer's variables."""
        return _params.to_torch(variables["params"], prefix, cls._FAMILY)

    @classmethod
    def variables_from_flax(cls, flax_params, *, shared_cell: bool | None = None,
                            param_dtype=jnp.float32):
        """``{"params": ...}`` from Flax ``nn.RNN`` params of the matching cell (one layer, an
        ``nn.Bidirectional`` tree, or a sequence of layers). An ``nn.Bidirectional`` whose two
        RNNs share one cell is stored once, under ``'forward_rnn'``: read as shared by default;
        ``shared_cell=True`` or ``False`` states which it must be."""
        return {"params": _params.from_flax(flax_params, cls._FAMILY, param_dtype,
                                                shared_cell)[0]}

    @classmethod
    def variables_from_flat(cls, weights, input_size: int, hidden_size: int, num_layers: int,
                            bidirectional: bool, **options):
        """``{"params": ...}`` from the flat weight vector of the functional call; `options`:
        the call options that shape the weights (``proj_size`` for a projected LSTM)."""
        options = _params.cell_options(cls._FAMILY, options, f"{cls.__name__}.variables_from_flat")
        return {"params": _params.from_flat(weights, input_size, hidden_size, num_layers,
                                            bidirectional, cls._FAMILY,
                                            options.get("proj_size", 0))}


def _attributes(fam) -> dict[str, Any]:
    """The family's options as the layer's attributes (dataclass fields with their defaults)."""
    return {"__annotations__": dict.fromkeys(fam.layer_options, "Any"), **fam.layer_options}


def _classes(namespace, families=None) -> list[str]:
    """Makes the families' layers (default: every registered family's) into `namespace`."""
    return _params.make_layers(namespace, lambda fam: _Recurrent, _docs.linen_doc, _attributes,
                               families)


class _Cell(nn.RNNCellBase):
    """What every family's step cell shares: one step of the family's one-layer layer, the
    carry in and out, for Flax's ``nn.RNN``, ``nn.scan`` and ``nn.Bidirectional`` and for
    streaming (`_cells` makes one per registered family, ``<Layer>Cell``).

    Its parameters are one direction of the layer's (``W_ih``, ``W_hh``, ``b_ih``, ``b_hh``
    and, for a projected LSTM, ``W_hr``): a layer's ``params["layer_0"]["forward"]`` is a
    cell's ``params``, and the cell's step is the layer's call on one step. Its carry is the
    family's states, each (*batch, size), in Flax's order where Flax has the cell (the LSTM's
    ``(c, h)``, as ``nn.LSTMCell``), else the layer's (the SLSTM's ``(h, c, n, m)``).
    """

    _FAMILY = ""

    features: int
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    implementation: str | None = None
    kernel_init: Callable | None = None
    recurrent_kernel_init: Callable | None = None
    bias_init: Callable | None = None
    carry_init: Callable = nn.initializers.zeros_init()

    def _config(self) -> _params.Config:
        return _params.cell_config(self)

    @nn.compact
    def __call__(self, carry, inputs):
        """One step.

        Args:
          carry: the states (`initialize_carry`'s), each (*batch, size).
          inputs: (*batch, I).

        Returns:
          ``(carry, output)``: the new states, and the output (*batch, S) (the new ``h``).
        """
        cfg = self._config()
        _params.check_config(cfg)
        inputs = _params.check_inputs(jnp.asarray(inputs)[..., None, :], None, self.dtype,
                                      self.param_dtype)[..., 0, :]
        inits = _params.initializers(self.kernel_init, self.recurrent_kernel_init,
                                     self.bias_init, getattr(self, "projection_init", None))
        default = _params.uniform_init(self.features)
        params = {n: self.param(n, inits.get(n) or default, shape, self.param_dtype)
                  for n, shape in cfg.shapes(inputs.shape[-1])[0].items()}
        return _params.cell_step(params, carry, inputs, cfg)

    @nn.nowrap
    def initialize_carry(self, rng, input_shape):
        """The initial carry for inputs of shape `input_shape` (*batch, I), by `carry_init`
        (zeros by default), in the dtypes of the layer's default carry."""
        dtype = self.dtype if self.dtype is not None else self.param_dtype
        return _params.cell_carry(self._config(), tuple(input_shape[:-1]), dtype,
                                  self.carry_init, rng)

    @property
    def num_feature_axes(self) -> int:
        return 1


def _cells(namespace) -> list[str]:
    """Makes every registered family's step cell into `namespace`."""
    return _params.make_layers(namespace, lambda fam: _Cell, _docs.cell_doc, _attributes,
                               suffix="Cell")


__all__ = ["attention_fn", *_classes(globals()), *_cells(globals())]

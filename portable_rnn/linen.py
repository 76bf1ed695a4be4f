"""Flax Linen layers: `LSTM` and `attention_fn` (for `nn.MultiHeadDotProductAttention`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from . import _lstm_params
from ._attention import flax_attention_fn as attention_fn

__all__ = ["LSTM", "attention_fn"]


class LSTM(nn.Module):
    """A multi-layer (bidirectional) LSTM over `portable_rnn.lstm`: cuDNN or scan, automatically.

    Parameters live per layer and direction, in PyTorch's layout (gates i, f, g, o)::

        params["layer_1"]["reverse"]["W_hh"]   # (4H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat cuDNN vector inside the call.

    Attributes:
      hidden_size: H.
      num_layers: stacked layers.
      bidirectional: also run each layer in reverse (outputs concatenated: 2H features).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype (default: the inputs'). ``jnp.bfloat16`` with float32 params
        computes in bfloat16 with float32 accumulation and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic), ``"cudnn"`` or ``"scan"``.
      kernel_init, recurrent_kernel_init, bias_init: initialisers for ``W_ih``, ``W_hh`` and both
        biases; default ``U(-1/sqrt(H), 1/sqrt(H))`` as PyTorch and `jax.experimental.rnn`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.LSTM(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (32, 8)
      >>> y, (h, c) = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, h.shape
      ((4, 5, 16), (4, 4, 8))
    """

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

    @nn.compact
    def __call__(self, inputs, seq_lengths=None, initial_carry=None, *, deterministic=True,
                 return_carry=False):
        """Runs the LSTM.

        Args:
          inputs: (..., T, I): any leading batch dims.
          seq_lengths: (...,) valid lengths (any integer dtype), or None for all T.
          initial_carry: ``(h, c)``, each (L*D, ..., H); zeros by default.
          deterministic: no dropout when True.
          return_carry: also return the final ``(h, c)``.

        Returns:
          Outputs (..., T, D*H), zero past each length; with ``return_carry``, also ``(h, c)``.
        """
        _lstm_params.check_config(self.hidden_size, self.num_layers, self.bidirectional,
                                  self.dropout, self.dtype, self.param_dtype,
                                  self.implementation)
        input_size = None  # the parameters' input size, when they exist already
        if self.has_variable("params", "layer_0"):
            input_size = nn.meta.unbox(self.get_variable("params", "layer_0"))[
                "forward"]["W_ih"].shape[1]
        inputs = _lstm_params.check_inputs(inputs, input_size, self.dtype)
        inits = dict(W_ih=self.kernel_init, W_hh=self.recurrent_kernel_init,
                     b_ih=self.bias_init, b_hh=self.bias_init)
        params = {}
        for layer in range(self.num_layers):
            params[f"layer_{layer}"] = self.param(
                f"layer_{layer}", _lstm_params.init_layer, layer, inputs.shape[-1],
                self.hidden_size, self.bidirectional, self.param_dtype, inits)
        rng = None
        if self.dropout > 0 and self.num_layers > 1 and not deterministic:
            rng = self.make_rng("dropout")
        return _lstm_params.apply(
            params, inputs, seq_lengths, initial_carry, hidden_size=self.hidden_size,
            num_layers=self.num_layers, bidirectional=self.bidirectional, dropout=self.dropout,
            dtype=self.dtype, precision=self.precision, implementation=self.implementation,
            dropout_rng=rng, return_carry=return_carry)

    @staticmethod
    def variables_from_torch(state_dict, *, prefix: str = "", param_dtype=jnp.float32):
        """``{"params": ...}`` for an `LSTM` from a PyTorch ``nn.LSTM`` state_dict."""
        return {"params": _lstm_params.from_torch(state_dict, prefix, param_dtype)[0]}

    @staticmethod
    def variables_to_torch(variables, *, prefix: str = ""):
        """A PyTorch ``nn.LSTM`` state_dict (NumPy arrays) from this layer's variables."""
        return _lstm_params.to_torch(variables["params"], prefix)

    @staticmethod
    def variables_from_flax(flax_params, *, param_dtype=jnp.float32):
        """``{"params": ...}`` from Flax ``nn.RNN(OptimizedLSTMCell | LSTMCell)`` params (one
        layer, an ``nn.Bidirectional`` tree, or a sequence of layers)."""
        return {"params": _lstm_params.from_flax(flax_params, param_dtype)[0]}

    @staticmethod
    def variables_from_flat(weights, input_size: int, hidden_size: int, num_layers: int,
                            bidirectional: bool):
        """``{"params": ...}`` from the flat cuDNN weight vector of `portable_rnn.lstm`."""
        return {"params": _lstm_params.from_flat(weights, input_size, hidden_size, num_layers,
                                                 bidirectional)}

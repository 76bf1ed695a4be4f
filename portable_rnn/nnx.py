"""Flax NNX layers: `LSTM` and `attention_fn` (for `nnx.MultiHeadAttention`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from . import _checks, _lstm_params
from ._attention import flax_attention_fn as attention_fn

__all__ = ["LSTM", "attention_fn"]


class LSTM(nnx.Module):
    """The NNX twin of `portable_rnn.linen.LSTM`: same call, same parameter tree.

    ``model.layer_1["reverse"]["W_hh"]`` is layer 1's reverse recurrent kernel (4H, H); the
    state's paths (``nnx.state(model, nnx.Param)``) equal the Linen params' paths.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.LSTM(3, 8, num_layers=2, rngs=nnx.Rngs(0))
      >>> model(jnp.ones((4, 5, 3))).shape
      (4, 5, 8)
    """

    def __init__(self, in_features: int, hidden_size: int, num_layers: int = 1,
                 bidirectional: bool = False, dropout: float = 0.0, dtype: Any = None,
                 param_dtype: Any = jnp.float32, precision: Any = None,
                 implementation: str | None = None, kernel_init: Callable | None = None,
                 recurrent_kernel_init: Callable | None = None,
                 bias_init: Callable | None = None, *, rngs: nnx.Rngs):
        _checks.static_int("in_features", in_features)
        _lstm_params.check_config(hidden_size, num_layers, bidirectional, dropout, dtype,
                                  param_dtype, implementation)
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"`rngs` must be an `nnx.Rngs`; got {type(rngs).__name__}.")
        self.in_features = in_features
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.dropout = dropout
        self.dtype = dtype
        self.precision = precision
        self.implementation = implementation
        self.rngs = rngs.fork() if dropout > 0 and num_layers > 1 else None
        inits = dict(W_ih=kernel_init, W_hh=recurrent_kernel_init, b_ih=bias_init,
                     b_hh=bias_init)
        key = rngs.params()
        for layer in range(num_layers):
            tree = _lstm_params.init_layer(jax.random.fold_in(key, layer), layer, in_features,
                                           hidden_size, bidirectional, param_dtype, inits)
            setattr(self, f"layer_{layer}", _as_state(tree))

    def params_tree(self):
        """The parameters as plain arrays, in the tree `linen.LSTM` uses."""
        return {f"layer_{l}": {d: {n: v[...] for n, v in p.items()}
                               for d, p in getattr(self, f"layer_{l}").items()}
                for l in range(self.num_layers)}

    def load_params(self, tree) -> LSTM:
        """Sets the parameters from a tree (e.g. Linen ``variables["params"]``); returns self."""
        for l in range(self.num_layers):
            for d, p in getattr(self, f"layer_{l}").items():
                for n, v in p.items():
                    try:
                        new = jnp.asarray(tree[f"layer_{l}"][d][n])
                    except (KeyError, TypeError, IndexError):
                        raise ValueError(f"`tree` must hold `layer_{l}/{d}/{n}` (the parameter "
                                         "tree of `linen.LSTM`); it does not.") from None
                    if new.shape != v[...].shape:
                        raise ValueError(f"`layer_{l}/{d}/{n}` must have shape {v[...].shape}; "
                                         f"got {new.shape}.")
                    v[...] = new.astype(v[...].dtype)
        return self

    def to_torch_state_dict(self, *, prefix: str = ""):
        """A PyTorch ``nn.LSTM`` state_dict (NumPy arrays) of this model's weights."""
        return _lstm_params.to_torch(self.params_tree(), prefix)

    def __call__(self, inputs, seq_lengths=None, initial_carry=None, *, deterministic=True,
                 return_carry=False):
        """As `portable_rnn.linen.LSTM.__call__`; dropout draws from the ``dropout`` stream of
        the `nnx.Rngs` given at construction."""
        rng = None
        if self.rngs is not None and not deterministic:
            rng = self.rngs.dropout()
        return _lstm_params.apply(
            self.params_tree(), inputs, seq_lengths, initial_carry, hidden_size=self.hidden_size,
            num_layers=self.num_layers, bidirectional=self.bidirectional, dropout=self.dropout,
            dtype=self.dtype, precision=self.precision, implementation=self.implementation,
            dropout_rng=rng, return_carry=return_carry)

    @classmethod
    def from_torch(cls, state_dict, *, prefix: str = "", rngs: nnx.Rngs | None = None,
                   **kwargs) -> LSTM:
        """A model with the weights (and sizes) of a PyTorch ``nn.LSTM`` state_dict."""
        tree, (input_size, hidden_size, num_layers, bidirectional) = _lstm_params.from_torch(
            state_dict, prefix)
        model = cls(input_size, hidden_size, num_layers, bidirectional,
                    rngs=rngs or nnx.Rngs(0), **kwargs)
        return model.load_params(tree)

    @classmethod
    def from_flax(cls, flax_params, *, rngs: nnx.Rngs | None = None, **kwargs) -> LSTM:
        """A model with the weights (and sizes) of Flax ``nn.RNN(OptimizedLSTMCell)`` params."""
        tree, (input_size, hidden_size, num_layers, bidirectional) = _lstm_params.from_flax(
            flax_params)
        model = cls(input_size, hidden_size, num_layers, bidirectional,
                    rngs=rngs or nnx.Rngs(0), **kwargs)
        return model.load_params(tree)


def _as_state(tree):
    return nnx.Dict({d: nnx.Dict({n: nnx.Param(a) for n, a in p.items()})
                     for d, p in tree.items()})

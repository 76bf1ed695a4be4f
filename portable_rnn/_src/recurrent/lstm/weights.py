"""The LSTM's weight functions: the flat layout of `jax.experimental.rnn`, and converters from
and to PyTorch, Flax and Keras."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..convert import (
    weights_from_flax,
    weights_from_torch,
    weights_to_flax,
    weights_to_torch,
)
from ..keras_weights import weights_from_keras, weights_to_keras
from ..layout import NAMES, init_weight, num_params, pack, unpack
from .family import FAMILY

Array = jax.Array


def get_num_params_in_lstm(input_size: int, hidden_size: int, num_layers: int,
                           bidirectional: bool, proj_size: int = 0) -> int:
    """Length of the flat weight vector of an LSTM (as `jax.experimental.rnn` for proj_size=0)."""
    return num_params(input_size, hidden_size, num_layers, bidirectional, FAMILY, proj_size)


def init_lstm_weight(rng: Array, input_size: int, hidden_size: int, num_layers: int,
                     bidirectional: bool, dtype: Any = jnp.float32, *,
                     proj_size: int = 0) -> Array:
    """Flat weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch and `jax.experimental.rnn`.

    With the default ``dtype`` (and no projection) the result is bit-identical to
    ``jax.experimental.rnn.init_lstm_weight`` for the same key.
    """
    return init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype, FAMILY,
                       proj_size)


def unpack_lstm_weights(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                        bidirectional: bool, *, proj_size: int = 0) -> tuple[dict[int, Array], ...]:
    """Split the flat vector into ``(W_ih, W_hh, b_ih, b_hh)``, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (4H, in), ``W_hh[p]`` (4H, H), ``b_ih[p]`` and ``b_hh[p]`` (4H,), gates i, f, g,
    o; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else ``p = layer``.
    Identical to ``jax.experimental.rnn.unpack_lstm_weights``. With ``proj_size=P > 0`` (PyTorch's
    projections) ``W_hh[p]`` is (4H, P), a fifth dict ``W_hr`` holds the (P, H) projections, and the
    flat vector stores each pseudo-layer's ``W_hr`` after its ``W_hh``.
    """
    g = unpack(weights, input_size, hidden_size, num_layers, bidirectional, FAMILY, proj_size)
    return tuple(g[n] for n in NAMES if n in g)


def pack_lstm_weights(W_ih, W_hh, b_ih, b_hh, input_size: int, hidden_size: int,
                      num_layers: int, bidirectional: bool, *, W_hr=None,
                      proj_size: int = 0) -> Array:
    """Inverse of `unpack_lstm_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros). ``W_hr`` is required with ``proj_size``.
    """
    groups = dict(W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh, W_hr=W_hr)
    return pack(groups, input_size, hidden_size, num_layers, bidirectional, FAMILY, proj_size)


def lstm_weights_from_torch(state_dict: Mapping[str, Any], *, prefix: str = "",
                            dtype: Any = None) -> Array:
    """Flat weights from a PyTorch ``nn.LSTM`` state_dict (tensors or arrays; torch not needed).

    Sizes, layer count, direction count and ``proj_size`` are read from the keys and shapes.
    ``prefix`` selects one LSTM inside a bigger model's state_dict (e.g. ``"encoder.lstm."``).
    Without biases (``bias=False``) zeros are used.
    """
    return weights_from_torch(state_dict, prefix, dtype, FAMILY)


def lstm_weights_to_torch(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                          bidirectional: bool, *, prefix: str = "",
                          proj_size: int = 0) -> dict[str, np.ndarray]:
    """A PyTorch ``nn.LSTM`` state_dict (NumPy arrays) from the flat weights.

    Load it with ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.
    """
    return weights_to_torch(weights, input_size, hidden_size, num_layers, bidirectional, prefix,
                            FAMILY, proj_size)


def lstm_weights_from_flax(params: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                           shared_cell: bool | None = None, dtype: Any = None) -> Array:
    """Flat LSTM weights from Flax ``nn.RNN(nn.OptimizedLSTMCell | nn.LSTMCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. The equations
    are PyTorch's (gates i, f, g, o); Flax's LSTM cells have one bias per gate, on the hidden
    Dense (``hi``, ``hf``, ``hg``, ``ho``), which becomes ``b_hh``; ``b_ih`` is zero.

    Args:
      params: one layer's tree (``{'params': {'cell': ...}}``, ``{'cell': ...}`` or the cell dict
        itself), an ``nn.Bidirectional`` tree (``{'forward_rnn': ..., 'backward_rnn': ...}``,
        optionally under ``'params'``), or a sequence of those for stacked layers, first layer
        first. Sizes, layer and direction counts are read from the kernels.
      shared_cell: whether an ``nn.Bidirectional``'s two RNNs share one cell (the same
        ``nn.RNN`` or cell object). Flax stores such a tree once, under ``'forward_rnn'``, and
        always writes ``'backward_rnn'`` otherwise, so None (the default) reads a tree without
        ``'backward_rnn'`` as shared: both directions get the same weights. True or False
        states it, and a tree that says otherwise is an error.
      dtype: casts the result; default: the parameters' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_lstm_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold LSTMCell/OptimizedLSTMCell parameters (the error names
        the missing Dense layers, and the cell it looks like), a kernel or bias has the wrong
        shape, or layers disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> params = nn.RNN(nn.LSTMCell(4)).init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> portable_rnn.lstm_weights_from_flax(params).shape == (
      ...     portable_rnn.get_num_params_in_lstm(3, 4, 1, False),)
      True
    """
    return weights_from_flax(params, FAMILY, shared_cell, dtype)


def lstm_weights_to_flax(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                         bidirectional: bool, *, proj_size: int = 0) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.OptimizedLSTMCell | nn.LSTMCell)`` parameters from flat LSTM weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each gate's
    ``b_ih + b_hh`` becomes the bias of its hidden Dense (``hi``, ``hf``, ``hg``, ``ho``).

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      proj_size: must be 0: a projection (PyTorch's ``proj_size``) has no Flax counterpart.

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}`` (two RNNs, not
      shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN(nn.OptimizedLSTMCell)`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays in
      the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.
      ValueError: ``proj_size > 0``: Flax's LSTM cells have no projection (``W_hr``).

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 2, False)
      >>> trees = portable_rnn.lstm_weights_to_flax(w, 3, 4, 2, False)
      >>> x = jnp.ones((1, 5, 3))
      >>> for tree in trees:
      ...     x = nn.RNN(nn.OptimizedLSTMCell(4)).apply(tree, x)
      >>> x.shape
      (1, 5, 4)
    """
    return weights_to_flax(weights, input_size, hidden_size, num_layers, bidirectional, FAMILY,
                           proj_size)


def lstm_weights_from_keras(keras_weights: Sequence[Any], *, dtype: Any = None) -> Array:
    """Flat LSTM weights from the weights of Keras 3 ``keras.layers.LSTM`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, 4H), recurrent_kernel (H, 4H), bias (4H,)]``, gates i, f, c, o (ours i, f, g,
    o); the kernels are ``W_ih.T`` and ``W_hh.T``, and the bias becomes ``b_ih`` (``b_hh`` is
    zero). The default activations (tanh, and sigmoid for the gates) are assumed.

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_lstm_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected).

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 4 * H)), np.ones((H, 4 * H)), np.zeros(4 * H)]
      >>> portable_rnn.lstm_weights_from_keras(layer).shape == (
      ...     portable_rnn.get_num_params_in_lstm(I, H, 1, False),)
      True
    """
    return weights_from_keras(keras_weights, FAMILY, dtype)


def lstm_weights_to_keras(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                          bidirectional: bool, *, proj_size: int = 0,
                          use_bias: bool = True) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.LSTM`` layers from flat LSTM weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets
    ``[kernel (I or D*H, 4H), recurrent_kernel (H, 4H), bias (4H,)]`` with ``bias = b_ih +
    b_hh`` (Keras has one bias per gate).

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      proj_size: must be 0: a projection (PyTorch's ``proj_size``) has no Keras counterpart.
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.LSTM`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.
      ValueError: ``proj_size > 0``: Keras' LSTM has no projection (``W_hr``).

    Examples:
      >>> import jax, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 2, True)
      >>> [[a.shape for a in layer] for layer in portable_rnn.lstm_weights_to_keras(
      ...     w, 3, 4, 2, True)][1]
      [(8, 16), (4, 16), (16,), (8, 16), (4, 16), (16,)]
    """
    return weights_to_keras(weights, input_size, hidden_size, num_layers, bidirectional, FAMILY,
                            proj_size, use_bias)


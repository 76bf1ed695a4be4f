"""The simple RNN's weight functions: the cuDNN/PyTorch layout, and converters from and to
PyTorch, Flax and Keras."""

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


def get_num_params_in_simple_rnn(input_size: int, hidden_size: int, num_layers: int,
                                 bidirectional: bool) -> int:
    """Length of the flat weight vector of a simple (Elman) RNN, as PyTorch ``nn.RNN``."""
    return num_params(input_size, hidden_size, num_layers, bidirectional, FAMILY)


def init_simple_rnn_weight(rng: Array, input_size: int, hidden_size: int, num_layers: int,
                           bidirectional: bool, dtype: Any = jnp.float32) -> Array:
    """Flat simple-RNN weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's ``nn.RNN``."""
    return init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype,
                       FAMILY)


def unpack_simple_rnn_weights(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                              bidirectional: bool) -> tuple[dict[int, Array], ...]:
    """``(W_ih, W_hh, b_ih, b_hh)`` per pseudo-layer: (H, in), (H, H), (H,), (H,)."""
    g = unpack(weights, input_size, hidden_size, num_layers, bidirectional, FAMILY)
    return tuple(g[n] for n in NAMES[:4])


def pack_simple_rnn_weights(W_ih, W_hh, b_ih, b_hh, input_size: int, hidden_size: int,
                            num_layers: int, bidirectional: bool) -> Array:
    """Inverse of `unpack_simple_rnn_weights` (biases may be None: zeros)."""
    groups = dict(W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh)
    return pack(groups, input_size, hidden_size, num_layers, bidirectional, FAMILY)


def simple_rnn_weights_from_torch(state_dict: Mapping[str, Any], *, prefix: str = "",
                                  dtype: Any = None) -> Array:
    """Flat weights from a PyTorch ``nn.RNN`` state_dict (the nonlinearity is not stored in it)."""
    return weights_from_torch(state_dict, prefix, dtype, FAMILY)


def simple_rnn_weights_to_torch(weights: Array, input_size: int, hidden_size: int,
                                num_layers: int, bidirectional: bool, *,
                                prefix: str = "") -> dict[str, np.ndarray]:
    """A PyTorch ``nn.RNN`` state_dict (NumPy arrays) from the flat weights."""
    return weights_to_torch(weights, input_size, hidden_size, num_layers, bidirectional, prefix,
                            FAMILY)


def simple_rnn_weights_from_flax(params: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                                 shared_cell: bool | None = None, dtype: Any = None) -> Array:
    """Flat simple-RNN weights from Flax ``nn.RNN(nn.SimpleCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Flax's
    SimpleCell computes ``h' = activation_fn(W_i x + b_i + W_h h)``: its one bias is on the input
    Dense ``i`` and becomes ``b_ih``; ``b_hh`` is zero. ``activation_fn`` (tanh by default; pass
    the same as ``portable_rnn.simple_rnn(..., nonlinearity=...)``) and ``residual=True`` (which
    adds ``h`` before the activation) are not recorded in the parameters.

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
      The flat weight vector, (P,), in the layout of `unpack_simple_rnn_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold SimpleCell parameters (the error names the missing Dense
        layers, and the cell it looks like), a kernel or bias has the wrong shape, or layers
        disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> params = nn.RNN(nn.SimpleCell(4)).init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> portable_rnn.simple_rnn_weights_from_flax(params).shape
      (36,)
    """
    return weights_from_flax(params, FAMILY, shared_cell, dtype)


def simple_rnn_weights_to_flax(weights: Array, input_size: int, hidden_size: int,
                               num_layers: int, bidirectional: bool) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.SimpleCell)`` parameters from flat simple-RNN weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions.
    ``b_ih + b_hh`` becomes the bias of the input Dense ``i``.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}`` (two RNNs, not
      shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN(nn.SimpleCell)`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays in
      the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, True)
      >>> (tree,) = portable_rnn.simple_rnn_weights_to_flax(w, 3, 4, 1, True)
      >>> sorted(tree["params"]), sorted(tree["params"]["forward_rnn"]["cell"])
      (['backward_rnn', 'forward_rnn'], ['h', 'i'])
    """
    return weights_to_flax(weights, input_size, hidden_size, num_layers, bidirectional,
                           FAMILY)


def simple_rnn_weights_from_keras(keras_weights: Sequence[Any], *, dtype: Any = None) -> Array:
    """Flat simple-RNN weights from the weights of Keras 3 ``keras.layers.SimpleRNN`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, H), recurrent_kernel (H, H), bias (H,)]`` and computes
    ``h' = activation(x W + b + h U)``; the bias becomes ``b_ih`` (``b_hh`` is zero). The
    activation (tanh by default; pass the same as ``portable_rnn.simple_rnn(...,
    nonlinearity=...)``) is not part of the weights.

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_simple_rnn_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected).

    Examples:
      >>> import numpy as np, portable_rnn
      >>> portable_rnn.simple_rnn_weights_from_keras([np.ones((3, 4)), np.ones((4, 4))]).shape
      (36,)
    """
    return weights_from_keras(keras_weights, FAMILY, dtype)


def simple_rnn_weights_to_keras(weights: Array, input_size: int, hidden_size: int,
                                num_layers: int, bidirectional: bool, *,
                                use_bias: bool = True) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.SimpleRNN`` layers from flat simple-RNN weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets
    ``[kernel (I or D*H, H), recurrent_kernel (H, H), bias (H,)]`` with ``bias = b_ih + b_hh``.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.SimpleRNN`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.

    Examples:
      >>> import jax, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.simple_rnn_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 4), (4, 4), (4,)]
    """
    return weights_to_keras(weights, input_size, hidden_size, num_layers, bidirectional,
                            FAMILY, use_bias=use_bias)


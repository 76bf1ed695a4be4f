"""The GRU's weight functions: the cuDNN/PyTorch layout, and converters from and to
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


def get_num_params_in_gru(input_size: int, hidden_size: int, num_layers: int,
                          bidirectional: bool) -> int:
    """Length of the flat weight vector of a GRU (gates r, z, n; cuDNN/PyTorch layout)."""
    return num_params(input_size, hidden_size, num_layers, bidirectional, FAMILY)


def init_gru_weight(rng: Array, input_size: int, hidden_size: int, num_layers: int,
                    bidirectional: bool, dtype: Any = jnp.float32) -> Array:
    """Flat GRU weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's ``nn.GRU``."""
    return init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype, FAMILY)


def unpack_gru_weights(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                       bidirectional: bool) -> tuple[dict[int, Array], ...]:
    """``(W_ih, W_hh, b_ih, b_hh)`` per pseudo-layer: (3H, in), (3H, H), (3H,), (3H,); gates r, z,
    n, as PyTorch ``nn.GRU`` (the flat order is the LSTM's: all matrices, then all biases)."""
    g = unpack(weights, input_size, hidden_size, num_layers, bidirectional, FAMILY)
    return tuple(g[n] for n in NAMES[:4])


def pack_gru_weights(W_ih, W_hh, b_ih, b_hh, input_size: int, hidden_size: int,
                     num_layers: int, bidirectional: bool) -> Array:
    """Inverse of `unpack_gru_weights` (biases may be None: zeros)."""
    groups = dict(W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh)
    return pack(groups, input_size, hidden_size, num_layers, bidirectional, FAMILY)


def gru_weights_from_torch(state_dict: Mapping[str, Any], *, prefix: str = "",
                           dtype: Any = None) -> Array:
    """Flat weights from a PyTorch ``nn.GRU`` state_dict (as `lstm_weights_from_torch`)."""
    return weights_from_torch(state_dict, prefix, dtype, FAMILY)


def gru_weights_to_torch(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                         bidirectional: bool, *, prefix: str = "") -> dict[str, np.ndarray]:
    """A PyTorch ``nn.GRU`` state_dict (NumPy arrays) from the flat weights."""
    return weights_to_torch(weights, input_size, hidden_size, num_layers, bidirectional, prefix,
                            FAMILY)


def gru_weights_from_flax(params: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                          shared_cell: bool | None = None, dtype: Any = None) -> Array:
    """Flat GRU weights from Flax ``nn.RNN(nn.GRUCell)`` parameters (always exact).

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Flax's GRUCell
    computes PyTorch's equations, gate names r, z, n alike, except for where the biases sit::

        r = sigmoid(W_ir x + b_ir + W_hr h)             # PyTorch: + b_hr
        z = sigmoid(W_iz x + b_iz + W_hz h)             # PyTorch: + b_hz
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))   # the same: r applied after the matmul
        h' = (1 - z) * n + z * h                        # the same: z keeps the old state

    Its ``hr`` and ``hz`` Dense have no bias; ``ir``, ``iz``, ``in`` and ``hn`` have one. So
    ``b_ih = [b_ir, b_iz, b_in]`` and ``b_hh = [0, 0, b_hn]``. The default ``gate_fn`` (sigmoid)
    and ``activation_fn`` (tanh) are assumed: the parameters do not record them.

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
      The flat weight vector, (P,), in the layout of `unpack_gru_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold GRUCell parameters (the error names the missing Dense
        layers, and the cell it looks like), a kernel or bias has the wrong shape, or layers
        disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> rnn = nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.GRUCell(4)))
      >>> params = rnn.init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> w = portable_rnn.gru_weights_from_flax(params)
      >>> w.shape == (portable_rnn.get_num_params_in_gru(3, 4, 1, True),)
      True
    """
    return weights_from_flax(params, FAMILY, shared_cell, dtype)


def gru_weights_to_flax(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                        bidirectional: bool) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.GRUCell)`` parameters from flat GRU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. PyTorch's
    ``b_hr`` and ``b_hz``, which Flax lacks, add to ``b_ir`` and ``b_iz`` before the sigmoid, so
    they are summed into the ``ir`` and ``iz`` biases (rounded once, in the weights' dtype):
    every GRU of this layout is representable. ``b_in`` and ``b_hn`` stay apart (``b_hn`` is
    multiplied by r in both). See `gru_weights_from_flax` for the equations.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}`` (two RNNs, not
      shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN(nn.GRUCell)`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays in
      the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> (tree,) = portable_rnn.gru_weights_to_flax(w, 3, 4, 1, False)
      >>> nn.RNN(nn.GRUCell(4)).apply(tree, jnp.ones((1, 5, 3))).shape
      (1, 5, 4)
    """
    return weights_to_flax(weights, input_size, hidden_size, num_layers, bidirectional, FAMILY)


def gru_weights_from_keras(keras_weights: Sequence[Any], *, dtype: Any = None) -> Array:
    """Flat GRU weights from the weights of Keras 3 ``keras.layers.GRU(reset_after=True)`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, 3H), recurrent_kernel (H, 3H), bias (2, 3H)]`` with gates z, r, h (ours r, z,
    n: the first two blocks swap); bias row 0 becomes ``b_ih``, row 1 ``b_hh``. With
    ``reset_after=True`` (Keras' default) the equations are PyTorch's:
    ``hh = tanh(x W_h + b_h + r * (h U_h + b'_h))``, ``h' = z * h + (1 - z) * hh``. A GRU with
    ``reset_after=False`` (bias (3H,)) computes ``tanh(x W_h + (r * h) U_h + b_h)`` instead and
    is rejected; without bias (``use_bias=False``) the two cannot be told apart by their weights,
    so make sure such a layer has ``reset_after=True``.

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_gru_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected), or a GRU's bias has
        shape (3H,): a ``reset_after=False`` layer, whose formula differs.

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 3 * H)), np.ones((H, 3 * H)), np.zeros((2, 3 * H))]
      >>> portable_rnn.gru_weights_from_keras(layer + layer).shape  # a Bidirectional's list
      (216,)
    """
    return weights_from_keras(keras_weights, FAMILY, dtype)


def gru_weights_to_keras(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                         bidirectional: bool, *, use_bias: bool = True) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.GRU(reset_after=True)`` layers from flat GRU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets
    ``[kernel (I or D*H, 3H), recurrent_kernel (H, 3H), bias (2, 3H)]``, gates in Keras' order
    z, r, h, bias rows ``b_ih`` and ``b_hh``: every GRU of this layout is representable exactly.
    Not for ``reset_after=False`` layers (another formula).

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.GRU`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.

    Examples:
      >>> import jax, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.gru_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 12), (4, 12), (2, 12)]
    """
    return weights_to_keras(weights, input_size, hidden_size, num_layers, bidirectional, FAMILY,
                            use_bias=use_bias)


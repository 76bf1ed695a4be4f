"""Keras 3 weight lists of LSTM, GRU and SimpleRNN layers, to and from the flat cuDNN vector.

A Keras recurrent layer's ``get_weights()`` is ``[kernel (I, G*H), recurrent_kernel (H, G*H),
bias]`` (no bias with ``use_bias=False``): the kernels are the transposes of ``W_ih`` and
``W_hh``, gate blocks along their last axis. Per layer:

- ``LSTM``: gates i, f, c, o (ours i, f, g, o: the same order); one bias (4H,).
- ``GRU`` with ``reset_after=True`` (Keras' default): gates z, r, h (ours r, z, n: the first two
  swapped); bias (2, 3H), row 0 the input bias, row 1 the recurrent bias. Its equations are
  PyTorch's: ``hh = tanh(x W_h + b_h + r * (h U_h + b'_h))``, ``h' = z * h + (1 - z) * hh``.
  ``reset_after=False`` (bias (3H,)) applies r to ``h`` before ``U_h``, another function.
- ``SimpleRNN``: one block; bias (H,).

A ``keras.layers.Bidirectional`` lists the forward layer's weights, then the backward layer's.
Keras is not imported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from ._weights import GATES, _check_sizes, _to_numpy, pack, param_shapes, unpack

Array = jax.Array

KERAS_LAYERS = {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "SimpleRNN"}
# Keras' gate block k is our gate _KERAS_ORDER[family][k]; each permutation is its own inverse.
_KERAS_ORDER = {"lstm": (0, 1, 2, 3), "gru": (1, 0, 2), "simple_rnn": (0,)}


def _bias_shape(family: str, hidden_size: int) -> tuple[int, ...]:
    G = GATES[family] * hidden_size
    return (2, G) if family == "gru" else (G,)


def _legend(family: str) -> str:
    """The expected list, e.g. ``[kernel (I, 3*H), recurrent_kernel (H, 3*H), bias (2, 3*H)]``."""
    g = {4: "4*H", 3: "3*H", 1: "H"}[GATES[family]]
    bias = f"(2, {g})" if family == "gru" else f"({g},)"
    return f"[kernel (I, {g}), recurrent_kernel (H, {g}), bias {bias}]"


def _permute_gates(a: np.ndarray, family: str) -> np.ndarray:
    """Reorders the gate blocks of axis 0 between Keras' order and ours (either way; NumPy or
    JAX arrays)."""
    order = _KERAS_ORDER[family]
    blocks = a.reshape((len(order), -1) + a.shape[1:])
    return blocks[np.asarray(order)].reshape(a.shape)


def _keras_numpy(a) -> np.ndarray:
    if hasattr(a, "path") and hasattr(a, "value"):  # a keras.Variable (from `layer.weights`)
        a = a.value
    return _to_numpy(a)


def _is_array(a) -> bool:
    return hasattr(a, "shape") and hasattr(a, "dtype")


def _direction(arrays: list[np.ndarray], where: str, family: str):
    """(W_ih, W_hh, b_ih, b_hh) in our layout from one direction's Keras arrays."""
    name, G = KERAS_LAYERS[family], GATES[family]
    kernel, recurrent = arrays[0], arrays[1]
    if recurrent.ndim != 2 or recurrent.shape[1] != G * recurrent.shape[0]:
        hint = ""
        if recurrent.ndim == 2 and recurrent.shape[0]:
            ratio, rest = divmod(recurrent.shape[1], recurrent.shape[0])
            other = {4: "lstm", 3: "gru", 1: "simple_rnn"}.get(ratio)
            if not rest and other and other != family:
                hint = (f" (it looks like a Keras {KERAS_LAYERS[other]}: use "
                        f"{other}_weights_from_keras)")
        raise ValueError(f"{where} recurrent_kernel must have shape (H, {G}*H) for a Keras "
                         f"{name}; got {recurrent.shape}{hint}.")
    H = recurrent.shape[0]
    if kernel.ndim != 2 or kernel.shape[1] != G * H:
        raise ValueError(f"{where} kernel must have shape (I, {G}*H)=(I, {G * H}) (H={H} from "
                         f"recurrent_kernel); got {kernel.shape}.")
    zeros = np.zeros(G * H, kernel.dtype)
    b_ih = b_hh = zeros
    if len(arrays) == 3:
        bias, expected = arrays[2], _bias_shape(family, H)
        if family == "gru" and bias.shape == (G * H,):
            raise ValueError(
                f"{where} bias has shape (3*H,)=({G * H},): a Keras GRU with reset_after=False, "
                "which applies the reset gate to h before the recurrent kernel "
                "(hh = tanh(x W_h + (r * h) U_h + b_h)). PyTorch's GRU, and this library's, "
                "apply it after (r * (h U_h + b'_h)), as Keras' reset_after=True (bias "
                f"(2, 3*H)); weights of a reset_after=False GRU cannot be converted.")
        if bias.shape != expected:
            raise ValueError(f"{where} bias must have shape {expected} for a Keras {name} "
                             f"(H={H} from recurrent_kernel); got {bias.shape}.")
        if family == "gru":
            b_ih, b_hh = _permute_gates(bias[0], family), _permute_gates(bias[1], family)
        else:
            b_ih = _permute_gates(bias, family)
    return (_permute_gates(kernel.T, family), _permute_gates(recurrent.T, family), b_ih, b_hh)


def keras_layout(keras_weights, family: str):
    """``({name: per-pseudo-layer list}, (input_size, hidden_size, num_layers, bidirectional,
    proj_size))`` of Keras weight lists (see `lstm_weights_from_keras`); ``proj_size`` is 0."""
    name = KERAS_LAYERS[family]
    if isinstance(keras_weights, (str, bytes)) or not isinstance(keras_weights, Sequence):
        raise TypeError(f"`keras_weights` must be a list of arrays (a Keras {name} layer's "
                        "`get_weights()`) or a list of such lists (one per layer); got "
                        f"{type(keras_weights).__name__}.")
    if not keras_weights:
        raise ValueError("`keras_weights` must hold at least one layer's weights; got an empty "
                         "list.")
    if all(_is_array(a) for a in keras_weights):
        layers = [keras_weights]
    elif all(isinstance(a, Sequence) and not isinstance(a, (str, bytes)) for a in keras_weights):
        layers = list(keras_weights)
    else:
        kinds = sorted({type(a).__name__ for a in keras_weights})
        raise TypeError(f"`keras_weights` must be a list of arrays (one layer) or a list of "
                        f"lists of arrays (one per layer); got a list of {kinds}.")
    pseudo, directions = [], []
    for n, layer in enumerate(layers):
        where = f"`keras_weights` layer {n}"
        if not all(_is_array(a) for a in layer):
            kinds = sorted({type(a).__name__ for a in layer})
            raise TypeError(f"{where} must be a list of arrays; got a list of {kinds}.")
        arrays = [_keras_numpy(a) for a in layer]
        if len(arrays) not in (2, 3, 4, 6):
            raise ValueError(
                f"{where} must hold a Keras {name} layer's weights {_legend(family)} (without "
                "bias with use_bias=False), or a Bidirectional's: the forward layer's, then the "
                f"backward layer's (4 or 6 arrays); got {len(arrays)} arrays of shapes "
                f"{[a.shape for a in arrays]}.")
        num_directions = 1 if len(arrays) < 4 else 2
        half = len(arrays) // num_directions
        for d in range(num_directions):
            part = f" {('forward', 'backward')[d]}" if num_directions == 2 else ""
            pseudo.append(_direction(arrays[d * half:(d + 1) * half], where + part, family))
        directions.append(num_directions)
    if len(set(directions)) != 1:
        n = directions.index(3 - directions[0])
        raise ValueError(f"`keras_weights` mixes bidirectional and unidirectional layers: layer "
                         f"{n} has {directions[n]} direction(s), layer 0 has {directions[0]}.")
    input_size, hidden_size = pseudo[0][0].shape[1], pseudo[0][1].shape[1]
    sizes = (input_size, hidden_size, len(layers), directions[0] == 2)
    shapes = param_shapes(*sizes, family)
    for p, (w_ih, w_hh, _, _) in enumerate(pseudo):
        where = f"`keras_weights` layer {p // directions[0]}"
        if w_hh.shape != shapes[p]["W_hh"]:
            raise ValueError(f"{where} recurrent_kernel must have shape {shapes[p]['W_hh'][::-1]} "
                             f"(hidden_size={hidden_size}, from layer 0); got {w_hh.T.shape}.")
        if w_ih.shape != shapes[p]["W_ih"]:
            legend = "input_size" if p < directions[0] else "num_directions * hidden_size"
            raise ValueError(f"{where} kernel must have shape {shapes[p]['W_ih'][::-1]} "
                             f"(rows: {legend}); got {w_ih.T.shape}.")
    groups = dict(zip(("W_ih", "W_hh", "b_ih", "b_hh"), (list(g) for g in zip(*pseudo))))
    return groups, sizes + (0,)


def weights_from_keras(keras_weights, family, dtype=None) -> Array:
    groups, sizes = keras_layout(keras_weights, family)
    flat = pack(groups, *sizes[:4], family, host=True)
    return flat if dtype is None else flat.astype(dtype)


def weights_to_keras(weights, input_size, hidden_size, num_layers, bidirectional, family,
                     proj_size=0, use_bias=True) -> list[list[np.ndarray]]:
    num_directions = _check_sizes(input_size, hidden_size, num_layers, bidirectional, proj_size)
    if proj_size:
        raise ValueError(
            f"`W_hr` (proj_size={proj_size}) cannot be represented in Keras: keras.layers.LSTM "
            "has no projection; load these weights into portable_rnn.lstm(..., proj_size=...) "
            "or PyTorch nn.LSTM(proj_size=...) instead.")
    if not isinstance(use_bias, (bool, np.bool_)):
        raise TypeError(f"`use_bias` must be a bool; got {use_bias!r}.")
    groups = unpack(weights, input_size, hidden_size, num_layers, bidirectional, family,
                    host=True)
    out = []
    for layer in range(num_layers):
        arrays = []
        for p in range(layer * num_directions, (layer + 1) * num_directions):
            w_ih, w_hh, b_ih, b_hh = (np.asarray(groups[n][p])
                                      for n in ("W_ih", "W_hh", "b_ih", "b_hh"))
            arrays += [_permute_gates(w_ih, family).T, _permute_gates(w_hh, family).T]
            if not use_bias:
                for n, b in (("b_ih", b_ih), ("b_hh", b_hh)):
                    if np.any(b):
                        direction = ("forward", "reverse")[p % num_directions]
                        raise ValueError(
                            f"`use_bias`=False, but `{n}[{p}]` (layer {layer}, {direction}) is "
                            f"not zero (max |{n}[{p}]| = {np.max(np.abs(b)):.3g}): a Keras "
                            "layer with use_bias=False has no bias to hold it; pass "
                            "use_bias=True.")
            elif family == "gru":
                arrays.append(np.stack([_permute_gates(b_ih, family),
                                        _permute_gates(b_hh, family)]))
            else:  # one bias: b_ih + b_hh add up before the nonlinearity
                arrays.append(_permute_gates(b_ih + b_hh, family))
        out.append(arrays)
    return out


_FROM_ARGS = """Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `{unpack}`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected){raises}"""

_TO_ARGS = """Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).{proj}
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.{layer}`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.{proj_raises}"""


def lstm_weights_from_keras(keras_weights: Sequence[Any], *, dtype: Any = None) -> Array:
    """Flat LSTM weights from the weights of Keras 3 ``keras.layers.LSTM`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, 4H), recurrent_kernel (H, 4H), bias (4H,)]``, gates i, f, c, o (ours i, f, g,
    o); the kernels are ``W_ih.T`` and ``W_hh.T``, and the bias becomes ``b_ih`` (``b_hh`` is
    zero). The default activations (tanh, and sigmoid for the gates) are assumed.

    {args}

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 4 * H)), np.ones((H, 4 * H)), np.zeros(4 * H)]
      >>> portable_rnn.lstm_weights_from_keras(layer).shape == (
      ...     portable_rnn.get_num_params_in_lstm(I, H, 1, False),)
      True
    """
    return weights_from_keras(keras_weights, "lstm", dtype)


def lstm_weights_to_keras(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                          bidirectional: bool, *, proj_size: int = 0,
                          use_bias: bool = True) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.LSTM`` layers from flat LSTM weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets
    ``[kernel (I or D*H, 4H), recurrent_kernel (H, 4H), bias (4H,)]`` with ``bias = b_ih +
    b_hh`` (Keras has one bias per gate).

    {args}

    Examples:
      >>> import jax, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 2, True)
      >>> [[a.shape for a in layer] for layer in portable_rnn.lstm_weights_to_keras(
      ...     w, 3, 4, 2, True)][1]
      [(8, 16), (4, 16), (16,), (8, 16), (4, 16), (16,)]
    """
    return weights_to_keras(weights, input_size, hidden_size, num_layers, bidirectional, "lstm",
                            proj_size, use_bias)


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

    {args}

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 3 * H)), np.ones((H, 3 * H)), np.zeros((2, 3 * H))]
      >>> portable_rnn.gru_weights_from_keras(layer + layer).shape  # a Bidirectional's list
      (216,)
    """
    return weights_from_keras(keras_weights, "gru", dtype)


def gru_weights_to_keras(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                         bidirectional: bool, *, use_bias: bool = True) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.GRU(reset_after=True)`` layers from flat GRU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets
    ``[kernel (I or D*H, 3H), recurrent_kernel (H, 3H), bias (2, 3H)]``, gates in Keras' order
    z, r, h, bias rows ``b_ih`` and ``b_hh``: every GRU of this layout is representable exactly.
    Not for ``reset_after=False`` layers (another formula).

    {args}

    Examples:
      >>> import jax, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.gru_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 12), (4, 12), (2, 12)]
    """
    return weights_to_keras(weights, input_size, hidden_size, num_layers, bidirectional, "gru",
                            use_bias=use_bias)


def simple_rnn_weights_from_keras(keras_weights: Sequence[Any], *, dtype: Any = None) -> Array:
    """Flat simple-RNN weights from the weights of Keras 3 ``keras.layers.SimpleRNN`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, H), recurrent_kernel (H, H), bias (H,)]`` and computes
    ``h' = activation(x W + b + h U)``; the bias becomes ``b_ih`` (``b_hh`` is zero). The
    activation (tanh by default; pass the same as ``portable_rnn.simple_rnn(...,
    nonlinearity=...)``) is not part of the weights.

    {args}

    Examples:
      >>> import numpy as np, portable_rnn
      >>> portable_rnn.simple_rnn_weights_from_keras([np.ones((3, 4)), np.ones((4, 4))]).shape
      (36,)
    """
    return weights_from_keras(keras_weights, "simple_rnn", dtype)


def simple_rnn_weights_to_keras(weights: Array, input_size: int, hidden_size: int,
                                num_layers: int, bidirectional: bool, *,
                                use_bias: bool = True) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.SimpleRNN`` layers from flat simple-RNN weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets
    ``[kernel (I or D*H, H), recurrent_kernel (H, H), bias (H,)]`` with ``bias = b_ih + b_hh``.

    {args}

    Examples:
      >>> import jax, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.simple_rnn_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 4), (4, 4), (4,)]
    """
    return weights_to_keras(weights, input_size, hidden_size, num_layers, bidirectional,
                            "simple_rnn", use_bias=use_bias)


def _keras_docs():
    gru_raises = (", or a GRU's bias has shape (3H,): a ``reset_after=False`` layer, whose "
                  "formula differs.")
    for family, layer in KERAS_LAYERS.items():
        f_from = globals()[f"{family}_weights_from_keras"]
        f_to = globals()[f"{family}_weights_to_keras"]
        f_from.__doc__ = f_from.__doc__.replace("{args}", _FROM_ARGS.replace(
            "{unpack}", f"unpack_{family}_weights").replace(
            "{raises}", gru_raises if family == "gru" else "."))
        lstm = family == "lstm"
        proj = ("\n      proj_size: must be 0: a projection (PyTorch's ``proj_size``) has no Keras "
                "counterpart." if lstm else "")
        proj_raises = ("\n      ValueError: ``proj_size > 0``: Keras' LSTM has no projection "
                       "(``W_hr``)." if lstm else "")
        f_to.__doc__ = f_to.__doc__.replace("{args}", _TO_ARGS.replace("{proj}", proj).replace(
            "{proj_raises}", proj_raises).replace("{layer}", layer))


_keras_docs()

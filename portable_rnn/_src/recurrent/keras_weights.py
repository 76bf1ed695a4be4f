"""Keras 3 weight lists of LSTM, GRU and SimpleRNN layers, to and from the flat cuDNN vector.

A Keras recurrent layer's ``get_weights()`` is ``[kernel (I, G*H), recurrent_kernel (H, G*H),
bias]`` (no bias with ``use_bias=False``): the kernels are the transposes of ``W_ih`` and
``W_hh``, gate blocks along their last axis. Per layer:

- ``LSTM``: gates i, f, c, o (ours i, f, g, o: the same order); one bias (4H,).
- ``GRU`` with ``reset_after=True`` (Keras' default): gates z, r, h (ours r, z, n: the first two
  swapped); bias (2, 3H), row 0 the input bias, row 1 the recurrent bias. Its equations are
  PyTorch's: ``hh = tanh(x W_h + b_h + r * (h U_h + b'_h))``, ``h' = z * h + (1 - z) * hh``.
  ``reset_after=False`` (bias (3H,)) applies r to ``h`` before ``U_h``, another function: the
  classic GRU's family, gates z, r, h as Keras'.
- ``SimpleRNN``: one block; bias (H,).

A ``keras.layers.Bidirectional`` lists the forward layer's weights, then the backward layer's.
Keras is not imported here.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from .cell import Family
from .convert import to_numpy
from .families import with_gates
from .layout import pack, param_shapes, peer_directions, unpack

Array = jax.Array


def _bias_shape(family: Family, hidden_size: int) -> tuple[int, ...]:
    G = family.gates * hidden_size
    return (2, G) if family.keras_bias_rows == 2 else (G,)


def _bias_legend(family: Family) -> str:
    """The Keras bias's shape in words, ``(2, 3*H)`` or ``(3*H,)``."""
    g = f"{family.gates}*H" if family.gates > 1 else "H"
    return f"(2, {g})" if family.keras_bias_rows == 2 else f"({g},)"


def _legend(family: Family) -> str:
    """The expected list, e.g. ``[kernel (I, 3*H), recurrent_kernel (H, 3*H), bias (2, 3*H)]``."""
    g = f"{family.gates}*H" if family.gates > 1 else "H"
    return f"[kernel (I, {g}), recurrent_kernel (H, {g}), bias {_bias_legend(family)}]"


def _config(family: Family) -> str:
    """The Keras configuration a family computes, ``reset_after=True`` (empty: any)."""
    return ", ".join(f"{k}={v!r}" for k, v in family.keras_config.items())


def _converters(families) -> str:
    """Each family's converter from Keras, with the configuration it reads where it has one:
    ``gru_weights_from_keras (reset_after=True) or classic_gru_weights_from_keras (...)``."""
    return " or ".join(f"{f.name}_weights_from_keras"
                       + (f" ({_config(f)})" if f.keras_config and len(families) > 1 else "")
                       for f in families)


def permute_gates(a: np.ndarray, family: Family) -> np.ndarray:
    """Reorders the gate blocks of axis 0 between Keras' order and ours (either way; NumPy or
    JAX arrays)."""
    order = family.keras_order
    blocks = a.reshape((len(order), -1) + a.shape[1:])
    return blocks[np.asarray(order)].reshape(a.shape)


def _keras_numpy(a) -> np.ndarray:
    if hasattr(a, "path") and hasattr(a, "value"):  # a keras.Variable (from `layer.weights`)
        a = a.value
    return to_numpy(a)


def _is_array(a) -> bool:
    return hasattr(a, "shape") and hasattr(a, "dtype")


def direction(arrays: list[np.ndarray], where: str, family: Family):
    """(W_ih, W_hh, b_ih, b_hh) in our layout from one direction's Keras arrays."""
    name, G = family.peer("keras_layer", "Keras"), family.gates
    kernel, recurrent = arrays[0], arrays[1]
    if recurrent.ndim != 2 or recurrent.shape[1] != G * recurrent.shape[0]:
        hint = ""
        if recurrent.ndim == 2 and recurrent.shape[0]:
            ratio, rest = divmod(recurrent.shape[1], recurrent.shape[0])
            others = [f for f in with_gates(ratio) if f is not family and f.keras_layer]
            if not rest and others:
                layers = " or ".join(dict.fromkeys(f.keras_layer for f in others))
                hint = f" (it looks like a Keras {layers}: use {_converters(others)})"
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
        variants = [f for f in with_gates(G) if f is not family and f.keras_layer == name
                    and _bias_shape(f, H) == bias.shape]
        if bias.shape != expected and variants:  # another family's configuration of the layer
            raise ValueError(
                f"{where} bias has shape {_bias_legend(variants[0])}={bias.shape}: a Keras "
                f"{name} with {_config(variants[0])}, which computes {variants[0].display}, "
                f"not {family.display} ({family.name}: {_config(family)}); convert it with "
                f"{_converters(variants)} and run it with {variants[0].name}.")
        if bias.shape != expected:
            raise ValueError(f"{where} bias must have shape {expected} for a Keras {name} "
                             f"(H={H} from recurrent_kernel); got {bias.shape}.")
        if family.keras_bias_rows == 2:
            b_ih, b_hh = permute_gates(bias[0], family), permute_gates(bias[1], family)
        else:
            b_ih = permute_gates(bias, family)
    return (permute_gates(kernel.T, family), permute_gates(recurrent.T, family), b_ih, b_hh)


def keras_layout(keras_weights, family: Family):
    """``({name: per-pseudo-layer list}, (input_size, hidden_size, num_layers, bidirectional,
    proj_size))`` of Keras weight lists (see `lstm_weights_from_keras`); ``proj_size`` is 0."""
    name = family.peer("keras_layer", "Keras")
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
            pseudo.append(direction(arrays[d * half:(d + 1) * half], where + part, family))
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
    num_directions = peer_directions(input_size, hidden_size, num_layers, bidirectional, family,
                                     proj_size, "keras_layer", "Keras",
                                     f"keras.layers.{family.keras_layer}")
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
            arrays += [permute_gates(w_ih, family).T, permute_gates(w_hh, family).T]
            if not use_bias:
                for n, b in (("b_ih", b_ih), ("b_hh", b_hh)):
                    if np.any(b):
                        side = ("forward", "reverse")[p % num_directions]
                        raise ValueError(
                            f"`use_bias`=False, but `{n}[{p}]` (layer {layer}, {side}) is "
                            f"not zero (max |{n}[{p}]| = {np.max(np.abs(b)):.3g}): a Keras "
                            "layer with use_bias=False has no bias to hold it; pass "
                            "use_bias=True.")
            elif family.keras_bias_rows == 2:
                arrays.append(np.stack([permute_gates(b_ih, family),
                                        permute_gates(b_hh, family)]))
            else:  # one bias: b_ih + b_hh add up before the nonlinearity
                arrays.append(permute_gates(b_ih + b_hh, family))
        out.append(arrays)
    return out



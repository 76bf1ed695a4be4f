"""The flat cuDNN LSTM weight vector of `jax.experimental.rnn`, and converters.

Layout (bit-compatible with `jax.experimental.rnn`): for pseudo-layers ``p = 2 * layer + direction``
(``direction`` 0 forward, 1 reverse), first every ``W_ih[p]`` (4H, in) followed by ``W_hh[p]``
(4H, H), then every ``b_ih[p]`` (4H,) followed by ``b_hh[p]`` (4H,). Gates are stacked i, f, g, o.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _checks

Array = jax.Array


def _check_sizes(input_size, hidden_size, num_layers, bidirectional) -> int:
    for name, value, low in (("input_size", input_size, 1), ("hidden_size", hidden_size, 1),
                             ("num_layers", num_layers, 1)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
            raise ValueError(f"`{name}` must be an integer >= {low}; got {value!r}.")
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"`bidirectional` must be a bool; got {bidirectional!r}.")
    return 2 if bidirectional else 1


def _param_shapes(input_size, hidden_size, num_layers, bidirectional):
    """(W_ih, W_hh, b_ih, b_hh) shapes per pseudo-layer, in pseudo-layer order."""
    num_directions = _check_sizes(input_size, hidden_size, num_layers, bidirectional)
    shapes = []
    for p in range(num_layers * num_directions):
        in_size = input_size if p < num_directions else num_directions * hidden_size
        shapes.append(((4 * hidden_size, in_size), (4 * hidden_size, hidden_size),
                       (4 * hidden_size,), (4 * hidden_size,)))
    return shapes


def get_num_params_in_lstm(input_size: int, hidden_size: int, num_layers: int,
                           bidirectional: bool) -> int:
    """Length of the flat weight vector of an LSTM (as `jax.experimental.rnn`)."""
    shapes = _param_shapes(input_size, hidden_size, num_layers, bidirectional)
    return sum(math.prod(s) for layer in shapes for s in layer)


def init_lstm_weight(rng: Array, input_size: int, hidden_size: int, num_layers: int,
                     bidirectional: bool, dtype: Any = jnp.float32) -> Array:
    """Flat weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch and `jax.experimental.rnn`.

    With the default ``dtype`` the result is bit-identical to
    ``jax.experimental.rnn.init_lstm_weight`` for the same key.
    """
    n = get_num_params_in_lstm(input_size, hidden_size, num_layers, bidirectional)
    _checks.prng_key("rng", rng)
    _checks.floating("dtype", np.dtype(dtype))
    k = np.sqrt(1.0 / hidden_size)
    return jax.random.uniform(rng, (n,), jnp.float32, minval=-k, maxval=k).astype(dtype)


def unpack_lstm_weights(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                        bidirectional: bool) -> tuple[dict[int, Array], ...]:
    """Split the flat vector into ``(W_ih, W_hh, b_ih, b_hh)``, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (4H, in), ``W_hh[p]`` (4H, H), ``b_ih[p]`` and ``b_hh[p]`` (4H,), gates i, f, g,
    o;
    pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else ``p = layer``.
    Identical to ``jax.experimental.rnn.unpack_lstm_weights``.
    """
    shapes = _param_shapes(input_size, hidden_size, num_layers, bidirectional)
    expected = sum(math.prod(s) for layer in shapes for s in layer)
    weights = _checks.array("weights", weights)
    if weights.shape != (expected,):
        raise ValueError(
            f"`weights` must have shape (get_num_params_in_lstm(...),)=({expected},) for "
            f"input_size={input_size}, hidden_size={hidden_size}, num_layers={num_layers}, "
            f"bidirectional={bidirectional}; got {weights.shape}.")
    out: tuple[dict[int, Array], ...] = ({}, {}, {}, {})
    offset = 0
    for kinds in ((0, 1), (2, 3)):  # all matrices first, then all biases
        for p, layer in enumerate(shapes):
            for k in kinds:
                n = math.prod(layer[k])
                out[k][p] = weights[offset:offset + n].reshape(layer[k])
                offset += n
    return out


def layer_weights(weights: Array, layer: int, input_size: int, hidden_size: int,
                  num_layers: int, bidirectional: bool) -> Array:
    """The flat weights of the single-layer LSTM that is layer `layer` of a stack."""
    groups = unpack_lstm_weights(weights, input_size, hidden_size, num_layers, bidirectional)
    num_directions = 2 if bidirectional else 1
    ps = range(layer * num_directions, (layer + 1) * num_directions)
    in_size = input_size if layer == 0 else num_directions * hidden_size
    return pack_lstm_weights(*[[g[p] for p in ps] for g in groups], in_size, hidden_size, 1,
                             bidirectional)


def pack_lstm_weights(W_ih, W_hh, b_ih, b_hh, input_size: int, hidden_size: int,
                      num_layers: int, bidirectional: bool) -> Array:
    """Inverse of `unpack_lstm_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros).
    """
    shapes = _param_shapes(input_size, hidden_size, num_layers, bidirectional)
    n_pseudo = len(shapes)
    names = ("W_ih", "W_hh", "b_ih", "b_hh")
    groups = []
    for k, (name, group) in enumerate(zip(names, (W_ih, W_hh, b_ih, b_hh))):
        if group is None and k >= 2:
            group = [None] * n_pseudo
        if hasattr(group, "shape") or not isinstance(group, (Mapping, Sequence)):
            what = (f"an array of shape {group.shape}" if hasattr(group, "shape")
                    else type(group).__name__)
            raise TypeError(f"`{name}` must be a sequence or dict of {n_pseudo} arrays (one per "
                            f"pseudo-layer); got {what}.")
        if isinstance(group, Mapping):
            if sorted(group) != list(range(n_pseudo)):
                raise ValueError(f"`{name}` must have keys 0..{n_pseudo - 1} (one per "
                                 "pseudo-layer); "
                                 f"got {sorted(group)}.")
            group = [group[p] for p in range(n_pseudo)]
        if len(group) != n_pseudo:
            raise ValueError(f"`{name}` must hold {n_pseudo} arrays (one per pseudo-layer); "
                             f"got {len(group)}.")
        arrays = []
        for p, a in enumerate(group):
            shape = shapes[p][k]
            if a is not None:
                a = _checks.array(f"{name}[{p}]", a)
                if a.shape != shape:
                    raise ValueError(f"`{name}[{p}]` must have shape {shape}; got {a.shape}.")
            arrays.append((shape, a))
        groups.append(arrays)
    dtypes = {a.dtype for g in groups for _, a in g if a is not None}
    if len(dtypes) != 1:
        raise TypeError("`W_ih`, `W_hh`, `b_ih` and `b_hh` must have one dtype; got "
                        f"{sorted(map(str, dtypes))}.")
    dtype = dtypes.pop()
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError("`W_ih`, `W_hh`, `b_ih` and `b_hh` must have a floating dtype; got "
                        f"{dtype}.")
    groups = [[jnp.zeros(shape, dtype) if a is None else a for shape, a in g] for g in groups]
    flat = [a.astype(dtype).reshape(-1) for kinds in ((0, 1), (2, 3))
            for p in range(n_pseudo) for a in (groups[kinds[0]][p], groups[kinds[1]][p])]
    return jnp.concatenate(flat)


# --- PyTorch nn.LSTM state_dict ---------------------------------------------------------------

_TORCH_KEY = re.compile(r"(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)(_reverse)?$")


def _to_numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch.Tensor, without importing torch
        a = a.detach().cpu()
        if str(a.dtype) == "torch.bfloat16":
            a = a.float()
    return np.asarray(a)


def torch_layout(state_dict: Mapping[str, Any], prefix: str = ""):
    """Per-pseudo-layer ``(W_ih, W_hh, b_ih, b_hh)`` lists (biases may be None) and the sizes
    ``(input_size, hidden_size, num_layers, bidirectional)`` of a PyTorch ``nn.LSTM`` state_dict."""
    if not isinstance(state_dict, Mapping):
        raise TypeError("`state_dict` must be a mapping (e.g. `module.state_dict()`); got "
                        f"{type(state_dict).__name__}.")
    found: dict[tuple[str, int, int], np.ndarray] = {}
    for key, value in state_dict.items():
        if not key.startswith(prefix):
            continue
        m = _TORCH_KEY.fullmatch(key[len(prefix):])
        if m is None:
            if key[len(prefix):].startswith("weight_hr"):
                raise ValueError("`state_dict` holds an LSTM with proj_size > 0 "
                                 f"({key!r}); projections are not supported.")
            continue
        found[(m.group(1), int(m.group(2)), 1 if m.group(3) else 0)] = _to_numpy(value)
    if not found:
        raise ValueError(f"`state_dict` holds no nn.LSTM weights under prefix {prefix!r}; expected "
                         f"keys like {prefix}weight_ih_l0; got {list(state_dict)[:6]}.")
    num_layers = 1 + max(layer for _, layer, _ in found)
    bidirectional = any(d == 1 for _, _, d in found)
    for kind in ("weight_ih", "weight_hh"):
        if (kind, 0, 0) not in found:
            raise ValueError(f"`state_dict` is missing {prefix}{kind}_l0.")
        if found[(kind, 0, 0)].ndim != 2:
            raise ValueError(f"`state_dict[{prefix + kind + '_l0'!r}]` must be 2-D (4*hidden_size, "
                             f"features); got shape {found[(kind, 0, 0)].shape}.")
    hidden_size = found[("weight_hh", 0, 0)].shape[1]
    input_size = found[("weight_ih", 0, 0)].shape[1]
    has_bias = any(kind.startswith("bias") for kind, _, _ in found)
    num_directions = 2 if bidirectional else 1
    shapes = _param_shapes(input_size, hidden_size, num_layers, bidirectional)
    groups: list[list] = [[], [], [], []]
    for layer in range(num_layers):
        for d in range(num_directions):
            for k, kind in enumerate(("weight_ih", "weight_hh", "bias_ih", "bias_hh")):
                key = f"{prefix}{kind}_l{layer}{'_reverse' if d else ''}"
                if (kind, layer, d) not in found:
                    if kind.startswith("bias") and not has_bias:
                        groups[k].append(None)
                        continue
                    raise ValueError(f"`state_dict` is missing {key!r}.")
                value, shape = found[(kind, layer, d)], shapes[layer * num_directions + d][k]
                if value.shape != shape:
                    raise ValueError(
                        f"`state_dict[{key!r}]` must have shape {shape} (input_size={input_size}, "
                        f"hidden_size={hidden_size}, from {prefix}weight_ih_l0 and "
                        f"{prefix}weight_hh_l0); got {value.shape}.")
                groups[k].append(value)
    return groups, (input_size, hidden_size, num_layers, bidirectional)


def lstm_weights_from_torch(state_dict: Mapping[str, Any], *, prefix: str = "",
                            dtype: Any = None) -> Array:
    """Flat weights from a PyTorch ``nn.LSTM`` state_dict (tensors or arrays; torch not needed).

    Sizes, layer count and direction count are read from the keys and shapes. ``prefix`` selects
    one LSTM inside a bigger model's state_dict (e.g. ``"encoder.lstm."``). Without biases
    (``bias=False``) zeros are used. ``proj_size`` LSTMs are not supported.
    """
    groups, sizes = torch_layout(state_dict, prefix)
    flat = pack_lstm_weights(*groups, *sizes)
    return flat if dtype is None else flat.astype(dtype)


def lstm_weights_to_torch(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                          bidirectional: bool, *, prefix: str = "") -> dict[str, np.ndarray]:
    """A PyTorch ``nn.LSTM`` state_dict (NumPy arrays) from the flat weights.

    Load it with ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.
    """
    W_ih, W_hh, b_ih, b_hh = unpack_lstm_weights(jnp.asarray(weights), input_size, hidden_size,
                                                 num_layers, bidirectional)
    num_directions = 2 if bidirectional else 1
    out = {}
    for p in range(num_layers * num_directions):
        suffix = f"_l{p // num_directions}{'_reverse' if p % num_directions else ''}"
        for kind, group in (("weight_ih", W_ih), ("weight_hh", W_hh), ("bias_ih", b_ih),
                            ("bias_hh", b_hh)):
            out[f"{prefix}{kind}{suffix}"] = np.asarray(group[p])
    return out


# --- Flax nn.RNN(nn.OptimizedLSTMCell | nn.LSTMCell) params ----------------------------------

_FLAX_GATES = "ifgo"


def _flax_cell(tree: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """Finds the cell dict ({'ii': ..., 'hi': ...}) inside an nn.RNN / cell param tree."""
    if "params" in tree:
        tree = tree["params"]
    if "cell" in tree:
        tree = tree["cell"]
    missing = [f"{s}{g}" for s in "ih" for g in _FLAX_GATES if f"{s}{g}" not in tree]
    if missing:
        raise ValueError(f"{where} is not an LSTMCell/OptimizedLSTMCell parameter tree: missing "
                         f"{missing}; got keys {sorted(tree)}.")
    return tree


def _flax_layer(cell: Mapping[str, Any]):
    """(W_ih, W_hh, b_ih, b_hh) in the cuDNN layout from one Flax LSTM cell."""
    w_ih = np.concatenate([_to_numpy(cell[f"i{g}"]["kernel"]) for g in _FLAX_GATES], -1).T
    w_hh = np.concatenate([_to_numpy(cell[f"h{g}"]["kernel"]) for g in _FLAX_GATES], -1).T
    b_hh = np.concatenate([_to_numpy(cell[f"h{g}"]["bias"]) for g in _FLAX_GATES], -1)
    return w_ih, w_hh, np.zeros_like(b_hh), b_hh


def flax_layout(params):
    """Per-pseudo-layer ``(W_ih, W_hh, b_ih, b_hh)`` lists and the sizes of Flax LSTM params
    (see `lstm_weights_from_flax` for the accepted trees)."""
    layers = [params] if isinstance(params, Mapping) else params
    if not isinstance(layers, (list, tuple)) or not all(isinstance(p, Mapping) for p in layers):
        raise TypeError("`params` must be a Flax parameter dict or a list of them (one per "
                        f"layer); got {type(params).__name__}.")
    if not layers:
        raise ValueError("`params` must hold at least one layer; got an empty sequence.")
    pseudo = []
    for n, layer in enumerate(layers):
        tree = layer.get("params", layer)
        if "forward_rnn" in tree or "backward_rnn" in tree:
            for part in ("forward_rnn", "backward_rnn"):
                if part not in tree:
                    raise ValueError(f"`params` layer {n} is an nn.Bidirectional tree without "
                                     f"{part!r}; got keys {sorted(tree)}.")
                pseudo.append(_flax_layer(_flax_cell(tree[part], f"`params` layer {n} {part}")))
        else:
            pseudo.append(_flax_layer(_flax_cell(tree, f"`params` layer {n}")))
    num_directions = len(pseudo) // len(layers)
    if len(pseudo) != num_directions * len(layers):
        raise ValueError("`params` mixes bidirectional and unidirectional layers.")
    hidden_size = pseudo[0][1].shape[1]
    input_size = pseudo[0][0].shape[1]
    groups = [list(g) for g in zip(*pseudo)]
    return groups, (input_size, hidden_size, len(layers), num_directions == 2)


def lstm_weights_from_flax(params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Array:
    """Flat weights from Flax ``nn.RNN(nn.OptimizedLSTMCell | nn.LSTMCell)`` parameters.

    ``params`` is one layer's tree (``{'params': {'cell': ...}}``, ``{'cell': ...}`` or the cell
    dict itself), an ``nn.Bidirectional`` tree (``{'forward_rnn': ..., 'backward_rnn': ...}``),
    or a sequence of those for stacked layers (first layer first). Flax cells have a single
    (hidden) bias; it becomes ``b_hh`` and ``b_ih`` is zero.
    """
    groups, sizes = flax_layout(params)
    return pack_lstm_weights(*groups, *sizes)

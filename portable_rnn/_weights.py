"""The flat cuDNN weight vectors of the recurrent family, and converters.

Layout (for the LSTM bit-compatible with `jax.experimental.rnn`): for pseudo-layers
``p = 2 * layer + direction`` (``direction`` 0 forward, 1 reverse), first every ``W_ih[p]``
(G*H, in) followed by ``W_hh[p]`` (G*H, H), then every ``b_ih[p]`` (G*H,) followed by ``b_hh[p]``
(G*H,). Gates are stacked as in PyTorch and cuDNN: LSTM i, f, g, o (G=4); GRU r, z, n (G=3);
simple RNN one block (G=1). An LSTM with a projection (``proj_size=P``) has ``W_hh[p]`` (4H, P) and
stores its ``W_hr[p]`` (P, H) right after ``W_hh[p]``; layers past the first read D*P features.
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


GATES = {"lstm": 4, "gru": 3, "simple_rnn": 1}
# Per family: the gate blocks of every matrix and bias, in PyTorch's (and cuDNN's) order.
GATE_NAMES = {"lstm": "i, f, g, o", "gru": "r, z, n", "simple_rnn": "a single block"}
NAMES = ("W_ih", "W_hh", "b_ih", "b_hh", "W_hr")  # W_hr only for an LSTM with proj_size > 0


def _check_sizes(input_size, hidden_size, num_layers, bidirectional, proj_size=0) -> int:
    for name, value, low in (("input_size", input_size, 1), ("hidden_size", hidden_size, 1),
                             ("num_layers", num_layers, 1), ("proj_size", proj_size, 0)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
            raise ValueError(f"`{name}` must be an integer >= {low}; got {value!r}.")
    if proj_size >= hidden_size:
        raise ValueError(f"`proj_size` must be smaller than `hidden_size`={hidden_size} (as in "
                         f"PyTorch); got {proj_size}.")
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"`bidirectional` must be a bool; got {bidirectional!r}.")
    return 2 if bidirectional else 1


def param_shapes(input_size, hidden_size, num_layers, bidirectional, family="lstm",
                 proj_size=0) -> list[dict[str, tuple[int, ...]]]:
    """Per pseudo-layer, the shape of each parameter in `NAMES` (W_hr only with a projection)."""
    num_directions = _check_sizes(input_size, hidden_size, num_layers, bidirectional, proj_size)
    G = GATES[family] * hidden_size
    out_size = proj_size or hidden_size
    shapes = []
    for p in range(num_layers * num_directions):
        in_size = input_size if p < num_directions else num_directions * out_size
        s = dict(W_ih=(G, in_size), W_hh=(G, out_size), b_ih=(G,), b_hh=(G,))
        if proj_size:
            s["W_hr"] = (proj_size, hidden_size)
        shapes.append(s)
    return shapes


def _flat_order(shapes):
    """(pseudo-layer, name) in the flat vector's order: all matrices, then all biases."""
    return ([(p, n) for p, s in enumerate(shapes) for n in ("W_ih", "W_hh", "W_hr") if n in s] +
            [(p, n) for p in range(len(shapes)) for n in ("b_ih", "b_hh")])


def num_params(input_size, hidden_size, num_layers, bidirectional, family="lstm",
               proj_size=0) -> int:
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family, proj_size)
    return sum(math.prod(shapes[p][n]) for p, n in _flat_order(shapes))


def init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype, family="lstm",
                proj_size=0) -> Array:
    n = num_params(input_size, hidden_size, num_layers, bidirectional, family, proj_size)
    _checks.prng_key("rng", rng)
    _checks.floating("dtype", np.dtype(dtype))
    k = np.sqrt(1.0 / hidden_size)
    return jax.random.uniform(rng, (n,), jnp.float32, minval=-k, maxval=k).astype(dtype)


def unpack(weights, input_size, hidden_size, num_layers, bidirectional, family="lstm",
           proj_size=0) -> dict[str, dict[int, Array]]:
    """``{name: {pseudo-layer: array}}`` for the names in `NAMES` the layout has."""
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family, proj_size)
    order = _flat_order(shapes)
    expected = sum(math.prod(shapes[p][n]) for p, n in order)
    weights = _checks.array("weights", weights)
    if weights.shape != (expected,):
        extra = f", proj_size={proj_size}" if proj_size else ""
        raise ValueError(
            f"`weights` must have shape (get_num_params_in_{family}(...),)=({expected},) for "
            f"input_size={input_size}, hidden_size={hidden_size}, num_layers={num_layers}, "
            f"bidirectional={bidirectional}{extra}; got {weights.shape}.")
    out: dict[str, dict[int, Array]] = {n: {} for n in shapes[0]}
    offset = 0
    for p, n in order:
        size = math.prod(shapes[p][n])
        out[n][p] = weights[offset:offset + size].reshape(shapes[p][n])
        offset += size
    return out


def pack(groups: Mapping[str, Any], input_size, hidden_size, num_layers, bidirectional,
         family="lstm", proj_size=0) -> Array:
    """The flat vector from ``{name: per-pseudo-layer arrays}`` (biases may be None: zeros)."""
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family, proj_size)
    n_pseudo = len(shapes)
    checked: dict[str, list] = {}
    for name in shapes[0]:
        group = groups.get(name)
        if group is None and name.startswith("b"):
            group = [None] * n_pseudo
        if hasattr(group, "shape") or not isinstance(group, (Mapping, Sequence)):
            what = (f"an array of shape {group.shape}" if hasattr(group, "shape")
                    else type(group).__name__)
            raise TypeError(f"`{name}` must be a sequence or dict of {n_pseudo} arrays (one per "
                            f"pseudo-layer); got {what}.")
        if isinstance(group, Mapping):
            if sorted(group) != list(range(n_pseudo)):
                raise ValueError(f"`{name}` must have keys 0..{n_pseudo - 1} (one per "
                                 f"pseudo-layer); got {sorted(group)}.")
            group = [group[p] for p in range(n_pseudo)]
        if len(group) != n_pseudo:
            raise ValueError(f"`{name}` must hold {n_pseudo} arrays (one per pseudo-layer); "
                             f"got {len(group)}.")
        arrays = []
        for p, a in enumerate(group):
            if a is not None:
                a = _checks.array(f"{name}[{p}]", a)
                if a.shape != shapes[p][name]:
                    raise ValueError(f"`{name}[{p}]` must have shape {shapes[p][name]}; got "
                                     f"{a.shape}.")
            arrays.append(a)
        checked[name] = arrays
    dtypes = {a.dtype for g in checked.values() for a in g if a is not None}
    listed = [f"`{n}`" for n in checked]
    names = ", ".join(listed[:-1]) + " and " + listed[-1]
    if len(dtypes) != 1:
        raise TypeError(f"{names} must have one dtype; got {sorted(map(str, dtypes))}.")
    dtype = dtypes.pop()
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{names} must have a floating dtype; got {dtype}.")
    flat = [(jnp.zeros(shapes[p][n], dtype) if checked[n][p] is None else checked[n][p])
            .reshape(-1) for p, n in _flat_order(shapes)]
    return jnp.concatenate(flat)


def get_num_params_in_lstm(input_size: int, hidden_size: int, num_layers: int,
                           bidirectional: bool, proj_size: int = 0) -> int:
    """Length of the flat weight vector of an LSTM (as `jax.experimental.rnn` for proj_size=0)."""
    return num_params(input_size, hidden_size, num_layers, bidirectional, "lstm", proj_size)


def init_lstm_weight(rng: Array, input_size: int, hidden_size: int, num_layers: int,
                     bidirectional: bool, dtype: Any = jnp.float32, *,
                     proj_size: int = 0) -> Array:
    """Flat weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch and `jax.experimental.rnn`.

    With the default ``dtype`` (and no projection) the result is bit-identical to
    ``jax.experimental.rnn.init_lstm_weight`` for the same key.
    """
    return init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype, "lstm",
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
    g = unpack(weights, input_size, hidden_size, num_layers, bidirectional, "lstm", proj_size)
    return tuple(g[n] for n in NAMES if n in g)


def pack_lstm_weights(W_ih, W_hh, b_ih, b_hh, input_size: int, hidden_size: int,
                      num_layers: int, bidirectional: bool, *, W_hr=None,
                      proj_size: int = 0) -> Array:
    """Inverse of `unpack_lstm_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros). ``W_hr`` is required with ``proj_size``.
    """
    groups = dict(W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh, W_hr=W_hr)
    return pack(groups, input_size, hidden_size, num_layers, bidirectional, "lstm", proj_size)


def get_num_params_in_gru(input_size: int, hidden_size: int, num_layers: int,
                          bidirectional: bool) -> int:
    """Length of the flat weight vector of a GRU (gates r, z, n; cuDNN/PyTorch layout)."""
    return num_params(input_size, hidden_size, num_layers, bidirectional, "gru")


def init_gru_weight(rng: Array, input_size: int, hidden_size: int, num_layers: int,
                    bidirectional: bool, dtype: Any = jnp.float32) -> Array:
    """Flat GRU weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's ``nn.GRU``."""
    return init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype, "gru")


def unpack_gru_weights(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                       bidirectional: bool) -> tuple[dict[int, Array], ...]:
    """``(W_ih, W_hh, b_ih, b_hh)`` per pseudo-layer: (3H, in), (3H, H), (3H,), (3H,); gates r, z,
    n, as PyTorch ``nn.GRU`` (the flat order is the LSTM's: all matrices, then all biases)."""
    g = unpack(weights, input_size, hidden_size, num_layers, bidirectional, "gru")
    return tuple(g[n] for n in NAMES[:4])


def pack_gru_weights(W_ih, W_hh, b_ih, b_hh, input_size: int, hidden_size: int,
                     num_layers: int, bidirectional: bool) -> Array:
    """Inverse of `unpack_gru_weights` (biases may be None: zeros)."""
    groups = dict(W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh)
    return pack(groups, input_size, hidden_size, num_layers, bidirectional, "gru")


def get_num_params_in_simple_rnn(input_size: int, hidden_size: int, num_layers: int,
                                 bidirectional: bool) -> int:
    """Length of the flat weight vector of a simple (Elman) RNN, as PyTorch ``nn.RNN``."""
    return num_params(input_size, hidden_size, num_layers, bidirectional, "simple_rnn")


def init_simple_rnn_weight(rng: Array, input_size: int, hidden_size: int, num_layers: int,
                           bidirectional: bool, dtype: Any = jnp.float32) -> Array:
    """Flat simple-RNN weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's ``nn.RNN``."""
    return init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype,
                       "simple_rnn")


def unpack_simple_rnn_weights(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                              bidirectional: bool) -> tuple[dict[int, Array], ...]:
    """``(W_ih, W_hh, b_ih, b_hh)`` per pseudo-layer: (H, in), (H, H), (H,), (H,)."""
    g = unpack(weights, input_size, hidden_size, num_layers, bidirectional, "simple_rnn")
    return tuple(g[n] for n in NAMES[:4])


def pack_simple_rnn_weights(W_ih, W_hh, b_ih, b_hh, input_size: int, hidden_size: int,
                            num_layers: int, bidirectional: bool) -> Array:
    """Inverse of `unpack_simple_rnn_weights` (biases may be None: zeros)."""
    groups = dict(W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh)
    return pack(groups, input_size, hidden_size, num_layers, bidirectional, "simple_rnn")


def layer_weights(weights: Array, layer: int, input_size: int, hidden_size: int,
                  num_layers: int, bidirectional: bool) -> Array:
    """The flat weights of the single-layer LSTM that is layer `layer` of a stack."""
    groups = unpack(weights, input_size, hidden_size, num_layers, bidirectional)
    num_directions = 2 if bidirectional else 1
    ps = range(layer * num_directions, (layer + 1) * num_directions)
    in_size = input_size if layer == 0 else num_directions * hidden_size
    return pack({n: [g[p] for p in ps] for n, g in groups.items()}, in_size, hidden_size, 1,
                bidirectional)


# --- PyTorch nn.LSTM state_dict ---------------------------------------------------------------

_TORCH_KEY = re.compile(r"(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$")
_TORCH_NAMES = dict(W_ih="weight_ih", W_hh="weight_hh", b_ih="bias_ih", b_hh="bias_hh",
                    W_hr="weight_hr")
TORCH_MODULES = {"lstm": "nn.LSTM", "gru": "nn.GRU", "simple_rnn": "nn.RNN"}


def _to_numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch.Tensor, without importing torch
        a = a.detach().cpu()
        if str(a.dtype) == "torch.bfloat16":
            a = a.float()
    return np.asarray(a)


def torch_layout(state_dict: Mapping[str, Any], prefix: str = "", family: str = "lstm"):
    """``({name: per-pseudo-layer list}, (input_size, hidden_size, num_layers, bidirectional,
    proj_size))`` of a PyTorch ``nn.LSTM``/``nn.GRU``/``nn.RNN`` state_dict (biases may be None)."""
    module = TORCH_MODULES[family]
    if not isinstance(state_dict, Mapping):
        raise TypeError("`state_dict` must be a mapping (e.g. `module.state_dict()`); got "
                        f"{type(state_dict).__name__}.")
    found: dict[tuple[str, int, int], np.ndarray] = {}
    for key, value in state_dict.items():
        if not key.startswith(prefix):
            continue
        m = _TORCH_KEY.fullmatch(key[len(prefix):])
        if m is not None:
            found[(m.group(1), int(m.group(2)), 1 if m.group(3) else 0)] = _to_numpy(value)
    if not found:
        hint = ""
        prefixes = sorted({k[:k.index("weight_ih_l0")] for k in map(str, state_dict)
                           if "weight_ih_l0" in k})
        if prefixes:
            hint = f" (it has some under prefix {', '.join(map(repr, prefixes[:3]))})"
        raise ValueError(f"`state_dict` holds no {module} weights under prefix {prefix!r}{hint}; "
                         f"expected keys like {prefix}weight_ih_l0; got {list(state_dict)[:6]}.")
    for kind in ("weight_ih", "weight_hh"):
        if (kind, 0, 0) not in found:
            raise ValueError(f"`state_dict` is missing {prefix}{kind}_l0.")
        if found[(kind, 0, 0)].ndim != 2:
            raise ValueError(f"`state_dict[{prefix + kind + '_l0'!r}]` must be 2-D "
                             f"(gates*hidden_size, features); got shape "
                             f"{found[(kind, 0, 0)].shape}.")
    proj_size = 0
    if any(kind == "weight_hr" for kind, _, _ in found) and ("weight_hr", 0, 0) not in found:
        raise ValueError(f"`state_dict` has projection weights (weight_hr_l*) but is missing "
                         f"{prefix}weight_hr_l0.")
    if ("weight_hr", 0, 0) in found:
        if family != "lstm":
            raise ValueError(f"`state_dict` holds {prefix}weight_hr_l0, a projection, which only "
                             f"nn.LSTM has; this converter reads {module}.")
        proj_size, hidden_size = found[("weight_hr", 0, 0)].shape
    rows = found[("weight_hh", 0, 0)].shape[0]
    if proj_size == 0:
        hidden_size = found[("weight_hh", 0, 0)].shape[1]
    if rows != GATES[family] * hidden_size:
        got = {4: "nn.LSTM", 3: "nn.GRU", 1: "nn.RNN"}.get(rows // max(hidden_size, 1))
        guess = f" (it looks like an {got})" if got and got != module else ""
        raise ValueError(f"`state_dict[{prefix + 'weight_hh_l0'!r}]` must have "
                         f"{GATES[family]}*hidden_size rows for an {module}; got shape "
                         f"{found[('weight_hh', 0, 0)].shape}{guess}.")
    num_layers = 1 + max(layer for _, layer, _ in found)
    bidirectional = any(d == 1 for _, _, d in found)
    input_size = found[("weight_ih", 0, 0)].shape[1]
    has_bias = any(kind.startswith("bias") for kind, _, _ in found)
    num_directions = 2 if bidirectional else 1
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family, proj_size)
    groups: dict[str, list] = {n: [] for n in shapes[0]}
    for layer in range(num_layers):
        for d in range(num_directions):
            for name in shapes[0]:
                kind = _TORCH_NAMES[name]
                key = f"{prefix}{kind}_l{layer}{'_reverse' if d else ''}"
                if (kind, layer, d) not in found:
                    if kind.startswith("bias") and not has_bias:
                        groups[name].append(None)
                        continue
                    raise ValueError(f"`state_dict` is missing {key!r}.")
                value, shape = found[(kind, layer, d)], shapes[layer * num_directions + d][name]
                if value.shape != shape:
                    raise ValueError(
                        f"`state_dict[{key!r}]` must have shape {shape} (input_size={input_size}, "
                        f"hidden_size={hidden_size}, from {prefix}weight_ih_l0 and "
                        f"{prefix}weight_hh_l0); got {value.shape}.")
                groups[name].append(value)
    return groups, (input_size, hidden_size, num_layers, bidirectional, proj_size)


def weights_from_torch(state_dict, prefix, dtype, family):
    groups, sizes = torch_layout(state_dict, prefix, family)
    flat = pack(groups, *sizes[:4], family, sizes[4])
    return flat if dtype is None else flat.astype(dtype)


def weights_to_torch(weights, input_size, hidden_size, num_layers, bidirectional, prefix,
                     family, proj_size=0) -> dict[str, np.ndarray]:
    groups = unpack(jnp.asarray(weights), input_size, hidden_size, num_layers, bidirectional,
                    family, proj_size)
    num_directions = 2 if bidirectional else 1
    out = {}
    for p in range(num_layers * num_directions):
        suffix = f"_l{p // num_directions}{'_reverse' if p % num_directions else ''}"
        for name in ("W_ih", "W_hh", "b_ih", "b_hh", "W_hr"):
            if name in groups:
                out[f"{prefix}{_TORCH_NAMES[name]}{suffix}"] = np.array(groups[name][p])
    return out


def lstm_weights_from_torch(state_dict: Mapping[str, Any], *, prefix: str = "",
                            dtype: Any = None) -> Array:
    """Flat weights from a PyTorch ``nn.LSTM`` state_dict (tensors or arrays; torch not needed).

    Sizes, layer count, direction count and ``proj_size`` are read from the keys and shapes.
    ``prefix`` selects one LSTM inside a bigger model's state_dict (e.g. ``"encoder.lstm."``).
    Without biases (``bias=False``) zeros are used.
    """
    return weights_from_torch(state_dict, prefix, dtype, "lstm")


def lstm_weights_to_torch(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                          bidirectional: bool, *, prefix: str = "",
                          proj_size: int = 0) -> dict[str, np.ndarray]:
    """A PyTorch ``nn.LSTM`` state_dict (NumPy arrays) from the flat weights.

    Load it with ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.
    """
    return weights_to_torch(weights, input_size, hidden_size, num_layers, bidirectional, prefix,
                            "lstm", proj_size)


def gru_weights_from_torch(state_dict: Mapping[str, Any], *, prefix: str = "",
                           dtype: Any = None) -> Array:
    """Flat weights from a PyTorch ``nn.GRU`` state_dict (as `lstm_weights_from_torch`)."""
    return weights_from_torch(state_dict, prefix, dtype, "gru")


def gru_weights_to_torch(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                         bidirectional: bool, *, prefix: str = "") -> dict[str, np.ndarray]:
    """A PyTorch ``nn.GRU`` state_dict (NumPy arrays) from the flat weights."""
    return weights_to_torch(weights, input_size, hidden_size, num_layers, bidirectional, prefix,
                            "gru")


def simple_rnn_weights_from_torch(state_dict: Mapping[str, Any], *, prefix: str = "",
                                  dtype: Any = None) -> Array:
    """Flat weights from a PyTorch ``nn.RNN`` state_dict (the nonlinearity is not stored in it)."""
    return weights_from_torch(state_dict, prefix, dtype, "simple_rnn")


def simple_rnn_weights_to_torch(weights: Array, input_size: int, hidden_size: int,
                                num_layers: int, bidirectional: bool, *,
                                prefix: str = "") -> dict[str, np.ndarray]:
    """A PyTorch ``nn.RNN`` state_dict (NumPy arrays) from the flat weights."""
    return weights_to_torch(weights, input_size, hidden_size, num_layers, bidirectional, prefix,
                            "simple_rnn")


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
    groups = dict(zip(NAMES, (list(g) for g in zip(*pseudo))))
    return groups, (input_size, hidden_size, len(layers), num_directions == 2, 0)


def lstm_weights_from_flax(params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Array:
    """Flat weights from Flax ``nn.RNN(nn.OptimizedLSTMCell | nn.LSTMCell)`` parameters.

    ``params`` is one layer's tree (``{'params': {'cell': ...}}``, ``{'cell': ...}`` or the cell
    dict itself), an ``nn.Bidirectional`` tree (``{'forward_rnn': ..., 'backward_rnn': ...}``),
    or a sequence of those for stacked layers (first layer first). Flax cells have a single
    (hidden) bias; it becomes ``b_hh`` and ``b_ih`` is zero.
    """
    groups, sizes = flax_layout(params)
    return pack(groups, *sizes[:4])

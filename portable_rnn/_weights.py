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
           proj_size=0, *, host=False) -> dict[str, dict[int, Array]]:
    """``{name: {pseudo-layer: array}}`` for the names in `NAMES` the layout has.

    ``host=True`` (concrete weights only) slices a NumPy copy: no device op per slice.
    """
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
    if host:
        weights = np.asarray(weights)
    out: dict[str, dict[int, Array]] = {n: {} for n in shapes[0]}
    # One split rather than a slice per array: its gradient is one concatenation, which XLA
    # folds with the packing of the layers' parameters (slices' gradients are one pad each).
    ends = np.cumsum([math.prod(shapes[p][n]) for p, n in order])[:-1].tolist()
    for (p, n), part in zip(order, (np.split if host else jnp.split)(weights, ends)):
        out[n][p] = part.reshape(shapes[p][n])
    return out


def pack(groups: Mapping[str, Any], input_size, hidden_size, num_layers, bidirectional,
         family="lstm", proj_size=0, *, host=False) -> Array:
    """The flat vector from ``{name: per-pseudo-layer arrays}`` (biases may be None: zeros).

    ``host=True`` (concrete arrays only, e.g. converted checkpoints) concatenates in NumPy: no
    device op per array.
    """
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
    xp = np if host else jnp
    flat = [(xp.zeros(shapes[p][n], dtype) if checked[n][p] is None else xp.asarray(checked[n][p]))
            .reshape(-1) for p, n in _flat_order(shapes)]
    return jnp.asarray(xp.concatenate(flat))


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
        prefixes = sorted({k[:k.index("weight_ih_l0")] for k in map(str, state_dict)
                           if "weight_ih_l0" in k})
        hint = (f"; did you mean {' or '.join(f'`prefix={p!r}`' for p in prefixes[:3])}?"
                if prefixes else ".")
        raise ValueError(f"`state_dict` holds no {module} weights under prefix {prefix!r}; "
                         f"expected keys like {prefix}weight_ih_l0; got {list(state_dict)[:6]}"
                         f"{hint}")
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


# --- Flax nn.RNN(LSTMCell | OptimizedLSTMCell | GRUCell | SimpleCell) params -------------------
#
# A Flax cell is one Dense per gate and side ("i" reads x, "h" reads h): kernels (features, H),
# the transposes of our gate blocks. Per family: the Dense names of each gate in our gate order
# (input side, hidden side), and which of them have a bias. Flax gives a gate one bias where the
# two of PyTorch's add up before any nonlinearity, so reading Flax is exact, and writing Flax sums
# b_ih + b_hh there; only the GRU's n gate keeps both (b_hn is multiplied by r).

FLAX_CELLS = {"lstm": "LSTMCell/OptimizedLSTMCell", "gru": "GRUCell", "simple_rnn": "SimpleCell"}
_FLAX_DENSE = {"lstm": (("ii", "hi"), ("if", "hf"), ("ig", "hg"), ("io", "ho")),
               "gru": (("ir", "hr"), ("iz", "hz"), ("in", "hn")),
               "simple_rnn": (("i", "h"),)}
_FLAX_BIASED = {"lstm": {"hi", "hf", "hg", "ho"}, "gru": {"ir", "iz", "in", "hn"},
                "simple_rnn": {"i"}}
_ARTICLE = {"lstm": "an", "gru": "a", "simple_rnn": "a"}


def _check_family(family) -> None:
    if family not in GATES:
        raise ValueError(f"`family` must be one of {sorted(GATES)}; got {family!r}.")


def _flax_cell(tree: Any, where: str, family: str) -> Mapping[str, Any]:
    """The cell dict ({'ii': {'kernel': ...}, ...}) inside an nn.RNN / cell param tree."""
    for key in ("params", "cell"):
        if not isinstance(tree, Mapping):
            break
        tree = tree.get(key, tree)
    if not isinstance(tree, Mapping):
        raise TypeError(f"{where} must be a Flax parameter dict; got {type(tree).__name__}.")
    names = [n for gate in _FLAX_DENSE[family] for n in gate]
    missing = [n for n in names if not isinstance(tree.get(n), Mapping) or "kernel" not in tree[n]]
    missing += [f"{n}/bias" for n in names if n in _FLAX_BIASED[family] and n not in missing
                and "bias" not in tree[n]]
    if missing:
        others = [f for f in GATES if f != family
                  and all(n in tree for gate in _FLAX_DENSE[f] for n in gate)]
        hint = (f" (it looks like {_ARTICLE[others[0]]} {FLAX_CELLS[others[0]]}: use "
                f"{others[0]}_weights_from_flax)" if others else "")
        raise ValueError(f"{where} is not {_ARTICLE[family]} {FLAX_CELLS[family]} parameter "
                         f"tree: missing {missing}; got keys {sorted(tree)}{hint}.")
    extra = [n for n in names if n not in _FLAX_BIASED[family] and "bias" in tree[n]]
    if extra:
        raise ValueError(f"{where}: {extra} have a bias, which Flax's {FLAX_CELLS[family]} does "
                         f"not have (its {sorted(_FLAX_BIASED[family])} do).")
    return tree


def _flax_layer(cell: Mapping[str, Any], where: str, family: str):
    """(W_ih, W_hh, b_ih, b_hh) in the cuDNN layout from one Flax cell."""
    kernels = {n: _to_numpy(cell[n]["kernel"]) for gate in _FLAX_DENSE[family] for n in gate}
    first_i, first_h = _FLAX_DENSE[family][0]
    hidden_shape = kernels[first_h].shape
    if len(hidden_shape) != 2 or hidden_shape[0] != hidden_shape[1]:
        raise ValueError(f"{where}: {first_h}/kernel must have shape (H, H); got {hidden_shape}.")
    H = hidden_shape[0]
    input_shape = kernels[first_i].shape
    for n, k in kernels.items():
        expected = input_shape if n.startswith("i") else (H, H)
        if k.shape != expected or len(expected) != 2 or expected[1] != H:
            raise ValueError(f"{where}: {n}/kernel must have shape {expected[:1] + (H,)} "
                             f"({'(I, H)' if n.startswith('i') else '(H, H)'}, from "
                             f"{first_i}/kernel and {first_h}/kernel); got {k.shape}.")
    biases = {}
    for n in _FLAX_BIASED[family]:
        biases[n] = _to_numpy(cell[n]["bias"])
        if biases[n].shape != (H,):
            raise ValueError(f"{where}: {n}/bias must have shape (H,)=({H},); got "
                             f"{biases[n].shape}.")
    zeros = np.zeros(H, kernels[first_h].dtype)
    w_ih = np.concatenate([kernels[i] for i, _ in _FLAX_DENSE[family]], -1).T
    w_hh = np.concatenate([kernels[h] for _, h in _FLAX_DENSE[family]], -1).T
    b_ih = np.concatenate([biases.get(i, zeros) for i, _ in _FLAX_DENSE[family]], -1)
    b_hh = np.concatenate([biases.get(h, zeros) for _, h in _FLAX_DENSE[family]], -1)
    return w_ih, w_hh, b_ih, b_hh


def flax_layout(params, family: str = "lstm", *, shared_cell: bool | None = None):
    """``({name: per-pseudo-layer list}, (input_size, hidden_size, num_layers, bidirectional,
    proj_size))`` of Flax ``nn.RNN`` params of `family`'s cell (see `lstm_weights_from_flax` for
    the accepted trees); ``proj_size`` is always 0."""
    _check_family(family)
    if shared_cell is not None:
        _checks.static_bool("shared_cell", shared_cell)
    layers = [params] if isinstance(params, Mapping) else params
    if not isinstance(layers, (list, tuple)) or not all(isinstance(p, Mapping) for p in layers):
        raise TypeError("`params` must be a Flax parameter dict or a list of them (one per "
                        f"layer); got {type(params).__name__}.")
    if not layers:
        raise ValueError("`params` must hold at least one layer; got an empty sequence.")
    pseudo, directions = [], []
    for n, layer in enumerate(layers):
        tree = layer.get("params", layer)
        where = f"`params` layer {n}"
        if not isinstance(tree, Mapping) or not ("forward_rnn" in tree or "backward_rnn" in tree):
            pseudo.append(_flax_layer(_flax_cell(tree, where, family), where, family))
            directions.append(1)
            continue
        if "forward_rnn" not in tree:
            raise ValueError(f"{where} is an nn.Bidirectional tree without 'forward_rnn'; got "
                             f"keys {sorted(tree)}.")
        if "backward_rnn" not in tree and shared_cell is False:
            raise ValueError(
                f"{where} is an nn.Bidirectional tree without 'backward_rnn'; got keys "
                f"{sorted(tree)}. Flax stores the parameters of an nn.Bidirectional whose two "
                "RNNs share one cell once, under 'forward_rnn': that is what this is, unless "
                "`shared_cell=False` is right and its 'backward_rnn' was lost.")
        if "backward_rnn" in tree and shared_cell:
            raise ValueError(
                f"{where} is an nn.Bidirectional tree with a 'backward_rnn' (keys "
                f"{sorted(tree)}): its directions have cells of their own, but "
                "`shared_cell=True` says they share one; pass shared_cell=None (detect) or "
                "False.")
        for part in ("forward_rnn", "backward_rnn"):
            part_where = f"{where} {part}"
            sub = tree.get(part, tree["forward_rnn"])
            pseudo.append(_flax_layer(_flax_cell(sub, part_where, family), part_where, family))
        directions.append(2)
    if len(set(directions)) != 1:
        n = directions.index(3 - directions[0])
        raise ValueError(f"`params` mixes bidirectional and unidirectional layers: layer {n} has "
                         f"{directions[n]} direction(s), layer 0 has {directions[0]}.")
    hidden_size = pseudo[0][1].shape[1]
    input_size = pseudo[0][0].shape[1]
    groups = dict(zip(NAMES[:4], (list(g) for g in zip(*pseudo))))
    return groups, (input_size, hidden_size, len(layers), directions[0] == 2, 0)


def weights_from_flax(params, family, shared_cell=None, dtype=None) -> Array:
    groups, sizes = flax_layout(params, family, shared_cell=shared_cell)
    flat = pack(groups, *sizes[:4], family, host=True)
    return flat if dtype is None else flat.astype(dtype)


def weights_to_flax(weights, input_size, hidden_size, num_layers, bidirectional, family,
                    proj_size=0) -> list[dict[str, Any]]:
    num_directions = _check_sizes(input_size, hidden_size, num_layers, bidirectional, proj_size)
    if proj_size:
        raise ValueError(
            f"`W_hr` (proj_size={proj_size}) cannot be represented in Flax: its "
            f"{FLAX_CELLS[family]} has no projection; load these weights into "
            "portable_rnn.lstm(..., proj_size=...) or PyTorch nn.LSTM(proj_size=...) instead.")
    groups = unpack(weights, input_size, hidden_size, num_layers, bidirectional, family,
                    host=True)
    H, biased = hidden_size, _FLAX_BIASED[family]
    cells = []
    for p in range(num_layers * num_directions):
        cell: dict[str, dict[str, Array]] = {}
        for k, (i_name, h_name) in enumerate(_FLAX_DENSE[family]):
            rows = slice(k * H, (k + 1) * H)
            b_i, b_h = groups["b_ih"][p][rows], groups["b_hh"][p][rows]
            cell[i_name] = {"kernel": groups["W_ih"][p][rows].T}
            cell[h_name] = {"kernel": groups["W_hh"][p][rows].T}
            if i_name in biased and h_name in biased:
                cell[i_name]["bias"], cell[h_name]["bias"] = b_i, b_h
            else:  # one bias per gate: b_ih + b_hh add up before the nonlinearity
                cell[i_name if i_name in biased else h_name]["bias"] = b_i + b_h
        cells.append(jax.tree.map(jnp.asarray, cell))
    if not bidirectional:
        return [{"params": {"cell": c}} for c in cells]
    return [{"params": {"forward_rnn": {"cell": f}, "backward_rnn": {"cell": b}}}
            for f, b in zip(cells[::2], cells[1::2])]


_FLAX_ARGS = """Args:
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
      The flat weight vector, (P,), in the layout of `{unpack}`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold {cell} parameters (the error names the missing Dense
        layers, and the cell it looks like), a kernel or bias has the wrong shape, or layers
        disagree in sizes or directions."""

_FLAX_TO_ARGS = """Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).{proj}

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}`` (two RNNs, not
      shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN({cell})`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays in
      the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length."""


def lstm_weights_from_flax(params: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                           shared_cell: bool | None = None, dtype: Any = None) -> Array:
    """Flat LSTM weights from Flax ``nn.RNN(nn.OptimizedLSTMCell | nn.LSTMCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. The equations
    are PyTorch's (gates i, f, g, o); Flax's LSTM cells have one bias per gate, on the hidden
    Dense (``hi``, ``hf``, ``hg``, ``ho``), which becomes ``b_hh``; ``b_ih`` is zero.

    {args}

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> params = nn.RNN(nn.LSTMCell(4)).init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> portable_rnn.lstm_weights_from_flax(params).shape == (
      ...     portable_rnn.get_num_params_in_lstm(3, 4, 1, False),)
      True
    """
    return weights_from_flax(params, "lstm", shared_cell, dtype)


def lstm_weights_to_flax(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                         bidirectional: bool, *, proj_size: int = 0) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.OptimizedLSTMCell | nn.LSTMCell)`` parameters from flat LSTM weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each gate's
    ``b_ih + b_hh`` becomes the bias of its hidden Dense (``hi``, ``hf``, ``hg``, ``ho``).

    {args}
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
    return weights_to_flax(weights, input_size, hidden_size, num_layers, bidirectional, "lstm",
                           proj_size)


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

    {args}

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> rnn = nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.GRUCell(4)))
      >>> params = rnn.init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> w = portable_rnn.gru_weights_from_flax(params)
      >>> w.shape == (portable_rnn.get_num_params_in_gru(3, 4, 1, True),)
      True
    """
    return weights_from_flax(params, "gru", shared_cell, dtype)


def gru_weights_to_flax(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                        bidirectional: bool) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.GRUCell)`` parameters from flat GRU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. PyTorch's
    ``b_hr`` and ``b_hz``, which Flax lacks, add to ``b_ir`` and ``b_iz`` before the sigmoid, so
    they are summed into the ``ir`` and ``iz`` biases (rounded once, in the weights' dtype):
    every GRU of this layout is representable. ``b_in`` and ``b_hn`` stay apart (``b_hn`` is
    multiplied by r in both). See `gru_weights_from_flax` for the equations.

    {args}

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> (tree,) = portable_rnn.gru_weights_to_flax(w, 3, 4, 1, False)
      >>> nn.RNN(nn.GRUCell(4)).apply(tree, jnp.ones((1, 5, 3))).shape
      (1, 5, 4)
    """
    return weights_to_flax(weights, input_size, hidden_size, num_layers, bidirectional, "gru")


def simple_rnn_weights_from_flax(params: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                                 shared_cell: bool | None = None, dtype: Any = None) -> Array:
    """Flat simple-RNN weights from Flax ``nn.RNN(nn.SimpleCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Flax's
    SimpleCell computes ``h' = activation_fn(W_i x + b_i + W_h h)``: its one bias is on the input
    Dense ``i`` and becomes ``b_ih``; ``b_hh`` is zero. ``activation_fn`` (tanh by default; pass
    the same as ``portable_rnn.simple_rnn(..., nonlinearity=...)``) and ``residual=True`` (which
    adds ``h`` before the activation) are not recorded in the parameters.

    {args}

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> params = nn.RNN(nn.SimpleCell(4)).init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> portable_rnn.simple_rnn_weights_from_flax(params).shape
      (36,)
    """
    return weights_from_flax(params, "simple_rnn", shared_cell, dtype)


def simple_rnn_weights_to_flax(weights: Array, input_size: int, hidden_size: int,
                               num_layers: int, bidirectional: bool) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.SimpleCell)`` parameters from flat simple-RNN weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions.
    ``b_ih + b_hh`` becomes the bias of the input Dense ``i``.

    {args}

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, True)
      >>> (tree,) = portable_rnn.simple_rnn_weights_to_flax(w, 3, 4, 1, True)
      >>> sorted(tree["params"]), sorted(tree["params"]["forward_rnn"]["cell"])
      (['backward_rnn', 'forward_rnn'], ['h', 'i'])
    """
    return weights_to_flax(weights, input_size, hidden_size, num_layers, bidirectional,
                           "simple_rnn")


def _flax_docs():
    cells = {"lstm": "nn.OptimizedLSTMCell", "gru": "nn.GRUCell", "simple_rnn": "nn.SimpleCell"}
    for family, cell in cells.items():
        unpack_name = f"unpack_{family}_weights"
        f_from = globals()[f"{family}_weights_from_flax"]
        f_to = globals()[f"{family}_weights_to_flax"]
        f_from.__doc__ = f_from.__doc__.replace("{args}", _FLAX_ARGS.replace(
            "{unpack}", unpack_name).replace("{cell}", FLAX_CELLS[family]))
        proj = ("\n      proj_size: must be 0: a projection (PyTorch's ``proj_size``) has no Flax "
                "counterpart." if family == "lstm" else "")
        f_to.__doc__ = f_to.__doc__.replace("{args}", _FLAX_TO_ARGS.replace(
            "{cell}", cell).replace("{proj}", proj))


_flax_docs()

"""The LSTM layers' readable parameter tree, shared by `linen.LSTM` and `nnx.LSTM` (no Flax here).

    {"layer_0": {"forward": {"W_ih": (4H, I), "W_hh": (4H, H), "b_ih": (4H,), "b_hh": (4H,)},
                 "reverse": {...}},          # when bidirectional
     "layer_1": {...}, ...}

Matrices and biases are PyTorch's (gates i, f, g, o), so "layer 1 reverse, recurrent kernel" is
``params["layer_1"]["reverse"]["W_hh"]``. The call packs them into the flat cuDNN vector.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _checks
from ._lstm import IMPLEMENTATIONS, lstm
from ._weights import flax_layout, pack_lstm_weights, torch_layout, unpack_lstm_weights

NAMES = ("W_ih", "W_hh", "b_ih", "b_hh")
DIRECTIONS = ("forward", "reverse")


def uniform_init(hidden_size: int):
    """PyTorch's and jax.experimental.rnn's default: U(-1/sqrt(H), 1/sqrt(H))."""
    bound = 1.0 / np.sqrt(hidden_size)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, jnp.float32, -bound, bound).astype(dtype)
    return init


def _shapes(input_size, hidden_size, layer, num_directions):
    in_size = input_size if layer == 0 else num_directions * hidden_size
    G = 4 * hidden_size
    return dict(W_ih=(G, in_size), W_hh=(G, hidden_size), b_ih=(G,), b_hh=(G,))


def init_layer(key, layer, input_size, hidden_size, bidirectional, param_dtype, inits):
    """One layer's ``{direction: {name: array}}``; `inits` maps names to initialisers or None."""
    num_directions = 2 if bidirectional else 1
    default = uniform_init(hidden_size)
    out = {}
    for d, direction in enumerate(DIRECTIONS[:num_directions]):
        keys = jax.random.split(jax.random.fold_in(key, d), 4)
        shapes = _shapes(input_size, hidden_size, layer, num_directions)
        out[direction] = {n: (inits.get(n) or default)(k, shapes[n], param_dtype)
                          for n, k in zip(NAMES, keys)}
    return out


def to_flat(params, input_size, hidden_size, num_layers, bidirectional):
    """The flat cuDNN weight vector from the tree."""
    directions = DIRECTIONS[:2 if bidirectional else 1]
    groups = [[params[f"layer_{l}"][d][n] for l in range(num_layers) for d in directions]
              for n in NAMES]
    return pack_lstm_weights(*groups, input_size, hidden_size, num_layers, bidirectional)


def _from_groups(groups, input_size, hidden_size, num_layers, bidirectional, dtype=None):
    num_directions = 2 if bidirectional else 1
    out: dict[str, Any] = {}
    for p in range(num_layers * num_directions):
        layer, d = divmod(p, num_directions)
        shapes = _shapes(input_size, hidden_size, layer, num_directions)
        arrays = {}
        for n, g in zip(NAMES, groups):
            a = jnp.zeros(shapes[n], jnp.float32) if g[p] is None else jnp.asarray(np.asarray(g[p]))
            arrays[n] = a if dtype is None else a.astype(dtype)
        out.setdefault(f"layer_{layer}", {})[DIRECTIONS[d]] = arrays
    return out


def from_flat(weights, input_size, hidden_size, num_layers, bidirectional, dtype=None):
    """The tree from a flat cuDNN weight vector (the inverse of `to_flat`)."""
    groups = [[g[p] for p in sorted(g)] for g in unpack_lstm_weights(
        jnp.asarray(weights), input_size, hidden_size, num_layers, bidirectional)]
    return _from_groups(groups, input_size, hidden_size, num_layers, bidirectional, dtype)


def from_torch(state_dict, prefix="", dtype=None):
    """(tree, sizes) from a PyTorch ``nn.LSTM`` state_dict; sizes = (I, H, L, bidirectional)."""
    groups, sizes = torch_layout(state_dict, prefix)
    return _from_groups(groups, *sizes, dtype), sizes


def to_torch(params, prefix: str = "") -> dict[str, np.ndarray]:
    """A PyTorch ``nn.LSTM`` state_dict (NumPy arrays) from the tree."""
    torch_names = dict(W_ih="weight_ih", W_hh="weight_hh", b_ih="bias_ih", b_hh="bias_hh")
    out = {}
    for layer_name, directions in params.items():
        layer = int(layer_name.split("_")[1])
        for direction, arrays in directions.items():
            suffix = f"_l{layer}{'_reverse' if direction == 'reverse' else ''}"
            for n, a in arrays.items():
                out[f"{prefix}{torch_names[n]}{suffix}"] = np.asarray(a)
    return out


def from_flax(params, dtype=None):
    """(tree, sizes) from Flax ``nn.RNN(OptimizedLSTMCell | LSTMCell)`` params."""
    groups, sizes = flax_layout(params)
    return _from_groups(groups, *sizes, dtype), sizes


def check_config(hidden_size, num_layers, bidirectional, dropout, dtype, param_dtype,
                 implementation) -> None:
    """Validates a layer's attributes (before any parameter is created)."""
    _checks.static_int("hidden_size", hidden_size)
    _checks.static_int("num_layers", num_layers)
    _checks.static_bool("bidirectional", bidirectional)
    _checks.rate("dropout", dropout)
    if dtype is not None:
        _checks.floating("dtype", np.dtype(dtype))
    _checks.floating("param_dtype", np.dtype(param_dtype))
    _checks.implementation(implementation, IMPLEMENTATIONS)


def check_inputs(inputs, input_size: int | None, dtype):
    """`inputs` as an array of shape (..., T, I) with I = `input_size` (when known)."""
    inputs = _checks.array("inputs", inputs)
    if inputs.ndim < 2:
        raise ValueError(f"`inputs` must have shape (..., T, I) (rank >= 2); got {inputs.shape}.")
    if dtype is None:
        _checks.floating("inputs", inputs.dtype)
    if input_size is not None and inputs.shape[-1] != input_size:
        raise ValueError(f"`inputs` must have input_size={input_size} features in its last axis "
                         f"(the size the layer's parameters were made for); got shape "
                         f"{inputs.shape}.")
    return inputs


def apply(params, inputs, seq_lengths, initial_carry, *, hidden_size, num_layers, bidirectional,
          dropout, dtype, precision, implementation, dropout_rng, return_carry):
    """The layers' call: any leading batch dims, optional carry, flat weights built here."""
    inputs = check_inputs(inputs, params["layer_0"]["forward"]["W_ih"].shape[1], dtype)
    shape = inputs.shape
    batch, (steps, input_size) = shape[:-2], shape[-2:]
    B = int(np.prod(batch, dtype=np.int64))
    dtype = np.dtype(dtype) if dtype is not None else inputs.dtype
    x = inputs.reshape((B, steps, input_size)).astype(dtype)
    LD = num_layers * (2 if bidirectional else 1)
    if initial_carry is None:
        h0 = jnp.zeros((LD, B, hidden_size), dtype)
        c0 = jnp.zeros((LD, B, hidden_size), jnp.float32)
    else:
        if not isinstance(initial_carry, (tuple, list)) or len(initial_carry) != 2:
            if isinstance(initial_carry, (tuple, list)):
                got = f"a {type(initial_carry).__name__} of length {len(initial_carry)}"
            elif hasattr(initial_carry, "shape"):
                got = f"an array of shape {initial_carry.shape}"
            else:
                got = type(initial_carry).__name__
            raise TypeError(f"`initial_carry` must be a pair (h, c) of arrays; got {got}.")
        h0, c0 = (_checks.array(f"initial_carry[{i}]", a) for i, a in enumerate(initial_carry))
        for name, a in (("initial_carry[0]", h0), ("initial_carry[1]", c0)):
            _checks.expect_shape(name, a.shape, (LD,) + batch + (hidden_size,),
                                 "(num_layers * num_directions, *batch, hidden_size)")
        h0, c0 = h0.reshape(LD, B, hidden_size), c0.reshape(LD, B, hidden_size)
    if seq_lengths is not None:
        lengths_shape, _ = _checks.shape_dtype("seq_lengths", seq_lengths)
        _checks.expect_shape("seq_lengths", lengths_shape, batch, "(*batch,)")
        seq_lengths = jnp.reshape(seq_lengths, (B,))
    weights = to_flat(params, input_size, hidden_size, num_layers, bidirectional)
    y, h, c = lstm(x, h0, c0, weights, seq_lengths, input_size, hidden_size, num_layers,
                   dropout if dropout_rng is not None else 0.0, bidirectional, precision,
                   dropout_rng=dropout_rng, implementation=implementation)
    y = y.reshape(batch + (steps, y.shape[-1]))
    if not return_carry:
        return y
    return y, (h.reshape((LD,) + batch + (hidden_size,)),
               c.reshape((LD,) + batch + (hidden_size,)))

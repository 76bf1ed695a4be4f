"""Converters between the flat weight vector and PyTorch state_dicts and Flax ``nn.RNN``
parameters, for every family (its `Family` holds the names and gate maps they read)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import checks
from .cell import Family
from .families import FAMILIES, with_gates
from .layout import NAMES, pack, param_shapes, peer_directions, unpack

Array = jax.Array


# --- PyTorch nn.LSTM / nn.GRU / nn.RNN state_dicts --------------------------------------------

_TORCH_KEY = re.compile(r"(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$")
TORCH_NAMES = dict(W_ih="weight_ih", W_hh="weight_hh", b_ih="bias_ih", b_hh="bias_hh",
                    W_hr="weight_hr")


def to_numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch.Tensor, without importing torch
        a = a.detach().cpu()
        if str(a.dtype) == "torch.bfloat16":
            a = a.float()
    return np.asarray(a)


def torch_layout(state_dict: Mapping[str, Any], prefix: str, family: Family):
    """``({name: per-pseudo-layer list}, (input_size, hidden_size, num_layers, bidirectional,
    proj_size))`` of a PyTorch ``nn.LSTM``/``nn.GRU``/``nn.RNN`` state_dict (biases may be None)."""
    module = family.peer("torch_module", "PyTorch")
    if not isinstance(state_dict, Mapping):
        raise TypeError("`state_dict` must be a mapping (e.g. `module.state_dict()`); got "
                        f"{type(state_dict).__name__}.")
    found: dict[tuple[str, int, int], np.ndarray] = {}
    for key, value in state_dict.items():
        if not key.startswith(prefix):
            continue
        m = _TORCH_KEY.fullmatch(key[len(prefix):])
        if m is not None:
            found[(m.group(1), int(m.group(2)), 1 if m.group(3) else 0)] = to_numpy(value)
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
        if not family.projection:
            raise ValueError(f"`state_dict` holds {prefix}weight_hr_l0, a projection, which only "
                             f"nn.LSTM has; this converter reads {module}.")
        proj_size, hidden_size = found[("weight_hr", 0, 0)].shape
    rows = found[("weight_hh", 0, 0)].shape[0]
    if proj_size == 0:
        hidden_size = found[("weight_hh", 0, 0)].shape[1]
    if rows != family.gates * hidden_size:
        modules = [f.torch_module for f in with_gates(rows // max(hidden_size, 1))
                   if f.torch_module and f.torch_module != module]
        guess = f" (it looks like an {' or an '.join(modules)})" if modules else ""
        raise ValueError(f"`state_dict[{prefix + 'weight_hh_l0'!r}]` must have "
                         f"{family.gates}*hidden_size rows for an {module}; got shape "
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
                kind = TORCH_NAMES[name]
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
    family.peer("torch_module", "PyTorch")
    groups = unpack(jnp.asarray(weights), input_size, hidden_size, num_layers, bidirectional,
                    family, proj_size)
    num_directions = 2 if bidirectional else 1
    out = {}
    for p in range(num_layers * num_directions):
        suffix = f"_l{p // num_directions}{'_reverse' if p % num_directions else ''}"
        for name in ("W_ih", "W_hh", "b_ih", "b_hh", "W_hr"):
            if name in groups:
                out[f"{prefix}{TORCH_NAMES[name]}{suffix}"] = np.array(groups[name][p])
    return out


# --- Flax nn.RNN(LSTMCell | OptimizedLSTMCell | GRUCell | SimpleCell) params -------------------
#
# A Flax cell is one Dense per gate and side ("i" reads x, "h" reads h): kernels (features, H),
# the transposes of our gate blocks. Per family: the Dense names of each gate in our gate order
# (input side, hidden side), and which of them have a bias. Flax gives a gate one bias where the
# two of PyTorch's add up before any nonlinearity, so reading Flax is exact, and writing Flax sums
# b_ih + b_hh there; only the GRU's n gate keeps both (b_hn is multiplied by r).

def _flax_cell(tree: Any, where: str, family: Family) -> Mapping[str, Any]:
    """The cell dict ({'ii': {'kernel': ...}, ...}) inside an nn.RNN / cell param tree."""
    for key in ("params", "cell"):
        if not isinstance(tree, Mapping):
            break
        tree = tree.get(key, tree)
    if not isinstance(tree, Mapping):
        raise TypeError(f"{where} must be a Flax parameter dict; got {type(tree).__name__}.")
    family.peer("flax_cells", "Flax")
    names = [n for gate in family.flax_dense for n in gate]
    missing = [n for n in names if not isinstance(tree.get(n), Mapping) or "kernel" not in tree[n]]
    missing += [f"{n}/bias" for n in names if n in family.flax_biased and n not in missing
                and "bias" not in tree[n]]
    if missing:
        others = [f for f in FAMILIES.values() if f is not family and f.flax_cells
                  and all(n in tree for gate in f.flax_dense for n in gate)]
        hint = (f" (it looks like {others[0].article} {others[0].flax_cells}: use "
                f"{others[0].name}_weights_from_flax)" if others else "")
        raise ValueError(f"{where} is not {family.article} {family.flax_cells} parameter "
                         f"tree: missing {missing}; got keys {sorted(tree)}{hint}.")
    extra = [n for n in names if n not in family.flax_biased and "bias" in tree[n]]
    if extra:
        raise ValueError(f"{where}: {extra} have a bias, which Flax's {family.flax_cells} does "
                         f"not have (its {sorted(family.flax_biased)} do).")
    return tree


def _flax_layer(cell: Mapping[str, Any], where: str, family: Family):
    """(W_ih, W_hh, b_ih, b_hh) in the cuDNN layout from one Flax cell."""
    kernels = {n: to_numpy(cell[n]["kernel"]) for gate in family.flax_dense for n in gate}
    first_i, first_h = family.flax_dense[0]
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
    for n in family.flax_biased:
        biases[n] = to_numpy(cell[n]["bias"])
        if biases[n].shape != (H,):
            raise ValueError(f"{where}: {n}/bias must have shape (H,)=({H},); got "
                             f"{biases[n].shape}.")
    zeros = np.zeros(H, kernels[first_h].dtype)
    w_ih = np.concatenate([kernels[i] for i, _ in family.flax_dense], -1).T
    w_hh = np.concatenate([kernels[h] for _, h in family.flax_dense], -1).T
    b_ih = np.concatenate([biases.get(i, zeros) for i, _ in family.flax_dense], -1)
    b_hh = np.concatenate([biases.get(h, zeros) for _, h in family.flax_dense], -1)
    return w_ih, w_hh, b_ih, b_hh


def flax_layout(params, family: Family, *, shared_cell: bool | None = None):
    """``({name: per-pseudo-layer list}, (input_size, hidden_size, num_layers, bidirectional,
    proj_size))`` of Flax ``nn.RNN`` params of `family`'s cell (see `lstm_weights_from_flax` for
    the accepted trees); ``proj_size`` is always 0."""
    if shared_cell is not None:
        checks.static_bool("shared_cell", shared_cell)
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
    num_directions = peer_directions(input_size, hidden_size, num_layers, bidirectional, family,
                                     proj_size, "flax_cells", "Flax", f"its {family.flax_cells}")
    groups = unpack(weights, input_size, hidden_size, num_layers, bidirectional, family,
                    host=True)
    H, biased = hidden_size, family.flax_biased
    cells = []
    for p in range(num_layers * num_directions):
        cell: dict[str, dict[str, Array]] = {}
        for k, (i_name, h_name) in enumerate(family.flax_dense):
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



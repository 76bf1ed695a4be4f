"""The flat weight vector of the recurrent family: its layout, packing and unpacking.

Layout (for the LSTM bit-compatible with `jax.experimental.rnn`): for pseudo-layers
``p = 2 * layer + direction`` (``direction`` 0 forward, 1 reverse), first every ``W_ih[p]``
(G*H, in) followed by ``W_hh[p]`` (G*H, H), then every ``b_ih[p]`` (G*H,) followed by ``b_hh[p]``
(G*H,). Gates are stacked as in PyTorch and cuDNN, in the order of each `Family`'s
``gate_names``, ``gates`` blocks. A family with a projection (the LSTM's ``proj_size=P``) has
``W_hh[p]`` (G*H, P) and stores its ``W_hr[p]`` (P, H) right after ``W_hh[p]``; layers past the
first read D*P features.

Heads (``num_heads=NH > 1``, FlashRNN's block-diagonal recurrence; ``DH = H / NH`` units per
head): ``W_hh[p]`` is (NH, G*DH, DH), each head's recurrent matrix in PyTorch's orientation with
its gates stacked as the dense one's, so that with NH = 1 the flat vector is the dense layer's
``W_hh`` (G*H, H) bit for bit. The hidden units are head-major (unit ``k * DH + j`` is unit
``j`` of head ``k``), and ``W_ih``, ``b_ih``, ``b_hh`` keep the dense layout (G*H, ...), gate
blocks of H rows. The pre-activation of gate ``g`` of head ``k``, unit ``j`` (row
``r = g * H + k * DH + j`` of the gate vector) is::

    a[r] = (W_ih x)[r] + b_ih[r] + b_hh[r] + sum_l W_hh[p][k, g * DH + j, l] * h[k * DH + l]

(head ``k`` reads only its own units of ``h``). FlashRNN's ``R`` (G, NH, DH, DH), recurrent shape
``"GHDP"``, adds ``R[g, k] @ h_k`` to gate ``g`` of head ``k``: ``W_hh[p][k, g * DH + j, l] =
R[g, k, j, l]``, ``W_hh[p] = R.transpose(1, 0, 2, 3).reshape(NH, G * DH, DH)``; its input and
bias layouts (``"BTGHD"``, ``"GHD"``) are ours flattened, no permutation
(`slstm.flashrnn`). The cells' kernel for the loop is ``W_hh[p]`` transposed per head,
(NH, DH, G*DH) (`cell.recurrent_kernel`). A projection (``proj_size``) has no heads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import checks
from .cell import Family

Array = jax.Array


NAMES = ("W_ih", "W_hh", "b_ih", "b_hh", "W_hr")  # W_hr only with a projection (proj_size > 0)


def check_sizes(input_size, hidden_size, num_layers, bidirectional,
                proj_size=0) -> tuple[int, int, int, bool, int]:
    """The sizes of a network, checked (each error names the argument), as Python values."""
    sizes = tuple(checks.static_int(name, value, low) for name, value, low in (
        ("input_size", input_size, 1), ("hidden_size", hidden_size, 1),
        ("num_layers", num_layers, 1), ("proj_size", proj_size, 0)))
    if sizes[3] >= sizes[1]:
        raise ValueError(f"`proj_size` must be smaller than `hidden_size`={hidden_size} (as in "
                         f"PyTorch); got {proj_size}.")
    return sizes[:3] + (checks.static_bool("bidirectional", bidirectional), sizes[3])


def check_heads(hidden_size, num_heads, proj_size=0) -> int:
    """`num_heads` checked against the (checked) sizes: a positive int dividing `hidden_size`,
    and 1 with a projection."""
    num_heads = checks.static_int("num_heads", num_heads, 1)
    if hidden_size % num_heads:
        raise ValueError(f"`hidden_size`={hidden_size} must be a multiple of `num_heads`="
                         f"{num_heads} (each head has hidden_size / num_heads units).")
    if num_heads > 1 and proj_size:
        raise ValueError(f"`num_heads`={num_heads} with `proj_size`={proj_size}: a projected "
                         "LSTM has no heads (its W_hh reads the P projected features); pass "
                         "num_heads=1 or proj_size=0.")
    return num_heads


def peer_directions(input_size, hidden_size, num_layers, bidirectional, family: Family,
                    proj_size, field: str, peer: str, owner: str) -> int:
    """The number of directions of a network whose weights convert to `peer` (``"Flax"``,
    ``"Keras"``), after checking its sizes, that `peer` has the family's cell (its `field`) and
    that it has no projection, which `owner` (the peer's cell or layer) lacks."""
    num_directions = 2 if check_sizes(input_size, hidden_size, num_layers, bidirectional,
                                      proj_size)[3] else 1
    family.peer(field, peer)
    if proj_size:
        raise ValueError(
            f"`W_hr` (proj_size={proj_size}) cannot be represented in {peer}: {owner} has no "
            "projection; load these weights into portable_rnn.lstm(..., proj_size=...) or "
            "PyTorch nn.LSTM(proj_size=...) instead.")
    return num_directions


def param_shapes(input_size, hidden_size, num_layers, bidirectional, family: Family,
                 proj_size=0, num_heads=1) -> list[dict[str, tuple[int, ...]]]:
    """Per pseudo-layer, the shape of each parameter in `NAMES` (W_hr only with a projection;
    ``W_hh`` (NH, G*DH, DH) with heads)."""
    num_directions = 2 if check_sizes(input_size, hidden_size, num_layers, bidirectional,
                                      proj_size)[3] else 1
    num_heads = check_heads(hidden_size, num_heads, proj_size)
    G = family.gates * hidden_size
    DH = hidden_size // num_heads
    out_size = proj_size or hidden_size
    shapes = []
    for p in range(num_layers * num_directions):
        in_size = input_size if p < num_directions else num_directions * out_size
        w_hh = (G, out_size) if num_heads == 1 else (num_heads, family.gates * DH, DH)
        s = dict(W_ih=(G, in_size), W_hh=w_hh, b_ih=(G,), b_hh=(G,))
        if proj_size:
            s["W_hr"] = (proj_size, hidden_size)
        shapes.append(s)
    return shapes


def _flat_order(shapes):
    """(pseudo-layer, name) in the flat vector's order: all matrices, then all biases."""
    return ([(p, n) for p, s in enumerate(shapes) for n in ("W_ih", "W_hh", "W_hr") if n in s] +
            [(p, n) for p in range(len(shapes)) for n in ("b_ih", "b_hh")])


def num_params(input_size, hidden_size, num_layers, bidirectional, family: Family,
               proj_size=0, num_heads=1) -> int:
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family, proj_size,
                          num_heads)
    return sum(math.prod(shapes[p][n]) for p, n in _flat_order(shapes))


def init_weight(rng, input_size, hidden_size, num_layers, bidirectional, dtype, family: Family,
                proj_size=0, num_heads=1) -> Array:
    n = num_params(input_size, hidden_size, num_layers, bidirectional, family, proj_size,
                   num_heads)
    checks.prng_key("rng", rng)
    checks.floating("dtype", np.dtype(dtype))
    k = np.sqrt(1.0 / hidden_size)
    return jax.random.uniform(rng, (n,), jnp.float32, minval=-k, maxval=k).astype(dtype)


def unpack(weights, input_size, hidden_size, num_layers, bidirectional, family: Family,
           proj_size=0, num_heads=1, *, host=False) -> dict[str, dict[int, Array]]:
    """``{name: {pseudo-layer: array}}`` for the names in `NAMES` the layout has.

    ``host=True`` (concrete weights only) slices a NumPy copy: no device op per slice.
    """
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family, proj_size,
                          num_heads)
    order = _flat_order(shapes)
    expected = sum(math.prod(shapes[p][n]) for p, n in order)
    weights = checks.array("weights", weights)
    if weights.shape != (expected,):
        extra = (f", proj_size={proj_size}" if proj_size else "") + (
            f", num_heads={num_heads}" if num_heads != 1 else "")
        raise ValueError(
            f"`weights` must have shape (get_num_params_in_{family.name}(...),)=({expected},) "
            f"for input_size={input_size}, hidden_size={hidden_size}, num_layers={num_layers}, "
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
         family: Family, proj_size=0, num_heads=1, *, host=False) -> Array:
    """The flat vector from ``{name: per-pseudo-layer arrays}`` (biases may be None: zeros).

    ``host=True`` (concrete arrays only, e.g. converted checkpoints) concatenates in NumPy: no
    device op per array.
    """
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family, proj_size,
                          num_heads)
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
                a = checks.array(f"{name}[{p}]", a)
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


def layer_weights(weights: Array, layer: int, input_size: int, hidden_size: int,
                  num_layers: int, bidirectional: bool, family: Family,
                  proj_size: int = 0, num_heads: int = 1) -> Array:
    """The flat weights of the single-layer network that is layer `layer` of a stack (with its
    projection, or heads)."""
    groups = unpack(weights, input_size, hidden_size, num_layers, bidirectional, family,
                    proj_size, num_heads)
    num_directions = 2 if bidirectional else 1
    ps = range(layer * num_directions, (layer + 1) * num_directions)
    in_size = input_size if layer == 0 else num_directions * (proj_size or hidden_size)
    return pack({n: [g[p] for p in ps] for n, g in groups.items()}, in_size, hidden_size, 1,
                bidirectional, family, proj_size, num_heads)

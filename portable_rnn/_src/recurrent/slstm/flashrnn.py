"""The sLSTM's weights and states from and to FlashRNN's (NX-AI's ``flashrnn`` package, its
``function="slstm"``), so that a FlashRNN sLSTM's results carry over to `portable_rnn.slstm`.
Arrays in, NumPy arrays out (torch tensors are read without importing torch; neither torch nor
flashrnn is imported).

FlashRNN runs one layer in one direction on gate pre-activations it is handed:
``flashrnn(Wx, R, b, states, function="slstm")``, in its default layouts (gates i, f, z, o;
``NH`` heads of ``DH`` units, ``H = NH * DH``):

- ``Wx`` (B, T, 4, NH, DH), ``input_shape="BTGHD"``: the input's share of the pre-activations;
- ``R`` (4, NH, DH, DH), ``recurrent_shape="GHDP"``: gate g of head h adds ``R[g, h] @ y_h``;
- ``b`` (4, NH, DH), ``bias_shape="GHD"``: one bias;
- ``states`` (4, B, 1, NH, DH), ``output_shape="SBTHD"``: h, c, n, m (zeros by default); it
  returns every step's states (4, B, T, NH, DH) and the last ones (4, B, 1, NH, DH).

It has no input projection of its own; a layer holding one is described here by ``W`` (4, NH,
DH, I), ``Wx = einsum("bti,ghdi->btghd", x, W)``. Without it (``W=None``) the op's input is
FlashRNN's ``Wx`` itself, flattened to (B, T, 4H), and ``W_ih`` is the identity.

One pseudo-layer is one dict ``{"W": ..., "R": ..., "b": ...}``; a stack is a list of them,
ordered layer 0 forward, layer 0 reverse (when bidirectional), layer 1 forward, ... Our
``b_ih + b_hh`` is FlashRNN's ``b`` (read into ``b_ih``, ``b_hh`` zero).

Heads: ``NH`` heads are `portable_rnn.slstm(..., num_heads=NH)` (a block-diagonal ``W_hh``;
`layout` states the equation). Our hidden units are FlashRNN's (NH, DH) flattened head-major,
so ``Wx``, ``W`` and ``b`` are ours reshaped, with no permutation: gate ``g``, head ``k``, unit
``j`` is row ``g * H + k * DH + j`` of ``W_ih`` and the biases. ``R[g, k]`` (DH, DH) is rows
``g * DH`` to ``(g + 1) * DH - 1`` of head ``k``'s ``W_hh[p][k]`` (NH, 4*DH, DH):
``W_hh[p] = R.transpose(1, 0, 2, 3).reshape(NH, 4 * DH, DH)`` (with NH = 1, the dense (4H, H)
``W_hh`` is ``R.reshape(4 * H, H)``).

Reach it as ``from portable_rnn._src.recurrent.slstm import flashrnn``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..layout import pack, unpack
from .family import FAMILY

GATES = 4


def _numpy(a, name: str) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch.Tensor, without importing torch
        a = a.detach().cpu()
        if str(a.dtype) == "torch.bfloat16":
            a = a.float()
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"`{name}` must have a floating dtype; got {a.dtype}.")
    return a


def _layers(layers) -> list[Mapping[str, Any]]:
    if isinstance(layers, Mapping):
        return [layers]
    if isinstance(layers, Sequence) and layers and all(isinstance(p, Mapping) for p in layers):
        return list(layers)
    raise TypeError("`layers` must be a dict {'R': ..., 'b': ..., 'W': ...} (one pseudo-layer) "
                    "or a non-empty sequence of them; got "
                    f"{type(layers).__name__}.")


def weights_from_flashrnn(layers, *, bidirectional: bool = False, dtype=None):
    """The flat `portable_rnn.slstm` weights of FlashRNN sLSTM layers.

    Args:
      layers: one pseudo-layer's ``{"R": (4, NH, DH, DH), "b": (4, NH, DH), "W": (4, NH, DH,
        I)}`` (``"W"`` optional: None or absent takes FlashRNN's ``Wx`` as the input, I = 4H),
        or a sequence of those, layer 0 forward first (then, when bidirectional, layer 0
        reverse, layer 1 forward, ...). Arrays or torch tensors; every pseudo-layer has the same
        heads.
      bidirectional: whether the sequence holds two directions per layer.
      dtype: casts the result; default: the arrays' common dtype.

    Returns:
      ``(weights, input_size, hidden_size, num_layers, num_heads)``: the flat vector (P,) and
      the sizes to call `portable_rnn.slstm` with (H = NH * DH).

    Raises:
      TypeError: ``layers`` is not a dict or a sequence of dicts, or an array is not floating.
      ValueError: a key is missing, an array has the wrong shape, the pseudo-layers' heads
        differ, or their count or input sizes do not make a stack.
    """
    layers = _layers(layers)
    D = 2 if bidirectional else 1
    if len(layers) % D:
        raise ValueError(f"a bidirectional stack needs two pseudo-layers per layer; got "
                         f"{len(layers)}.")
    groups: dict[str, list] = {"W_ih": [], "W_hh": [], "b_ih": [], "b_hh": []}
    hidden = input_size = heads = None
    for p, layer in enumerate(layers):
        missing = [k for k in ("R", "b") if k not in layer]
        if missing:
            raise ValueError(f"`layers[{p}]` is missing {missing}; it has {sorted(layer)}.")
        R = _numpy(layer["R"], f"layers[{p}]['R']")
        if R.ndim != 4 or R.shape[0] != GATES or R.shape[2] != R.shape[3]:
            raise ValueError(f"`layers[{p}]['R']` must have shape (4, NH, DH, DH) (FlashRNN's "
                             f"recurrent_shape 'GHDP'); got {R.shape}.")
        NH, DH = R.shape[1], R.shape[2]
        H = NH * DH
        if hidden is None:
            hidden, heads = H, NH
        elif (NH, H) != (heads, hidden):
            raise ValueError(f"`layers[{p}]['R']` has {NH} heads of {DH} units; `layers[0]`'s "
                             f"has {heads} of {hidden // heads}.")
        b = _numpy(layer["b"], f"layers[{p}]['b']")
        if b.shape != (GATES, NH, DH):
            raise ValueError(f"`layers[{p}]['b']` must have shape (4, {NH}, {DH}) (FlashRNN's "
                             f"bias_shape 'GHD'); got {b.shape}.")
        W = layer.get("W")
        if W is None:
            W_ih = np.eye(GATES * H, dtype=R.dtype)
        else:
            W = _numpy(W, f"layers[{p}]['W']")
            if W.ndim != 4 or W.shape[:3] != (GATES, NH, DH):
                raise ValueError(f"`layers[{p}]['W']` must have shape (4, {NH}, {DH}, I) (gate, "
                                 f"head, unit, input); got {W.shape}.")
            W_ih = W.reshape(GATES * H, W.shape[3])
        want = input_size if p < D else D * H
        if want is not None and W_ih.shape[1] != want:
            raise ValueError(
                f"`layers[{p}]` reads {W_ih.shape[1]} features; "
                + (f"`layers[0]` reads {want}." if p < D else
                   f"a layer past the first reads its previous layer's D*H = {want} (an input "
                   "projection 'W' of that many columns, or none where 4H = D*H)."))
        input_size = input_size if input_size is not None else W_ih.shape[1]
        groups["W_ih"].append(W_ih)
        groups["W_hh"].append(R.reshape(GATES * H, H) if NH == 1 else
                              R.transpose(1, 0, 2, 3).reshape(NH, GATES * DH, DH))
        groups["b_ih"].append(b.reshape(GATES * H))
        groups["b_hh"].append(np.zeros(GATES * H, b.dtype))
    dtypes = {a.dtype for g in groups.values() for a in g}
    common = np.result_type(*dtypes) if dtype is None else np.dtype(dtype)
    groups = {n: [a.astype(common) for a in g] for n, g in groups.items()}
    num_layers = len(layers) // D
    weights = pack(groups, input_size, hidden, num_layers, bidirectional, FAMILY,
                   num_heads=heads, host=True)
    return weights, input_size, hidden, num_layers, heads


def weights_to_flashrnn(weights, input_size: int, hidden_size: int, num_layers: int,
                        bidirectional: bool, num_heads: int = 1) -> list[dict[str, np.ndarray]]:
    """FlashRNN's arrays per pseudo-layer from flat `portable_rnn.slstm` weights: a list (layer
    0 forward first) of ``{"W": (4, NH, DH, in), "R": (4, NH, DH, DH), "b": (4, NH, DH)}``
    NumPy arrays in the weights' dtype, ``b = b_ih + b_hh`` (summed in the weights' dtype). Run
    a pseudo-layer as ``flashrnn(einsum("bti,ghdi->btghd", x, W), R, b, function="slstm")``."""
    groups = unpack(np.asarray(weights), input_size, hidden_size, num_layers, bidirectional,
                    FAMILY, num_heads=num_heads, host=True)
    NH = num_heads
    DH = hidden_size // NH
    return [{"W": groups["W_ih"][p].reshape(GATES, NH, DH, -1),
             "R": groups["W_hh"][p].reshape(NH, GATES, DH, DH).transpose(1, 0, 2, 3),
             "b": (groups["b_ih"][p] + groups["b_hh"][p]).reshape(GATES, NH, DH)}
            for p in range(len(groups["W_ih"]))]


def states_from_flashrnn(states) -> tuple[np.ndarray, ...]:
    """``(h, c, n, m)``, each (L*D, B, H), from FlashRNN's states: one pseudo-layer's (4, B, 1,
    NH, DH) (``output_shape="SBTHD"``; its last states, or initial ones) or a sequence of them
    in pseudo-layer order; H = NH * DH, head-major."""
    if hasattr(states, "shape"):
        states = [states]
    arrays = [_numpy(s, f"states[{p}]") for p, s in enumerate(states)]
    for p, s in enumerate(arrays):
        if s.ndim != 5 or s.shape[0] != 4 or s.shape[2] != 1:
            raise ValueError(f"`states[{p}]` must have shape (4, B, 1, NH, DH) (FlashRNN's "
                             f"states h, c, n, m at one step, 'SBTHD'); got {s.shape}.")
    stacked = np.stack([s[:, :, 0].reshape(s.shape[:2] + (-1,)) for s in arrays],
                       axis=1)  # (4, L*D, B, H)
    return tuple(stacked)


def states_to_flashrnn(h, c, n, m, num_heads: int = 1) -> list[np.ndarray]:
    """FlashRNN's states per pseudo-layer, (4, B, 1, NH, DH) each, from `portable_rnn.slstm`'s
    (L*D, B, H) states (its initial or final ones); H = NH * DH, head-major."""
    arrays = [_numpy(a, name) for a, name in zip((h, c, n, m), "hcnm")]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1 or arrays[0].ndim != 3:
        raise ValueError(f"`h`, `c`, `n` and `m` must have one shape (L*D, B, H); got "
                         f"{[a.shape for a in arrays]}.")
    stacked = np.stack(arrays)  # (4, L*D, B, H)
    LD, B, H = stacked.shape[1:]
    if H % num_heads:
        raise ValueError(f"the states' hidden size {H} must be a multiple of `num_heads`="
                         f"{num_heads}.")
    return [stacked[:, p, :, None].reshape(4, B, 1, num_heads, H // num_heads)
            for p in range(LD)]

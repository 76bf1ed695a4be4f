"""The recurrent routes' cost terms for the routing model (`core.routing`), shared by every
family: the family enters through its gate count.

A step multiplies the state (B, S) by W_hh (S, G*H). On a TPU's MXU a weight tile of 128 x 128
is loaded, then the batch's rows stream through it; a route that does not keep W_hh on chip reads
it from memory every step. The steps of a layer are serial; a route may run a layer's two
directions in one loop (the scan path) or one after the other (a kernel per direction). Around
that serial chain: the gates' element-wise work, and the input projection, one large GEMM for
the whole sequence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core import routing

LANES = 128
TERMS = ("call", "serial steps", "serial steps x directions", "MXU tiles x rows",
         "W_hh bytes per step", "gate bytes", "input projection FLOPs")


def shape(call) -> dict:
    """A checked recurrent call as the sizes the grid records."""
    return dict(family=call.family.name, gates=call.family.gates,
                dtype=str(np.dtype(call.dtypes["x"])), B=call.batch, T=call.steps,
                I=call.input_size, H=call.hidden_size, L=call.num_layers,
                D=2 if call.bidirectional else 1, P=call.proj_size)


def basis(s: Mapping[str, Any], route: str, params: Mapping[str, int]) -> Sequence[float]:
    """The cost terms of a recurrent call of sizes `s` (the same for every route)."""
    del route, params
    G, B, T, I, H, L, D = (s[k] for k in ("gates", "B", "T", "I", "H", "L", "D"))
    S = s.get("P") or H  # the recurrent input: the projection where there is one
    item = np.dtype(s["dtype"]).itemsize
    steps = T * L
    instances = steps * D
    rows = -(-B // 8) * 8
    tiles = math.ceil(S / LANES) * math.ceil(G * H / LANES)
    inputs = I + (L - 1) * D * S
    return (1.0, steps / 1e3, instances / 1e3, instances * tiles * (LANES + rows) / 1e6,
            instances * S * G * H * item / 1e9, B * instances * G * H * (item + 4) / 1e9,
            2 * B * T * D * G * H * inputs / 1e12)


def variants(route: str, s: Mapping[str, Any]) -> list[dict]:
    del route, s
    return [{}]


def rule(s: Mapping[str, Any], serving: Sequence[str]) -> tuple[str, str]:
    """The stated choice on a device kind without a grid: the first route that serves the call
    in order of preference (a fused kernel before the scan path: on a TPU the Pallas kernel,
    whose rejects check that W_hh fits its VMEM)."""
    del s
    return serving[0], (f"{serving[0]}, the first route in order of preference that serves the "
                        "call (a fused kernel before the scan path)")


def size(s: Mapping[str, Any]) -> float:
    """A call's recurrent products, B x T x L x D x S x G*H."""
    return float(s["B"] * s["T"] * s["L"] * s["D"] * (s.get("P") or s["H"]) * s["gates"]
                 * s["H"])


def group(*ops: str) -> None:
    """Registers the recurrent group with the routing model, for `ops` (family names)."""
    routing.register_group(routing.Group("recurrent", TERMS, basis, shape, variants, rule, size),
                           *ops)

"""The recurrent routes' cost terms for the routing model (`core.routing`), shared by every
family: the family enters through its gate count.

A step multiplies the state (B, S) by W_hh (S, G*H), or with NH heads each head's (B, DH) by its
(DH, G*DH) block (DH = H / NH; ``NH``, absent from older grids' rows, is 1). On a TPU's MXU a
weight tile of 128 x 128 is loaded, then the batch's rows stream through it; a route that does
not keep W_hh on chip reads it from memory every step. The steps of a layer are serial; a
route may run a layer's two directions in one loop (the scan path) or one after the other (a
kernel per direction). Around that serial chain: the gates' element-wise work, and the input
projection, one large GEMM for the whole sequence.

The scan route's variants are where its input projection runs (``in_loop``): 0, one GEMM for
the whole sequence before the loop; 1, a matmul per step inside it (the driver's
``project_in_loop``; on a CPU, whose profile allows it, XLA then keeps the step's operands in
cache). A grid that times both (a CPU's) lets the model rank them; elsewhere the route is
measured as the driver runs it, as ``scan``.
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
                D=2 if call.bidirectional else 1, P=call.proj_size, NH=call.num_heads)


def computed_hidden(s: Mapping[str, Any], route: str) -> int:
    """The hidden size a route computes: the Pallas kernel pads a gated cell's to the lanes
    (`routes.pallas.kernel`: each gate block, or each head's part of it, zero-padded to a
    multiple of 128)."""
    NH = s.get("NH", 1)
    DH = s["H"] // NH
    return NH * (-(-DH // LANES) * LANES if route == "pallas" and s["gates"] > 1 else DH)


def basis(s: Mapping[str, Any], route: str, params: Mapping[str, int]) -> Sequence[float]:
    """The cost terms of a recurrent call of sizes `s` (the same for every route but for the
    hidden size it computes, `computed_hidden`). With NH heads, W_hh's tiles and bytes are the
    heads' blocks': NH x (DH x G*DH)."""
    del params
    G, B, T, I, L, D = (s[k] for k in ("gates", "B", "T", "I", "L", "D"))
    NH = s.get("NH", 1)
    H = computed_hidden(s, route)
    S = s.get("P") or H  # the recurrent input: the projection where there is one
    item = np.dtype(s["dtype"]).itemsize
    steps = T * L
    instances = steps * D
    rows = -(-B // 8) * 8
    tiles = NH * math.ceil(S // NH / LANES) * math.ceil(G * H // NH / LANES)
    inputs = I + (L - 1) * D * (s.get("P") or s["H"])
    return (1.0, steps / 1e3, instances / 1e3, instances * tiles * (LANES + rows) / 1e6,
            instances * (S * G * H // NH) * item / 1e9, B * instances * G * H * (item + 4) / 1e9,
            2 * B * T * D * G * H * inputs / 1e12)


IN_LOOP = (0, 1)  # the scan route's variants: the input projection before the loop, inside it


def variants(route: str, s: Mapping[str, Any]) -> list[dict]:
    """The scan route as the driver runs it on the platform (``{}``) and with its input
    projection before (``in_loop=0``) or inside the loop (``in_loop=1``); one variant for the
    other routes. A model ranks only the variants its grid timed."""
    del s
    if route != "scan":
        return [{}]
    return [{}] + [{"in_loop": v} for v in IN_LOOP]


def rule(s: Mapping[str, Any], serving: Sequence[str]) -> tuple[str, str]:
    """The stated choice on a device kind without a grid, or beyond its grid's reach: the first
    route that serves the call in order of preference (a fused kernel before the scan path: on
    a TPU the Pallas kernel, whose rejects check that W_hh fits its VMEM), except JAX's cuDNN
    LSTM call (``cudnn``), over which the scan path is taken: the scan path was faster than it
    at all but one shape measured on a GPU (an H200, ``benchmarks/results/gpu.json``: 0.56-1.01x
    its time forward+backward), and a GPU of another kind has no figures that say otherwise."""
    del s
    first = serving[0]
    if first == "cudnn" and "scan" in serving:
        return "scan", ("the automatic choice takes the scan path on a GPU unless a grid measures "
                        "otherwise (it was measured faster than JAX's cuDNN LSTM call on an "
                        "NVIDIA H200 at all but one of the shapes benchmarked, where cuDNN took "
                        "0.985x its time); policy(lstm='cudnn') or implementation='cudnn' "
                        "selects cuDNN")
    return first, (f"{first}, the first route in order of preference that serves the call (a "
                   "fused kernel before the scan path)")


def size(s: Mapping[str, Any]) -> float:
    """A call's recurrent products, B x T x L x D x S x G*H (with NH heads, over NH)."""
    return float(s["B"] * s["T"] * s["L"] * s["D"] * (s.get("P") or s["H"]) * s["gates"]
                 * s["H"] // s.get("NH", 1))


def group(*ops: str) -> None:
    """Registers the recurrent group with the routing model, for `ops` (family names)."""
    routing.register_group(routing.Group("recurrent", TERMS, basis, shape, variants, rule, size),
                           *ops)

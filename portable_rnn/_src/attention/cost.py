"""Attention's cost terms for the routing model (`core.routing`).

A route's work grows with the logits it computes: every one of the T x S (the dense route), the
visible ones, or the visible blocks' (the blocked routes skip blocks that causality or a window
hide entirely); each block has a fixed cost too, and the chunked path steps through its blocks
in a loop, one after another, whatever the batch and heads. The splash kernel's variants are its
block sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core import routing
from .routes import chunked, flash, splash

BLOCKS = (1024, 512, 256)  # the splash kernel's block sizes the grid measures
TERMS = ("call", "visible products", "all products", "visible logits", "all logits",
         "visible blocks' products", "visible blocks", "serial block steps", "operand bytes")
CHUNKED_FROM = 2**24  # logits of a call: the stated rule's line between dense and chunked


def shape(call) -> dict:
    """A checked attention call as the sizes the grid records; ``offset`` (the key position of
    query 0 for causality and the window) only where a bottom-right alignment moves it."""
    out = dict(dtype=str(np.dtype(call.dtype)), B=call.B, T=call.T, S=call.S, N=call.N,
               K=call.K, H=call.H, causal=call.is_causal,
               window=None if call.window is None else list(call.window))
    if call.offset_matters:
        out["offset"] = call.causal_offset
    return out


def _window(s: Mapping[str, Any]) -> tuple[int, int] | None:
    w = s.get("window")
    if w is None:
        return None
    if isinstance(w, int):  # the grid's symmetric (or, causal, left-only) window
        return (w, 0 if s["causal"] else w)
    return (int(w[0]), int(w[1]))


def _key_range(s: Mapping[str, Any], t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and last key each query `t` sees (top-left causal alignment, as jax.nn, unless
    the shape records an ``offset``: query t at key t + offset)."""
    S, window = s["S"], _window(s)
    lo = np.zeros_like(t)
    hi = np.full_like(t, S - 1)
    t = t + s.get("offset", 0)  # the key position each query sits at
    if s["causal"]:
        hi = np.minimum(hi, t)
    if window is not None:
        lo = np.maximum(lo, t - window[0])
        hi = np.minimum(hi, t + window[1])
    return lo, hi


def visible(s: Mapping[str, Any], block: int | tuple[int, int] | None = None) -> int:
    """The visible (query, key) pairs of one head, or with `block` (a size, or query and key
    sizes), the tiles that hold at least one."""
    T, S = s["T"], s["S"]
    if T == 0 or S == 0:
        return 0
    if block is None:
        lo, hi = _key_range(s, np.arange(T, dtype=np.int64))
        return int(np.maximum(hi - lo + 1, 0).sum())
    bq, bk = block if isinstance(block, tuple) else (block, block)
    bq, bk = min(bq, T), min(bk, S)
    if s.get("offset", 0) < 0:  # the first queries see no key: per query
        lo, hi = _key_range(s, np.arange(T, dtype=np.int64))
        seen = hi >= lo
        starts = np.arange(0, T, bq)
        first = np.minimum.reduceat(np.where(seen, lo, S), starts) // bk
        last = np.maximum.reduceat(np.where(seen, hi, -1), starts) // bk
        return int(np.where(np.logical_or.reduceat(seen, starts), last - first + 1, 0).sum())
    # A query sees a contiguous range of keys, whose ends never decrease down the queries, and
    # a query that sees none is followed only by such: a block of queries sees the keys from
    # its first query's first to its last query's last, if its first query sees any.
    starts = np.arange(0, T, bq, dtype=np.int64)
    lo, first_hi = _key_range(s, starts)
    _, hi = _key_range(s, np.minimum(starts + bq - 1, T - 1))
    tiles = hi // bk - lo // bk + 1
    return int(np.where(first_hi >= lo, tiles, 0).sum())


def tiling(s: Mapping[str, Any], route: str, params: Mapping[str, int]) -> tuple[int, int]:
    """The query and key block sizes a route computes the logits in: the splash variant's, the
    chunked path's own (`chunked.block_sizes`), the flash route's (`flash.BLOCK`), one
    block for the dense path."""
    if route == "xla":
        return s["T"], s["S"]
    if route == "chunked":
        return chunked.block_sizes(s["T"], s["S"], s["N"] // s["K"], s["H"])
    block = params.get("block", flash.BLOCK)
    return block, block


def basis(s: Mapping[str, Any], route: str, params: Mapping[str, int]) -> Sequence[float]:
    """The cost terms of an attention call of sizes `s` for a route (variant)."""
    B, T, S, N, K, H = (s[k] for k in ("B", "T", "S", "N", "K", "H"))
    bq, bk = tiling(s, route, params)
    item = np.dtype(s["dtype"]).itemsize
    heads = B * N
    seen = visible(s)
    tiles = visible(s, (bq, bk))
    tile = min(bq, T) * min(bk, S)
    return (1.0, heads * seen * H / 1e9, heads * T * S * H / 1e9, heads * seen / 1e6,
            heads * T * S / 1e6, heads * tiles * tile * H / 1e9, heads * tiles / 1e3,
            tiles / 1e3, B * (T * N + 2 * S * K) * H * item / 1e6)


def variants(route: str, s: Mapping[str, Any]) -> list[dict]:
    """The splash kernel's block sizes that tile both sequences, up to the largest it runs at
    the dtype (`splash.largest_block`); one variant for the others."""
    if route != "splash":
        return [{}]
    largest = splash.largest_block(s["dtype"])
    return [{"block": b} for b in BLOCKS
            if b <= largest and s["T"] % b == 0 and s["S"] % b == 0]


def rule(s: Mapping[str, Any], serving: Sequence[str]) -> tuple[str, str]:
    """The stated choice on a device kind without a grid, or beyond its grid's reach: a fused
    kernel (cuDNN, splash) where one serves the call, flash only where neither does (a bias),
    then the chunked path from `CHUNKED_FROM` logits (B x N x T x S: 64 MiB in float32) on, the
    dense one below."""
    for name in ("cudnn", "splash"):
        if name in serving:
            return name, f"{name}, a fused kernel that serves the call"
    if "flash" in serving:
        return "flash", "flash, the fused kernel that serves the call (splash does not)"
    logits = size(s)
    if "xla" not in serving or logits >= CHUNKED_FROM and "chunked" in serving:
        return "chunked", (f"chunked: {logits:,.0f} logits (B x N x T x S), from 2**24 on"
                           if "xla" in serving else "chunked: the dense path does not serve it")
    return "xla", (f"xla (dense): {logits:,.0f} logits (B x N x T x S), below 2**24 (64 MiB in "
                   "float32)")


def size(s: Mapping[str, Any]) -> float:
    """A call's logits, B x N x T x S."""
    return float(s["B"] * s["N"] * s["T"] * s["S"])


def group(*ops: str) -> None:
    """Registers the attention group with the routing model, for `ops`."""
    routing.register_group(routing.Group("attention", TERMS, basis, shape, variants, rule, size),
                           *ops)

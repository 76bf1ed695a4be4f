"""LSTM on CPU, for Equinox users: `portable_rnn.equinox.LSTM` against `eqx.nn.LSTMCell` looped
with `lax.scan`, at the LSTM family's shapes.

What an Equinox user writes today: one `eqx.nn.LSTMCell` per layer and direction, each looped
over time with `lax.scan` and `vmap`ped over the batch (Equinox's cells take one example), the
reverse direction on the time-reversed sequence. Equinox's cells have no lengths: the ragged case
runs every sequence to the end (its outputs at the valid steps are the same for a
unidirectional network, and the rest is not compared). The functional `portable_rnn.lstm` is the
baseline, and Flax's `OptimizedLSTMCell` runs in the same interleaved rounds, so the Equinox
ratio (the cells' time over the Equinox layer's) and the Flax ratio (Flax's time over
portable_rnn's) come from one run. Every implementation computes the same function from one
set of flat weights and is checked against `jax.experimental.rnn.lstm_ref` before it is timed.
"""

from __future__ import annotations

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import portable_rnn

from ._harness import Impl, goal, measure, print_row
from .lstm import CASES, QUICK_CASES, Problem, flax, jax_impl, ours, problem

BASELINE = "portable_rnn"
TARGET_RATIO = 1.3  # the LSTM family's target for Flax's OptimizedLSTMCell over portable_rnn


def import_equinox():
    """Equinox, or a string saying why it cannot be used."""
    try:
        import equinox
    except ImportError:
        return "equinox is not installed (pip install portable_rnn[equinox])"
    return equinox


def _torch_state_dict(p: Problem):
    B, T, I, H, L, bidir, _ = p.case
    return portable_rnn.lstm_weights_to_torch(jnp.asarray(p.w), I, H, L, bidir)


def equinox_layer(p: Problem) -> Impl:
    """`portable_rnn.equinox.LSTM` with the problem's weights, differentiated in its arrays."""
    eqx = import_equinox()
    import portable_rnn.equinox as preqx

    B, T, I, H, L, bidir, ragged = p.case
    dtype = None if p.dtype == jnp.float32 else p.dtype
    model = preqx.LSTM.from_torch(_torch_state_dict(p), dtype=dtype)
    arrays, static = eqx.partition(model, eqx.is_array)
    seq = jnp.asarray(p.lengths) if ragged else None
    return jax_impl(p, lambda x, arrays: eqx.combine(arrays, static)(x, seq), arrays)


def equinox_cells(p: Problem) -> Impl:
    """`eqx.nn.LSTMCell`s (one per layer and direction, Equinox's one bias = b_ih + b_hh) in
    `lax.scan`, `vmap`ped over the batch. For a 16-bit row the float32 parameters are cast to
    the dtype inside the function, as Flax's cells do with ``dtype=``."""
    eqx = import_equinox()
    B, T, I, H, L, bidir, _ = p.case
    D = 2 if bidir else 1
    W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_lstm_weights(jnp.asarray(p.w), I, H, L, bidir)
    cells = []
    for q in range(L * D):
        cell = eqx.nn.LSTMCell(I if q < D else D * H, H, key=jax.random.key(q))
        cells.append(eqx.tree_at(lambda c: (c.weight_ih, c.weight_hh, c.bias), cell,
                                 (W_ih[q], W_hh[q], b_ih[q] + b_hh[q])))

    def run(cell, xs):  # xs (T, in) -> (T, H)
        def step(state, x_t):
            state = cell(x_t, state)
            return state, state[0]

        zero = jnp.zeros((H,), xs.dtype)
        return lax.scan(step, (zero, zero), xs)[1]

    def apply(x, cells):
        cells = jax.tree.map(lambda a: a.astype(p.dtype), cells)
        for layer in range(L):
            outs = []
            for d in range(D):
                xs = x if d == 0 else x[:, ::-1]
                y = jax.vmap(partial(run, cells[layer * D + d]))(xs)
                outs.append(y if d == 0 else y[:, ::-1])
            x = jnp.concatenate(outs, axis=-1)
        return x

    return jax_impl(p, apply, cells)


PEERS = {"portable_rnn": ours, "equinox": equinox_layer, "equinox_cells": equinox_cells,
         "flax_optimized": flax(nn.OptimizedLSTMCell)}

TARGETS = (f"fwd+bwd in float32: the Equinox cells' time over the Equinox layer's at least "
           f"{TARGET_RATIO} (the LSTM family's target for Flax's OptimizedLSTMCell over "
           "portable_rnn), and at least Flax's ratio measured in the same row")


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        if row["dtype"] != "float32" or row["mode"] != "fwd+bwd":
            continue
        t = {n: r["median_ms"] for n, r in row["results"].items()}
        if "equinox" not in t or "equinox_cells" not in t:
            continue
        ratio = t["equinox_cells"] / t["equinox"]
        out += goal(f"float32 fwd+bwd: Equinox cells' time / the Equinox layer's >= "
                    f"{TARGET_RATIO}", row, ratio, TARGET_RATIO, at_least=True)
        if "flax_optimized" in t:
            flax_ratio = t["flax_optimized"] / t[BASELINE]
            out += goal("float32 fwd+bwd: (Equinox cells / Equinox layer) / (Flax OptimizedLSTM "
                        "/ portable_rnn) >= 1", row, ratio / flax_ratio, 1.0, at_least=True)
    return out


def run(quick: bool, rounds: int | None = None) -> dict:
    rounds = rounds or (3 if quick else 10)
    why = import_equinox()
    skipped = {n: why for n in ("equinox", "equinox_cells") if isinstance(why, str)}
    rows = []
    for case in QUICK_CASES if quick else CASES:
        p = problem(case, jnp.dtype("float32"))
        makers = {n: partial(make, p) for n, make in PEERS.items() if n not in skipped}
        print(f"equinox {case.label} float32", flush=True)
        for mode, row in measure(makers, BASELINE, rounds).items():
            rows.append({"panel": f"float32, {mode}", "case": case.label, "dtype": "float32",
                         "mode": mode, "params": case._asdict(), "skipped": skipped, **row})
            print_row("equinox", rows[-1])
    ratios = [{"case": r["case"], "mode": r["mode"],
               "equinox_cells_over_equinox": round(float(np.divide(
                   r["results"]["equinox_cells"]["median_ms"],
                   r["results"]["equinox"]["median_ms"])), 3),
               "flax_over_portable_rnn": round(float(np.divide(
                   r["results"]["flax_optimized"]["median_ms"],
                   r["results"][BASELINE]["median_ms"])), 3)}
              for r in rows if {"equinox", "equinox_cells", "flax_optimized"} <= set(r["results"])]
    return {"family": "equinox", "title": "LSTM for Equinox users, CPU", "rows": rows,
            "ratios": ratios, "targets": {"about": TARGETS, "rows": targets(rows)},
            "about": "portable_rnn.equinox.LSTM (`equinox`) vs eqx.nn.LSTMCell per layer and "
                     "direction in lax.scan, vmapped over the batch (`equinox_cells`), at the LSTM "
                     "family's shapes, under jit; the functional portable_rnn.lstm is the "
                     "baseline and Flax's OptimizedLSTMCell runs in the same rounds. fwd+bwd is "
                     "the gradient in the inputs and every weight. Equinox's cells have no "
                     "lengths: in the ragged case they run every sequence to the end."}

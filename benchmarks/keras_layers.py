"""Keras 3 layers on the JAX backend, CPU: `portable_rnn.keras` against the stock `keras.layers`.

`portable_rnn.keras.LSTM` / `GRU` / `SimpleRNN` are the stock layers with their recurrence computed
by one `portable_rnn.lstm` / `gru` / `simple_rnn` call; both rows are the same Keras model
(`benchmarks/lstm.py`'s `keras_impl`: a stack of layers, `Bidirectional` pairs
(`portable_rnn.keras.Bidirectional`, one call for both directions, around ours), a mask for ragged
cases), with the same weights, timed through a jitted `stateless_call`, and checked against the LSTM
and GRU benchmarks' references before timing. Shapes are the LSTM benchmark's; float32 and
``mixed_bfloat16`` (bfloat16 compute, float32 variables).
"""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp

from . import lstm, recurrent
from ._harness import measure, print_row

BASELINE = "portable_rnn.keras"


def keras_layers() -> dict:
    """Per cell: its problem maker and its two peers."""
    lstm.import_keras()  # Keras on the JAX backend, before portable_rnn.keras imports it
    import portable_rnn.keras as pk

    def family(cell):
        return (partial(recurrent.problem, recurrent.CELLS[cell]),
                {BASELINE: partial(recurrent.keras_rnn, layers=pk),
                 "keras.layers": recurrent.keras_rnn})

    return {"LSTM": (lstm.problem, {BASELINE: partial(lstm.keras_lstm, layers=pk),
                                    "keras.layers": lstm.keras_lstm}),
            "GRU": family("gru"), "SimpleRNN": family("simple_rnn")}


def run(quick: bool, rounds: int | None = None) -> dict:
    rounds = rounds or (3 if quick else 15)
    rows = []
    reason = lstm.missing("keras_jax")
    cells = {} if reason else keras_layers()
    for cell, (problem, peers) in cells.items():
        for case in lstm.QUICK_CASES if quick else lstm.CASES:
            for dtype in ("float32",) if quick else ("float32", "bfloat16"):
                p = problem(case, jnp.dtype(dtype))
                makers = {n: partial(make, p) for n, make in peers.items()}
                print(f"keras_layers {cell} {case.label} {dtype}", flush=True)
                for mode, row in measure(makers, BASELINE, rounds, modes=("fwd+bwd",)).items():
                    rows.append({"panel": f"{cell} {dtype}, {mode}", "case": case.label,
                                 "cell": cell, "dtype": dtype, "mode": mode,
                                 "params": case._asdict(), "skipped": {}, **row})
                    print_row("keras_layers", rows[-1])
            if quick:
                break
        if quick:
            break
    return {"family": "keras_layers", "title": "Keras 3 layers (JAX backend), CPU", "rows": rows,
            "skipped": reason,
            "about": "portable_rnn.keras.LSTM / GRU / SimpleRNN vs the keras.layers ones on "
                     "the JAX backend: the same Keras model and weights, under jit, fwd+bwd (the "
                     "gradient in the inputs and every weight); bidirectional rows wrap ours in "
                     "portable_rnn.keras.Bidirectional (one call for both directions) and the "
                     "stock layers in keras.layers.Bidirectional; bfloat16 rows use the "
                     "mixed_bfloat16 policy. Checked against the LSTM and GRU benchmarks' "
                     "references before timing."}

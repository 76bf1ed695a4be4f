"""Compile time of a train step on CPU: portable_rnn.linen layers vs Flax nn.RNN of the same size.

A train step is ``jax.value_and_grad`` of a loss over the layer's parameters and one SGD update,
under `jax.jit`. Each round clears JAX's caches and builds a fresh `jax.jit` of every model, then
times its tracing, lowering and XLA compilation (no persistent compilation cache), in an order
that rotates from round to round; the compiled step is then timed as well. Both models get the
same weights (the LSTM and GRU benchmarks' converters), and before anything is timed each one's
output and input gradient are checked against those benchmarks' references.
"""

from __future__ import annotations

import statistics
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

from portable_rnn import linen as plinen
from portable_rnn._src.layers import params as _params

from . import lstm, recurrent
from ._harness import add_ratios, block, goal, print_row, summary
from .lstm import Case

BASELINE = "portable_rnn"
PHASES = ("trace", "lower", "compile")
TARGETS = "a train step's trace + lower + compile time: ours no slower than Flax's nn.RNN"


class Model(NamedTuple):
    """One network as both libraries build it: flat weights in, (apply, params) for each."""

    family: str
    label: str
    layer: type  # portable_rnn.linen's
    flax_cell: type
    problem: object  # (case, dtype) -> the LSTM or GRU benchmark's Problem
    flax_params: object  # Problem -> Flax params


MODELS = {
    "lstm": Model("lstm", "LSTM", plinen.LSTM, lstm.nn.OptimizedLSTMCell, lstm.problem,
                  lambda p: lstm.flax_params(p.w, p.case)),
    "gru": Model("gru", "GRU", plinen.GRU, recurrent.nn.GRUCell,
                 lambda case, dtype: recurrent.problem(recurrent.CELLS["gru"], case, dtype),
                 recurrent.flax_params),
}
# (model, case, dtype): the shape of the LSTM benchmark's first case, in the two configurations
# a user meets first: one float32 layer, and two bidirectional bfloat16 layers.
CASES = [(m, c, d) for m in MODELS for c, d in (
    (Case(32, 128, 256, 256, 1), "float32"),
    (Case(32, 128, 256, 256, 2, bidirectional=True), "bfloat16"))]
QUICK_CASES = [("lstm", Case(4, 16, 8, 16, 2, bidirectional=True), "bfloat16")]


def networks(model: Model, p) -> dict:
    """{name: (apply(params, x) -> y, params)} computing the same network."""
    B, T, I, H, L, bidir, _ = p.case
    dtype = None if p.dtype == jnp.float32 else p.dtype
    ours = model.layer(H, num_layers=L, bidirectional=bidir, dtype=dtype)
    flax = lstm.FlaxStack(model.flax_cell, H, L, bidir, dtype=dtype)
    return {"portable_rnn": (ours.apply, {"params": _params.from_flat(
                p.w, I, H, L, bidir, model.family)}),
            "flax": (flax.apply, model.flax_params(p))}


def train_step(apply, valid, ct):
    def loss(params, x):
        return jnp.sum(jnp.where(valid, apply(params, x).astype(jnp.float32), 0) * ct)

    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return value, jax.tree.map(lambda a, g: a - 1e-3 * g.astype(a.dtype), params, grads)
    return step


def compile_times(step, params, x) -> tuple[dict[str, float], object]:
    """Milliseconds of each phase of a fresh `jax.jit(step)`, and the compiled step."""
    t0 = time.perf_counter()
    traced = jax.jit(step).trace(params, x)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    return dict(zip(PHASES, ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3))), compiled


def measure_case(model: Model, case: Case, dtype: str, rounds: int) -> list[dict]:
    p = model.problem(case, jnp.dtype(dtype))
    nets = networks(model, p)
    checks = {n: lstm.jax_impl(p, lambda x, params, a=apply: a(params, x), params).check()
              for n, (apply, params) in nets.items()}
    names = list(nets)
    phases = {n: {k: [] for k in (*PHASES, "total")} for n in names}
    runs = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            apply, params = nets[name]
            jax.clear_caches()
            ms, compiled = compile_times(train_step(apply, p.valid, p.ct), params, p.x)
            for k, v in ms.items():
                phases[name][k].append(v)
            phases[name]["total"].append(sum(ms.values()))
            block(compiled(params, p.x))  # the first run, then one timed
            t0 = time.perf_counter()
            block(compiled(params, p.x))
            runs[name].append((time.perf_counter() - t0) * 1e3)
    label = f"{model.label} {case.label} {dtype}"
    common = {"case": label, "dtype": dtype, "params": {**case._asdict(), "cell": model.family},
              "metric": "median_ms", "baseline": BASELINE, "rounds": rounds, "check": checks,
              "failed": {}, "skipped": {}}
    compile_row = {"panel": "trace + lower + compile, train step", "mode": "compile",
                   "results": {n: {**summary(phases[n]["total"]),
                                   **{f"{k}_ms": statistics.median(phases[n][k])
                                      for k in PHASES}} for n in names}, **common}
    run_row = {"panel": "one train step, compiled", "mode": "run",
               "results": {n: summary(runs[n]) for n in names}, **common}
    for row in (compile_row, run_row):
        add_ratios(row["results"], BASELINE, "median_ms")
        print_row("compile", row)
    return [compile_row, run_row]


def targets(rows: list[dict]) -> list[dict]:
    """`TARGETS`, checked on every row they concern (see `_harness.goal`)."""
    out = []
    for row in rows:
        flax = row["results"].get("flax", {}).get("ratio")
        if row["mode"] == "compile" and flax:
            out += goal("train step compile: ours / Flax's time <= 1", row, 1 / flax, 1.0,
                        at_least=False)
    return out


def run(quick: bool, rounds: int | None = None) -> dict:
    rounds = rounds or (1 if quick else 7)  # quick: one compile of each (a smoke run)
    rows = []
    for family, case, dtype in QUICK_CASES if quick else CASES:
        print(f"compile {family} {case.label} {dtype}", flush=True)
        rows += measure_case(MODELS[family], case, dtype, rounds)
    return {"family": "compile", "title": "Train-step compile time, CPU", "rows": rows,
            "targets": {"about": TARGETS, "rows": targets(rows)},
            "about": "portable_rnn.linen.LSTM / GRU vs Flax nn.RNN(OptimizedLSTMCell / GRUCell) "
                     "(nn.Bidirectional pairs), a jitted train step (value_and_grad over the "
                     "parameters and an SGD update): tracing, lowering and XLA compilation from "
                     "cold caches, then one run of the compiled step. Inputs (B, T, I), hidden "
                     "H, L layers."}

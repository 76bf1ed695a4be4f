"""Dispatch overhead: portable_rnn's public functions vs the path they choose, called directly.

Steady state under jit (the target: within 2% after compilation, since the decision is made
while tracing), eager calls of `lstm` (argument checks and the decision run on every call), and
the first call's tracing and compilation, each measured from cold caches.
"""

from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._src.attention.routes.chunked import attention_chunked
from portable_rnn._src.attention.routes.xla import attention_dense
from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan
from portable_rnn._src.recurrent.lstm.cell import LSTMCell
from portable_rnn._src.recurrent.routes.scan import scan_options

from ._harness import agreement, block, interleaved, print_row, summary

BASELINE = "direct"
TARGET = 1.02


def lstm_case(quick: bool):
    B, T, I, H, L = (4, 16, 8, 16, 1) if quick else (32, 128, 256, 256, 1)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((B, T, I), np.float32))
    w = jnp.asarray(rng.uniform(-H ** -0.5, H ** -0.5, portable_rnn.get_num_params_in_lstm(
        I, H, L, False)).astype(np.float32))
    z = jnp.zeros((L, B, H))
    args = (x, z, z, w, None, I, H, L, 0.0, False)
    chosen = portable_rnn.explain_lstm(*args).implementation

    def scan(x, h, c, w, seq_lengths, input_size, hidden_size, num_layers, dropout,
             bidirectional):
        config = ScanConfig(LSTMCell(), input_size, hidden_size, num_layers, bidirectional,
                            dropout, **scan_options(LSTMCell(), x, portable_rnn.capabilities()))
        y, (h, c) = rnn_scan(config, x, (h, c), w, seq_lengths)
        return y, h, c
    direct = {"scan": scan}.get(chosen)
    fns = {"portable_rnn": lambda x, w: portable_rnn.lstm(x, z, z, w, *args[4:])[0],
           "direct": direct and (lambda x, w: direct(x, z, z, w, *args[4:])[0])}
    eager = {"portable_rnn": partial(portable_rnn.lstm, *args),
             "direct": direct and partial(direct, *args)}
    return f"lstm B{B} T{T} I{I} H{H} L{L}, float32", chosen, fns, (x, w), eager


def attention_case(quick: bool):
    T, N, H = (256, 8, 64) if quick else (2048, 8, 64)
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, T, N, H), np.float32)) for _ in range(3))
    chosen = portable_rnn.explain_attention(q, k, v, is_causal=True).implementation
    direct = {"chunked": attention_chunked, "xla": attention_dense}.get(chosen)
    fns = {"portable_rnn": lambda q, k, v: portable_rnn.dot_product_attention(
               q, k, v, is_causal=True),
           "direct": direct and (lambda q, k, v: direct(
               q, k, v, None, None, None, None, scale=H ** -0.5, is_causal=True, window=None))}
    return f"attention T=S={T} N{N} H{H} causal, float32", chosen, fns, (q, k, v), None


def grad_of(f, n):
    return jax.grad(lambda *a: jnp.sum(f(*a) ** 2), tuple(range(n)))


def first_call(fns, args, *, rounds, grad, warmup) -> dict[str, dict[str, dict]]:
    """Cold-cache tracing and compilation of each function, jitted (or its gradient),
    interleaved; `warmup` untimed rounds first pay one-time costs (imports, probes)."""
    times = {n: {"trace": [], "compile": []} for n in fns}
    names = list(fns)
    for r in range(-warmup, rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            jax.clear_caches()
            f = fns[name]
            g = jax.jit(grad_of(f, len(args)) if grad else f)
            t0 = time.perf_counter()
            lowered = g.lower(*args)
            t1 = time.perf_counter()
            lowered.compile()
            if r >= 0:
                times[name]["trace"].append((t1 - t0) * 1e3)
                times[name]["compile"].append((time.perf_counter() - t1) * 1e3)
    return {step: {n: summary(times[n][step]) for n in names} for step in ("trace", "compile")}


def rows_for(label, chosen, fns, args, eager, quick, rounds):
    if fns["direct"] is None:
        return []
    jitted = {n: (jax.jit(f), jax.jit(grad_of(f, len(args)))) for n, f in fns.items()}
    (out, grads), (ref, ref_grads) = ((fwd(*args), grad(*args))
                                      for fwd, grad in (jitted["portable_rnn"], jitted["direct"]))
    check = agreement({"out": (out, ref)} | {f"grad {i}": pair for i, pair in enumerate(
        zip(grads, ref_grads))}, 1e-6)
    steady = {"jit fwd": {n: partial(lambda f: block(f(*args)), fwd)
                          for n, (fwd, _) in jitted.items()},
              "jit fwd+bwd": {n: partial(lambda g: block(g(*args)), grad)
                              for n, (_, grad) in jitted.items()}}
    if eager:
        steady["eager fwd"] = {n: partial(lambda f: block(f()), f) for n, f in eager.items()}
    results = {case: interleaved(fs, rounds, warmup=2) for case, fs in steady.items()}
    mode = "fwd" if quick else "fwd+bwd"  # quick: the smaller compilation, once
    cold = first_call(fns, args, rounds=1 if quick else 5, grad=not quick,
                      warmup=0 if quick else 1)
    results |= {f"first call: {step} {mode}": stats for step, stats in cold.items()}
    rows = []
    for case, stats in results.items():
        base = stats[BASELINE]["median_ms"]
        for s in stats.values():
            s["ratio"] = s["median_ms"] / base
        rows.append({"panel": label, "case": case, "dtype": "float32", "mode": case,
                     "metric": "median_ms", "baseline": BASELINE, "params": {"path": chosen},
                     "rounds": rounds, "results": stats, "check": {"portable_rnn": check},
                     "failed": {}, "skipped": {}})
        if case.startswith("jit"):
            rows[-1]["within_target"] = stats["portable_rnn"]["ratio"] < TARGET
        print_row("overhead", rows[-1])
    return rows


def run(quick: bool, rounds: int | None = None) -> dict:
    rounds = rounds or (5 if quick else 30)
    rows = [r for case in (lstm_case(quick), attention_case(quick))
            for r in rows_for(*case, quick, rounds)]
    return {"family": "overhead", "title": "Dispatch overhead", "rows": rows,
            "about": "portable_rnn's public function (automatic path) vs the function of the "
                     "chosen path called directly (direct = 1.00). Under jit the decision runs "
                     f"only while tracing: the target is < {100 * (TARGET - 1):.0f}% there. "
                     "First call: tracing and compilation from cold caches (jax.clear_caches())."}

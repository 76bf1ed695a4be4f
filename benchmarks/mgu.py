"""The MGU (`portable_rnn.mgu`) against the GRU (`portable_rnn.gru`, one gate block more) and
against Flax's own ``nn.RNN(nn.MGUCell)`` on the same weights.

    python -m benchmarks.mgu OUT.json                 # a few minutes on a CPU
    python -m benchmarks.mgu OUT.json --quick         # a smoke run, tiny shapes
    python -m benchmarks.mgu OUT.json --cases 8,64,64,128 --rounds 9

Per shape (B, T, I, H; one layer, one direction, full lengths, float32), forward and
forward+backward (`jax.grad` of a scalar loss w.r.t. the inputs and the weights, under `jit`):
first each implementation is checked (the MGU's outputs and input gradients against Flax's;
the GRU's outputs finite), then timed in interleaved rounds (`_harness.measure`); the rows give
each median and its ratio to the MGU's. Writes the JSON to OUT after every case.
"""

from __future__ import annotations

import functools
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn

from ._harness import (
    Impl,
    Mismatch,
    agreement,
    block,
    case_command,
    environment,
    measure,
    print_row,
    write_json,
)

# (B, T, I, H)
CASES = [(16, 128, 128, 128), (64, 64, 256, 256)]
QUICK = [(4, 8, 8, 16)]
TOL = 1e-4  # float32, both sides: max error relative to the largest value


def _inputs(B, T, I, H):
    k = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(k[0], (B, T, I), jnp.float32)
    h0 = jax.random.normal(k[1], (1, B, H), jnp.float32)
    cot = jax.random.normal(k[2], (B, T, H), jnp.float32)
    return k[3], x, h0, cot


def _ours(op, init, case):
    B, T, I, H = case
    key, x, h0, cot = _inputs(*case)
    w = init(key, I, H, 1, False)
    fwd = jax.jit(lambda x, w: op(x, h0, w, None, I, H, 1, 0.0, False)[0])
    grad = jax.jit(jax.grad(lambda x, w: jnp.sum(fwd(x, w) * cot), (0, 1)))
    return fwd, grad, x, w


def make_mgu(case, flax_fwd_bwd):
    fwd, grad, x, w = _ours(portable_rnn.mgu, portable_rnn.init_mgu_weight, case)

    def check():
        y, (dx, _) = fwd(x, w), grad(x, w)
        ref_y, ref_dx = flax_fwd_bwd(w)
        return agreement({"y vs Flax": (y, ref_y), "dx vs Flax": (dx, ref_dx)}, TOL)

    return Impl(lambda: block(fwd(x, w)), lambda: block(grad(x, w)), check)


def make_gru(case):
    fwd, grad, x, w = _ours(portable_rnn.gru, portable_rnn.init_gru_weight, case)

    def check():
        if not np.isfinite(np.asarray(fwd(x, w))).all():
            raise Mismatch("non-finite GRU outputs")
        return {}

    return Impl(lambda: block(fwd(x, w)), lambda: block(grad(x, w)), check)


def flax_functions(case):
    """Flax's ``nn.RNN(nn.MGUCell(H))``: (forward of params, grad of (x, params), x, and a
    function of our flat weights giving Flax's outputs and input gradient on them)."""
    B, T, I, H = case
    _, x, h0, cot = _inputs(*case)
    rnn = nn.RNN(nn.MGUCell(H))
    fwd = jax.jit(lambda x, p: rnn.apply(p, x, initial_carry=h0[0]))
    grad = jax.jit(jax.grad(lambda x, p: jnp.sum(fwd(x, p) * cot), (0, 1)))

    def on_ours(w):
        (params,) = portable_rnn.mgu_weights_to_flax(w, I, H, 1, False)
        return fwd(x, params), grad(x, params)[0]

    return fwd, grad, x, on_ours


def make_flax(case):
    fwd, grad, x, _ = flax_functions(case)
    key, *_ = _inputs(*case)
    (params,) = portable_rnn.mgu_weights_to_flax(
        portable_rnn.init_mgu_weight(key, case[2], case[3], 1, False), case[2], case[3], 1,
        False)
    return Impl(lambda: block(fwd(x, params)), lambda: block(grad(x, params)), dict)


def run(out, cases, rounds) -> dict:
    start = time.perf_counter()
    rows = []
    for case in cases:
        B, T, I, H = case
        label = f"B{B} T{T} I{I} H{H}"
        print(f"mgu {label}", flush=True)
        on_ours = flax_functions(case)[3]
        makers = {"mgu": functools.partial(make_mgu, case, on_ours),
                  "gru": functools.partial(make_gru, case),
                  "flax_mgu": functools.partial(make_flax, case)}
        timed = measure(makers, "mgu", rounds)
        for mode, row in timed.items():
            row.update(panel=mode, case=label, mode=mode, dtype="float32",
                       params=dict(B=B, T=T, I=I, H=H))
            print_row("mgu", row)
            rows.append(row)
        write_json(out, {"family": "mgu", "environment": environment(), "rows": rows,
                         "seconds": time.perf_counter() - start})
    return {"rows": rows}


def main(argv=None) -> None:
    run(*case_command(__doc__, argv, "B,T,I,H", CASES, QUICK))


if __name__ == "__main__":
    main()

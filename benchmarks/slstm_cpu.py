"""The sLSTM (`portable_rnn.slstm`, its scan path) against FlashRNN's own PyTorch backend on this
machine's CPU: the same layer, the same weights, float32, in one process with the same threads.

    python -m benchmarks.slstm_cpu OUT.json              # a few minutes on 2 cores
    python -m benchmarks.slstm_cpu OUT.json --quick      # a smoke run, tiny shapes
    python -m benchmarks.slstm_cpu OUT.json --cases 16,128,128,256,4 --rounds 9

FlashRNN (NX-AI's ``flashrnn`` package, 1.0.8; its fused kernels are CUDA and Triton only) runs
on a CPU through its ``backend="vanilla"``: a PyTorch loop over the steps of its sLSTM cell,
differentiated by autograd. Per shape (B, T, I, H, NH; one layer, one direction, full lengths,
zero initial states), forward and forward+backward (the gradient of a scalar loss w.r.t. the
input and every weight): FlashRNN is handed the weights `weights_to_flashrnn` writes from ours,
its input projection done by one einsum as a FlashRNN layer does; its outputs and input
gradient are checked against ours, then both are timed in interleaved rounds
(`_harness.measure`), PyTorch on one thread per core as XLA's CPU runtime; the rows give each
median and its ratio to ours. Without PyTorch or FlashRNN its rows say so and time ours alone.
Writes the JSON to OUT after every case.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._src.recurrent.slstm import flashrnn as conv

from ._harness import (
    Impl,
    agreement,
    block,
    case_command,
    environment,
    import_torch,
    measure,
    print_row,
    write_json,
)

# (B, T, I, H, NH)
CASES = [(16, 128, 128, 128, 1), (16, 256, 256, 256, 1), (8, 256, 256, 512, 4),
         (32, 256, 512, 1024, 8)]
QUICK = [(2, 5, 4, 8, 2)]
TOL = 1e-4  # float32, both sides: max error relative to the largest value


def _inputs(B, T, I, H, NH):
    k = jax.random.split(jax.random.key(0), 3)
    w = portable_rnn.init_slstm_weight(k[0], I, H, 1, False, num_heads=NH)
    x = jax.random.normal(k[1], (B, T, I), jnp.float32)
    cot = jax.random.normal(k[2], (B, T, H), jnp.float32)
    return x, w, cot


def make_ours(case, x, w, cot):
    """Our layer: (its `Impl`, forward, gradient w.r.t. (x, w)), jitted."""
    B, T, I, H, NH = case
    zeros = (jnp.zeros((1, B, H), jnp.float32),) * 4
    fwd = jax.jit(lambda x, w: portable_rnn.slstm(x, *zeros, w, None, I, H, 1, 0.0, False,
                                                  num_heads=NH)[0])
    grad = jax.jit(jax.grad(lambda x, w: jnp.sum(fwd(x, w) * cot), (0, 1)))
    return Impl(lambda: block(fwd(x, w)), lambda: block(grad(x, w)), dict), fwd, grad


def flashrnn_functions(case, torch, flashrnn, x, w, cot):
    """FlashRNN's layer on our weights: (forward, giving y (B, T, H); forward+backward, giving
    dx), as NumPy arrays."""
    B, T, I, H, NH = case
    (layer,) = conv.weights_to_flashrnn(w, I, H, 1, False, num_heads=NH)
    params = {k: torch.tensor(np.asarray(v), requires_grad=True) for k, v in layer.items()}
    tx = torch.tensor(np.asarray(x), requires_grad=True)
    tcot = torch.tensor(np.asarray(cot))

    def layer_out(inp):
        Wx = torch.einsum("bti,ghdi->btghd", inp, params["W"])
        hs, _ = flashrnn(Wx, params["R"], params["b"], function="slstm", backend="vanilla",
                         dtype="float32")
        return hs[0].reshape(B, T, H)  # h at every step, heads flattened head-major

    def forward():
        with torch.no_grad():
            return layer_out(tx).numpy()

    def forward_backward():
        for p in (tx, *params.values()):
            p.grad = None
        (layer_out(tx) * tcot).sum().backward()
        return tx.grad.numpy()

    return forward, forward_backward


def make_flashrnn(case, torch, flashrnn, inputs, ours):
    x, w, _ = inputs
    forward, forward_backward = flashrnn_functions(case, torch, flashrnn, *inputs)
    _, fwd, grad = ours

    def check():
        return agreement({"y vs ours": (forward(), fwd(x, w)),
                          "dx vs ours": (forward_backward(), grad(x, w)[0])}, TOL)

    return Impl(forward, forward_backward, check)


def run(out, cases, rounds) -> dict:
    """Times every case; ``failed``: whether an implementation that ran disagreed or failed (a
    peer that is not installed is recorded in the rows, and is no failure)."""
    start = time.perf_counter()
    torch = import_torch()
    try:
        from flashrnn import flashrnn
    except ImportError:
        flashrnn = None
    rows, failed = [], False
    for case in cases:
        B, T, I, H, NH = case
        label = f"B{B} T{T} I{I} H{H} NH{NH}"
        print(f"slstm_cpu {label}", flush=True)
        inputs = _inputs(*case)
        ours = make_ours(case, *inputs)
        makers = {"slstm": lambda ours=ours: ours[0]}
        if torch is not None and flashrnn is not None:
            makers["flashrnn_vanilla"] = functools.partial(make_flashrnn, case, torch, flashrnn,
                                                           inputs, ours)
        timed = measure(makers, "slstm", rounds)
        failed = failed or any(row["failed"] for row in timed.values())
        for mode, row in timed.items():
            row.update(panel=mode, case=label, mode=mode, dtype="float32",
                       params=dict(B=B, T=T, I=I, H=H, NH=NH),
                       torch_threads=torch.get_num_threads() if torch else None)
            if "flashrnn_vanilla" not in makers:
                row["failed"]["flashrnn_vanilla"] = "not installed (torch and flashrnn==1.0.8)"
            print_row("slstm_cpu", row)
            rows.append(row)
        write_json(out, {"family": "slstm_cpu", "environment": environment(), "rows": rows,
                         "seconds": time.perf_counter() - start})
    return {"rows": rows, "failed": failed}


def main(argv=None) -> int:
    command = case_command(__doc__, argv, "B,T,I,H,NH", CASES, QUICK, divides=("NH", "H"))
    return 1 if run(*command)["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

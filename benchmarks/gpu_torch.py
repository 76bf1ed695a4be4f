"""The anchor for GPU recurrent speed: PyTorch's `nn.LSTM`, `nn.GRU` and `nn.RNN` on cuDNN
against portable_rnn's scan path and portable_rnn's own cuDNN call (the ``cudnn_ffi`` route,
asked for explicitly: the automatic choice does not take it until it is measured here), side by
side in one process (the `torch` family of `python -m benchmarks.gpu`).

Per row (one cell, dtype and shape): forward+backward and forward alone, each implementation's
output and input gradient checked against portable_rnn's scan path before it is timed; the
time, microseconds per time step, TFLOP/s of the cell's matmuls, their share of a bfloat16
matmul's measured peak on the same device, and the cuDNN algorithm PyTorch picks by its own
rules (`pytorch_algorithm`). PyTorch is imported only when it is installed; on a CPU
(``--dry-run``) its CPU kernels stand in, at tiny sizes, so that the plumbing is checked, and
the ``cudnn_ffi`` implementation is left out with the route's reason (`ffi_unavailable`).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn

from ._harness import agreement

CELLS = ("lstm", "gru", "rnn_tanh")
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1}
DTYPES = ("bfloat16", "float16", "float32")
# The GPU benchmark's shapes, and B in {1, 8, 32, 64, 128} at H in {256, 512, 1024} (T = 256,
# I = H, one layer, one direction): (B, T, I, H, L).
SHAPES = ([(64, 256, 512, 512, 1), (16, 1024, 256, 1024, 2)]
          + [(B, 256, H, H, 1) for H in (256, 512, 1024) for B in (1, 8, 32, 64, 128)])
DRY_SHAPES = [(8, 16, 32, 32, 1)]
# A GPU that PyTorch's rules are evaluated for in a dry run: an H100/H200 (sm90, 132 SMs).
DRY_DEVICE = {"major": 9, "minor": 0, "multi_processor_count": 132}


def pytorch_algorithm(cell: str, dtype: str, B: int, T: int, I: int, H: int, L: int,
                      bidirectional: bool, forward: bool, device: dict, proj_size: int = 0,
                      packed: bool = False, cudnn_version: int = 91300) -> str:
    """The cuDNN RNN algorithm PyTorch asks for: `get_algo` of
    aten/src/ATen/native/cudnn/RNN.cpp (with `use_rnn_persist_small_h`,
    `use_persist_common_heuristics` and `use_persist_device_heuristics`), for a device given
    as ``{"major", "minor", "multi_processor_count"}``."""
    mode = {"lstm": "LSTM", "gru": "GRU"}.get(cell, "RNN")
    if proj_size:
        return "STANDARD"  # "LSTM with projections only works with standard algorithm"
    if packed:  # persistent algorithms reject lengths that vary across the batch
        return "STANDARD"
    if cudnn_version >= 8201 and device["major"] >= 6:
        limit = ({"RNN": 384, "LSTM": 192, "GRU": 192} if forward
                 else {"RNN": 256, "LSTM": 128, "GRU": 128})[mode]
        if H <= limit:
            return "PERSIST_STATIC_SMALL_H"
    if dtype == "float16":  # CUDNN_DATA_HALF only
        common = L == 1 and H <= 1024 and not bidirectional and H % 128 == 0 and I % 128 == 0
        if common and _persist_device(mode, B, T, H, device):
            return "PERSIST_STATIC"
    return "STANDARD"


def _persist_device(mode: str, B: int, T: int, H: int, device: dict) -> bool:
    major, minor = device["major"], device["minor"]
    if major == 7:
        if minor == 5:
            return False  # Turing
        return (((B % 16 == 0 and B not in (80, 112)) or B == 8)
                and ((T >= 40 and B <= 128) or (T >= 20 and B <= 96) or (T >= 10 and B <= 32)))
    if major >= 8 and device["multi_processor_count"] >= 98:
        if minor == 6:
            return False  # sm_86 (A40)
        if mode == "GRU":
            return False  # "Persistent GRU performance is flakier than other RNN types"
        if mode == "LSTM":
            return B % 8 == 0 and B <= 128
        return B % 8 == 0 and B <= 128 and (B < 96 or H < 896)
    return False


def flops(cell: str, B: int, T: int, I: int, H: int, L: int, backward: bool) -> float:
    """The matmul FLOPs of the call: per layer and step ``2 * B * (in + H) * G*H``; a backward
    pass costs twice the forward's (the input and weight gradients)."""
    G = GATES[cell]
    forward = sum(2 * B * T * ((I if layer == 0 else H) + H) * G * H for layer in range(L))
    return forward * (3 if backward else 1)


def matmul_peak(dtype=jnp.bfloat16, n: int = 8192, rounds: int = 10) -> float:
    """The TFLOP/s of an (n x n) @ (n x n) product in `dtype` on the default device (median)."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda a, b: a @ b)
    jax.block_until_ready(f(a, a))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        jax.block_until_ready(f(a, a))
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / float(np.median(times)) / 1e12


def _ours(cell, B, T, I, H, L, dtype, impl=None):
    """portable_rnn's call (its automatic choice, or `impl`) as f(x, w) -> y, the input and the
    flat weights."""
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (B, T, I), jnp.float32)
    dt = jnp.dtype(dtype)
    z = jnp.zeros((L, B, H), dt)
    if cell == "lstm":
        w = portable_rnn.init_lstm_weight(kw, I, H, L, False)

        def f(x, w):
            return portable_rnn.lstm(x.astype(dt), z, z.astype(jnp.float32), w, None, I, H, L,
                                     0.0, False, implementation=impl)[0]
    elif cell == "gru":
        w = portable_rnn.init_gru_weight(kw, I, H, L, False)

        def f(x, w):
            return portable_rnn.gru(x.astype(dt), z, w, None, I, H, L, 0.0, False,
                                    implementation=impl)[0]
    else:
        w = portable_rnn.init_simple_rnn_weight(kw, I, H, L, False)

        def f(x, w):
            return portable_rnn.simple_rnn(x.astype(dt), z, w, None, I, H, L, 0.0, False,
                                           implementation=impl)[0]
    return f, x, w


def _torch_module(torch, cell, w, I, H, L, dtype, device):
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(cell)
    to_torch = {"lstm": portable_rnn.lstm_weights_to_torch,
                "gru": portable_rnn.gru_weights_to_torch}.get(
        cell, portable_rnn.simple_rnn_weights_to_torch)
    module = (cls(I, H, L, batch_first=True) if cls is not None
              else torch.nn.RNN(I, H, L, nonlinearity="tanh", batch_first=True))
    state = {k: torch.from_numpy(np.asarray(v)) for k, v in to_torch(w, I, H, L, False).items()}
    module.load_state_dict(state)
    return module.to(device=device, dtype=getattr(torch, dtype))


FFI = "cudnn_ffi"  # portable_rnn's own cuDNN call, in the rows next to the scan path


def ffi_unavailable(cell, shape, dtype) -> str | None:
    """Why portable_rnn's own cuDNN call cannot serve this row here (asked for explicitly, it
    raises with the reasons), or None."""
    B, T, I, H, L = shape
    f, x, w = _ours(cell, B, T, I, H, L, dtype, impl=FFI)
    try:
        jax.eval_shape(f, x, w)
    except ValueError as e:
        return " ".join(str(e).split("\n  - ")[1:2]) or str(e)
    return None


def rows(torch, cell, shape, dtype, dry):
    """({"fwd+bwd": {name: timed callable}, "fwd": {...}}, checks) for one cell, dtype and
    shape: portable_rnn (its automatic choice: the scan path on a GPU), portable_rnn's own cuDNN
    call (``cudnn_ffi``, where it can serve the row; its check holds the reason where not) and
    PyTorch."""
    B, T, I, H, L = shape
    f, x, w = _ours(cell, B, T, I, H, L, dtype)
    ct = jax.random.normal(jax.random.key(2), (B, T, H), jnp.float32)
    device = "cpu" if dry else "cuda"

    def loss(x, w):
        return jnp.sum(f(x, w).astype(jnp.float32) * ct)

    fwd, bwd = jax.jit(f), jax.jit(jax.grad(loss, (0, 1)))
    ref_out = np.asarray(fwd(x, w).astype(jnp.float32))
    ref_dx = np.asarray(bwd(x, w)[0])
    module = _torch_module(torch, cell, w, I, H, L, dtype, device)
    tx = torch.from_numpy(np.array(x)).to(device=device, dtype=getattr(torch, dtype))
    tx.requires_grad_(True)
    tct = torch.from_numpy(np.array(ct)).to(device=device, dtype=getattr(torch, dtype))
    params = list(module.parameters())
    sync = (lambda: None) if dry else torch.cuda.synchronize

    def torch_fwd():
        with torch.no_grad():
            out = module(tx)[0]
        sync()
        return out

    def torch_fwd_bwd():
        out = module(tx)[0]
        grads = torch.autograd.grad(out, [tx, *params], grad_outputs=tct)
        sync()
        return out, grads

    out, grads = torch_fwd_bwd()
    tol = 1e-2 if dtype == "float32" else 6e-2  # TF32 on both sides; 16-bit rounding
    check = agreement({"out": (out.float().cpu().detach().numpy(), ref_out),
                       "dx": (grads[0].float().cpu().numpy(), ref_dx)}, tol)
    timed = {"fwd+bwd": {"portable_rnn": lambda: jax.block_until_ready(bwd(x, w)),
                         "torch": torch_fwd_bwd},
             "fwd": {"portable_rnn": lambda: jax.block_until_ready(fwd(x, w)),
                     "torch": torch_fwd}}
    checks = {"torch": check}
    why = ffi_unavailable(cell, shape, dtype)
    if why is not None:
        checks[FFI] = {"skipped": why}
        return timed, checks
    g, _, _ = _ours(cell, B, T, I, H, L, dtype, impl=FFI)
    ffi_fwd = jax.jit(g)
    ffi_bwd = jax.jit(jax.grad(lambda x, w: jnp.sum(g(x, w).astype(jnp.float32) * ct), (0, 1)))
    checks[FFI] = agreement({"out": (np.asarray(ffi_fwd(x, w).astype(jnp.float32)), ref_out),
                             "dx": (np.asarray(ffi_bwd(x, w)[0]), ref_dx)}, tol)
    timed["fwd+bwd"][FFI] = lambda: jax.block_until_ready(ffi_bwd(x, w))
    timed["fwd"][FFI] = lambda: jax.block_until_ready(ffi_fwd(x, w))
    return timed, checks


def describe(cell, shape, dtype, mode, stats, peak, device, cudnn_version):
    """Per implementation: µs per step, TFLOP/s, percent of the bfloat16 matmul peak; and
    PyTorch's cuDNN algorithm for the forward and the backward."""
    B, T, I, H, L = shape
    work = flops(cell, B, T, I, H, L, mode == "fwd+bwd")
    for s in stats.values():
        seconds = s["median_ms"] / 1e3
        s["us_per_step"] = s["median_ms"] * 1e3 / T
        s["tflops"] = work / seconds / 1e12
        s["percent_of_bf16_peak"] = 100 * s["tflops"] / peak if peak else None
    return {"pytorch_algorithm": {
        "forward": pytorch_algorithm(cell, dtype, B, T, I, H, L, False, True, device,
                                     cudnn_version=cudnn_version),
        "backward": pytorch_algorithm(cell, dtype, B, T, I, H, L, False, False, device,
                                      cudnn_version=cudnn_version)}}

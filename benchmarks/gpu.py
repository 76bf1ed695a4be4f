"""One CUDA GPU: cuDNN (through portable_rnn) vs the pure-JAX paths, LSTM and attention.

    python -m benchmarks.gpu [--quick] [--out benchmarks/results/gpu.json]

Rows (each checked against the scan path in float32 before timing):
- dtype: cuDNN fp32 (TF32 allowed, and HIGHEST), scan fp32, scan bf16, Flax OptimizedLSTMCell fp32.
- dropout between layers (L=2): cuDNN as one 2-layer call without dropout (the speed of light),
  two single-layer cuDNN calls with portable_rnn's masks (what the router does), scan with dropout.
- vmap: a vmapped call folded into one cuDNN call vs a Python loop of calls.
- attention, bf16, fwd+bwd: stock cuDNN at batch dim 0 vs portable_rnn's cuDNN wrapper vmapped
  over the heads axis, vs the dense ("xla") and chunked paths.
"""

from __future__ import annotations

import argparse
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import portable_rnn

from ._harness import environment, interleaved, write_json

SHAPES = [(64, 256, 512, 512, 1), (16, 1024, 256, 1024, 2)]
QUICK = [(8, 32, 64, 64, 1)]


def _grad_fn(f):
    return jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w).astype(jnp.float32) ** 2), (0, 1)))


def dtype_rows(B, T, I, H, L, rounds):
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (B, T, I))
    w = portable_rnn.init_lstm_weight(kw, I, H, L, False)
    z = jnp.zeros((L, B, H))

    def ours(impl, dtype=jnp.float32, precision=None):
        def f(x, w):
            return portable_rnn.lstm(x.astype(dtype), z.astype(dtype), z, w.astype(dtype), None,
                                     I, H, L, 0.0, False, precision, implementation=impl)[0]
        return f

    impls = {"cudnn_fp32_tf32": ours("cudnn"),
             "cudnn_fp32_highest": ours("cudnn", precision=lax.Precision.HIGHEST),
             "scan_fp32": ours("scan", precision=lax.Precision.HIGHEST),
             "scan_fp32_tf32": ours("scan"),
             "scan_bf16": ours(None, jnp.bfloat16)}
    if L == 1:
        model = nn.RNN(nn.OptimizedLSTMCell(H))
        params = model.init(jax.random.key(1), x[:, :2])
        fw = portable_rnn.lstm_weights_from_flax(params)
        impls["flax_fp32"] = lambda x, _: model.apply(params, x)
        w = fw  # same weights everywhere, so the outputs can be compared
    ref = jax.jit(impls["scan_fp32"])(x, w)
    fns, checks = {}, {}
    for name, f in impls.items():
        err = float(jnp.max(jnp.abs(jax.jit(f)(x, w).astype(jnp.float32) - ref)))
        checks[name] = err
        if not np.isfinite(err) or err > (0.1 if "bf16" in name else 2e-2):
            raise AssertionError(f"{name} disagrees with scan_fp32: max |dy| = {err}")
        g = _grad_fn(f)
        fns[name] = partial(lambda g: jax.block_until_ready(g(x, w)), g)
    return fns, checks


def dropout_rows(B, T, I, H, rounds):
    L = 2
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (B, T, I))
    w = portable_rnn.init_lstm_weight(kw, I, H, L, False)
    z = jnp.zeros((L, B, H))
    key = jax.random.key(3)

    def f(impl, rate):
        return lambda x, w: portable_rnn.lstm(x, z, z, w, None, I, H, L, rate, False,
                                              dropout_rng=key, implementation=impl)[0]

    a = jax.jit(f("cudnn", 0.2))(x, w)
    b = jax.jit(f("scan", 0.2))(x, w)
    err = float(jnp.max(jnp.abs(a - b)))
    if err > 2e-2:
        raise AssertionError(f"cuDNN per-layer dropout disagrees with scan: {err}")
    fns = {name: partial(lambda g: jax.block_until_ready(g(x, w)), _grad_fn(fn))
           for name, fn in (("cudnn_2layer_call_no_dropout", f("cudnn", 0.0)),
                            ("cudnn_per_layer_dropout", f("cudnn", 0.2)),
                            ("scan_dropout", f("scan", 0.2)))}
    return fns, {"cudnn_vs_scan_max_abs_err": err}


def vmap_rows(B, T, I, H, rounds, V=4):
    kx, kw = jax.random.split(jax.random.key(0))
    xs = jax.random.normal(kx, (B, V, T, I))  # vmapped over axis 1
    w = portable_rnn.init_lstm_weight(kw, I, H, 1, False)
    z = jnp.zeros((1, B, H))
    def one(x):
        return portable_rnn.lstm(x, z, z, w, None, I, H, 1, 0.0, False)[0]

    folded = jax.jit(jax.vmap(one, in_axes=1, out_axes=1))
    looped = jax.jit(lambda xs: jnp.stack([one(xs[:, v]) for v in range(V)], axis=1))
    err = float(jnp.max(jnp.abs(folded(xs) - looped(xs))))
    if err > 1e-4:
        raise AssertionError(f"vmapped cuDNN disagrees with a loop: {err}")
    return ({"cudnn_vmap_axis1_folded_fwd": lambda: jax.block_until_ready(folded(xs)),
             "cudnn_python_loop_fwd": lambda: jax.block_until_ready(looped(xs))},
            {"max_abs_err": err})


def attention_rows(T, B=4, N=8, H=64):
    ks = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (B, T, N, H), jnp.bfloat16) for kk in ks)

    def stock(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")

    def ours(impl):
        return lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, is_causal=True,
                                                                  implementation=impl)

    def per_head(q, k, v):  # (B, T, H) slices of the heads axis, vmapped
        return ours("cudnn")(q[:, :, None], k[:, :, None], v[:, :, None])[:, :, 0]

    impls = {"stock_cudnn_bdim0": stock,
             "ours_cudnn_vmap_heads": jax.vmap(per_head, in_axes=2, out_axes=2),
             "ours_xla": ours("xla"), "ours_chunked": ours("chunked")}
    ref = jax.jit(ours("xla"))(q, k, v).astype(jnp.float32)
    fns, checks = {}, {}
    for name, f in impls.items():
        err = float(jnp.max(jnp.abs(jax.jit(f)(q, k, v).astype(jnp.float32) - ref)))
        if not np.isfinite(err) or err > 5e-2:
            raise AssertionError(f"{name} disagrees with the dense path: {err}")
        checks[name] = err
        g = jax.jit(jax.grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v).astype(jnp.float32) ** 2),
                             (0, 1, 2)))
        fns[name] = partial(lambda g: jax.block_until_ready(g(q, k, v)), g)
    return fns, checks


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="benchmarks/results/gpu.json")
    args = p.parse_args(argv)
    rounds = 5 if args.quick else 20
    rows = []

    def record(family, shape, fns, checks, baseline):
        stats = interleaved(fns, rounds=rounds, warmup=2)
        base = stats[baseline]["median_ms"]
        for s in stats.values():
            s[f"ratio_vs_{baseline}"] = s["median_ms"] / base
        rows.append({"family": family, "shape": shape, "mode": "fwd+bwd"
                     if family != "vmap" else "fwd", "results": stats, "check": checks})
        print(f"{family} {shape}: " + "  ".join(
            f"{k}={v['median_ms']:.2f}ms(x{v[f'ratio_vs_{baseline}']:.2f})"
            for k, v in stats.items()), flush=True)

    for shape in (QUICK if args.quick else SHAPES):
        B, T, I, H, L = shape
        fns, checks = dtype_rows(*shape, rounds)
        record("dtype", shape, fns, checks, "cudnn_fp32_tf32")
    B, T, I, H, _ = (QUICK if args.quick else SHAPES)[0]
    fns, checks = dropout_rows(B, T, I, H, rounds)
    record("dropout", (B, T, I, H, 2), fns, checks, "cudnn_2layer_call_no_dropout")
    fns, checks = vmap_rows(B // 4 or 1, T, I, H, rounds)
    record("vmap", (B // 4 or 1, T, I, H, 1), fns, checks, "cudnn_vmap_axis1_folded_fwd")
    for T in ((64,) if args.quick else (1024, 4096)):
        fns, checks = attention_rows(T)
        record("attention", (4, T, 8, 64), fns, checks, "stock_cudnn_bdim0")
    write_json(args.out, {"benchmark": "gpu", "environment": environment(),
                          "capabilities": str(portable_rnn.capabilities()), "rounds": rounds,
                          "rows": rows})


if __name__ == "__main__":
    main()

"""Attention on CPU: portable_rnn ("xla", "chunked", automatic) vs jax.nn and PyTorch SDPA.

Speed: forward and forward+backward under jit, interleaved, medians; every implementation is
checked against portable_rnn's dense path first. Memory: each implementation runs one
forward+backward in a fresh subprocess, which reports its peak resident memory (and XLA's own
buffer plan), so that one implementation's allocations cannot hide another's.

    python -m benchmarks.attention_cpu            # T in {512, 2048}; memory at T=S=8192
    python -m benchmarks.attention_cpu --quick    # small sizes, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn

from ._harness import environment, interleaved, write_json

B, N, H = 1, 8, 64
IMPLS = ("portable_xla", "portable_chunked", "portable_auto", "jax_nn_xla", "torch_sdpa")


def _inputs(T, dtype=jnp.float32):
    ks = jax.random.split(jax.random.key(0), 3)
    return tuple(jax.random.normal(k, (B, T, N, H), dtype) for k in ks)


def _jax_fn(name, causal):
    if name == "jax_nn_xla":
        def f(q, k, v):
            with jax.numpy_dtype_promotion("standard"):
                return jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                    implementation="xla")
        return f
    impl = {"portable_xla": "xla", "portable_chunked": "chunked", "portable_auto": None}[name]
    return lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, is_causal=causal,
                                                              implementation=impl)


def _torch_fns(q, k, v, causal):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    tq, tk, tv = (torch.tensor(np.asarray(a)).transpose(1, 2).contiguous() for a in (q, k, v))

    def fwd():
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

    def fwd_bwd():
        a, b, c = (t.clone().requires_grad_(True) for t in (tq, tk, tv))
        out = torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=causal)
        (out ** 2).sum().backward()
        return a.grad

    def check():
        return jnp.asarray(fwd().transpose(1, 2).numpy())

    return fwd, fwd_bwd, check


def speed_rows(T, causal, rounds):
    q, k, v = _inputs(T)
    ref = jax.jit(_jax_fn("portable_xla", causal))(q, k, v)
    fns, checks = {}, {}
    for name in IMPLS:
        if name == "torch_sdpa":
            tf = _torch_fns(q, k, v, causal)
            if tf is None:
                continue
            fwd, fwd_bwd, check = tf
            out = check()
        else:
            f = _jax_fn(name, causal)
            jf = jax.jit(f)
            jg = jax.jit(jax.grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v) ** 2), (0, 1, 2)))
            fwd = lambda jf=jf: jax.block_until_ready(jf(q, k, v))  # noqa: E731
            fwd_bwd = lambda jg=jg: jax.block_until_ready(jg(q, k, v))  # noqa: E731
            out = jf(q, k, v)
        err = float(jnp.max(jnp.abs(out - ref)))
        if not np.isfinite(err) or err > 1e-4:
            raise AssertionError(f"{name} disagrees with portable_xla at T={T}: {err}")
        checks[name] = err
        fns[name] = (fwd, fwd_bwd)
    rows = []
    for mode, i in (("fwd", 0), ("fwd+bwd", 1)):
        stats = interleaved({k: v[i] for k, v in fns.items()}, rounds=rounds, warmup=1)
        base = stats["portable_xla"]["median_ms"]
        for s in stats.values():
            s["ratio_vs_portable_xla"] = s["median_ms"] / base
        rows.append({"T": T, "S": T, "B": B, "N": N, "H": H, "causal": causal, "mode": mode,
                     "results": stats, "check_max_abs_err": checks})
        print(f"T={T} causal={causal} {mode}: " + "  ".join(
            f"{k}={s['median_ms']:.1f}ms(x{s['ratio_vs_portable_xla']:.2f})"
            for k, s in stats.items()), flush=True)
    return rows


def _peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM; unlike ru_maxrss, not inherited on exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory_child(name, T):
    """Runs in a subprocess: one jitted forward+backward; prints JSON with the peak RSS."""
    q, k, v = _inputs(T)
    before = _peak_rss_mib()
    if name == "torch_sdpa":
        _torch_fns(q, k, v, False)[1]()
        plan = None
    else:
        f = _jax_fn(name, False)
        g = jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) ** 2), (0, 1, 2)))
        compiled = g.lower(q, k, v).compile()
        analysis = compiled.memory_analysis()
        plan = None if analysis is None else int(analysis.temp_size_in_bytes)
        jax.block_until_ready(compiled(q, k, v))
    peak = _peak_rss_mib()
    print(json.dumps({"peak_rss_mib": peak, "rss_before_mib": before,
                      "xla_temp_mib": None if plan is None else plan / 2**20}))


def memory_rows(T):
    rows = {}
    for name in ("portable_xla", "portable_chunked", "jax_nn_xla", "torch_sdpa"):
        cmd = [sys.executable, "-m", "benchmarks.attention_cpu", "--memory-child", name, str(T)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            rows[name] = {"error": proc.stderr.strip().splitlines()[-1:]}
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["growth_mib"] = r["peak_rss_mib"] - r["rss_before_mib"]
        rows[name] = r
    base = rows["portable_xla"].get("growth_mib")
    for r in rows.values():
        if base and "growth_mib" in r:
            r["growth_ratio_vs_portable_xla"] = r["growth_mib"] / base
    print(f"memory, fwd+bwd at T=S={T}: " + "  ".join(
        f"{k}=+{r['growth_mib']:.0f}MiB(x{r.get('growth_ratio_vs_portable_xla', 0):.3f})"
        if "growth_mib" in r else f"{k}=error" for k, r in rows.items()), flush=True)
    return {"T": T, "S": T, "B": B, "N": N, "H": H, "results": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="benchmarks/results/attention_cpu.json")
    p.add_argument("--memory-child", nargs=2, metavar=("IMPL", "T"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child:
        return _memory_child(args.memory_child[0], int(args.memory_child[1]))
    sizes, memory_T, rounds = ((128, 512), 1024, 3) if args.quick else ((512, 2048), 8192, 7)
    rows = [r for T in sizes for causal in (False, True) for r in speed_rows(T, causal, rounds)]
    memory = memory_rows(memory_T)
    write_json(args.out, {"benchmark": "attention_cpu", "environment": environment(),
                          "rounds": rounds, "speed": rows, "memory": memory})


if __name__ == "__main__":
    main()

"""Attention on CPU: portable_rnn ("xla", "chunked", automatic) vs jax.nn and PyTorch SDPA.

Speed: forward and forward+backward (gradients in q, k, v) under jit, B=1, N=8 heads, head dim
64, float32. Every implementation is first checked against a float32 einsum-softmax reference
at the highest precision (output and gradients; at T > 2048 on 256 query rows, where only dq is
complete). Memory: each implementation runs one forward+backward in a fresh subprocess, which
reports how far its resident memory rose during that run (compilation excluded: the peak is
reset after compiling), so that no implementation's allocations hide another's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn

from ._harness import Impl, agreement, block, goal, import_torch, measure, print_row

B, N, H = 1, 8, 64
BASELINE = "portable_auto"
TOL = 1e-4  # max error relative to max |reference|
ROUNDS = {512: 15, 2048: 7, 8192: 5}  # the dense fwd+bwd takes ~10 s and ~9-13 GB at T=8192
FULL_CHECK_T = 2048  # above, the reference covers 256 query rows (out and dq only)
IMPLS = {"portable_xla": "xla", "portable_chunked": "chunked", "portable_auto": None,
         "jax_nn_xla": "jax.nn", "torch_sdpa": "torch"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Problem(NamedTuple):
    T: int
    causal: bool
    qkv: tuple  # 3 x (B, T, N, H) float32
    ct: np.ndarray  # cotangent of the output
    rows: np.ndarray  # query rows the reference covers
    ref: dict  # out, dq (and dk, dv when every row is covered), on those rows


def inputs(T):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((B, T, N, H), np.float32) for _ in range(4)]


def problem(T: int, causal: bool) -> Problem:
    q, k, v, ct = inputs(T)
    rows = np.arange(T) if T <= FULL_CHECK_T else np.linspace(0, T - 1, 256).astype(int)

    @jax.jit
    def ref(q, k, v, ct):
        def attend(q, k, v):
            logits = jnp.einsum("btnh,bsnh->bnts", q, k, precision="highest") / np.sqrt(H)
            if causal:
                logits = jnp.where(rows[:, None] >= np.arange(T)[None, :], logits, -jnp.inf)
            return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, -1), v,
                              precision="highest")
        out, vjp = jax.vjp(attend, q, k, v)
        return out, *vjp(ct)

    out, dq, dk, dv = ref(q[:, rows], k, v, ct[:, rows])
    want = {"out": out, "dq": dq} | ({"dk": dk, "dv": dv} if len(rows) == T else {})
    return Problem(T, causal, (q, k, v), ct, rows, {n: np.asarray(a) for n, a in want.items()})


def check(p: Problem, out, dq, dk, dv) -> dict:
    got = {"out": out, "dq": dq, "dk": dk, "dv": dv}
    return agreement({n: (np.asarray(got[n])[:, p.rows] if n in ("out", "dq") else got[n], ref)
                      for n, ref in p.ref.items()}, TOL)


def jax_attention(name: str, causal: bool):
    impl = IMPLS[name]
    if impl == "jax.nn":
        return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                            implementation="xla")
    return lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, is_causal=causal,
                                                              implementation=impl)


def jax_grad(f, ct):
    return jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) * ct), (0, 1, 2)))


def jax_impl(name: str, p: Problem) -> Impl:
    f = jax_attention(name, p.causal)
    fwd, grad = jax.jit(f), jax_grad(f, jnp.asarray(p.ct))
    qkv = [jnp.asarray(a) for a in p.qkv]
    return Impl(fwd=lambda: block(fwd(*qkv)), fwd_bwd=lambda: block(grad(*qkv)),
                check=lambda: check(p, fwd(*qkv), *grad(*qkv)))


def torch_impl(p: Problem) -> Impl:
    torch = import_torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    tq, tk, tv, tct = (torch.from_numpy(a).transpose(1, 2).contiguous()  # (B, N, T, H)
                       for a in (*p.qkv, p.ct))

    def fwd():
        with torch.no_grad():
            return sdpa(tq, tk, tv, is_causal=p.causal)

    def fwd_bwd():
        q, k, v = (t.clone().requires_grad_(True) for t in (tq, tk, tv))
        out = sdpa(q, k, v, is_causal=p.causal)
        (out * tct).sum().backward()
        return out, q.grad, k.grad, v.grad

    def check_():
        return check(p, *(t.detach().transpose(1, 2).numpy() for t in fwd_bwd()))

    return Impl(fwd=fwd, fwd_bwd=fwd_bwd, check=check_)


def make(name: str, p: Problem) -> Impl:
    return torch_impl(p) if name == "torch_sdpa" else jax_impl(name, p)


def speed_rows(T: int, causal: bool, rounds: int, skipped: dict) -> list[dict]:
    p = problem(T, causal)
    makers = {n: partial(make, n, p) for n in IMPLS if n not in skipped}
    case = f"T={T}" + (" causal" if causal else "")
    print(f"attention {case}", flush=True)
    note = {}
    if T >= 8192:
        note = {"note": f"T={T}: {rounds} rounds and no warmup beyond the checking call and "
                        "the settling one (a dense fwd+bwd takes seconds and ~9-13 GB here)"}
    # One settling call before each timed one: the dense paths free large buffers, and the
    # call timed right after them read up to 1.9x its time elsewhere in the rotation.
    return [{"panel": f"float32, {mode}", "case": case, "dtype": "float32", "mode": mode,
             "params": {"B": B, "T": T, "S": T, "N": N, "H": H, "causal": causal},
             "skipped": skipped, **note, **row}
            for mode, row in measure(makers, BASELINE, rounds, warmup=0 if note else 1,
                                     settle=1).items()]


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise OSError(f"no {field} in /proc/self/status")


def memory_child(name: str, T: int) -> None:
    """In a fresh process: compile, reset the peak, run one fwd+bwd; print the rise as JSON."""
    q, k, v, ct = inputs(T)
    if name == "torch_sdpa":
        run = torch_impl(Problem(T, False, (q, k, v), ct, np.arange(0), {})).fwd_bwd
        xla_temp = None
    else:
        compiled = jax_grad(jax_attention(name, False), jnp.asarray(ct)).lower(
            q, k, v).compile()
        analysis = compiled.memory_analysis()
        xla_temp = None if analysis is None else analysis.temp_size_in_bytes / 2**20
        args = [jnp.asarray(a) for a in (q, k, v)]
        run = lambda: block(compiled(*args))  # noqa: E731
    peak_before = _rss_mib("VmHWM")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size (Linux)
    before = _rss_mib("VmRSS")
    run()
    print(json.dumps({"run_peak_mib": _rss_mib("VmHWM") - before, "rss_before_run_mib": before,
                      "peak_before_run_mib": peak_before, "xla_temp_mib": xla_temp}))


def memory_row(T: int, skipped: dict, names=tuple(IMPLS)) -> dict:
    results, failed = {}, {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))

    def start(name):
        return subprocess.Popen(
            [sys.executable, "-m", "benchmarks.attention", "--memory-child", name, str(T)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)

    names = [n for n in names if n not in skipped]
    # Each process measures its own peak, so small probes may run side by side; large ones
    # (gigabytes each at T=8192) run one at a time.
    procs = {n: start(n) for n in names} if T <= 2048 else {}
    for name in names:
        proc = procs.get(name) or start(name)
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            failed[name] = (err.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            print(f"  FAILED {name}: {failed[name]}", flush=True)
            continue
        results[name] = json.loads(out.strip().splitlines()[-1])
    base = results.get(BASELINE, {}).get("run_peak_mib")
    for r in results.values():
        r["ratio"] = r["run_peak_mib"] / base if base else None
    return {"panel": "peak memory, fwd+bwd", "case": f"T={T}", "dtype": "float32",
            "mode": "fwd+bwd", "metric": "run_peak_mib", "baseline": BASELINE,
            "params": {"B": B, "T": T, "S": T, "N": N, "H": H, "causal": False},
            "results": results, "failed": failed, "skipped": skipped, "check": {},
            "note": "rise of the resident memory during one fwd+bwd in a fresh process, after "
                    "compilation (the peak is reset before the run)"}


TARGETS = ("the chunked path (portable_auto) within 1.2x of PyTorch SDPA's fwd+bwd time at "
           "T=2048 and T=8192, causal and not; its peak memory not above PyTorch's")


def targets(rows: list[dict]) -> list[dict]:
    """`TARGETS`, checked on every row they concern (see `_harness.goal`)."""
    out = []
    for row in rows:
        torch = row["results"].get("torch_sdpa", {}).get("ratio")
        if not torch:
            continue
        if row["mode"] == "fwd+bwd" and row.get("metric") == "median_ms" and (
                row["params"]["T"] >= 2048):
            out += goal("fwd+bwd: ours / PyTorch SDPA's time <= 1.2", row, 1 / torch, 1.2,
                        at_least=False)
        elif row.get("metric") == "run_peak_mib":
            out += goal("fwd+bwd peak memory: ours / PyTorch SDPA's <= 1", row, 1 / torch, 1.0,
                        at_least=False)
    return out


def run(quick: bool, rounds: int | None = None) -> dict:
    skipped = {} if import_torch() else {"torch_sdpa": "torch is not installed"}
    cases = [(256, True)] if quick else [(T, c) for T in ROUNDS for c in (False, True)]
    rows = []
    for T, causal in cases:
        for row in speed_rows(T, causal, rounds or (3 if quick else ROUNDS[T]), skipped):
            rows.append(row)
            print_row("attention", row)
    print("attention memory", flush=True)
    rows.append(memory_row(1024, skipped, (BASELINE, "jax_nn_xla", "torch_sdpa")) if quick
                else memory_row(8192, skipped))
    print_row("attention", rows[-1])
    return {"family": "attention", "title": "Attention, CPU", "rows": rows,
            "targets": {"about": TARGETS, "rows": targets(rows)},
            "about": f"B={B}, N={N} heads, head dim {H}, float32, S=T. portable_auto is "
                     "portable_rnn.dot_product_attention(implementation=None). Checked against a "
                     "float32 reference before timing."}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory-child"]:
        memory_child(sys.argv[2], int(sys.argv[3]))

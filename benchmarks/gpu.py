"""One CUDA GPU: cuDNN (through portable_rnn) vs the pure-JAX paths, LSTM and attention.

    python -m benchmarks.gpu [--quick] [--out benchmarks/results/gpu.json]   # a few minutes
    python -m benchmarks.gpu --dry-run     # on a CPU: the same plumbing, tiny, cuDNN rows left out

All rows time forward+backward under jit (gradients in the inputs and weights), except vmap.
Each implementation's output and input gradient are checked before it is timed (against the
scan path at float32 HIGHEST, or the dense attention path).
- dtype: cuDNN fp32 (TF32 allowed, and HIGHEST), scan fp32, scan bf16, bf16 upcast to cuDNN fp32
  (`policy(lstm_low_precision="upcast")`), Flax OptimizedLSTMCell fp32.
- crossover: small batches and short sequences, forward+backward and forward only (inference),
  cuDNN fp32 vs scan fp32 (both TF32) and scan bf16: where the scan path beats JAX's cuDNN call
  (which copies `seq_lengths` to the host and synchronises on every call).
- gru: the scan GRU (no cuDNN GRU in JAX) fp32 and bf16 vs Flax GRUCell in nn.RNN.
- dropout between layers (L=2): cuDNN as one 2-layer call without dropout (the speed of light),
  two single-layer cuDNN calls with portable_rnn's masks (what the router does), scan with dropout.
- vmap: a vmapped call folded into one cuDNN call vs a Python loop of calls (forward).
- attention, bf16, causal: stock cuDNN (jax.nn) at batch dim 0; portable_rnn's cuDNN wrapper at
  batch dim 0, and vmapped over axis 1 (the heads axis of (B, N, T, H) arrays, where the stock
  call raises); the dense ("xla") and chunked paths.
- attention choices made without a GPU, to confirm here: odd T=S=197 (cuDNN forward with the
  gradient on the xla path, what the router does, vs xla and chunked throughout), and a (B, 1,
  1, S) padding mask broadcast to (T, S) for cuDNN vs the xla path.
- torch: the anchor, PyTorch's `nn.LSTM`, `nn.GRU` and `nn.RNN` on cuDNN against portable_rnn
  (its automatic choice, the scan path) and portable_rnn's own cuDNN call (`cudnn_ffi`, asked
  for; left out with the reason where it cannot serve a row, e.g. on a CPU), bfloat16, float32
  (TF32) and float16, forward+backward and forward (`benchmarks.gpu_torch`);
  `--torch-budget` seconds bound it (rows in order of priority: bfloat16 first). Run it first:
  ``python -m benchmarks.gpu --only torch``.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

import portable_rnn

from . import gpu_torch
from ._harness import agreement, environment, interleaved, write_json
from .lstm import Case, FlaxStack, flax_params

SHAPES = [(64, 256, 512, 512, 1), (16, 1024, 256, 1024, 2)]
QUICK = [(8, 32, 64, 64, 1)]
CROSSOVER = [(1, 16, 64, 64), (8, 64, 128, 128), (32, 128, 256, 256), (64, 256, 512, 512),
             (128, 256, 512, 512), (256, 128, 1024, 1024), (32, 512, 1024, 1024)]
FAMILIES = ("torch", "dtype", "crossover", "dropout", "vmap", "attention", "gru")
ATTENTION_T = (1024, 4096)


def _grad_fn(f):
    return jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w).astype(jnp.float32) ** 2), (0, 1)))


FAILED: list[str] = []


def _guard(name, check, *args):
    """`check(*args)`'s errors, or None (reported) when it raises: the row is not timed."""
    try:
        return check(*args)
    except Exception as e:  # noqa: BLE001 - reported, and the other rows still run
        FAILED.append(f"{name}: {type(e).__name__}: {e}")
        print(f"  FAILED {FAILED[-1]}", flush=True)
        return None


def _agree(f, g, args, ref_out, ref_grad, tol, layout=lambda a: a):
    """`f`'s output and `g`'s first gradient (brought to the reference's layout) vs the
    references."""
    out, grad = (layout(a).astype(jnp.float32) for a in (jax.jit(f)(*args), g(*args)[0]))
    return agreement({"out": (out, ref_out), "grad": (grad, ref_grad)}, tol)


def _checked(impls, args, ref_name, tol):
    """Jitted gradients of `impls` after checking each one's output and first gradient against
    `impls[ref_name]`; returns ({name: timed callable}, {name: errors}). An implementation that
    disagrees (or fails) is reported and left out."""
    ref = impls[ref_name]
    ref_out, ref_grad = jax.jit(ref)(*args), _grad_fn(ref)(*args)[0]
    fns, checks = {}, {}
    for name, f in impls.items():
        g = _grad_fn(f)
        checks[name] = _guard(name, _agree, f, g, args, ref_out, ref_grad, tol(name))
        if checks[name] is not None:
            fns[name] = partial(lambda g: jax.block_until_ready(g(*args)), g)
    return fns, checks


def _tol(name):  # relative to max |reference|; TF32 and bfloat16 round the matmul inputs
    return 0.2 if "bf16" in name else 1e-3 if "highest" in name or name == "scan_fp32" else 5e-2


def dtype_rows(B, T, I, H, L, dry):
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (B, T, I))
    w = portable_rnn.init_lstm_weight(kw, I, H, L, False)
    z = jnp.zeros((L, B, H))

    def ours(impl, dtype=jnp.float32, precision=None, low_precision="scan"):
        def f(x, w):
            with portable_rnn.policy(lstm_low_precision=low_precision):
                return portable_rnn.lstm(x.astype(dtype), z.astype(dtype), z, w, None, I, H, L,
                                         0.0, False, precision, implementation=impl)[0]
        return f

    model = FlaxStack(nn.OptimizedLSTMCell, H, L, False)
    impls = {"cudnn_fp32_tf32": ours("cudnn"),
             "cudnn_fp32_highest": ours("cudnn", precision=lax.Precision.HIGHEST),
             "scan_fp32": ours("scan", precision=lax.Precision.HIGHEST),
             "scan_fp32_tf32": ours("scan"),
             "scan_bf16": ours(None, jnp.bfloat16),
             "cudnn_bf16_upcast": ours(None, jnp.bfloat16, low_precision="upcast"),
             "flax_fp32": lambda x, w: model.apply(flax_params(w, Case(B, T, I, H, L)), x)}
    if dry:
        impls = {k: v for k, v in impls.items() if "cudnn" not in k}
    return _checked(impls, (x, w), "scan_fp32", _tol)


def crossover_rows(B, T, I, H):
    """cuDNN fp32 vs the scan path at one (small) shape: ({"fwd+bwd": fns, "fwd": fns},
    checks); forward only is inference."""
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (B, T, I))
    w = portable_rnn.init_lstm_weight(kw, I, H, 1, False)
    z = jnp.zeros((1, B, H))

    def ours(impl, dtype=jnp.float32):
        return lambda x, w: portable_rnn.lstm(x.astype(dtype), z.astype(dtype), z, w, None, I,
                                              H, 1, 0.0, False, implementation=impl)[0]

    impls = {"cudnn_fp32": ours("cudnn"), "scan_fp32": ours("scan"),
             "scan_bf16": ours("scan", jnp.bfloat16)}
    fns, checks = _checked(impls, (x, w), "cudnn_fp32", lambda name: _tol(name + "_tf32"))
    forward = {name: partial(lambda fwd: jax.block_until_ready(fwd(x, w)), jax.jit(f))
               for name, f in impls.items() if name in fns}
    return {"fwd+bwd": fns, "fwd": forward}, checks


def gru_rows(B, T, I, H, L):
    """The scan GRU (JAX has no cuDNN GRU) vs Flax `nn.RNN(nn.GRUCell)` with the same weights."""
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (B, T, I))
    w = portable_rnn.init_gru_weight(kw, I, H, L, False)
    z = jnp.zeros((L, B, H))

    def ours(dtype=jnp.float32, precision=None):
        return lambda x, w: portable_rnn.gru(x.astype(dtype), z.astype(dtype), w, None, I, H, L,
                                             0.0, False, precision)[0]

    model = FlaxStack(nn.GRUCell, H, L, False)
    cells = portable_rnn.gru_weights_to_flax(w, I, H, L, False)
    params = {"params": {f"cell_{p}": c["params"]["cell"] for p, c in enumerate(cells)}}

    def flax_fp32(x, w):
        del w  # the same weights, as Flax parameters
        return model.apply(params, x)

    impls = {"scan_fp32": ours(precision=lax.Precision.HIGHEST), "scan_fp32_tf32": ours(),
             "scan_bf16": ours(jnp.bfloat16), "flax_fp32_tf32": flax_fp32}
    return _checked(impls, (x, w), "scan_fp32", _tol)


def dropout_rows(B, T, I, H):
    L = 2
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (B, T, I))
    w = portable_rnn.init_lstm_weight(kw, I, H, L, False)
    z = jnp.zeros((L, B, H))
    key = jax.random.key(3)

    def f(impl, rate):
        return lambda x, w: portable_rnn.lstm(x, z, z, w, None, I, H, L, rate, False,
                                              dropout_rng=key, implementation=impl)[0]

    fast, fast_checks = _checked({"cudnn_2layer_call_no_dropout": f("cudnn", 0.0),
                                  "scan": f("scan", 0.0)}, (x, w), "scan", _tol)
    fns, checks = _checked({"cudnn_per_layer_dropout": f("cudnn", 0.2),
                            "scan_dropout": f("scan", 0.2)}, (x, w), "scan_dropout", _tol)
    fast.pop("scan", None)
    return fast | fns, fast_checks | checks


def vmap_rows(B, T, I, H, V=4):
    kx, kw = jax.random.split(jax.random.key(0))
    xs = jax.random.normal(kx, (B, V, T, I))  # vmapped over axis 1
    w = portable_rnn.init_lstm_weight(kw, I, H, 1, False)
    z = jnp.zeros((1, B, H))

    def one(x):
        return portable_rnn.lstm(x, z, z, w, None, I, H, 1, 0.0, False)[0]

    folded = jax.jit(jax.vmap(one, in_axes=1, out_axes=1))
    looped = jax.jit(lambda xs: jnp.stack([one(xs[:, v]) for v in range(V)], axis=1))
    checks = _guard("cudnn_vmap_axis1_folded_fwd", lambda: agreement(
        {"out": (folded(xs), looped(xs))}, 1e-4))
    fns = {"cudnn_vmap_axis1_folded_fwd": lambda: jax.block_until_ready(folded(xs)),
           "cudnn_python_loop_fwd": lambda: jax.block_until_ready(looped(xs))}
    return (fns if checks else {}), checks


def attention_rows(T, dry, B=4, N=8, H=64):
    ks = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (B, T, N, H), jnp.bfloat16) for kk in ks)
    heads_first = [a.transpose(0, 2, 1, 3) for a in (q, k, v)]  # (B, N, T, H)

    def ours(impl):
        return lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, is_causal=True,
                                                                  implementation=impl)

    def per_head(q, k, v):  # (B, T, H) slices of the heads axis
        return ours("cudnn")(q[:, :, None], k[:, :, None], v[:, :, None])[:, :, 0]

    vmapped = jax.vmap(per_head, in_axes=1, out_axes=1)
    impls = {"stock_cudnn_bdim0": lambda q, k, v: jax.nn.dot_product_attention(
                 q, k, v, is_causal=True, implementation="cudnn"),
             "ours_cudnn_bdim0": ours("cudnn"),
             # the inputs arrive heads-first; the transposes are the caller's, not timed
             "ours_cudnn_vmap_axis1": (vmapped, heads_first),
             "ours_xla": ours("xla"), "ours_chunked": ours("chunked")}
    if dry:
        impls = {k: v for k, v in impls.items() if "cudnn" not in k}
    ref = impls["ours_xla"]
    ref_out = jax.jit(ref)(q, k, v).astype(jnp.float32)
    ct = jax.random.normal(jax.random.key(1), q.shape, jnp.float32)

    def grad_of(f, ct):
        return jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * ct),
                                (0, 1, 2)))

    def btnh(a):  # (B, N, T, H) <-> (B, T, N, H)
        return a.transpose(0, 2, 1, 3)

    ref_dq = grad_of(ref, ct)(q, k, v)[0]
    fns, checks = {}, {}
    for name, f in impls.items():
        f, args = f if isinstance(f, tuple) else (f, (q, k, v))
        layout = btnh if args is heads_first else (lambda a: a)
        g = grad_of(f, layout(ct))
        checks[name] = _guard(name, _agree, f, g, args, ref_out, ref_dq, 5e-2, layout)
        if checks[name] is not None:
            fns[name] = partial(lambda g, args: jax.block_until_ready(g(*args)), g, args)
    return fns, checks


def attention_choice_rows(T, masked, dry, B=4, N=8, H=64):
    """A router choice that only a GPU can confirm: the automatic route (cuDNN forward with an
    xla gradient for odd T; a broadcast padding mask) vs the portable paths throughout."""
    ks = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (B, T, N, H), jnp.bfloat16) for kk in ks)
    lengths = jnp.array([T, T // 2, T - 3, 7][:B])
    mask = (jnp.arange(T)[None, None, None, :] < lengths[:, None, None, None]) if masked else None

    def ours(impl):
        return lambda q, k, v: portable_rnn.dot_product_attention(
            q, k, v, mask=mask, is_causal=not masked, implementation=impl)

    impls = {"auto": ours(None), "ours_xla": ours("xla"), "ours_chunked": ours("chunked")}
    if dry:
        impls.pop("auto")
    ct = jax.random.normal(jax.random.key(1), q.shape, jnp.float32)

    def grad(f):
        return jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * ct),
                                (0, 1, 2)))

    ref = impls["ours_xla"]
    ref_out, ref_dq = jax.jit(ref)(q, k, v).astype(jnp.float32), grad(ref)(q, k, v)[0]
    fns, checks = {}, {}
    for name, f in impls.items():
        g = grad(f)
        checks[name] = _guard(name, _agree, f, g, (q, k, v), ref_out, ref_dq, 5e-2)
        if checks[name] is not None:
            fns[name] = partial(lambda g: jax.block_until_ready(g(q, k, v)), g)
    return fns, checks


ABOUT = {
    "dtype": "LSTM forward+backward, one shape per row: cuDNN float32 (TF32, HIGHEST), the scan "
             "path (HIGHEST, TF32, bfloat16), bfloat16 upcast to cuDNN "
             "(`policy(lstm_low_precision=\"upcast\")`) and Flax `OptimizedLSTMCell`.",
    "crossover": "LSTM, one layer, float32 with TF32 on both paths (and the scan path in "
                 "bfloat16): forward+backward (training) and forward only (inference).",
    "dropout": "LSTM, 2 layers: cuDNN as one call without dropout (the speed of light), cuDNN as "
               "one call per layer with portable_rnn's masks, the scan path with dropout.",
    "vmap": "LSTM forward vmapped over axis 1: folded into one cuDNN call vs a Python loop.",
    "attention": "Causal bfloat16 attention forward+backward: stock `jax.nn` cuDNN, "
                 "portable_rnn's cuDNN wrapper (and vmapped over the heads axis), dense (xla) "
                 "and chunked.",
    "attention_odd_T": "Odd T=S: the automatic route (cuDNN forward, xla gradient) vs xla and "
                       "chunked throughout.",
    "attention_pad_mask": "A (B, 1, 1, S) padding mask: the automatic route (cuDNN) vs xla and "
                          "chunked.",
    "gru": "GRU forward+backward (JAX has no cuDNN GRU): the scan path vs Flax `GRUCell` in "
           "`nn.RNN`, the same weights.",
    "torch": "The anchor: PyTorch's cuDNN `nn.LSTM`, `nn.GRU`, `nn.RNN` (tanh) against "
             "portable_rnn (its automatic choice) and portable_rnn's own cuDNN call "
             "(`cudnn_ffi`), the same weights; one layer, one direction unless the shape says "
             "L=2. In brackets: portable_rnn's time / PyTorch's.",
}


def _torch_markdown(rows: list[dict]) -> list[str]:
    lines = ["| cell | dtype | shape | mode | portable_rnn | PyTorch | ours / PyTorch | µs per "
             "step (ours, PyTorch) | TFLOP/s (% of bf16 peak), ours / PyTorch | PyTorch's cuDNN "
             "algorithm (fwd, bwd) | `cudnn_ffi` (/ PyTorch) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r, alg = row["results"], row["pytorch_algorithm"]
        ours, theirs = r.get("portable_rnn"), r.get("torch")
        if not ours or not theirs:
            continue

        def pct(s):
            return "" if s.get("percent_of_bf16_peak") is None else (
                f" ({s['percent_of_bf16_peak']:.1f}%)")

        shape = "(" + ", ".join(map(str, row["shape"])) + ")"
        ffi = r.get(gpu_torch.FFI)
        ffi_cell = (f"{ffi['median_ms']:.3f} ms ({ffi['median_ms'] / theirs['median_ms']:.2f})"
                    if ffi else "skipped")
        lines.append(
            f"| {row['cell']} | {row['dtype']} | {shape} | {row['mode']} | "
            f"{ours['median_ms']:.3f} ms | {theirs['median_ms']:.3f} ms | "
            f"{ours['median_ms'] / theirs['median_ms']:.2f} | "
            f"{ours['us_per_step']:.1f}, {theirs['us_per_step']:.1f} | "
            f"{ours['tflops']:.3g}{pct(ours)} / {theirs['tflops']:.3g}{pct(theirs)} | "
            f"{alg['forward']}, {alg['backward']} | {ffi_cell} |")
    return lines


def markdown(payload: dict) -> str:
    """The rows of a GPU run as Markdown tables, one per family: median ms and (ratio to the
    row's baseline)."""
    env = payload["environment"]
    lines = [f"{env.get('device_kind')} ({payload['capabilities']}), jax {env.get('jax')}, "
             f"flax {env.get('flax')}, {env.get('time')}; medians of {payload['rounds']} "
             "interleaved rounds, in brackets relative to the row's first column (lower is "
             "better). Every implementation's output and first gradient were checked against "
             "a reference before it was timed.", ""]
    families: dict[str, list[dict]] = {}
    for row in payload["rows"]:
        families.setdefault(row["family"], []).append(row)
    for family, rows in families.items():
        if family == "torch":
            peak = payload.get("bf16_matmul_peak_tflops")
            lines += [f"**torch**: {ABOUT['torch']} A bfloat16 8192^3 matmul measured "
                      f"{peak:.3g} TFLOP/s here." if peak else f"**torch**: {ABOUT['torch']}",
                      "", *_torch_markdown(rows), ""]
            continue
        names = [rows[0]["baseline"]]
        for row in rows:
            names += [n for n in row["results"] if n not in names]
        lines += [f"**{family}**: {ABOUT.get(family, '')}", "",
                  "| shape | mode | " + " | ".join(f"`{n}`" for n in names) + " |",
                  "|---|---|" + "---|" * len(names)]
        for row in rows:
            cells = [f"{row['results'][n]['median_ms']:.2f} ms ({row['results'][n]['ratio']:.2f})"
                     if n in row["results"] else "" for n in names]
            shape = "(" + ", ".join(map(str, row["shape"])) + ")"
            lines.append(f"| {shape} | {row['mode']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"- FAILED {line}" for line in payload.get("failed", [])]
    return "\n".join(lines).rstrip() + "\n"


def torch_rows(args, rounds, rows, extra, save):
    """The torch family: PyTorch's cuDNN RNNs against portable_rnn, bfloat16 rows first, until
    `args.torch_budget` seconds are spent."""
    try:
        import torch
    except ImportError:
        print("torch: PyTorch is not installed; its rows are left out", flush=True)
        extra["torch_skipped"] = "PyTorch is not installed"
        return
    dry = args.dry_run
    if dry:
        device, cudnn_version = gpu_torch.DRY_DEVICE, 91300
    else:
        props = torch.cuda.get_device_properties(0)
        device = {"major": props.major, "minor": props.minor,
                  "multi_processor_count": props.multi_processor_count}
        cudnn_version = torch.backends.cudnn.version()
    peak = gpu_torch.matmul_peak(n=512 if dry else 8192)
    extra.update(bf16_matmul_peak_tflops=peak, torch=torch.__version__,
                 torch_cudnn=None if dry else cudnn_version, torch_device=device)
    start = time.perf_counter()
    dtypes = ("bfloat16", "float32") if dry else gpu_torch.DTYPES
    shapes = gpu_torch.DRY_SHAPES if dry or args.quick else gpu_torch.SHAPES
    for dtype in dtypes:
        for cell in gpu_torch.CELLS:
            for shape in shapes:
                if time.perf_counter() - start > args.torch_budget:
                    extra["torch_budget_spent"] = True
                    print(f"torch: {args.torch_budget:.0f} s spent; the remaining rows are "
                          "left out", flush=True)
                    return
                name = f"torch {cell} {dtype} {shape}"
                made = _guard(name, gpu_torch.rows, torch, cell, shape, dtype, dry)
                if made is None:
                    continue
                modes, checks = made
                for mode, fns in modes.items():
                    stats = interleaved(fns, rounds=rounds, warmup=2)
                    info = gpu_torch.describe(cell, shape, dtype, mode, stats, peak, device,
                                              cudnn_version)
                    rows.append({"family": "torch", "cell": cell, "dtype": dtype,
                                 "shape": shape, "mode": mode, "baseline": "torch",
                                 "results": stats, "check": checks, **info})
                    ratio = stats["portable_rnn"]["median_ms"] / stats["torch"]["median_ms"]
                    ffi = stats.get(gpu_torch.FFI)
                    ffi_text = (f", cudnn_ffi/torch="
                                f"{ffi['median_ms'] / stats['torch']['median_ms']:.2f}"
                                if ffi else ", cudnn_ffi skipped: "
                                + checks[gpu_torch.FFI]["skipped"])
                    print(f"torch {cell} {dtype} {shape} {mode}: ours/torch={ratio:.2f}"
                          f"{ffi_text} (torch {info['pytorch_algorithm']['forward']})",
                          flush=True)
                save()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny sizes without the cuDNN rows: checks the script on a CPU")
    p.add_argument("--only", default=",".join(FAMILIES),
                   help=f"comma-separated families (default: all of {','.join(FAMILIES)})")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 20; 5 with "
                                                             "--quick or --dry-run)")
    p.add_argument("--out", default=None, help="default: benchmarks/results/gpu.json "
                                               "(--quick, --dry-run: gpu_quick.json)")
    p.add_argument("--torch-budget", type=float, default=300.0, metavar="S",
                   help="seconds for the torch family (its rows, bfloat16 first, stop when "
                        "they are spent; default 300)")
    args = p.parse_args(argv)
    caps = portable_rnn.capabilities()
    if not args.dry_run and not (caps.platform in ("gpu", "cuda") and caps.cudnn_version):
        print(f"no CUDA GPU with cuDNN here ({caps}); try --dry-run", file=sys.stderr)
        return 2
    small = args.quick or args.dry_run
    out = args.out or f"benchmarks/results/gpu{'_quick' if small else ''}.json"
    rounds = args.rounds or (5 if small else 20)
    rows = []

    extra: dict = {}

    def save():  # after every row too: a run cut short keeps what it measured
        write_json(out, {"benchmark": "gpu", "environment": environment(),
                         "capabilities": str(caps), "rounds": rounds, "dry_run": args.dry_run,
                         "rows": rows, "failed": FAILED, **extra})

    only = set(args.only.split(","))
    if only - set(FAMILIES):
        p.error(f"--only: unknown {sorted(only - set(FAMILIES))}; choose from {FAMILIES}")

    def record(family, shape, fns_checks, baseline, mode="fwd+bwd"):
        fns, checks = fns_checks
        if not fns:
            return
        stats = interleaved(fns, rounds=rounds, warmup=2)
        base = stats.get(baseline, next(iter(stats.values())))["median_ms"]
        for s in stats.values():
            s["ratio"] = s["median_ms"] / base
        rows.append({"family": family, "shape": shape, "mode": mode, "baseline": baseline,
                     "results": stats, "check": checks})
        print(f"{family} {shape}: " + "  ".join(
            f"{k}={v['median_ms']:.2f}ms(x{v['ratio']:.2f})" for k, v in stats.items()),
            flush=True)
        save()

    if "torch" in only:
        torch_rows(args, rounds, rows, extra, save)
    shapes = QUICK if small else SHAPES
    for shape in shapes if "dtype" in only else ():
        record("dtype", shape, dtype_rows(*shape, args.dry_run), "cudnn_fp32_tf32")
    if not args.dry_run and "crossover" in only:
        for shape in ([QUICK[0][:4]] if small else CROSSOVER):
            modes, checks = crossover_rows(*shape)
            for mode, fns in modes.items():
                record("crossover", shape, (fns, checks), "cudnn_fp32", mode=mode)
    B, T, I, H, _ = shapes[0]
    if not args.dry_run and "dropout" in only:
        record("dropout", (B, T, I, H, 2), dropout_rows(B, T, I, H),
               "cudnn_2layer_call_no_dropout")
    if not args.dry_run and "vmap" in only:
        record("vmap", (B // 4 or 1, T, I, H, 1), vmap_rows(B // 4 or 1, T, I, H),
               "cudnn_vmap_axis1_folded_fwd", mode="fwd")
    for T in ((64,) if small else ATTENTION_T) if "attention" in only else ():
        record("attention", (4, T, 8, 64), attention_rows(T, args.dry_run),
               "stock_cudnn_bdim0")
    for family, T, masked in ((("attention_odd_T", 19 if small else 197, False),
                               ("attention_pad_mask", 64 if small else 1024, True))
                              if "attention" in only else ()):
        record(family, (4, T, 8, 64), attention_choice_rows(T, masked, args.dry_run),
               "ours_xla")
    for shape in shapes if "gru" in only else ():
        record("gru", shape, gru_rows(*shape), "flax_fp32_tf32")
    save()
    for line in FAILED:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

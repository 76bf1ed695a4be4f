"""LSTM on CPU: portable_rnn vs Flax cells, jax.experimental.rnn.lstm_ref and PyTorch nn.LSTM.

Every implementation gets the same weights and inputs; outputs and input gradients are checked
against portable_rnn before anything is timed. Timings are interleaved in one process (medians,
p25/p75); the JSON reports ratios against portable_rnn.

    python -m benchmarks.lstm_cpu            # full
    python -m benchmarks.lstm_cpu --quick    # a smoke run in seconds
    python -m benchmarks.lstm_cpu --unroll   # also sweep the scan unroll factor
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from unittest import mock

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import rnn as jrnn

import portable_rnn
from portable_rnn import _lstm_scan

from ._harness import block, environment, interleaved, write_json

# (B, T, I, H, L, bidirectional, ragged)
SHAPES = [
    (32, 128, 256, 256, 1, False, False),
    (32, 128, 256, 256, 2, False, False),
    (8, 512, 128, 512, 1, False, False),
    (1, 1024, 64, 256, 1, False, False),
    (64, 64, 64, 128, 1, True, False),
    (32, 128, 256, 256, 1, False, True),
]
QUICK_SHAPES = [(4, 16, 8, 16, 1, False, False), (4, 16, 8, 16, 2, True, True)]


def _flax_model(cell_cls, hidden, layers, bidirectional):
    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x, seq_lengths=None):
            for _ in range(layers):
                if bidirectional:
                    x = nn.Bidirectional(nn.RNN(cell_cls(hidden)), nn.RNN(cell_cls(hidden)))(
                        x, seq_lengths=seq_lengths)
                else:
                    x = nn.RNN(cell_cls(hidden))(x, seq_lengths=seq_lengths)
            return x

    return Stack()


def _flax_layers(params, layers):
    """Per-layer cell trees of `_flax_model` (its cells are named <Cell>_0, <Cell>_1, ...)."""
    names = sorted(params["params"], key=lambda k: int(k.rsplit("_")[-1]))
    cells = [params["params"][k] for k in names]
    if len(cells) == layers:
        return cells
    return [{"forward_rnn": cells[2 * i], "backward_rnn": cells[2 * i + 1]} for i in range(layers)]


def build(shape, dtype, unrolls=()):
    """{name: (fwd, fwd_bwd)} zero-argument callables, plus each one's (y, dx) for the check."""
    B, T, I, H, L, bidir, ragged = shape
    D = 2 if bidir else 1
    kx, kp, kl = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (B, T, I), jnp.float32).astype(dtype)
    lengths = (jax.random.randint(kl, (B,), T // 4, T + 1).at[0].set(T) if ragged
               else jnp.full((B,), T))
    seq = lengths.astype(jnp.int32) if ragged else None
    model = _flax_model(nn.OptimizedLSTMCell, H, L, bidir)
    fparams = model.init(kp, x[:, :2].astype(jnp.float32))
    w = portable_rnn.lstm_weights_from_flax(_flax_layers(fparams, L))
    zeros = jnp.zeros((L * D, B, H), dtype)
    impls = {}

    def ours(x, w, unroll=None):
        if unroll is None:
            return portable_rnn.lstm(x, zeros, zeros, w, seq, I, H, L, 0.0, bidir)[0]
        mm = None if dtype == jnp.float32 else np.dtype(np.float32)  # as lstm() on CPU
        return _lstm_scan.lstm_scan(x, zeros, zeros, w, seq, I, H, L, 0.0, bidir, None, None,
                                    unroll, mm)[0]

    valid = (jnp.arange(T)[None, :] < lengths[:, None])[..., None]  # Flax leaves padding non-zero

    def _mask(y):
        return jnp.where(valid, y, 0) if ragged else y

    def add_jax(name, f, params):
        f = (lambda x, p, f=f: _mask(f(x, p))) if ragged else f
        fwd = jax.jit(f)
        grad = jax.jit(jax.grad(lambda x, p: jnp.sum(f(x, p).astype(jnp.float32)), (0, 1)))
        impls[name] = (partial(fwd, x, params), partial(grad, x, params),
                       lambda: (fwd(x, params), grad(x, params)[0]))

    add_jax("portable_rnn", ours, w)
    # The same scan differentiated by plain autodiff instead of the hand-written VJP.
    with mock.patch.object(_lstm_scan, "lstm_layer", _lstm_scan.lstm_layer.fun):
        def autodiff(x, w):
            mm = None if dtype == jnp.float32 else np.dtype(np.float32)  # as lstm() on CPU
            return _lstm_scan.lstm_scan.__wrapped__(x, zeros, zeros, w, seq, I, H, L, 0.0,
                                                    bidir, matmul_dtype=mm)[0]
        fwd_ad = jax.jit(autodiff).lower(x, w).compile()
        grad_ad = jax.jit(jax.grad(lambda x, w: jnp.sum(
            _mask(autodiff(x, w)).astype(jnp.float32)), (0, 1))).lower(x, w).compile()
    impls["portable_rnn_autodiff"] = (partial(fwd_ad, x, w), partial(grad_ad, x, w),
                                      lambda: (_mask(fwd_ad(x, w)), grad_ad(x, w)[0]))
    for u in unrolls:
        add_jax(f"portable_rnn_unroll{u}", partial(ours, unroll=u), w)
    if dtype == jnp.float32:
        for name, cell in (("flax_optimized", nn.OptimizedLSTMCell),
                           ("flax_lstmcell", nn.LSTMCell)):
            m = _flax_model(cell, H, L, bidir)
            renamed = {"params": {k.replace("OptimizedLSTMCell", cell.__name__): v
                                  for k, v in fparams["params"].items()}}
            add_jax(name, lambda x, p, m=m: m.apply(p, x, seq_lengths=seq), renamed)
        ref_lengths = lengths.astype(jnp.int32)
        add_jax("lstm_ref", lambda x, w: jrnn.lstm_ref(
            x, zeros, zeros, *jrnn.unpack_lstm_weights(w, I, H, L, bidir), ref_lengths, I, H, L,
            0.0, bidir)[0], w)
    _add_torch(impls, x, w, lengths, shape, dtype)
    return impls


def _add_torch(impls, x, w, lengths, shape, dtype):
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    B, T, I, H, L, bidir, ragged = shape
    tdtype = {jnp.float32: torch.float32, jnp.bfloat16: torch.bfloat16}[dtype]
    mod = torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=bidir).to(tdtype)
    sd = portable_rnn.lstm_weights_to_torch(w, I, H, L, bidir)
    mod.load_state_dict({k: torch.from_numpy(np.array(v)).to(tdtype) for k, v in sd.items()})
    tx = torch.from_numpy(np.array(x.astype(jnp.float32))).to(tdtype)
    tlen = torch.from_numpy(np.array(lengths)).long()

    def run(inp):
        if not ragged:
            return mod(inp)[0]
        packed = torch.nn.utils.rnn.pack_padded_sequence(inp, tlen, batch_first=True,
                                                         enforce_sorted=False)
        return torch.nn.utils.rnn.pad_packed_sequence(mod(packed)[0], batch_first=True,
                                                      total_length=T)[0]

    def fwd():
        with torch.no_grad():
            return run(tx)

    def fwd_bwd():
        inp = tx.clone().requires_grad_(True)
        mod.zero_grad(set_to_none=True)
        run(inp).float().sum().backward()
        return inp.grad

    def check():
        inp = tx.clone().requires_grad_(True)
        y = run(inp)
        y.float().sum().backward()
        return (jnp.asarray(y.detach().float().numpy()), jnp.asarray(inp.grad.float().numpy()))

    impls["torch"] = (fwd, fwd_bwd, check)


def verify(impls, tol):
    y_ref, dx_ref = impls["portable_rnn"][2]()
    report = {}
    for name, (_, _, check) in impls.items():
        y, dx = check()
        err = (float(jnp.max(jnp.abs(y.astype(jnp.float32) - y_ref.astype(jnp.float32)))),
               float(jnp.max(jnp.abs(dx.astype(jnp.float32) - dx_ref.astype(jnp.float32)))))
        if not all(np.isfinite(err)) or max(err) > tol:
            raise AssertionError(f"{name} disagrees with portable_rnn: max |dy|, |dx| = {err}")
        report[name] = {"max_abs_err_y": err[0], "max_abs_err_dx": err[1]}
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--unroll", action="store_true", help="also time unroll 1, 2, 4, 8")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--out", default="benchmarks/results/lstm_cpu.json")
    args = p.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    rounds = args.rounds or (3 if args.quick else 15)
    unrolls = (1, 2, 4, 8) if args.unroll else ()
    rows = []
    for shape in shapes:
        for dtype in (jnp.float32, jnp.bfloat16):
            impls = build(shape, dtype, unrolls)
            errors = verify(impls, 1e-3 if dtype == jnp.float32 else 0.25)
            for mode, idx in (("fwd", 0), ("fwd+bwd", 1)):
                stats = interleaved({k: (lambda f=v[idx]: block(f())) for k, v in impls.items()},
                                    rounds=rounds)
                base = stats["portable_rnn"]["median_ms"]
                for s in stats.values():
                    s["ratio_vs_portable_rnn"] = s["median_ms"] / base
                B, T, I, H, L, bidir, ragged = shape
                row = {"B": B, "T": T, "I": I, "H": H, "L": L, "bidirectional": bidir,
                       "ragged": ragged, "dtype": jnp.dtype(dtype).name, "mode": mode,
                       "results": stats, "check": errors}
                rows.append(row)
                print(f"{shape} {row['dtype']:8s} {mode:8s} " + "  ".join(
                    f"{k}={s['median_ms']:.2f}ms(x{s['ratio_vs_portable_rnn']:.2f})"
                    for k, s in stats.items()), flush=True)
    write_json(args.out, {"benchmark": "lstm_cpu", "environment": environment(),
                          "rounds": rounds, "rows": rows})
    return rows


if __name__ == "__main__":
    main()

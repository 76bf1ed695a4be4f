"""Probes on the chip: (1) the multi-head LSTM's time, forward and forward+backward, by loop
form and backward; (2) segment checkpointing's time and memory by segment length."""

import contextlib
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._src.recurrent.routes.pallas import route as pallas

out = sys.argv[1]
part = sys.argv[2]
res = {"backend": jax.default_backend(), "rows": []}


def save():
    json.dump(res, open(out, "w"), indent=1)


def timed(progs, rounds=7):
    times = {n: [] for n in progs}
    for _ in range(rounds):
        for n, f in progs.items():
            t = time.perf_counter()
            jax.block_until_ready(f())
            times[n].append(1e3 * (time.perf_counter() - t))
    return {n: float(np.median(t)) for n, t in times.items()}


if part == "parts":
    # which part of the training step shrinks with the heads: gradients with respect to x alone
    # (the weight-gradient GEMMs left out by XLA), to the weights alone, to both
    B, T, I, H = 16, 1024, 512, 1024
    z = jnp.zeros((1, B, H), jnp.bfloat16)
    x = jax.random.normal(jax.random.key(1), (B, T, I), jnp.bfloat16)
    progs = {}
    for nh in (1, 4):
        kw = {} if nh == 1 else {"num_heads": nh}
        w = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, 1, False, jnp.bfloat16, **kw)

        def loss(x, w, kw=kw):
            return jnp.sum(
                portable_rnn.lstm(
                    x, z, z, w, None, I, H, 1, 0.0, False, implementation="pallas", **kw
                )[0].astype(jnp.float32)
                ** 2
            )

        for name, f in (
            ("fwd", jax.jit(loss)),
            ("dx", jax.jit(jax.grad(loss, 0))),
            ("dw", jax.jit(jax.grad(loss, 1))),
            ("both", jax.jit(jax.grad(loss, (0, 1)))),
        ):
            jax.block_until_ready(f(x, w))
            progs[f"nh{nh}_{name}"] = lambda f=f, w=w: f(x, w)
            ca = f.lower(x, w).compile().cost_analysis()
            ca = ca[0] if isinstance(ca, list) else ca
            res.setdefault("flops", {})[f"nh{nh}_{name}"] = float((ca or {}).get("flops", -1))
    res["ms"] = timed(progs)
    print(json.dumps(res, indent=1), flush=True)
    save()
elif part == "heads":
    B, T, I, H = 16, 1024, 512, 1024
    z = jnp.zeros((1, B, H), jnp.bfloat16)
    x = jax.random.normal(jax.random.key(1), (B, T, I), jnp.bfloat16)
    progs = {}
    for nh in (1, 4):
        kw = {} if nh == 1 else {"num_heads": nh}
        w = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, 1, False, jnp.bfloat16, **kw)
        forms = (
            {"default": contextlib.nullcontext}
            if nh == 1
            else {
                "default": contextlib.nullcontext,
                "recompute": pallas.recompute_backward,
                "u1_scratch": lambda: pallas.loop_form(1, False),
                "u1_values": lambda: pallas.loop_form(1, True),
                "u4_values": lambda: pallas.loop_form(4, True),
                "u8_values": lambda: pallas.loop_form(8, True),
                "u16_values": lambda: pallas.loop_form(16, True),
            }
        )
        for fname, ctx in forms.items():

            def y(x, w, kw=kw, ctx=ctx):
                with ctx():
                    return portable_rnn.lstm(
                        x, z, z, w, None, I, H, 1, 0.0, False, implementation="pallas", **kw
                    )[0]

            fwd = jax.jit(lambda x, w, y=y: jnp.sum(y(x, w).astype(jnp.float32) ** 2))
            both = jax.jit(
                jax.grad(
                    lambda x, w, y=y: jnp.sum(y(x, w).astype(jnp.float32) ** 2), argnums=(0, 1)
                )
            )
            for mode, f in (
                (("fwd", fwd), ("both", both))
                if fname in ("default", "u1_values", "u8_values")
                else (("both", both),)
            ):
                try:
                    t = time.perf_counter()
                    jax.block_until_ready(f(x, w))
                    c = time.perf_counter() - t
                    progs[f"nh{nh}_{fname}_{mode}"] = lambda f=f, w=w: f(x, w)
                    print(f"compiled nh{nh}_{fname}_{mode} {c:.1f}s", flush=True)
                except Exception as e:
                    res.setdefault("errors", {})[f"nh{nh}_{fname}_{mode}"] = (
                        f"{type(e).__name__}: {e}"[:400]
                    )
    # the scan path with heads, for scale
    w4 = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, 1, False, jnp.bfloat16, num_heads=4)
    sc = jax.jit(
        jax.grad(
            lambda x, w: jnp.sum(
                portable_rnn.lstm(
                    x, z, z, w, None, I, H, 1, 0.0, False, implementation="scan", num_heads=4
                )[0].astype(jnp.float32)
                ** 2
            ),
            argnums=(0, 1),
        )
    )
    jax.block_until_ready(sc(x, w4))
    progs["nh4_scan_both"] = lambda: sc(x, w4)
    res["ms"] = timed(progs)
    print(json.dumps(res["ms"], indent=1), flush=True)
    save()
else:
    B, T, I, H = (8, 16384, 256, 1024) if part == "remat" else (32, 16384, 512, 512)
    dtype = jnp.bfloat16
    z = jnp.zeros((1, B, H), dtype)
    w = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, 1, False)
    S = jax.ShapeDtypeStruct
    d = portable_rnn.explain_lstm(
        S((B, T, I), dtype), S((1, B, H), dtype), S((1, B, H), dtype), w, None, I, H, 1, 0.0, False
    )
    res["auto_notes"] = list(d.notes)
    x = jax.random.normal(jax.random.key(1), (B, T, I), dtype)
    progs = {}
    for every in (
        (None, 128, 512, 1024, 4096, "fwd") if part == "remat" else (None, 128, 256, 1024, "fwd")
    ):
        ctx = (
            portable_rnn.policy(recurrent_memory_fraction=float("inf"))
            if every in (None, "fwd")
            else contextlib.nullcontext()
        )
        with ctx:

            def loss(w, x, every=every):
                y, _, _ = portable_rnn.lstm(
                    x,
                    z,
                    z,
                    w,
                    None,
                    I,
                    H,
                    1,
                    0.0,
                    False,
                    remat_every=None if every == "fwd" else every,
                )
                return jnp.mean(jnp.square(y.astype(jnp.float32)))

            f = jax.jit(loss if every == "fwd" else jax.grad(loss))
            t = time.perf_counter()
            exe = f.lower(w, x).compile()
            c = time.perf_counter() - t
        m = exe.memory_analysis()
        mem = {k: int(getattr(m, f"{k}_size_in_bytes")) for k in ("temp", "argument", "output")}
        name = f"k{every}"
        res["rows"].append({"name": name, "compile_s": c, **mem, "peak": sum(mem.values())})
        print(res["rows"][-1], flush=True)
        progs[name] = lambda exe=exe: exe(w, x)
        save()
    res["ms"] = timed(progs, 3)
    print(json.dumps(res["ms"], indent=1), flush=True)
    save()

"""The CPU scan route's two variants (input projection before the loop, inside it) at four
recurrent calls beyond the routing model's reach (over 4x its largest fitted shape), where the
cell's stated rule decides: forward+backward, medians of 5 interleaved rounds, written to
/tmp/ev/beyond.json (run from the repository root with PYTHONPATH=.)."""
# ruff: noqa: B023 (the closures run within their loop iteration)

import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from benchmarks.routing_grid import _in_loop
from portable_rnn._src.core import routing

m = routing.model("cpu", "recurrent")
print("largest fitted", m.largest, "reach", routing.REACH * m.largest)
CASES = [
    ("lstm", "float32", 64, 256, 256, 512),
    ("gru", "bfloat16", 32, 512, 128, 512),
    ("simple_rnn", "float32", 128, 256, 256, 1024),
    ("lstm", "bfloat16", 32, 512, 256, 768),
]
G = {"lstm": 4, "gru": 3, "simple_rnn": 1}
out = []
for fam, dt, B, T, I, H in CASES:
    size = B * T * H * G[fam] * H
    dt = jnp.dtype(dt)
    x = jax.random.normal(jax.random.key(0), (B, T, I), dt)
    w = getattr(portable_rnn, f"init_{fam}_weight")(jax.random.key(1), I, H, 1, False, dt)
    z = jnp.zeros((1, B, H), dt)
    n = 2 if fam == "lstm" else 1
    fn = getattr(portable_rnn, fam)
    d = getattr(portable_rnn, f"explain_{fam}")(x, *(z,) * n, w, None, I, H, 1, 0.0, False)
    note = next(t for t in d.notes if "input projection" in t)
    progs = {}
    for v in (0, 1):

        def loss(x, w, v=v):
            with _in_loop(v):
                return jnp.sum(
                    fn(x, *(z,) * n, w, None, I, H, 1, 0.0, False)[0].astype(jnp.float32) ** 2
                )

        f = jax.jit(jax.value_and_grad(loss, (0, 1)))
        jax.block_until_ready(f(x, w))
        progs[v] = lambda f=f: f(x, w)
    t = {0: [], 1: []}
    for _ in range(5):
        for v, p in progs.items():
            s = time.perf_counter()
            jax.block_until_ready(p())
            t[v].append(time.perf_counter() - s)
    med = {v: 1e3 * float(np.median(a)) for v, a in t.items()}
    row = dict(
        family=fam,
        dtype=str(dt),
        B=B,
        T=T,
        I=I,
        H=H,
        size=size,
        beyond=size > routing.REACH * m.largest,
        note=note,
        ms={"scan@in_loop=0": med[0], "scan@in_loop=1": med[1]},
    )
    print(json.dumps(row), flush=True)
    out.append(row)
json.dump(out, open("/tmp/ev/beyond.json", "w"), indent=1)

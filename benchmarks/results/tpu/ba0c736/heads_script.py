"""Multi-head recurrence on the chip (bf16, forward+backward, interleaved medians): heads on the
scan path against the single-head layer of the same hidden size (the automatic route: the
Pallas kernel where the model takes it, and the scan path)."""
import json, sys, time
import jax, jax.numpy as jnp, numpy as np
import portable_rnn

tpu = jax.default_backend() == "tpu"
# (family, B, T, I, H, NH)
CASES = [("lstm", 16, 1024, 512, 1024, 4), ("lstm", 32, 512, 256, 1024, 4),
         ("slstm", 16, 1024, 512, 512, 4), ("slstm", 32, 512, 256, 1024, 8),
         ("gru", 16, 1024, 512, 1024, 4)] if tpu else [("lstm", 2, 8, 8, 8, 2)]
rows = []


def program(fam, B, T, I, H, NH, impl):
    k = jax.random.split(jax.random.key(0), 2)
    kw = {} if NH == 1 else {"num_heads": NH}
    w = getattr(portable_rnn, f"init_{fam}_weight")(k[0], I, H, 1, False, jnp.bfloat16, **kw)
    x = jax.random.normal(k[1], (B, T, I), jnp.bfloat16)
    n = len([p for p in __import__("inspect").signature(getattr(portable_rnn, fam)).parameters if p.endswith("_0")])
    z = jnp.zeros((1, B, H), jnp.bfloat16)
    fn = getattr(portable_rnn, fam)

    def loss(x, w):
        y = fn(x, *(z,) * n, w, None, I, H, 1, 0.0, False, implementation=impl, **kw)[0]
        return jnp.sum(y.astype(jnp.float32) ** 2)
    d = getattr(portable_rnn, f"explain_{fam}")(x, *(z,) * n, w, None, I, H, 1, 0.0, False, implementation=impl, **kw)
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), x, w, d.implementation


for fam, B, T, I, H, NH in CASES:
    row = dict(family=fam, B=B, T=T, I=I, H=H, NH=NH, ms={}, routes={}, errors={})
    progs = {}
    for label, nh, impl in ((f"heads{NH}_auto", NH, None), ("single_auto", 1, None), ("single_scan", 1, "scan")):
        try:
            f, x, w, route = program(fam, B, T, I, H, nh, impl)
            jax.block_until_ready(f(x, w))
            progs[label] = (f, x, w)
            row["routes"][label] = route
        except Exception as e:
            row["errors"][label] = f"{type(e).__name__}: {e}"[:400]
    times = {n: [] for n in progs}
    for r in range(7 if tpu else 2):
        for n, (f, x, w) in progs.items():
            t = time.perf_counter(); jax.block_until_ready(f(x, w)); times[n].append(1e3 * (time.perf_counter() - t))
    row["ms"] = {n: float(np.median(t)) for n, t in times.items()}
    h = f"heads{NH}_auto"
    for other in ("single_auto", "single_scan"):
        if h in row["ms"] and other in row["ms"]:
            row[f"{other}_over_heads"] = row["ms"][other] / row["ms"][h]
    print(json.dumps(row), flush=True)
    rows.append(row)
    if len(sys.argv) > 1:
        json.dump(dict(backend=jax.default_backend(), devices=str(jax.devices()), rows=rows), open(sys.argv[1], "w"), indent=1)

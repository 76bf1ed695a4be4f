import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

T, B, NH, DH, G = 1024, 16, 4, 256, 4
H = NH * DH
k1, k2 = jax.random.split(jax.random.key(0))
v = jax.random.normal(k1, (T, B, H), jnp.bfloat16)
dz = jax.random.normal(k2, (T, B, G * H), jnp.bfloat16)
f32 = jnp.float32


def a(v, dz):  # the current batched dot_general
    vv = v.reshape(T, B, NH, DH)
    d = dz.reshape(T, B, G, NH, DH)
    return jax.lax.dot_general(
        vv, d, (((0, 1), (0, 1)), ((2,), (3,))), preferred_element_type=f32
    ).reshape(NH, DH, -1)


def b(v, dz):  # per head and gate, 2-D GEMMs on column slices
    vv = v.reshape(T * B, H)
    d = dz.reshape(T * B, G * H)
    return jnp.stack(
        [
            jnp.concatenate(
                [
                    jnp.dot(
                        vv[:, k * DH : (k + 1) * DH].T,
                        d[:, g * H + k * DH : g * H + (k + 1) * DH],
                        preferred_element_type=f32,
                    )
                    for g in range(G)
                ],
                axis=1,
            )
            for k in range(NH)
        ]
    )


def c(v, dz):  # per head, the gate slices concatenated first
    vv = v.reshape(T * B, H)
    d = dz.reshape(T * B, G * H)
    return jnp.stack(
        [
            jnp.dot(
                vv[:, k * DH : (k + 1) * DH].T,
                jnp.concatenate(
                    [d[:, g * H + k * DH : g * H + (k + 1) * DH] for g in range(G)], axis=1
                ),
                preferred_element_type=f32,
            )
            for k in range(NH)
        ]
    )


def d(v, dz):  # dense, then the diagonal blocks
    full = jnp.dot(
        v.reshape(T * B, H).T, dz.reshape(T * B, G * H), preferred_element_type=f32
    ).reshape(NH, DH, G, NH, DH)
    return jnp.stack([full[k, :, :, k, :] for k in range(NH)]).reshape(NH, DH, -1)


def e(v, dz):  # einsum over T*B flattened
    return jnp.einsum(
        "tnd,tgne->ndge",
        v.reshape(T * B, NH, DH),
        dz.reshape(T * B, G, NH, DH),
        preferred_element_type=f32,
    ).reshape(NH, DH, -1)


def f(v, dz):  # per head and gate via dot_general on 3-D views (no reshape to 2-D)
    vv = v.reshape(T * B, NH, DH)
    dd = dz.reshape(T * B, G, NH, DH)
    return jnp.stack(
        [
            jnp.concatenate(
                [
                    jax.lax.dot_general(
                        vv[:, k], dd[:, g, k], (((0,), (0,)), ((), ())), preferred_element_type=f32
                    )
                    for g in range(G)
                ],
                axis=1,
            )
            for k in range(NH)
        ]
    )


fns = {n: jax.jit(fn) for n, fn in dict(a=a, b=b, c=c, d=d, e=e, f=f).items()}
ref = np.asarray(fns["d"](v, dz))
out = {"shape": dict(T=T, B=B, NH=NH, DH=DH, G=G), "err": {}, "ms": {}}
for n, fn in fns.items():
    out["err"][n] = float(np.max(np.abs(np.asarray(fn(v, dz)) - ref)))
ts = {n: [] for n in fns}
for _r in range(15):
    for n, fn in fns.items():
        t = time.perf_counter()
        jax.block_until_ready(fn(v, dz))
        ts[n].append(1e3 * (time.perf_counter() - t))
out["ms"] = {n: float(np.median(t)) for n, t in ts.items()}
print(json.dumps(out, indent=1))
json.dump(out, open(sys.argv[1], "w"), indent=1)

"""`jax.vmap` over the heads axis: cuDNN fused attention via jax.nn vs portable_rnn, side by side.

The situation of JAX issue reports like "Currently only support batch_dim in [0, None]": a
per-head attention function vmapped over axis 2 of (B, T, N, H) arrays. On a GPU the stock cuDNN
call raises; portable_rnn folds the vmapped axis into the batch and makes one cuDNN call. On a
CPU there is no cuDNN, and portable_rnn says so and takes its pure-JAX path.

    python examples/attention_vmap_heads.py [--seq 256] [--heads 8]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    args = p.parse_args(argv)
    ks = jax.random.split(jax.random.key(0), 3)
    shape = (args.batch, args.seq, args.heads, args.head_dim)
    q, k, v = (jax.random.normal(key, shape, jnp.bfloat16) for key in ks)
    print(f"devices: {jax.devices()}; q/k/v {shape} bfloat16, vmapped over axis 2 (heads)")

    def one_head(attention):  # (B, T, H) slices -> a one-head (B, T, 1, H) call
        return lambda q, k, v: attention(q[:, :, None], k[:, :, None], v[:, :, None])[:, :, 0]

    stock = one_head(lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=True, implementation="cudnn"))
    ours = one_head(lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, is_causal=True))
    try:
        jax.jit(jax.vmap(stock, in_axes=2, out_axes=2))(q, k, v).block_until_ready()
        print("jax.nn (cudnn) under vmap(in_axes=2): ran")
    except Exception as e:  # noqa: BLE001 - the point is to show what the stock call raises
        print(f"jax.nn (cudnn) under vmap(in_axes=2): {type(e).__name__}: "
              f"{str(e).splitlines()[0][:120]}")
    one = jax.ShapeDtypeStruct((args.batch, args.seq, 1, args.head_dim), jnp.bfloat16)
    print(portable_rnn.explain_attention(one, one, one, is_causal=True))
    got = jax.jit(jax.vmap(ours, in_axes=2, out_axes=2))(q, k, v)
    loop = jnp.stack([ours(q[:, :, n], k[:, :, n], v[:, :, n]) for n in range(args.heads)], 2)
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - loop.astype(jnp.float32))))
    print(f"portable_rnn under vmap(in_axes=2): output {got.shape} {got.dtype}; "
          f"max |vmap - per-head loop| = {err:.3g}")
    finite = bool(np.isfinite(np.asarray(got, np.float32)).all())
    print("OK" if err < 1e-2 and finite else "MISMATCH")
    return err


if __name__ == "__main__":
    main()

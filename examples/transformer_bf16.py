"""A small Flax transformer block in bfloat16 with portable_rnn's attention, trained a few steps.

`flax.linen.MultiHeadDotProductAttention(attention_fn=portable_rnn.linen.attention_fn)`: the
block keeps Flax's parameters and API; the attention itself is routed by portable_rnn (cuDNN on
a GPU, the chunked or dense pure-JAX path elsewhere). The task is next-token prediction on
sequences that count up from a random start, which a causal block learns in a few steps.

    python examples/transformer_bf16.py [--steps 60] [--seq 128]
"""

from __future__ import annotations

import argparse
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import portable_rnn
import portable_rnn.linen as plinen


class Block(nn.Module):
    vocab: int
    width: int = 64
    heads: int = 4
    dtype: jnp.dtype = jnp.bfloat16

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, self.width, dtype=self.dtype)(tokens)
        x = x + nn.Embed(tokens.shape[-1], self.width, dtype=self.dtype)(
            jnp.arange(tokens.shape[-1]))
        mask = nn.make_causal_mask(tokens)
        y = nn.LayerNorm(dtype=self.dtype)(x)
        x = x + nn.MultiHeadDotProductAttention(
            num_heads=self.heads, dtype=self.dtype, attention_fn=plinen.attention_fn)(y, mask=mask)
        y = nn.LayerNorm(dtype=self.dtype)(x)
        x = x + nn.Dense(self.width, dtype=self.dtype)(nn.gelu(nn.Dense(
            4 * self.width, dtype=self.dtype)(y)))
        return nn.Dense(self.vocab)(x.astype(jnp.float32))


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=64)
    args = p.parse_args(argv)
    model = Block(args.vocab)
    rng = np.random.default_rng(0)

    def batch():
        start = rng.integers(0, args.vocab, (args.batch, 1))
        return jnp.asarray((start + np.arange(args.seq + 1)) % args.vocab, jnp.int32)

    params = model.init(jax.random.key(0), batch()[:, :-1])
    S = jax.ShapeDtypeStruct((args.batch, args.seq, 4, 16), jnp.bfloat16)
    print(f"devices: {jax.devices()}")
    print(portable_rnn.explain_attention(S, S, S, mask=jax.ShapeDtypeStruct(
        (args.batch, 1, args.seq, args.seq), jnp.bool_)))
    tx = optax.adam(3e-3)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, tokens):
        def loss_fn(params):
            # without `mutable=`, `apply` returns the output alone
            logits = cast(jax.Array, model.apply(params, tokens[:, :-1]))
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for i in range(1, args.steps + 1):
        params, opt_state, loss = step(params, opt_state, batch())
        losses.append(float(loss))
        if i == 1 or i % 20 == 0 or i == args.steps:
            print(f"step {i}: loss {losses[-1]:.3f}", flush=True)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} (uniform guess {np.log(args.vocab):.3f})")
    return losses


if __name__ == "__main__":
    main()

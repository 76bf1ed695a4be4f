"""Train a character-level LSTM language model in bfloat16 with portable_rnn.

The default corpus is the Python standard library's own source (present on every machine, no
download); pass ``--text FILE`` for your own. Parameters stay in float32, the LSTM computes in
bfloat16 with float32 accumulation: exactly the case that `jax.experimental.rnn.lstm` rejects.

    python examples/train_char_lstm.py                 # small defaults, seconds on a CPU
    python examples/train_char_lstm.py --steps 2000 --hidden 512 --layers 2 --batch 64
"""

from __future__ import annotations

import argparse
import glob
import os
import sysconfig
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import portable_rnn

VOCAB = 256  # bytes


def load_corpus(path: str | None, max_bytes: int) -> np.ndarray:
    if path:
        with open(path, "rb") as f:
            data = f.read(max_bytes)
    else:
        files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
        chunks, total = [], 0
        for name in files:
            with open(name, "rb") as f:
                chunks.append(f.read())
            total += len(chunks[-1])
            if total >= max_bytes:
                break
        data = b"".join(chunks)[:max_bytes]
    if len(data) < 1000:
        raise SystemExit(f"corpus too small ({len(data)} bytes); pass --text with a larger file")
    return np.frombuffer(data, np.uint8)


def init_params(key, embed: int, hidden: int, layers: int):
    k_emb, k_lstm, k_out = jax.random.split(key, 3)
    return {
        "embed": jax.random.normal(k_emb, (VOCAB, embed), jnp.float32) * 0.1,
        "lstm": portable_rnn.init_lstm_weight(k_lstm, embed, hidden, layers, False),
        "out_w": jax.random.normal(k_out, (hidden, VOCAB), jnp.float32) / np.sqrt(hidden),
        "out_b": jnp.zeros((VOCAB,), jnp.float32),
    }


def forward(params, tokens, carry, cfg, dropout_rng=None):
    """tokens (B, T) uint8 -> logits (B, T, VOCAB) float32, new carry. Computes in bfloat16."""
    dtype = jnp.dtype(cfg.dtype)
    x = params["embed"][tokens].astype(dtype)
    h0, c0 = carry
    y, h, c = portable_rnn.lstm(x, h0, c0, params["lstm"], None, cfg.embed, cfg.hidden,
                                cfg.layers, cfg.dropout if dropout_rng is not None else 0.0,
                                False, dropout_rng=dropout_rng)
    logits = jnp.dot(y, params["out_w"].astype(dtype), preferred_element_type=jnp.float32)
    return logits + params["out_b"], (h, c)


def zero_carry(cfg, batch):
    return (jnp.zeros((cfg.layers, batch, cfg.hidden), jnp.dtype(cfg.dtype)),
            jnp.zeros((cfg.layers, batch, cfg.hidden), jnp.float32))


def loss_fn(params, batch, cfg, rng=None):
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits, _ = forward(params, inputs, zero_carry(cfg, batch.shape[0]), cfg, rng)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def sample(params, cfg, prompt: bytes, length: int, key, temperature=0.8) -> bytes:
    carry = zero_carry(cfg, 1)
    tokens = jnp.asarray(np.frombuffer(prompt, np.uint8))[None]
    logits, carry = forward(params, tokens, carry, cfg)

    def step(state, key):
        carry, logits = state
        tok = jax.random.categorical(key, logits / temperature)
        new_logits, carry = forward(params, tok[:, None], carry, cfg)
        return (carry, new_logits[:, -1]), tok[0]

    _, out = jax.jit(lambda s, k: jax.lax.scan(step, s, k))(
        (carry, logits[:, -1]), jax.random.split(key, length))
    return prompt + bytes(np.asarray(out, np.uint8).tolist())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", help="training text file (default: the Python stdlib's source)")
    p.add_argument("--max-bytes", type=int, default=400_000)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--embed", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25)
    cfg = p.parse_args(argv)

    data = load_corpus(cfg.text, cfg.max_bytes)
    split = int(len(data) * 0.9)
    train, held_out = data[:split], data[split:]
    print(f"devices: {jax.devices()}  ({jax.default_backend()})")
    print(f"corpus: {len(data):,} bytes ({'--text ' + cfg.text if cfg.text else 'Python stdlib'}); "
          f"train {len(train):,} / held-out {len(held_out):,}")
    print(f"model: {cfg.layers}x LSTM({cfg.hidden}) in {cfg.dtype}, params float32")
    S, dt = jax.ShapeDtypeStruct, jnp.dtype(cfg.dtype)
    n = portable_rnn.get_num_params_in_lstm(cfg.embed, cfg.hidden, cfg.layers, False)
    print(portable_rnn.explain_lstm(
        S((cfg.batch, cfg.seq, cfg.embed), dt), S((cfg.layers, cfg.batch, cfg.hidden), dt),
        S((cfg.layers, cfg.batch, cfg.hidden), jnp.float32), S((n,), jnp.float32), None,
        cfg.embed, cfg.hidden, cfg.layers, cfg.dropout, False, dropout_rng=jax.random.key(0)))

    key = jax.random.key(cfg.seed)
    key, k_init = jax.random.split(key)
    params = init_params(k_init, cfg.embed, cfg.hidden, cfg.layers)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(cfg.lr))
    opt_state = opt.init(params)

    @jax.jit
    def train_step(params, opt_state, batch, rng):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, cfg, rng)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    eval_loss = jax.jit(lambda params, batch: loss_fn(params, batch, cfg))
    rng = np.random.default_rng(cfg.seed)

    def batch_from(arr, n):
        starts = rng.integers(0, len(arr) - cfg.seq - 1, n)
        return jnp.asarray(np.stack([arr[s:s + cfg.seq + 1] for s in starts]))

    first = None
    t0 = time.perf_counter()
    tokens = 0
    for step in range(1, cfg.steps + 1):
        key, k_drop = jax.random.split(key)
        params, opt_state, loss = train_step(params, opt_state, batch_from(train, cfg.batch),
                                             k_drop)
        tokens += cfg.batch * cfg.seq
        if step == 1:
            loss.block_until_ready()
            first = float(loss)
            print(f"step 1: loss {first:.3f} (compiled in {time.perf_counter() - t0:.1f}s)")
            t0, tokens = time.perf_counter(), 0
        elif step % cfg.log_every == 0 or step == cfg.steps:
            loss = float(loss)
            rate = tokens / (time.perf_counter() - t0)
            print(f"step {step}: loss {loss:.3f}  {rate:,.0f} tokens/s", flush=True)
    held = float(np.mean([eval_loss(params, batch_from(held_out, cfg.batch))
                          for _ in range(4)]))
    print(f"held-out loss {held:.3f} (uniform guess: {np.log(VOCAB):.3f}; first step {first:.3f})")
    text = sample(params, cfg, b"def ", 200, key)
    print("sample:\n" + text.decode("utf-8", errors="replace"))
    return held


if __name__ == "__main__":
    main()

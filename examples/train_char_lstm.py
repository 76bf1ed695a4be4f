"""Train a character-level LSTM language model in bfloat16 with portable_rnn's layers.

The default corpus is the Python standard library's own source (on every machine, no download);
``--text FILE`` trains on your own. Parameters stay in float32; the LSTM computes in bfloat16 with
float32 accumulation, exactly the case `jax.experimental.rnn.lstm` rejects. The run prints the
devices and the dispatch decision with its reasons, shows a progress bar with loss and tokens/s,
evaluates on a held-out split, writes a loss-curve PNG, the losses (JSON) and an Orbax
checkpoint, and samples text. ``--resume`` continues from the newest checkpoint in the output
directory. Data-parallel over every device: a `Mesh` over the batch axis with explicit axes (as
the documentation advises for data parallelism), parameters replicated. The loss plot shows
every step's loss under a title with the run's configuration. ``--api`` chooses the layers:
Flax Linen (default), Flax NNX or Equinox; ``--cell gru``, ``--cell rnn`` or ``--cell slstm``
trains a GRU, a simple (tanh) RNN or xLSTM's sLSTM the same way instead, and ``--heads N`` gives
the recurrence N heads (a block-diagonal recurrent matrix, as FlashRNN's).

Several processes (JAX's multi-controller runtime, one process per host): start the same command
on every host with ``--num-processes N --process-id I --coordinator HOST:PORT`` (process 0's
address), or with ``--distributed`` alone where JAX's cluster detection finds them (SLURM, Open
MPI, Kubernetes, Cloud TPU; ``JAX_COORDINATOR_ADDRESS``). The mesh spans every process's
devices, each process feeds its own rows of the global batch, process 0 logs, plots and samples,
and every process writes its shards of the checkpoint. Batches and dropout keys are functions of
the seed and the step, so a run with the same global batch gives the same losses on any number
of processes, and a resumed run the losses of one that never stopped.

With the default arguments a run takes about 40 s on a 2-core CPU (measured with ``time``: Intel
Xeon, jax 0.10.2, 150 steps at about 12,000 tokens/s after a 5 s compilation).

    python examples/train_char_lstm.py                    # small defaults: about 40 s on 2 cores
    python examples/train_char_lstm.py --api nnx --steps 2000 --hidden 512 --batch 64
    python examples/train_char_lstm.py --cell gru --api equinox
    python examples/train_char_lstm.py --cell slstm --heads 4
    python examples/train_char_lstm.py --steps 300 --resume       # 150 more steps
    # two processes on one machine (on two hosts: process 0's HOST:PORT, and I on each):
    A="--num-processes 2 --coordinator localhost:1234"
    python examples/train_char_lstm.py $A --process-id 0 & python examples/train_char_lstm.py $A \
        --process-id 1
"""

from __future__ import annotations

import argparse
import glob
import inspect
import json
import os
import re
import sysconfig
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import portable_rnn
import portable_rnn.linen as plinen
import portable_rnn.nnx as pnnx

VOCAB = 256  # bytes
# nn.Embed's initialiser, for the embedding table below
EMBED_INIT = nn.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)
# --cell: (layer class in portable_rnn.linen / .nnx / .equinox, the functional family for
# explain_*)
CELLS = {"lstm": ("LSTM", "lstm"), "gru": ("GRU", "gru"), "rnn": ("SimpleRNN", "simple_rnn"),
         "slstm": ("SLSTM", "slstm")}


def load_corpus(path: str | None, max_bytes: int) -> np.ndarray:
    if path:
        with open(path, "rb") as f:
            data = f.read(max_bytes)
    else:
        chunks, total = [], 0
        for name in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py"))):
            with open(name, "rb") as f:
                chunks.append(f.read())
            total += len(chunks[-1])
            if total >= max_bytes:
                break
        data = b"".join(chunks)[:max_bytes]
    if len(data) < 1000:
        raise SystemExit(f"corpus too small ({len(data)} bytes); pass --text with a larger file")
    return np.frombuffer(data, np.uint8)


def one_hot(tokens, dtype):
    """The embedding lookup as one-hot rows times the table (a Dense without bias): its output
    is sharded as the tokens over explicit mesh axes, where a gather (`nn.Embed`) raises unless
    told its output sharding."""
    return jax.nn.one_hot(tokens, VOCAB, dtype=dtype)


def data_parallel_mesh(devices):
    """A 1-D mesh over the batch with explicit axes, where JAX has them: shardings are part of
    the types, and portable_rnn runs one cuDNN call per batch shard on GPUs (under auto axes XLA
    replicates the call). Auto axes otherwise. The devices are ordered by process, so that each
    process's devices hold one contiguous block of the batch's rows."""
    devices = sorted(devices, key=lambda d: (d.process_index, d.id))
    explicit = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", None)
    if explicit is None:
        return jax.sharding.Mesh(np.asarray(devices), ("batch",))
    return jax.make_mesh((len(devices),), ("batch",), devices=devices, axis_types=(explicit,))


class LinenModel(nn.Module):
    cell: str
    embed: int
    hidden: int
    layers: int
    dropout: float
    dtype: jnp.dtype
    heads: int = 1

    @nn.compact
    def __call__(self, tokens, carry=None, deterministic=True):
        x = nn.Dense(self.embed, use_bias=False, dtype=self.dtype, kernel_init=EMBED_INIT)(
            one_hot(tokens, self.dtype))
        rnn = getattr(plinen, CELLS[self.cell][0])
        y, carry = rnn(self.hidden, self.layers, dropout=self.dropout, dtype=self.dtype,
                       num_heads=self.heads)(
            x, initial_carry=carry, deterministic=deterministic, return_carry=True)
        logits = nn.Dense(VOCAB)(y.astype(jnp.float32))  # the recurrent layer is the bf16 part
        return logits.astype(jnp.float32), carry


class NNXModel(nnx.Module):
    def __init__(self, cell, embed, hidden, layers, dropout, dtype, rngs, heads=1):
        self.dtype = dtype
        self.embed = nnx.Linear(VOCAB, embed, use_bias=False, dtype=dtype,
                                kernel_init=EMBED_INIT, rngs=rngs)
        rnn = getattr(pnnx, CELLS[cell][0])
        self.rnn = rnn(embed, hidden, layers, dropout=dropout, dtype=dtype, num_heads=heads,
                       rngs=rngs)
        self.out = nnx.Linear(hidden, VOCAB, rngs=rngs)  # the recurrent layer is the bf16 part

    def __call__(self, tokens, carry=None, deterministic=True):
        y, carry = self.rnn(self.embed(one_hot(tokens, self.dtype)), initial_carry=carry,
                            deterministic=deterministic, return_carry=True)
        return self.out(y.astype(jnp.float32)), carry


def equinox_model(cell, embed, hidden, layers, dropout, dtype, key, heads=1):
    """The same model with Equinox: `portable_rnn.equinox`'s layer between two `eqx.nn.Linear`
    (imported here: Equinox is needed only for ``--api equinox``)."""
    import equinox as eqx

    import portable_rnn.equinox as peqx

    class EquinoxModel(eqx.Module):
        embed: eqx.nn.Linear
        rnn: peqx.LSTM | peqx.GRU | peqx.SimpleRNN | peqx.SLSTM  # one of CELLS' layers
        out: eqx.nn.Linear
        dtype: jnp.dtype = eqx.field(static=True)

        def __init__(self, key):
            k_embed, k_rnn, k_out = jax.random.split(key, 3)
            self.embed = eqx.nn.Linear(VOCAB, embed, use_bias=False, key=k_embed)
            self.embed = eqx.tree_at(lambda m: m.weight, self.embed,
                                     EMBED_INIT(k_embed, (embed, VOCAB)))
            self.rnn = getattr(peqx, CELLS[cell][0])(embed, hidden, layers, dropout=dropout,
                                                     dtype=dtype, num_heads=heads,
                                                     return_state=True, key=k_rnn)
            self.out = eqx.nn.Linear(hidden, VOCAB, key=k_out)
            self.dtype = dtype

        def __call__(self, tokens, state=None, *, key=None):
            # (B, T, V) @ (V, E): the Linear layers' weights on the whole batch at once
            x = one_hot(tokens, self.dtype) @ self.embed.weight.astype(self.dtype).T
            y, state = self.rnn(x, state=state, key=key, inference=key is None)
            logits = y.astype(jnp.float32) @ self.out.weight.T + self.out.bias
            return logits, state

    model = EquinoxModel(key)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def apply(params, tokens, carry=None, rng=None):
        return eqx.combine(params, static)(tokens, carry, key=rng)
    return params, apply


def build(cfg, key):
    """(params, apply) with apply(params, tokens, carry, dropout_key) -> (logits, carry)."""
    dtype = jnp.dtype(cfg.dtype)
    if cfg.api == "equinox":
        return equinox_model(cfg.cell, cfg.embed, cfg.hidden, cfg.layers, cfg.dropout, dtype,
                             key, cfg.heads)
    if cfg.api == "linen":
        model = LinenModel(cfg.cell, cfg.embed, cfg.hidden, cfg.layers, cfg.dropout, dtype,
                           cfg.heads)
        params = model.init(key, jnp.zeros((1, 2), jnp.int32))["params"]

        def linen_apply(params, tokens, carry=None, rng=None):
            return model.apply({"params": params}, tokens, carry, deterministic=rng is None,
                               rngs=None if rng is None else {"dropout": rng})
        return params, linen_apply
    model = NNXModel(cfg.cell, cfg.embed, cfg.hidden, cfg.layers, cfg.dropout, dtype,
                     nnx.Rngs(params=key, dropout=jax.random.fold_in(key, 1)), cfg.heads)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def apply(params, tokens, carry=None, rng=None):
        m = nnx.merge(graphdef, params, rest)
        if rng is not None and m.rnn.rngs is not None:  # a fresh dropout key every step
            m.rnn.rngs = nnx.Rngs(dropout=rng)
        return m(tokens, carry, deterministic=rng is None)
    return params, apply


def loss_fn(params, apply, batch, rng=None):
    logits, _ = apply(params, batch[:, :-1], None, rng)
    # One-hot labels, no gather: over explicit axes JAX 0.12 cannot shard the gradient of
    # `softmax_cross_entropy_with_integer_labels`'s gather.
    return optax.softmax_cross_entropy(logits, one_hot(batch[:, 1:], logits.dtype)).mean()


def sample(params, apply, cfg, prompt: bytes, length: int, key, temperature=0.8) -> bytes:
    tokens = jnp.asarray(np.frombuffer(prompt, np.uint8), jnp.int32)[None]
    logits, carry = apply(params, tokens)

    def step(state, key):
        carry, last = state
        tok = jax.random.categorical(key, last / temperature)
        logits, carry = apply(params, tok[:, None], carry)
        return (carry, logits[:, -1]), tok[0]

    _, out = jax.jit(lambda s, k: jax.lax.scan(step, s, k))((carry, logits[:, -1]),
                                                           jax.random.split(key, length))
    return prompt + bytes(np.asarray(out, np.uint8).tolist())


def run_title(cfg, batch_size: int) -> str:
    """The run's configuration, for the plot."""
    heads = f" in {cfg.heads} heads" if cfg.heads > 1 else ""
    return (f"char {CELLS[cfg.cell][0]} ({cfg.api}): {cfg.layers} layers x {cfg.hidden} hidden"
            f"{heads}, "
            f"{cfg.dtype}, batch {batch_size}, seq {cfg.seq}, {cfg.steps} steps")


def write_plot(path, steps, losses, held, title, window=10):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, losses, color="C0", alpha=0.35, linewidth=0.8, label="train, every step")
    if len(losses) >= 2 * window:
        mean = np.convolve(losses, np.ones(window) / window, mode="valid")
        centres = np.asarray(steps[:len(mean)]) + (window - 1) / 2
        ax.plot(centres, mean, color="C0", label=f"train, mean of {window} steps")
    ax.axhline(held, color="C1", linestyle="--", label=f"held-out {held:.3f}")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/byte)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def initialize_distributed(cfg) -> None:
    """Joins JAX's multi-controller runtime when the command line asks for it: the three
    ``--num-processes``/``--process-id``/``--coordinator`` flags, or ``--distributed`` alone
    (JAX's cluster detection fills in what is not given). Before any other JAX call."""
    flags = (cfg.num_processes, cfg.process_id, cfg.coordinator)
    if not cfg.distributed and all(f is None for f in flags):
        return
    jax.distributed.initialize(coordinator_address=cfg.coordinator,
                               num_processes=cfg.num_processes, process_id=cfg.process_id)


def local_rows(sharding, shape) -> slice:
    """The rows of a global batch that this process's devices hold: one contiguous block (the
    mesh orders its devices by process)."""
    rows = sorted({(s[0].start or 0, s[0].stop if s[0].stop is not None else shape[0])
                   for s in sharding.addressable_devices_indices_map(shape).values()})
    start, stop = rows[0][0], rows[-1][1]
    if sum(b - a for a, b in rows) != stop - start:
        raise RuntimeError(f"this process's rows {rows} are not one block")
    return slice(start, stop)


def checkpoint_steps(directory: str) -> list[int]:
    """The steps with a finished checkpoint in `directory` (Orbax writes a step's checkpoint
    under a temporary name and renames it when every process has written its part)."""
    if not os.path.isdir(directory):
        return []
    return sorted(int(n) for n in os.listdir(directory) if re.fullmatch(r"\d+", n))


def checkpoint_items(state) -> dict:
    """The training state as a flat dict of arrays named by their paths: one Orbax item per
    array, the same for the Linen, NNX and Equinox parameter trees and optax's state."""
    leaves = jax.tree_util.tree_leaves_with_path(state)
    return {f"{i:03d}" + re.sub(r"[^A-Za-z0-9_]+", ".", jax.tree_util.keystr(path)).rstrip("."):
            leaf for i, (path, leaf) in enumerate(leaves)}


def save_checkpoint(directory: str, step: int, state) -> str:
    """Writes `state` (sharded arrays) for `step` with Orbax; every process writes its shards."""
    import orbax.checkpoint as ocp

    path = os.path.join(directory, str(step))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, checkpoint_items(state))
    checkpointer.wait_until_finished()
    checkpointer.close()
    return path


def restore_checkpoint(path: str, like):
    """The state saved at `path`, in the structure, dtypes and shardings of `like` (which may
    have been saved by another number of processes: Orbax reads each shard where it goes)."""
    import orbax.checkpoint as ocp

    items = checkpoint_items(like)
    target = {k: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding)
              for k, a in items.items()}
    checkpointer = ocp.StandardCheckpointer()
    restored = checkpointer.restore(path, target)
    checkpointer.close()
    return jax.tree.unflatten(jax.tree.structure(like), [restored[k] for k in items])


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--api", choices=["linen", "nnx", "equinox"], default="linen")
    p.add_argument("--cell", choices=list(CELLS), default="lstm",
                   help="lstm, gru, rnn (a simple tanh RNN) or slstm (xLSTM's sLSTM)")
    p.add_argument("--text", help="training text file (default: the Python stdlib's source)")
    p.add_argument("--max-bytes", type=int, default=400_000)
    p.add_argument("--steps", type=int, default=150, help="the last step (with --resume too)")
    p.add_argument("--batch", type=int, default=32, help="global batch (rounded up to devices)")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--embed", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=1,
                   help="heads of the recurrence (block-diagonal W_hh; divides --hidden)")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--implementation", default=None,
                   help="the recurrent route, a name the cell's op takes as `implementation` "
                        "(e.g. scan, pallas); falls back with the reason where it cannot serve "
                        "(default: the automatic choice)")
    p.add_argument("--out-dir", help="default: runs/char_<cell>")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in <out-dir>/checkpoints")
    p.add_argument("--sample-bytes", type=int, default=200, help="0: no sample")
    p.add_argument("--no-progress", action="store_true", help="plain log lines, no bar")
    multi = p.add_argument_group("several processes (JAX's multi-controller runtime)")
    multi.add_argument("--num-processes", type=int)
    multi.add_argument("--process-id", type=int)
    multi.add_argument("--coordinator", help="HOST:PORT of process 0")
    multi.add_argument("--distributed", action="store_true",
                       help="join the runtime with what JAX's cluster detection finds")
    cfg = p.parse_args(argv)
    cfg.out_dir = cfg.out_dir or f"runs/char_{cfg.cell}"
    with portable_rnn.policy(**{CELLS[cfg.cell][1]: cfg.implementation}):
        return train(cfg)


def train(cfg):
    """The run `main`'s arguments describe, traced under their routing policy."""
    initialize_distributed(cfg)
    lead = jax.process_index() == 0
    log = print if lead else (lambda *args, **kwargs: None)

    devices = jax.devices()
    mesh = data_parallel_mesh(devices)
    batch_size = -(-cfg.batch // len(devices)) * len(devices)
    data_sharding, replicated = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
    batch_shape = (batch_size, cfg.seq + 1)
    rows = local_rows(data_sharding, batch_shape)
    data = load_corpus(cfg.text, cfg.max_bytes)
    split = int(len(data) * 0.9)
    train, held_out = data[:split], data[split:]
    log(f"devices: {len(devices)} x {devices[0].device_kind} ({jax.default_backend()}) in "
        f"{jax.process_count()} process(es); batch {batch_size} split over a {dict(mesh.shape)} "
        f"mesh")
    if jax.process_count() > 1:
        print(f"process {jax.process_index()}: {jax.local_device_count()} devices, rows "
              f"{rows.start}:{rows.stop} of the batch", flush=True)
    log(f"corpus: {len(data):,} bytes ({'--text ' + cfg.text if cfg.text else 'Python stdlib'})"
        f"; train {len(train):,} / held-out {len(held_out):,}")
    layer, family = CELLS[cfg.cell]
    heads = f", {cfg.heads} heads" if cfg.heads > 1 else ""
    log(f"model ({cfg.api}): {cfg.layers}x {layer}({cfg.hidden}{heads}) computing in "
        f"{cfg.dtype}, params float32")
    S, dt = jax.ShapeDtypeStruct, jnp.dtype(cfg.dtype)
    L, B, H = cfg.layers, batch_size, cfg.hidden
    n = getattr(portable_rnn, f"get_num_params_in_{family}")(cfg.embed, H, L, False,
                                                             num_heads=cfg.heads)
    # The layers' default carry: h in the compute dtype and the other states in float32 (the
    # LSTM's c, the sLSTM's c, n and m); a single state (GRU, RNN) in float32.
    names = [p for p in inspect.signature(getattr(portable_rnn, family)).parameters
             if p.endswith("_0")]
    states = [S((L, B, H), dt if i == 0 and len(names) > 1 else jnp.float32)
              for i in range(len(names))]
    log(getattr(portable_rnn, f"explain_{family}")(
        S((B, cfg.seq, cfg.embed), dt), *states, S((n,), jnp.float32), None, cfg.embed, H, L,
        cfg.dropout, False, dropout_rng=jax.random.key(0), num_heads=cfg.heads))

    key = jax.random.key(cfg.seed)
    params, apply = build(cfg, jax.random.fold_in(key, 0))
    params = jax.device_put(params, replicated)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(cfg.lr, weight_decay=1e-4))
    opt_state = jax.device_put(tx.init(params), replicated)
    checkpoints = os.path.abspath(os.path.join(cfg.out_dir, "checkpoints"))
    done = 0
    if cfg.resume:
        saved = checkpoint_steps(checkpoints)
        if not saved:
            raise SystemExit(f"--resume: no checkpoint in {checkpoints}")
        done = saved[-1]
        params, opt_state = restore_checkpoint(os.path.join(checkpoints, str(done)),
                                               (params, opt_state))
        log(f"resumed from {os.path.join(checkpoints, str(done))} (step {done})")

    @jax.jit
    def train_step(params, opt_state, batch, rng):
        loss, grads = jax.value_and_grad(loss_fn)(params, apply, batch, rng)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    eval_loss = jax.jit(lambda params, batch: loss_fn(params, apply, batch))

    def batch_from(arr, rng):
        """The global batch of `rng`'s draw (every process draws the same starts), as one array
        over the mesh, built from this process's rows alone."""
        starts = rng.integers(0, len(arr) - cfg.seq - 1, batch_size)[rows]
        tokens = np.stack([arr[s:s + cfg.seq + 1] for s in starts]).astype(np.int32)
        return jax.make_array_from_process_local_data(data_sharding, tokens, batch_shape)

    bar = None
    if not cfg.no_progress and lead:
        try:
            from tqdm.auto import tqdm
        except ImportError:  # the progress bar is a nicety: plain log lines without it
            log("tqdm is not installed: progress as log lines every 50 steps")
        else:
            bar = tqdm(total=cfg.steps, initial=done, unit="step", dynamic_ncols=True)
    steps, step_losses = [], []  # every step's loss, fetched from the device once at the end
    t0, tokens, first = time.perf_counter(), 0, None
    for step in range(done + 1, cfg.steps + 1):
        batch = batch_from(train, np.random.default_rng([cfg.seed, 1, step]))
        params, opt_state, loss = train_step(params, opt_state, batch,
                                             jax.random.fold_in(key, step))
        steps.append(step)
        step_losses.append(loss)
        tokens += batch_size * cfg.seq
        if first is None:
            first = float(loss)
            log(f"step {step}: loss {first:.3f} (compiled in {time.perf_counter() - t0:.1f}s)",
                flush=True)
            t0, tokens = time.perf_counter(), 0
        if step % 10 == 0 or step == cfg.steps:
            loss = float(loss)
            rate = tokens / max(time.perf_counter() - t0, 1e-9)
            if bar is not None:
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}")
            elif step % 50 == 0 or step == cfg.steps:
                log(f"step {step}: loss {loss:.3f}  {rate:,.0f} tokens/s", flush=True)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    rate = tokens / max(time.perf_counter() - t0, 1e-9) if tokens else None
    held = float(np.mean([eval_loss(params, batch_from(held_out, np.random.default_rng(
        [cfg.seed, 2, i]))) for i in range(4)]))
    log(f"held-out loss {held:.3f} (uniform guess {np.log(VOCAB):.3f}"
        + (f"; first step {first:.3f}); {rate:,.0f} tokens/s" if rate else ")"))
    losses = [float(v) for v in jax.device_get(step_losses)]
    ckpt = save_checkpoint(checkpoints, cfg.steps, (params, opt_state))
    title = run_title(cfg, batch_size)
    plot = os.path.join(cfg.out_dir, "loss.png")
    metrics = os.path.join(cfg.out_dir, "losses.json")
    text = None
    if lead:
        os.makedirs(cfg.out_dir, exist_ok=True)
        if losses:
            write_plot(plot, steps, losses, held, title)
        with open(metrics, "w") as f:
            json.dump({"steps": steps, "losses": losses, "held_out": held,
                       "processes": jax.process_count(), "devices": len(devices),
                       "platform": devices[0].platform, "tokens_per_s": rate,
                       "implementation": cfg.implementation or "auto"}, f)
        log(f"wrote {plot}, {metrics} and the checkpoint {ckpt}")
        if cfg.sample_bytes:
            # Process 0 alone: on its own copy of the (replicated) parameters.
            local = jax.tree.map(lambda a: a.addressable_data(0), params)
            text = sample(local, apply, cfg, b"def ", cfg.sample_bytes,
                          jax.random.key(cfg.seed + 1))
            log("sample:\n" + text.decode("utf-8", errors="replace"))
    return dict(held_out=held, first=first, steps=steps, losses=losses, title=title, plot=plot,
                checkpoint=ckpt, params=params, opt_state=opt_state, apply=apply,
                metrics=metrics, sample=text)


if __name__ == "__main__":
    main()

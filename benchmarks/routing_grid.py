"""The routing model's grid: every route that serves a shape, timed side by side on this machine.

    python -m benchmarks.routing_grid OUT.json [--ops recurrent,attention] [--budget S] [--resume]
    python -m benchmarks.routing_grid OUT.json --quick           # a smoke run, any backend
    python -m benchmarks.routing_grid OUT.json --ops recurrent --heads 2,4,8 --resume

Shapes are drawn at random with a fixed seed (`shapes`, ``--seed``), each marked ``fit`` or
``held_out`` by a second seeded draw (about one in three held out) before anything is measured,
after the named shapes of `PINNED` (``pinned``: held out, the model never sees them). With
``--heads``, the recurrent shapes have heads (``NH`` drawn from the counts given, each of
`HEAD_DIMS` units: the families that take them) and no pinned shapes. For each
shape, every route that serves it on this machine (its ``explain_*`` accepts
``implementation=``), and for the splash route each block size that tiles the sequences (on a
CPU, the scan route with its input projection before the loop and inside it: the variants the
model ranks there, `recurrent.cost.variants`), runs the forward and the forward+backward pass
under `jit`; the programs of several shapes are
compiled at once in threads, then timed in interleaved rounds (medians). A timed sample is one
call and its wait for the result; with ``--sample-ms MS``, as many calls back to back as take
about MS (from the warm-up call's time, at most `MOST_CALLS`), then one wait, over their
number: the call's time when its dispatch overlaps the previous call, as in a training loop,
and less of the host's jitter in calls of a millisecond or less (the grid records ``sample_ms``;
`routing_fit` merges only runs of one kind). A program that fails to compile or run is recorded
with its error and left out of the medians. The rows are the
routing model's grid (`portable_rnn/_src/core/routing.py`): ``python -m benchmarks.routing_fit
OUT.json`` checks the model on the held-out shapes and installs the grid for this device kind.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import random
import statistics
import time

import jax
import jax.numpy as jnp

import portable_rnn
from portable_rnn._src.attention import cost as attention_cost
from portable_rnn._src.attention.routes import splash
from portable_rnn._src.core import routing
from portable_rnn._src.core.capabilities import capabilities
from portable_rnn._src.core.profile import profile
from portable_rnn._src.recurrent import cost as recurrent_cost
from portable_rnn._src.recurrent import families as rfamilies
from portable_rnn._src.recurrent.routes import scan as scan_route

from ._harness import environment, write_json

# the families the default draw chooses from (a longer list would change every seeded shape);
# ``--families`` draws from others, e.g. a family added after the grid was measured
FAMILIES = {"lstm": 4, "gru": 3, "simple_rnn": 1, "mgu": 2}
HEAD_DIMS = (128, 256)  # DH of the shapes with heads (``--heads``): multiples of 128
SEED = 20261206
# the ten recurrent shape classes (family, dtype, B, T, I, H, layers, bidirectional) that the
# kernel table of earlier releases did not list, held out
PINNED = [
    ("lstm", "bfloat16", 128, 256, 512, 512, 1, False),
    ("gru", "bfloat16", 128, 256, 512, 512, 1, False),
    ("lstm", "bfloat16", 64, 512, 512, 512, 1, False),
    ("lstm", "bfloat16", 32, 256, 128, 128, 1, False),
    ("lstm", "bfloat16", 4, 2048, 128, 256, 1, False),
    ("lstm", "float32", 32, 512, 256, 1024, 1, False),
    ("lstm", "bfloat16", 24, 512, 256, 768, 1, False),
    ("lstm", "bfloat16", 32, 256, 256, 512, 2, True),
    ("simple_rnn", "bfloat16", 64, 512, 256, 512, 1, False),
    ("mgu", "bfloat16", 32, 512, 256, 1024, 1, False),
]


def recurrent_shapes(n: int, rng: random.Random, scale: float,
                     families: tuple[str, ...] = tuple(FAMILIES),
                     heads: tuple[int, ...] = ()) -> list[dict]:
    """`n` recurrent shapes: families, dtypes, sizes drawn at random, work bounded by `scale`;
    with `heads`, NH drawn from them and H = NH x a head size of `HEAD_DIMS`."""
    out = []
    while len(out) < n:
        family = rng.choice(list(families))
        s = dict(op="recurrent", family=family, gates=rfamilies.family(family).gates,
                 dtype=rng.choice(["bfloat16"] * 3 + ["float32"]),
                 B=rng.choice([1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]),
                 T=rng.choice([32, 64, 128, 256, 512, 1024, 2048]),
                 I=rng.choice([32, 64, 128, 256, 512, 1024]),
                 H=rng.choice([128, 256, 384, 512, 640, 768, 1024]),
                 L=rng.choice([1, 1, 1, 2]), D=rng.choice([1, 1, 2]))
        if heads:
            s["NH"] = rng.choice(heads)
            s["H"] = s["NH"] * rng.choice(HEAD_DIMS)
        work = s["B"] * s["T"] * s["L"] * s["D"] * (s["I"] + s["H"]) * s["gates"] * s["H"]
        if work * 6 <= scale * 4e11:
            out.append(s)
    return out


def attention_shapes(n: int, rng: random.Random, scale: float) -> list[dict]:
    """`n` attention shapes, logits and products bounded by `scale`."""
    out = []
    while len(out) < n:
        T = rng.choice([128, 256, 512, 1024, 2048, 4096, 8192])
        S = T if rng.random() < 0.8 else rng.choice([256, 1024, 2048, 4096])
        N = rng.choice([2, 4, 8, 16, 32])
        s = dict(op="attention", dtype=rng.choice(["bfloat16"] * 4 + ["float32"]),
                 B=rng.choice([1, 2, 4, 8, 16]), T=T, S=S, N=N,
                 K=rng.choice([k for k in (N, N // 4, 1) if k >= 1 and N % k == 0]),
                 H=rng.choice([64, 128, 128, 256]), causal=rng.random() < 0.5,
                 window=rng.choice([None] * 4 + [256, 1024]))
        if s["window"] is not None and (s["window"] >= S or T > S):
            s["window"] = None
        logits = s["B"] * s["N"] * T * S
        if logits * s["H"] * 8 <= scale * 1.5e12 and logits * 4 <= scale * 2**31:
            out.append(s)
    return out


def shapes(ops: list[str], n: int, seed: int = SEED, scale: float = 1.0,
           families: tuple[str, ...] = tuple(FAMILIES), heads: tuple[int, ...] = ()) -> list[dict]:
    """The grid's shapes, each with its split; the pinned shapes (of `families`, without
    `heads`) are held out."""
    rng = random.Random(seed)
    drawn = []
    if "recurrent" in ops:
        drawn += recurrent_shapes(n, rng, scale, families, heads)
    if "attention" in ops:
        drawn += attention_shapes(n, rng, scale)
    split = random.Random(seed + 1)
    for s in drawn:
        s["split"] = "held_out" if split.random() < 1 / 3 else "fit"
    pinned = []
    if "recurrent" in ops and scale >= 1 and not heads:
        for family, dtype, B, T, I, H, L, bidir in PINNED:
            if family not in families:
                continue
            pinned.append(dict(op="recurrent", family=family, gates=FAMILIES[family], dtype=dtype,
                               B=B, T=T, I=I, H=H, L=L, D=2 if bidir else 1, split="pinned"))
    return pinned + drawn


# --- the programs -------------------------------------------------------------------------------

@contextlib.contextmanager
def _in_loop(value: int | None):
    """While tracing: the scan route's input projection inside the loop (1) or before it (0),
    whatever the automatic choice (`recurrent.routes.scan.scan_options`); None leaves it be."""
    if value is None:
        yield
        return
    chosen = scan_route.scan_options

    def forced(*args, **kw):
        return dict(chosen(*args, **kw), project_in_loop=bool(value))

    scan_route.scan_options = forced
    try:
        yield
    finally:
        scan_route.scan_options = chosen


def _recurrent_programs(s: dict) -> dict:
    """name -> (fwd, fwd+bwd, args) for every route that serves recurrent shape `s`; on a
    platform whose profile lets the input projection run inside the loop (a CPU), the scan
    route's two variants, the projection in the loop and before it."""
    B, T, I, H, L, D = (s[k] for k in "BTIHLD")
    dtype = jnp.dtype(s["dtype"])
    fam = s["family"]
    heads = {"num_heads": s["NH"]} if "NH" in s else {}
    keys = jax.random.split(jax.random.key(0), 3)
    w = getattr(portable_rnn, f"init_{fam}_weight")(keys[0], I, H, L, D == 2, dtype, **heads)
    x = jax.random.normal(keys[1], (B, T, I), dtype)
    z = jnp.zeros((L * D, B, H), dtype)
    states = (z,) * len(rfamilies.family(fam).states)
    fn = getattr(portable_rnn, fam)
    explain = getattr(portable_rnn, f"explain_{fam}")
    out = {}
    for name in portable_rnn._src.core.dispatch.implementations(fam):
        try:
            explain(x, *states, w, None, I, H, L, 0.0, D == 2, implementation=name, **heads)
        except ValueError:
            continue

        variants = [None]
        if name == "scan" and profile(capabilities()).project_in_loop:
            variants = [p["in_loop"] for p in recurrent_cost.variants(name, s) if p]
        for in_loop in variants:
            def fwd(x, w, name=name, in_loop=in_loop):
                with _in_loop(in_loop):
                    return fn(x, *states, w, None, I, H, L, 0.0, D == 2,
                              implementation=name, **heads)[0]

            def loss(x, w, fwd=fwd):
                return jnp.sum(fwd(x, w).astype(jnp.float32))

            label = name if in_loop is None else routing.variant_name(name, in_loop=in_loop)
            out[label] = (fwd, jax.grad(loss, argnums=(0, 1)), (x, w))
    return out


def _attention_programs(s: dict) -> dict:
    """name -> (fwd, fwd+bwd, args) for every route (splash per block size) serving `s`."""
    B, T, S, N, K, H = (s[k] for k in ("B", "T", "S", "N", "K", "H"))
    dtype = jnp.dtype(s["dtype"])
    keys = jax.random.split(jax.random.key(1), 3)
    q = jax.random.normal(keys[0], (B, T, N, H), dtype)
    k = jax.random.normal(keys[1], (B, S, K, H), dtype)
    v = jax.random.normal(keys[2], (B, S, K, H), dtype)
    window = None if s["window"] is None else (s["window"], 0 if s["causal"] else s["window"])
    kw = dict(is_causal=s["causal"], local_window_size=window)
    out = {}
    for name in portable_rnn._src.core.dispatch.implementations("attention"):
        try:
            portable_rnn.explain_attention(q, k, v, implementation=name, **kw)
        except ValueError:
            continue
        # the variants the routing model ranks (the splash kernel's block sizes that tile)
        variants = {routing.variant_name(name, **p): p.get("block")
                    for p in attention_cost.variants(name, s)}
        for label, block in variants.items():
            if block is None:
                def fwd(q, k, v, name=name):
                    return portable_rnn.dot_product_attention(q, k, v, implementation=name, **kw)
            else:
                def fwd(q, k, v, block=block):
                    return splash.attention_splash(
                        q, k, v, None, None, scale=1 / H ** 0.5, is_causal=s["causal"],
                        window=window, block_q=block, block_kv=block)

            def loss(q, k, v, fwd=fwd):
                return jnp.sum(fwd(q, k, v).astype(jnp.float32))

            out[label] = (fwd, jax.grad(loss, argnums=(0, 1, 2)), (q, k, v))
    return out


def programs(s: dict) -> dict:
    return (_recurrent_programs if s["op"] == "recurrent" else _attention_programs)(s)


# --- measuring ----------------------------------------------------------------------------------

def _compile(fn, args):
    return jax.jit(fn).lower(*args)


MOST_CALLS = 64  # calls back to back in one timed sample (``--sample-ms``)


def grid_sample_ms(grid: dict) -> float:
    """How a grid's samples were timed: its ``--sample-ms`` (0, one call a sample, for a grid
    that does not record it)."""
    return grid.get("sample_ms") or 0.0


def calls_per_sample(warm_ms: float, sample_ms: float) -> int:
    """How many calls of about `warm_ms` each one timed sample of about `sample_ms` runs (1
    without `sample_ms`)."""
    if sample_ms <= 0:
        return 1
    return max(1, min(MOST_CALLS, round(sample_ms / max(warm_ms, 1e-3))))


def measure_chunk(chunk: list[dict], rounds: int, pool, sample_ms: float = 0.0) -> list[dict]:
    """Compiles every program of the shapes in `chunk` at once, then times each shape's routes
    in interleaved rounds, each sample `calls_per_sample` calls back to back."""
    lowered, rows = {}, []
    for i, s in enumerate(chunk):
        row = dict(s, ms={}, errors={})
        rows.append(row)
        try:
            progs = programs(s)
        except Exception as e:  # noqa: BLE001 - recorded, the grid goes on
            row["errors"]["setup"] = f"{type(e).__name__}: {e}"[:300]
            continue
        for name, (fwd, fwdbwd, args) in progs.items():
            for kind, fn in (("fwd", fwd), ("fwdbwd", fwdbwd)):
                try:
                    lowered[(i, name, kind)] = (_compile(fn, args), args)
                except Exception as e:  # noqa: BLE001
                    row["errors"][f"{name}/{kind}"] = f"{type(e).__name__}: {e}"[:300]
    futures = {key: pool.submit(lo.compile) for key, (lo, _) in lowered.items()}
    compiled = {}
    for key, fut in futures.items():
        try:
            compiled[key] = (fut.result(), lowered[key][1])
        except Exception as e:  # noqa: BLE001
            rows[key[0]]["errors"][f"{key[1]}/{key[2]}"] = f"{type(e).__name__}: {e}"[:300]
    for i, row in enumerate(rows):
        mine = {key: c for key, c in compiled.items() if key[0] == i}
        times = {key: [] for key in mine}
        calls = {}
        for key, (exe, args) in list(mine.items()):  # warm up; a failure drops the program
            try:
                jax.block_until_ready(exe(*args))
                t0 = time.perf_counter()
                jax.block_until_ready(exe(*args))
                calls[key] = calls_per_sample((time.perf_counter() - t0) * 1e3, sample_ms)
            except Exception as e:  # noqa: BLE001
                row["errors"][f"{key[1]}/{key[2]}"] = f"{type(e).__name__}: {e}"[:300]
                del mine[key], times[key]
        keys = list(mine)
        for r in range(rounds):
            for key in keys[r % max(len(keys), 1):] + keys[:r % max(len(keys), 1)]:
                exe, args = mine[key]
                t0 = time.perf_counter()
                for _ in range(calls[key] - 1):
                    exe(*args)
                jax.block_until_ready(exe(*args))
                times[key].append((time.perf_counter() - t0) * 1e3 / calls[key])
        for (_, name, kind), ts in times.items():
            row["ms"].setdefault(name, {})[kind] = round(statistics.median(ts), 4)
        for name in [n for n, t in row["ms"].items() if len(t) < 2]:
            del row["ms"][name]  # a route is measured with both passes or not at all
    return rows


def label(s: dict) -> str:
    keys = ("family", "dtype", "B", "T", "I", "H", "NH", "L", "D") if s["op"] == "recurrent" else (
        "dtype", "B", "T", "S", "N", "K", "H", "causal", "window")
    return " ".join(f"{k}={s[k]}" for k in keys if k in s)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the grid's JSON file")
    p.add_argument("--ops", default="recurrent,attention")
    p.add_argument("--families", default=",".join(FAMILIES),
                   help="the recurrent families drawn (a run of others merges with the grid)")
    p.add_argument("--heads", default="",
                   help="head counts drawn, e.g. 2,4,8: recurrent shapes with heads of a multiple "
                        "of 128 units, of the families that take them (a run merges with the "
                        "grid); none: without heads")
    p.add_argument("--n", type=int, default=48, help="random shapes per op")
    p.add_argument("--seed", type=int, default=SEED, help="draws the shapes and their split")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sample-ms", type=float, default=0.0,
                   help="time calls back to back for about this long per sample (0: one call)")
    p.add_argument("--chunk", type=int, default=6, help="shapes compiled at once")
    p.add_argument("--budget", type=float, default=500, help="seconds; no shape starts after")
    p.add_argument("--resume", action="store_true", help="keep the shapes OUT has measured")
    p.add_argument("--scale", type=float, default=1.0,
                   help="bounds the shapes' work (1: a TPU v5e; a CPU takes about 0.003)")
    p.add_argument("--quick", action="store_true", help="a few tiny shapes (any backend)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    ops = args.ops.split(",")
    todo = shapes(ops, 4 if args.quick else args.n, args.seed,
                  scale=1e-4 if args.quick else args.scale,
                  families=tuple(args.families.split(",")),
                  heads=tuple(int(n) for n in args.heads.split(",") if n))
    done = []
    if args.resume and os.path.exists(args.out):
        with open(args.out) as f:
            earlier = json.load(f)
        if grid_sample_ms(earlier) != args.sample_ms:
            p.error(f"{args.out} was timed with --sample-ms {grid_sample_ms(earlier):g}: "
                    "resume it the same way")
        done = [r for r in earlier["rows"] if r["ms"]]
    seen = {label(r) for r in done}
    todo = [s for s in todo if label(s) not in seen]
    rows = list(done)
    env = environment()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for i in range(0, len(todo), args.chunk):
            if time.perf_counter() - start > args.budget:
                print(f"budget spent: {len(todo) - i} shapes not measured", flush=True)
                break
            chunk = todo[i:i + args.chunk]
            rows += measure_chunk(chunk, args.rounds, pool, args.sample_ms)
            for r in rows[-len(chunk):]:
                print(label(r), r["ms"], r["errors"] or "", flush=True)
            write_json(args.out, {"family": "routing_grid", "device_kind":
                                  jax.devices()[0].device_kind, "platform": jax.default_backend(),
                                  "seed": args.seed, "rounds": args.rounds,
                                  "sample_ms": args.sample_ms, "rows": rows,
                                  "environment": env})
    print(f"{len(rows)} shapes in {args.out}, {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

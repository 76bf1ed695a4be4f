"""The routing model's grid from a GPU benchmark run (``benchmarks/gpu.py``'s JSON).

    python -m benchmarks.routing_from_gpu benchmarks/results/gpu.json OUT.json [--seed S]
    python -m benchmarks.routing_fit OUT.json [--install]

``benchmarks/gpu.py`` times, per shape, the routes of the LSTM (JAX's cuDNN call against the
scan path) and of attention (cuDNN, dense, chunked) under its own names; this writes the same
measurements as a grid (``benchmarks/routing_grid.py``'s rows), each measured variant under the
route that runs it when the dispatcher chooses that route for a call of the row's dtype:

- ``crossover`` (LSTM, one layer, float32, precision left at its default: TF32 allowed on both
  routes, what an automatic float32 call runs): ``cudnn_fp32`` is ``cudnn``, ``scan_fp32``
  ``scan`` (forward, and forward+backward); ``scan_bf16`` is ``scan`` on a bfloat16 row (the
  only route that serves it: cuDNN rejects 16-bit calls unless a policy upcasts them).
- ``dtype`` (forward+backward): ``cudnn_fp32_tf32`` is ``cudnn`` and ``scan_fp32_tf32``
  ``scan`` on a float32 row; ``scan_bf16`` is ``scan`` on a bfloat16 row. Left out: the
  precision HIGHEST variants (``cudnn_fp32_highest``, ``scan_fp32``; the grid records no
  precision: its float32 rows are the default precision's), the upcast of bfloat16 to cuDNN
  float32 (``cudnn_bf16_upcast``: that policy asks for cuDNN, the model does not choose it),
  Flax's cell (not a route). A float32 default-precision row at a shape ``crossover`` measured
  too is left out (``crossover`` measured both passes there).
- ``dropout`` (two layers, dropout between them): ``cudnn_per_layer_dropout`` (one cuDNN call
  per layer, what the route runs with dropout) is ``cudnn``, ``scan_dropout`` ``scan``; the
  grid's shape records no dropout rate.
- ``gru`` (forward+backward; the scan path only, JAX has no cuDNN GRU): ``scan_fp32_tf32``
  on a float32 row, ``scan_bf16`` on a bfloat16 one.
- ``attention`` (bfloat16, causal, B=4, N=K=8, H=64, forward+backward): ``ours_cudnn_bdim0``
  is ``cudnn``, ``ours_xla`` ``xla``, ``ours_chunked`` ``chunked``; ``attention_odd_T``:
  ``auto`` is ``cudnn`` (the automatic route of that run: cuDNN's forward, the dense
  gradient, at T=197), with ``xla`` and ``chunked``. Left out: the baselines (stock
  jax.nn, the vmapped heads) and ``attention_pad_mask`` (a padding mask: the grid's shape
  records none).
- ``vmap`` (cuDNN only: no choice) is left out.

The split is decided by a seeded draw before anything is read but the rows' names: per op
group, of the rows where at least two routes were measured (a choice to check), a third
(rounded; at least one of three or more) is held out, drawn with ``--seed``; a row with one
route is fitted (it says nothing about a choice).
"""

from __future__ import annotations

import argparse
import json
import random

from benchmarks._harness import write_json

SEED = 20261206
FAMILIES = {"lstm": 4, "gru": 3}


def _ms(results: dict, name: str) -> float | None:
    found = results.get(name)
    return None if found is None else round(found["median_ms"], 4)


def _recurrent(family: str, dtype: str, B: int, T: int, I: int, H: int, L: int = 1) -> dict:
    return dict(op="recurrent", family=family, gates=FAMILIES[family], dtype=dtype, B=B, T=T,
                I=I, H=H, L=L, D=1)


def _attention(B: int, T: int, N: int, H: int) -> dict:
    return dict(op="attention", dtype="bfloat16", B=B, T=T, S=T, N=N, K=N, H=H, causal=True,
                window=None)


def _add(rows: dict, shape: dict, route: str, passes: dict) -> None:
    """Adds `route`'s measured passes (``{"fwd": ms, "fwdbwd": ms}``, None for not measured)
    to the row of `shape`."""
    passes = {p: t for p, t in passes.items() if t is not None}
    if not passes:
        return
    key = json.dumps(shape, sort_keys=True)
    row = rows.setdefault(key, dict(shape, ms={}))
    row["ms"].setdefault(route, {}).update(passes)


def convert(run: dict) -> list[dict]:
    """The grid's rows (without their split) of a ``benchmarks/gpu.py`` run."""
    rows: dict = {}
    mode = {"fwd+bwd": "fwdbwd", "fwd": "fwd"}
    crossed = set()
    for r in run["rows"]:
        if r["family"] == "crossover":
            B, T, I, H = r["shape"]
            crossed.add((B, T, I, H, 1))
            p = mode[r["mode"]]
            res = r["results"]
            _add(rows, _recurrent("lstm", "float32", B, T, I, H), "cudnn",
                 {p: _ms(res, "cudnn_fp32")})
            _add(rows, _recurrent("lstm", "float32", B, T, I, H), "scan",
                 {p: _ms(res, "scan_fp32")})
            _add(rows, _recurrent("lstm", "bfloat16", B, T, I, H), "scan",
                 {p: _ms(res, "scan_bf16")})
    for r in run["rows"]:
        res, family = r["results"], r["family"]
        if family == "dtype" and r["mode"] == "fwd+bwd":
            B, T, I, H, L = r["shape"]
            if (B, T, I, H, L) not in crossed:
                _add(rows, _recurrent("lstm", "float32", B, T, I, H, L), "cudnn",
                     {"fwdbwd": _ms(res, "cudnn_fp32_tf32")})
                _add(rows, _recurrent("lstm", "float32", B, T, I, H, L), "scan",
                     {"fwdbwd": _ms(res, "scan_fp32_tf32")})
            _add(rows, _recurrent("lstm", "bfloat16", B, T, I, H, L), "scan",
                 {"fwdbwd": _ms(res, "scan_bf16")})
        elif family == "dropout" and r["mode"] == "fwd+bwd":
            B, T, I, H, L = r["shape"]
            shape = _recurrent("lstm", "float32", B, T, I, H, L)
            _add(rows, shape, "cudnn", {"fwdbwd": _ms(res, "cudnn_per_layer_dropout")})
            _add(rows, shape, "scan", {"fwdbwd": _ms(res, "scan_dropout")})
        elif family == "gru" and r["mode"] == "fwd+bwd":
            B, T, I, H, L = r["shape"]
            _add(rows, _recurrent("gru", "float32", B, T, I, H, L), "scan",
                 {"fwdbwd": _ms(res, "scan_fp32_tf32")})
            _add(rows, _recurrent("gru", "bfloat16", B, T, I, H, L), "scan",
                 {"fwdbwd": _ms(res, "scan_bf16")})
        elif family in ("attention", "attention_odd_T") and r["mode"] == "fwd+bwd":
            B, T, N, H = r["shape"]
            cudnn = "ours_cudnn_bdim0" if family == "attention" else "auto"
            for route, name in (("cudnn", cudnn), ("xla", "ours_xla"),
                                ("chunked", "ours_chunked")):
                _add(rows, _attention(B, T, N, H), route, {"fwdbwd": _ms(res, name)})
    return list(rows.values())


def split(rows: list[dict], seed: int = SEED) -> list[dict]:
    """Marks each row ``fit`` or ``held_out``: per op group, a seeded third of the rows that
    measured two routes or more is held out (chosen from the rows' order, not their times)."""
    rng = random.Random(seed + 1)
    for group in ("recurrent", "attention"):
        choices = [r for r in rows if r["op"] == group and len(r["ms"]) >= 2]
        k = round(len(choices) / 3) if len(choices) != 3 else 1
        held = {id(r) for r in rng.sample(choices, k)} if k else set()
        for r in rows:
            if r["op"] == group:
                r["split"] = "held_out" if id(r) in held else "fit"
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="benchmarks/gpu.py's JSON")
    p.add_argument("out", help="the grid's JSON file")
    p.add_argument("--seed", type=int, default=SEED, help="draws the held-out rows")
    args = p.parse_args(argv)
    with open(args.run) as f:
        run = json.load(f)
    env = run["environment"]
    rows = split(convert(run), args.seed)
    write_json(args.out, {"family": "routing_grid", "device_kind": env["device_kind"],
                          "platform": "gpu", "seed": args.seed, "rounds": run.get("rounds"),
                          "from": f"{args.run} (benchmarks/gpu.py, {run.get('capabilities')})",
                          "rows": rows, "environment": env})
    print(f"{len(rows)} shapes ({sum(r['split'] == 'held_out' for r in rows)} held out) in "
          f"{args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

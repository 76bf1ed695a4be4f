"""What leaving a cell's backward step to JAX costs: the scan driver's hand-written backward
against JAX's autodiff of the same forward loop (the cell seen without its backward part).

    python -m benchmarks.autodiff_backward OUT_DIR             # on a TPU or a CPU (under 4 min)
    python -m benchmarks.autodiff_backward OUT_DIR --quick     # a smoke run, tiny shapes
    python -m benchmarks.autodiff_backward --table-from OUT_DIR/autodiff_backward.json

Per family (LSTM, GRU, simple RNN), dtype and shape: forward+backward (`jax.grad` under `jit`)
of `driver.rnn_scan` with the platform's options (`routes.scan.scan_options`), on both paths;
first the
two paths' gradients are compared (max relative error to the largest), then timed (medians of
interleaved rounds) and their compiled temporary memory read (`memory_analysis`). A case that
fails is recorded with its error and the run goes on; cases not started within the time budget
are listed as skipped. Writes ``autodiff_backward.json`` after every case.

``--table-from`` writes the measured table (autodiff over hand-written, time and memory) into
docs/development.md, between the ``autodiff-backward-table`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn
from portable_rnn._src.recurrent import layout
from portable_rnn._src.recurrent.cell import ForwardOnly
from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan
from portable_rnn._src.recurrent.families import family
from portable_rnn._src.recurrent.gru.cell import GRUCell
from portable_rnn._src.recurrent.lstm.cell import LSTMCell
from portable_rnn._src.recurrent.routes.scan import scan_options
from portable_rnn._src.recurrent.simple_rnn.cell import SimpleRNNCell

from ._harness import environment, interleaved, write_json

CELLS = {"lstm": LSTMCell(), "gru": GRUCell(), "simple_rnn": SimpleRNNCell()}
# (B, T, I, H, layers, bidirectional)
CASES = [(32, 256, 256, 256, 1, False), (8, 512, 128, 512, 1, True)]
QUICK = [(4, 8, 8, 16, 2, True)]
DTYPES = ("bfloat16", "float32")
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "development.md")
BEGIN, END = "<!-- autodiff-backward-table -->", "<!-- /autodiff-backward-table -->"


def _grad_fns(name, case, dtype):
    B, T, I, H, L, bidir = case
    cell = CELLS[name]
    fam = family(cell.family.name)
    k = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k[0], (B, T, I), dtype)
    w = layout.init_weight(k[1], I, H, L, bidir, jnp.float32, fam, 0)
    states = tuple(jnp.zeros(((2 if bidir else 1) * L, B, H), dtype)
                   for _ in fam.states)
    lengths = jnp.maximum(T - jnp.arange(B, dtype=jnp.int32) * (T // (2 * B) + 1), 1)
    opts = scan_options(cell, x, portable_rnn.capabilities())
    cot = jax.random.normal(k[2], (B, T, (2 if bidir else 1) * H), jnp.float32)

    def grad_fn(c):
        def loss(x, w):
            y, _ = rnn_scan(ScanConfig(c, I, H, L, bidir, **opts), x, states, w, lengths)
            return jnp.sum(y.astype(jnp.float32) * cot)
        return jax.jit(jax.grad(loss, (0, 1)))

    return {"hand_written": grad_fn(cell), "autodiff": grad_fn(ForwardOnly(cell))}, (x, w)


def _max_rel_err(got, want) -> float:
    return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))
                     / max(float(np.max(np.abs(np.asarray(b, np.float64)))), 1e-30))
               for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))


def measure_case(name, case, dtype, rounds) -> dict:
    fns, args = _grad_fns(name, case, jnp.dtype(dtype))
    memory = {}
    for path, fn in fns.items():
        analysis = fn.lower(*args).compile().memory_analysis()
        memory[path] = None if analysis is None else analysis.temp_size_in_bytes / 2**20
    grads = {path: jax.block_until_ready(fn(*args)) for path, fn in fns.items()}
    err = _max_rel_err(grads["autodiff"], grads["hand_written"])
    times = interleaved({p: (lambda fn=fn: jax.block_until_ready(fn(*args)))
                         for p, fn in fns.items()}, rounds)
    B, T, I, H, L, bidir = case
    return {"cell": name, "dtype": dtype, "case": f"B{B} T{T} I{I} H{H} L{L}"
            + (" bidir" if bidir else ""), "max_rel_err": err, "times": times,
            "temp_mib": memory,
            "time_ratio": times["autodiff"]["median_ms"] / times["hand_written"]["median_ms"],
            "memory_ratio": (memory["autodiff"] / memory["hand_written"]
                             if memory["autodiff"] and memory["hand_written"] else None)}


def run(out_dir, quick, rounds, budget, cells, dtypes) -> dict:
    start = time.perf_counter()
    rows, errors, skipped = [], [], []
    for case in QUICK if quick else CASES:
        for dtype in dtypes:
            for name in cells:
                label = f"{name} {dtype} {case}"
                if time.perf_counter() - start > budget:
                    skipped.append(label)
                    print(f"SKIPPED (time budget) {label}", flush=True)
                    continue
                print(f"autodiff_backward {label}", flush=True)
                try:
                    rows.append(measure_case(name, case, dtype, rounds))
                except Exception as e:  # noqa: BLE001 - a failing case is recorded, run goes on
                    errors.append({"case": label, "error": f"{type(e).__name__}: {e}"[:2000]})
                    print(f"  FAILED {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                _write(out_dir, rows, errors, skipped, start)
    payload = _write(out_dir, rows, errors, skipped, start)
    print()
    print(table(payload))
    return payload


def _write(out_dir, rows, errors, skipped, start) -> dict:
    payload = {"family": "autodiff_backward", "environment": environment(), "rows": rows,
               "errors": errors, "skipped": skipped, "seconds": time.perf_counter() - start}
    write_json(os.path.join(out_dir, "autodiff_backward.json"), payload)
    return payload


def table(payload: dict) -> str:
    """The Markdown table of a run."""
    env = payload.get("environment", {})
    lines = [f"Measured on {env.get('device_kind', '?')} ({env.get('jax_backend', '?')}, jax "
             f"{env.get('jax', '?')}), fwd+bwd under jit, autodiff over hand-written:", "",
             "| cell | dtype | case | hand-written | autodiff | time | temp memory | "
             "gradients' max rel. error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        t = r["times"]
        mem = "-" if r["memory_ratio"] is None else f"{r['memory_ratio']:.2f}x"
        lines.append(f"| {r['cell']} | {r['dtype']} | {r['case']} | "
                     f"{t['hand_written']['median_ms']:.3f} ms | "
                     f"{t['autodiff']['median_ms']:.3f} ms | {r['time_ratio']:.2f}x | {mem} | "
                     f"{r['max_rel_err']:.1e} |")
    for e in payload.get("errors", []):
        lines.append(f"| {e['case']} | failed: {e['error'][:80]} |||||||")
    return "\n".join(lines)


def write_table(json_path: str, docs_path: str = DOCS) -> str:
    with open(json_path) as f:
        payload = json.load(f)
    text = table(payload)
    with open(docs_path) as f:
        page = f.read()
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(docs_path, "w") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    print(text)
    print(f"wrote {docs_path}")
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", help="where the JSON goes")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (any backend)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--budget", type=float, default=150.0,
                        help="seconds after which no new case starts (default 150)")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--table-from", metavar="JSON",
                        help="write the measured table into docs/development.md from a run")
    parser.add_argument("--docs-path", default=DOCS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table_from:
        write_table(args.table_from, args.docs_path)
        return
    if not args.out_dir:
        parser.error("OUT_DIR is required (or --table-from JSON)")
    rounds = args.rounds or (3 if args.quick else 7)
    run(args.out_dir, args.quick, rounds, args.budget, tuple(args.cells.split(",")),
        tuple(args.dtypes.split(",")))


if __name__ == "__main__":
    main()

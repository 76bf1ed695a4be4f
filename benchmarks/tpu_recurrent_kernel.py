"""The Pallas TPU recurrent kernel (route "pallas") against the scan path and Flax on a TPU.

    python -m benchmarks.tpu_recurrent_kernel OUT_DIR [--resume] # on a TPU (about 50 s a case)
    python -m benchmarks.tpu_recurrent_kernel OUT_DIR --quick    # a smoke run, any backend
    python -m benchmarks.tpu_recurrent_kernel OUT_DIR --only B16 --loop-forms pallas_16_values

For each case (LSTM and GRU, bfloat16: the latency-bound shapes people train, the README
example's, one large one):
`portable_rnn.lstm`/`gru` with ``implementation="pallas"`` and ``"scan"``, and Flax's
``nn.RNN(nn.OptimizedLSTMCell)`` / ``nn.RNN(nn.GRUCell)`` on the same weights, forward and
forward+backward under jit, each checked against a float32 loop at the highest precision first
(`benchmarks/lstm.py`, `benchmarks/recurrent.py`); medians of interleaved rounds, ratios to the
scan path. A case that fails is recorded with its error and the run goes on; cases not started
within the time budget are listed as skipped. Writes ``tpu_recurrent_kernel.json``; with
``--resume``, the cases that OUT_DIR's JSON has measured are kept and the others run, so that
the ten cases can span several runs.

The automatic choice does not read these cases: the routing model is fitted from
``benchmarks/routing_grid.py``'s grid.

Two backwards of the kernel: ``pallas`` reads the gate factors its forward kernel saved;
``pallas_recompute`` (`pallas.recompute_backward`) has the forward kernel write only the
states and recomputes the factors with XLA (one GEMM over all steps) before the backward kernel.
With ``--loop-forms [FORMS]``, the kernel also
runs with its time loop's form forced (`pallas.loop_form`): ``pallas_U_scratch`` or
``pallas_U_values``, U steps per loop iteration, the state in VMEM scratch or carried as loop
values (by default U 1 and 4, both ways); ``pallas`` is the form the kernel chooses by size
(`pallas_kernel.loop_form`). ``--only`` runs the cases whose label holds one of its parts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import time
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp

import portable_rnn
from portable_rnn._src.recurrent.routes.pallas import route as pallas

from . import lstm, recurrent
from ._harness import environment, measure, print_row, write_json

C = lstm.Case
# the latency-bound shapes people train, the README example's (examples/train_char_lstm.py's
# defaults: B32 T64, a 64-wide embedding, two layers of 256) and one large shape
CASES = [C(32, 512, 256, 1024, 1), C(16, 1024, 128, 512, 1), C(8, 1024, 256, 256, 1),
         C(32, 64, 64, 256, 2), C(256, 512, 1024, 1024, 1)]
QUICK = [C(4, 8, 8, 128, 1)]
CELLS = ("lstm", "gru")
IMPLS = ("pallas", "pallas_recompute", "scan", "flax")
# --loop-forms: the kernel's time loop forced to (steps per iteration, state as loop values)
LOOP_FORMS = ("pallas_1_scratch", "pallas_4_scratch", "pallas_1_values", "pallas_4_values")


def loop_form(name: str) -> tuple[int, bool]:
    """A --loop-forms name, ``pallas_U_scratch`` or ``pallas_U_values``, as (U, values)."""
    match = re.fullmatch(r"pallas_(\d+)_(scratch|values)", name)
    if not match or int(match[1]) < 1:
        raise ValueError(f"loop form {name!r}: expected pallas_U_scratch or pallas_U_values "
                         "with U >= 1 steps per loop iteration")
    return int(match[1]), match[2] == "values"


def _makers(cell: str, case, dtype, loop_forms=None):
    B, T, I, H, L, bidir, ragged = case

    def kernel_mode():
        # off a TPU the kernel runs in Pallas interpret mode (a smoke run)
        return (pallas.interpret() if jax.default_backend() != "tpu"
                else contextlib.nullcontext())

    @contextlib.contextmanager
    def kernel_options(recompute, form):
        with pallas.loop_form(*form), (pallas.recompute_backward() if recompute
                                           else contextlib.nullcontext()):
            yield

    if cell == "lstm":
        p = lstm.problem(case, dtype)
        z = jnp.zeros(((2 if bidir else 1) * L, B, H), dtype)

        def ours(impl, recompute=False, form=(None, None)):
            def apply(x, w):
                with kernel_mode(), kernel_options(recompute, form):
                    return portable_rnn.lstm(x, z, z, w, None, I, H, L, 0.0, bidir,
                                             implementation=impl)[0]
            return lstm.jax_impl(p, apply, jnp.asarray(p.w))

        flax = partial(lstm.flax(nn.OptimizedLSTMCell), p)
    else:
        p = recurrent.problem(recurrent.CELLS[cell], case, dtype)
        h0 = jnp.zeros(((2 if bidir else 1) * L, B, H), dtype)

        def ours(impl, recompute=False, form=(None, None)):
            def apply(x, w):
                with kernel_mode(), kernel_options(recompute, form):
                    return portable_rnn.gru(x, h0, w, None, I, H, L, 0.0, bidir,
                                            implementation=impl)[0]
            return lstm.jax_impl(p, apply, jnp.asarray(p.w))

        flax = partial(recurrent.flax, p)
    forms = {name: partial(ours, "pallas", form=form)
             for name, form in (loop_forms or {}).items()}
    return {"pallas": partial(ours, "pallas"),
            "pallas_recompute": partial(ours, "pallas", recompute=True), **forms,
            "scan": partial(ours, "scan"), "flax": flax}


def run(out_dir: str, quick: bool, rounds: int, budget: float, cells, resume=False,
        loop_forms=None, only=()) -> dict:
    start = time.perf_counter()
    rows, skipped, errors = [], [], []
    done = set()
    path = os.path.join(out_dir, "tpu_recurrent_kernel.json")
    if resume and os.path.exists(path):  # the cases an earlier run measured are kept, not rerun
        with open(path) as f:
            rows = json.load(f)["rows"]
        done = {(row["cell"], row["case"]) for row in rows}
    cases = [c for c in (QUICK if quick else CASES)
             if not only or any(part in c.label for part in only)]
    for case in cases:
        for cell in cells:
            label = f"{cell} {case.label} bfloat16"
            if (cell, case.label) in done:
                print(f"MEASURED EARLIER {label}", flush=True)
                continue
            if time.perf_counter() - start > budget:
                skipped.append(label)
                print(f"SKIPPED (time budget) {label}", flush=True)
                continue
            print(f"tpu_recurrent_kernel {label}", flush=True)
            try:
                measured = measure(_makers(cell, case, jnp.dtype(jnp.bfloat16), loop_forms), "scan",
                                   rounds)
            except Exception as e:  # noqa: BLE001 - a failing case is recorded, the run goes on
                errors.append({"case": label, "error": f"{type(e).__name__}: {e}"[:2000]})
                print(f"  FAILED {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            for mode, row in measured.items():
                row.update(panel=f"{cell} bfloat16, {mode}", case=case.label, cell=cell,
                           dtype="bfloat16", mode=mode, params=case._asdict())
                rows.append(row)
                print_row("tpu_recurrent_kernel", row)
            _write(out_dir, rows, errors, skipped, start)  # after every case: a killed run keeps it
    payload = _write(out_dir, rows, errors, skipped, start)
    _print_table(rows)
    return payload


def _write(out_dir, rows, errors, skipped, start) -> dict:
    payload = {"family": "tpu_recurrent_kernel", "environment": environment(), "rows": rows,
               "errors": errors,
               "skipped": skipped, "seconds": time.perf_counter() - start}
    write_json(os.path.join(out_dir, "tpu_recurrent_kernel.json"), payload)
    return payload


def _print_table(rows) -> None:
    print(f"\n{'cell':5} {'case':26} {'mode':8} " + " ".join(f"{n:>17}" for n in IMPLS))
    for row in rows:
        cells = []
        for name in IMPLS:
            r = row["results"].get(name)
            failed = row["failed"].get(name)
            cells.append("failed" if failed else "-" if r is None else
                         f"{r['median_ms']:.3f}ms x{r['ratio']:.2f}" if r.get("ratio")
                         else f"{r['median_ms']:.3f}ms")
        print(f"{row['cell']:5} {row['case']:26} {row['mode']:8} "
              + " ".join(f"{c:>17}" for c in cells))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", help="where the JSON goes")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (any backend)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--budget", type=float, default=140.0,
                        help="seconds after which no new case starts (default 140)")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--resume", action="store_true",
                        help="keep the cases OUT_DIR's JSON has measured; run the others")
    parser.add_argument("--loop-forms", nargs="?", const=",".join(LOOP_FORMS), default="",
                        metavar="FORMS",
                        help="also time the kernel with its time loop's forms forced: "
                             "pallas_U_scratch or pallas_U_values, comma-separated (default "
                             + ", ".join(LOOP_FORMS) + ")")
    parser.add_argument("--only", default="", metavar="PARTS",
                        help="the cases whose label holds one of these comma-separated parts "
                             "(e.g. 'B16 T1024,B8')")
    args = parser.parse_args(argv)
    if not args.out_dir:
        parser.error("OUT_DIR is required")
    rounds = args.rounds or (3 if args.quick else 7)
    try:  # {name: (steps per iteration, state as loop values)}
        forms = {name: loop_form(name) for name in args.loop_forms.split(",") if name}
    except ValueError as e:
        parser.error(str(e))
    run(args.out_dir, args.quick, rounds, args.budget, tuple(args.cells.split(",")), args.resume,
        forms, tuple(p for p in args.only.split(",") if p))


if __name__ == "__main__":
    main()


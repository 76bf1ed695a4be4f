"""portable_rnn against its peers on this machine's CPU: LSTM, GRU/RNN, Keras, attention, overhead.

    python -m benchmarks                  # full: 20-25 minutes on 2 cores
    python -m benchmarks --quick          # a smoke run in under a minute, into results/quick/
    python -m benchmarks --only lstm,overhead --rounds 5 --out-dir /tmp/bench
    python -m benchmarks --report         # re-render the charts and RESULTS.md from the JSON
    python -m benchmarks.gpu              # the GPU counterpart: cuDNN vs the pure-JAX paths

Each family writes <out-dir>/<family>.json and <family>.png; RESULTS.md sums them up. The
documentation's Benchmarks page is generated from the JSON files of the default directory when
the site is built (docs/hooks.py). The exit status is 1 when an implementation disagreed with
its reference (or failed): such rows are not timed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

from . import report
from ._harness import environment, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def families(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in report.FAMILIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown families {unknown}; choose from {', '.join(report.FAMILIES)}")
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--quick", action="store_true", help="one small case per family, few rounds")
    p.add_argument("--only", type=families, default=report.FAMILIES,
                   help=f"comma-separated families (default: {','.join(report.FAMILIES)})")
    p.add_argument("--out-dir", help="default: benchmarks/results (--quick: "
                                     "benchmarks/results/quick)")
    p.add_argument("--rounds", type=int, help="timed rounds per case (default: per family)")
    p.add_argument("--report", action="store_true", help="only re-render from the JSON files")
    args = p.parse_args(argv)
    out_dir = args.out_dir or os.path.join(RESULTS, "quick" if args.quick else "")
    out_dir = os.path.abspath(out_dir)
    failures = []
    for family in () if args.report else args.only:
        start = time.perf_counter()
        payload = importlib.import_module(f"benchmarks.{family}").run(args.quick, args.rounds)
        payload.update(quick=args.quick, environment=environment(),
                       seconds=round(time.perf_counter() - start, 1))
        write_json(os.path.join(out_dir, f"{family}.json"), payload)
        print(f"{family}: {payload['seconds']} s", flush=True)
        failures += [f"{family} {r['panel']} {r['case']}: {n}: {why}"
                     for r in payload["rows"] for n, why in r["failed"].items()]
    report.write(report.load(out_dir), out_dir)
    for line in failures:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

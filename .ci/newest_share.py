"""Prints the test files (and `portable_rnn`, its doctests) that CI's newest leg runs in one run.

The suite is dealt into SHARES shares of about equal time, by each file's time measured on that
leg (`.ci/newest_times.json`: seconds summed over its tests on jax 0.12, smoke profile; a file
not listed counts as the median file), largest first, each into the share with the least time so
far; the run's hypothesis seed picks the share (seed mod SHARES). The lowest leg runs every file.

    python .ci/newest_share.py SEED [EXCLUDED_FILE ...]
"""
import json
import pathlib
import statistics
import sys

SHARES = 6


def shares(root: pathlib.Path, excluded=(), n: int = SHARES) -> list[list[str]]:
    times = json.loads((root / ".ci" / "newest_times.json").read_text())
    units = [str(p.relative_to(root)) for p in sorted((root / "tests").glob("test_*.py"))]
    units = [u for u in [*units, "portable_rnn"] if u not in excluded]
    default = statistics.median(times.values())
    bins = [(0.0, i, []) for i in range(n)]
    for unit in sorted(units, key=lambda u: (-times.get(u, default), u)):
        total, i, files = min(bins)
        bins[i] = (total + times.get(unit, default), i, files + [unit])
    return [sorted(files) for _, _, files in bins]


if __name__ == "__main__":
    seed, excluded = int(sys.argv[1]), set(sys.argv[2:])
    print(" ".join(shares(pathlib.Path(__file__).resolve().parent.parent, excluded)[
        seed % SHARES]))

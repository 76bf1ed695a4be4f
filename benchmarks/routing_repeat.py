"""How far a routing model can be right: two runs of one grid's shapes, each judged on the other.

    python -m benchmarks.routing_repeat FIRST.json SECOND.json [--floor MS] [--json OUT.json]

FIRST.json and SECOND.json are two runs of ``python -m benchmarks.routing_grid`` on one device
kind, with the same seed (so the same shapes). Per op group, for every shape both runs measured
(forward+backward, every variant both timed):

- ``oracle``: the variant fastest in one run, timed in the other, over the other's fastest,
  both ways round. A model that knew one run's times exactly would score this against the
  other run: the ceiling that the measurements' repeatability puts on the held-out check;
- ``installed``: the installed model's pick (the device kind's committed grid,
  `core.routing.model`) judged on each run, and on the geometric mean of both. Where the runs'
  shapes were never fitted, this is a held-out check of its own.

Each as `benchmarks.routing_fit` prints its held-out check (min, median, 90th percentile, max,
within 1.05x), over every shape and over the shapes whose fastest variant takes at least
``--floor`` ms (default 1; below it a call's fixed cost and its jitter dominate).
"""

from __future__ import annotations

import argparse
import json
import math

from portable_rnn._src.core import routing

from . import routing_fit, routing_grid


def _times(row) -> dict[str, float]:
    return {v: t[routing.CRITERION] for v, t in row["ms"].items() if routing.CRITERION in t}


def pairs(first: dict, second: dict, group: str) -> list[tuple[dict, dict[str, float],
                                                               dict[str, float]]]:
    """(shape, first run's times, second run's times) per shape of `group` both runs measured,
    over the variants both timed (shapes with fewer than two left out)."""
    other = {routing_grid.label(r): r for r in routing.rows_of(second["rows"], group, None)}
    out = []
    for r in routing.rows_of(first["rows"], group, None):
        match = other.get(routing_grid.label(r))
        if match is None:
            continue
        a, b = _times(r), _times(match)
        common = [v for v in a if v in b]
        if len(common) >= 2:
            out.append((r, {v: a[v] for v in common}, {v: b[v] for v in common}))
    return out


def _ratio(times: dict[str, float], pick: str) -> float:
    return times[pick] / min(times.values())


def report(first: dict, second: dict, floor_ms: float = 1.0) -> dict:
    """Per op group, over every shape and over the shapes at or above `floor_ms`: the oracle's
    and the installed model's auto/best summaries (`routing.summary`)."""
    import portable_rnn  # noqa: F401 - registers the op groups

    key = routing_fit.grid_key(first)
    out = {}
    for group in routing._GROUPS:
        rows = pairs(first, second, group)
        if not rows:
            continue
        m = routing.model(key, group)
        ratios: dict[str, dict[str, list[float]]] = {"all": {}, f">= {floor_ms:g} ms": {}}
        for shape, a, b in rows:
            mean = {v: math.sqrt(a[v] * b[v]) for v in a}
            got = {"oracle, first judged on second": _ratio(b, min(a, key=a.get)),
                   "oracle, second judged on first": _ratio(a, min(b, key=b.get))}
            pick = m.pick(shape, a) if m else None
            if pick is not None:
                got.update({"installed, on the first": _ratio(a, pick),
                            "installed, on the second": _ratio(b, pick),
                            "installed, on both (geometric mean)": _ratio(mean, pick)})
            for part, by in ratios.items():
                if part == "all" or min(mean.values()) >= floor_ms:
                    for name, ratio in got.items():
                        by.setdefault(name, []).append(ratio)
        out[group] = {"model": m.describe() if m else None,
                      **{part: {name: routing.summary(r) for name, r in by.items()}
                         for part, by in ratios.items()}}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("first")
    p.add_argument("second")
    p.add_argument("--floor", type=float, default=1.0,
                   help="ms: the fastest variant's time from which shapes count as large")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args(argv)
    with open(args.first) as f:
        first = json.load(f)
    with open(args.second) as f:
        second = json.load(f)
    if first["device_kind"] != second["device_kind"]:
        raise SystemExit(f"two device kinds: {first['device_kind']!r}, "
                         f"{second['device_kind']!r}")
    if routing_grid.grid_sample_ms(first) != routing_grid.grid_sample_ms(second):
        raise SystemExit("two ways of timing: --sample-ms "
                         f"{routing_grid.grid_sample_ms(first):g} and "
                         f"{routing_grid.grid_sample_ms(second):g}")
    result = report(first, second, args.floor)
    print(first["device_kind"])
    for group, parts in result.items():
        print(f"{group}: the installed {parts['model']}")
        for part, by in parts.items():
            if part == "model":
                continue
            for name, s in by.items():
                print(f"  {part:>9}, {name}: {s['n']} shapes, min {s['min']:.3f} median "
                      f"{s['median']:.3f} p90 {s['p90']:.3f} max {s['max']:.3f}, within 1.05x "
                      f"{s['within_1.05']:.0%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"first": args.first, "second": args.second, "groups": result}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

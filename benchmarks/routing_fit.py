"""The routing model on a measured grid: its error and its choice on the shapes it never saw.

    python -m benchmarks.routing_fit GRID.json [GRID.json ...] [--install] [--json OUT.json]

GRID.json files come from ``python -m benchmarks.routing_grid`` (several runs on one device kind
are merged, a later run's shape replacing an earlier one's). Per op group the model is fitted on
the grid's ``fit`` shapes (`core.routing.fit`), then each held-out shape (``held_out``, and the
``pinned`` ones) is decided as the dispatcher decides it: the variant with the least predicted
forward+backward time among the routes measured there. Printed per split: the automatic
choice's measured time over the best measured route's (min, median, 90th percentile, max, and
the share within 1.05x), the model's median log error, and each shape where the choice is over
1.05x. ``--install`` writes the merged grid, trimmed to what the model reads, as
``portable_rnn/_src/core/grids/<device kind>.json``: the grid the dispatcher then fits for that
device kind. A new route or device kind needs nothing else. ``--installed`` judges the installed
model instead (the device kind's committed grid, not refitted) on every shape of GRID.json that
the committed grid does not hold, whatever its split: a check on shapes it never saw.
"""

from __future__ import annotations

import argparse
import json
import os

from portable_rnn._src.core import routing

from . import routing_grid

KEEP = ("op", "family", "gates", "dtype", "B", "T", "I", "H", "NH", "L", "D", "P", "S", "N",
        "K", "causal", "window", "split", "ms")


def merge(paths: list[str]) -> dict:
    """The runs' rows, a later run's measurement of a shape replacing an earlier one's."""
    rows, first = {}, None
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        first = first or run
        if run["device_kind"] != first["device_kind"]:
            raise SystemExit(f"{path}: device kind {run['device_kind']!r}, the first run's is "
                             f"{first['device_kind']!r}: one grid per device kind")
        timed, first_timed = routing_grid.grid_sample_ms(run), routing_grid.grid_sample_ms(first)
        if timed != first_timed:
            raise SystemExit(f"{path}: timed with --sample-ms {timed:g}, the first run with "
                             f"{first_timed:g}: one way of timing per grid")
        for r in run["rows"]:
            if r.get("ms"):
                rows[routing_grid.label(r)] = {k: r[k] for k in KEEP if k in r}
    timed = routing_grid.grid_sample_ms(first)
    return dict(device_kind=first["device_kind"], platform=first["platform"],
                source=", ".join(paths), rows=list(rows.values()),
                **({"sample_ms": timed} if timed else {}))


def report(grid: dict) -> dict:
    """Per group and split: the held-out check's figures."""
    import portable_rnn  # noqa: F401 - registers the op groups

    out = {}
    for name, group in routing._GROUPS.items():
        fitted = routing.rows_of(grid["rows"], name)
        if not fitted:
            continue
        m = routing.fit(fitted, group, grid["device_kind"], grid["source"])
        out[name] = {"fitted": len(fitted)}
        for split in ("fit", "held_out", "pinned"):
            picks = routing.evaluate(grid["rows"], m, split)
            if not picks:
                continue
            out[name][split] = dict(routing.summary([p["ratio"] for p in picks]),
                                    log_error=routing.log_error(grid["rows"], m, split),
                                    over=[p for p in picks if p["ratio"] > 1.05])
    return out


def grid_key(grid: dict) -> str:
    """The device key (`routing.device_key`) of a grid's machine: its installed grid's name."""
    return "cpu" if grid["platform"] == "cpu" else routing.slug(grid["device_kind"])


def installed(grid: dict) -> dict:
    """Per group: the installed model's choice (`routing.model`) on every shape of `grid` that
    the device kind's committed grid does not hold, as `report` gives its held-out check."""
    import portable_rnn  # noqa: F401 - registers the op groups

    committed = routing.grid(grid_key(grid))
    if committed is None:
        raise SystemExit(f"no installed grid for {grid['device_kind']!r}")
    timed, installed_timed = (routing_grid.grid_sample_ms(grid),
                              routing_grid.grid_sample_ms(committed))
    if timed != installed_timed:
        raise SystemExit(f"the run was timed with --sample-ms {timed:g}, the installed grid "
                         f"with {installed_timed:g}")
    known = {routing_grid.label(r) for r in committed["rows"]}
    rows = [r for r in grid["rows"] if routing_grid.label(r) not in known]
    out = {}
    for name in routing._GROUPS:
        m = routing.model(grid_key(grid), name)
        picks = routing.evaluate(rows, m, None) if m else []
        if picks:
            out[name] = {"fitted": m.fitted, "unseen": dict(
                routing.summary([p["ratio"] for p in picks]),
                log_error=routing.log_error(rows, m, None),
                over=[p for p in picks if p["ratio"] > 1.05])}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("grids", nargs="+")
    p.add_argument("--install", action="store_true",
                   help="write the merged grid into portable_rnn/_src/core/grids/")
    p.add_argument("--installed", action="store_true",
                   help="judge the installed model on the shapes its grid does not hold")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args(argv)
    if args.install and args.installed:
        p.error("--install refits; --installed judges the installed model: one of them")
    grid = merge(args.grids)
    result = installed(grid) if args.installed else report(grid)
    print(f"{grid['device_kind']}: {len(grid['rows'])} shapes")
    for name, splits in result.items():
        print(f"{name}: fitted on {splits['fitted']} shapes")
        for split, s in splits.items():
            if split == "fitted":
                continue
            print(f"  {split}: {s['n']} shapes, auto/best min {s['min']:.3f} median "
                  f"{s['median']:.3f} p90 {s['p90']:.3f} max {s['max']:.3f}, within 1.05x "
                  f"{s['within_1.05']:.0%}; median |log error| {s['log_error']:.3f}")
            for o in s["over"]:
                print(f"    {o['ratio']:.3f}x  picked {o['pick']}, best {o['best']}: "
                      f"{routing_grid.label(o['shape'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device_kind": grid["device_kind"], "source": grid["source"],
                       "groups": result}, f, indent=1)
    if args.install:
        path = routing.GRIDS / f"{grid_key(grid)}.json"
        os.makedirs(path.parent, exist_ok=True)
        head = json.dumps({k: v for k, v in grid.items() if k != "rows"})[:-1]
        with open(path, "w") as f:  # a row a line
            f.write(head + ', "rows": [\n' + ",\n".join(json.dumps(r) for r in grid["rows"])
                    + "\n]}\n")
        print(f"installed {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

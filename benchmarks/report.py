"""Charts and Markdown tables from the families' JSON files: RESULTS.md, and the documentation's
Benchmarks page (generated when the site is built, by docs/hooks.py)."""

from __future__ import annotations

import json
import math
import os

FAMILIES = ("lstm", "equinox", "recurrent", "keras_layers", "attention", "overhead", "compile")


def load(out_dir: str) -> dict[str, dict]:
    payloads = {}
    for family in FAMILIES:
        path = os.path.join(out_dir, f"{family}.json")
        if os.path.exists(path):
            with open(path) as f:
                payloads[family] = json.load(f)
    return payloads


def panels(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["panel"], []).append(row)
    return out


def implementations(rows: list[dict]) -> list[str]:
    names = [rows[0]["baseline"]]
    for row in rows:
        names += [n for n in [*row["results"], *row["failed"], *row["skipped"]] if n not in names]
    return names


def unit(row: dict) -> str:
    return "ms" if row["metric"].endswith("_ms") else "MiB"


def chart(payload: dict, path: str) -> None:
    """One bar chart per panel: each implementation's value relative to the baseline, per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    times = FuncFormatter(lambda v, _: f"{v:g}x")

    groups = panels(payload["rows"])
    cols = min(2, len(groups))
    nrows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(7 * cols, 3.6 * nrows), squeeze=False)
    names = implementations(payload["rows"])
    colors = {n: f"C{i}" for i, n in enumerate(names)}
    for ax, (panel, rows) in zip(axes.flat, groups.items()):
        width = 0.8 / len(names)
        ratios = []
        for i, name in enumerate(names):
            vals = [(r["results"].get(name) or {}).get("ratio") or math.nan for r in rows]
            ratios += [v for v in vals if not math.isnan(v)]
            ax.bar([c + (i - (len(names) - 1) / 2) * width for c in range(len(rows))], vals,
                   width, label=name, color=colors[name])
        ax.axhline(1.0, color="black", linewidth=0.8)
        if ratios and max(ratios) / min(ratios) > 3:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(times)
        ax.set_xticks(range(len(rows)), [r["case"] for r in rows], rotation=15, ha="right",
                      fontsize=8)
        ax.set_title(panel, fontsize=10)
        ax.set_ylabel(f"{'memory' if unit(rows[0]) == 'MiB' else 'time'} / "
                      f"{rows[0]['baseline']}", fontsize=8)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(6, len(names)), fontsize=8,
               bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(f"{payload['title']}: relative to the baseline (lower is better)", y=1.06,
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _number(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _cell(row: dict, name: str) -> str:
    if name in row["failed"]:
        return "**FAILED**"
    if name in row["skipped"] or name not in row["results"]:
        return "n/a"
    r = row["results"][name]
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") is not None else ""
    return f"{_number(r[row['metric']])} {unit(row)}{ratio}"


def table(rows: list[dict]) -> list[str]:
    names = implementations(rows)
    head = [n + (" (baseline)" if n == rows[0]["baseline"] else "") for n in names]
    lines = ["| " + " | ".join([rows[0]["panel"], *head]) + " |",
             "|" + "---|" * (len(names) + 1)]
    lines += ["| " + " | ".join([r["case"], *(_cell(r, n) for n in names)]) + " |" for r in rows]
    return lines


def target_table(targets: dict) -> list[str]:
    """The family's performance targets, one line per target and row they concern."""
    rows = [t for t in targets.get("rows", []) if "target" in t]
    if not rows:
        return []
    met = sum(t["met"] for t in rows)
    return [f"Targets: {targets['about']}. Met: {met} of {len(rows)}.", "",
            "| target | case | measured | met |", "|---|---|---|---|",
            *(f"| {t['target']} | {t['case']} | {t['value']:.2f} | "
              f"{'yes' if t['met'] else '**no**'} |" for t in rows), ""]


def environment_line(env: dict) -> str:
    versions = ", ".join(f"{k} {env[k]}" for k in ("jax", "flax", "torch", "keras") if k in env)
    cpu = env.get("cpu_model", env["machine"])
    return (f"Measured {env['time']} on {cpu}, {env['cores']} cores ({env['device_kind']}), "
            f"Python {env['python']}, {versions}.")


def markdown(payloads: dict[str, dict], image_dir: str = "", heading: str = "###") -> str:
    if not payloads:
        return "No results yet: run `python -m benchmarks`.\n"
    first = environment_line(next(iter(payloads.values()))["environment"])
    lines = [first + " Each cell: the median over "
             "interleaved rounds (every implementation once per round, in rotating order), and "
             "in brackets relative to the baseline column; lower is better. Every "
             "implementation's output and gradients were checked against a reference before "
             "it was timed. Regenerate with `python -m benchmarks` (20-25 minutes on 2 "
             "cores); raw numbers with quartiles in `benchmarks/results/*.json`.", ""]
    for family, payload in payloads.items():
        lines += [f"{heading} {payload['title']}", "", payload["about"], ""]
        own = environment_line(payload["environment"])
        if own != first:  # a family run on its own, at another time or with other versions
            lines += [own, ""]
        lines += [f"![{payload['title']}]({image_dir}{family}.png)", ""]
        for rows in panels(payload["rows"]).values():
            lines += table(rows) + [""]
        notes = {f"{n}: {why}" for r in payload["rows"] for n, why in r["skipped"].items()}
        notes |= {r["note"] for r in payload["rows"] if r.get("note")}
        notes |= {f"{n} FAILED in {r['case']} ({r['panel']}): {why}" for r in payload["rows"]
                  for n, why in r["failed"].items()}
        lines += [f"- {n}" for n in sorted(notes)] + ([""] if notes else [])
        lines += target_table(payload.get("targets") or {})
    return "\n".join(lines).rstrip() + "\n"


def write(payloads: dict[str, dict], out_dir: str) -> None:
    for family, payload in payloads.items():
        chart(payload, os.path.join(out_dir, f"{family}.png"))
    with open(os.path.join(out_dir, "RESULTS.md"), "w") as f:
        f.write("# Benchmark results\n\n" + markdown(payloads, heading="##"))
    print(f"wrote {out_dir}/RESULTS.md and {len(payloads)} chart(s)")

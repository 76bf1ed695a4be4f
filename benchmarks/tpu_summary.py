"""The short report of `benchmarks/tpu_check.sh`: summary.md and summary.json from its results.

    python -m benchmarks.tpu_summary benchmarks/results/tpu
    python -m benchmarks.tpu_summary --done benchmarks/results/tpu   # tests already run there
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def _read(out: str, name: str) -> str | None:
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def suite(out: str, name: str) -> dict | None:
    """Counts, time, failures and skip reasons of one pytest process's JUnit XML."""
    text = _read(out, f"{name}.xml")
    if text is None:
        return None
    root = ET.fromstring(text)
    cases = root.iter("testcase")
    counts = collections.Counter()
    failures, skips = [], collections.Counter()
    for case in cases:
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
        elif outcome.tag == "skipped":
            counts["skipped"] += 1
            message = (outcome.get("message") or "").strip().splitlines() or [""]
            skips[re.sub(r"^[^:]*:\d+: ", "", message[0])] += 1
        else:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            lines = [line.strip() for line in (outcome.get("message") or "").splitlines()]
            detail = " ".join(line for line in lines[:6] if line)[:240]
            failures.append(f"{test}: {detail}" if detail else test)
    suites = [root] if root.tag == "testsuite" else list(root)
    seconds = sum(float(s.get("time", 0)) for s in suites)
    return {"counts": dict(counts), "seconds": round(seconds, 1), "failures": failures,
            "skip_reasons": dict(skips.most_common())}


def node_id(classname: str, name: str, root: str = ".") -> str:
    """pytest's node id of a JUnit test case: ``tests.test_a.TestB`` + ``test_c[x]`` is
    ``tests/test_a.py::TestB::test_c[x]``."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if os.path.exists(os.path.join(root, path)):
            return "::".join([path, *parts[i:], name])
    return "::".join([*parts, name])


VERBOSE = re.compile(r"^(\S+\.py::.+?) (PASSED|SKIPPED|XFAIL|XPASS)\b")


def done(out: str, root: str = ".") -> list[str]:
    """The node ids of the tests that the TPU process's parts in `out` passed or skipped, so
    that a further part runs only the others: those not reached and those that failed
    (`tpu_check.sh`, SUITE_TPU_RESUME). Read from each part's JUnit XML, and from its verbose
    output (``suite_tpu*.txt``), which a process that aborts leaves without an XML."""
    ids = []
    for f in sorted(os.listdir(out)):
        if re.fullmatch(r"suite_tpu\w*\.xml", f):
            ids += [node_id(c.get("classname") or "", c.get("name"), root)
                    for c in ET.parse(os.path.join(out, f)).getroot().iter("testcase")
                    if c.get("classname") and not any(
                        e.tag in ("failure", "error") for e in c)]
        elif re.fullmatch(r"suite_tpu\w*\.txt", f):
            with open(os.path.join(out, f), errors="replace") as lines:
                ids += [m.group(1) for m in map(VERBOSE.match, lines) if m]
    return list(dict.fromkeys(ids))


def benchmark_lines(payload: dict) -> list[str]:
    lines = []
    for row in payload["rows"]:
        if "results" not in row:  # a case that failed or was left out, with its reason
            lines.append(f"- {row['case']}: {row.get('error', 'no results')}")
            continue
        base = row["results"].get(row["baseline"], {}).get("median_ms")
        parts = []
        for name, r in row["results"].items():
            share = f", {r['peak_share']:.0%} of peak" if r.get("peak_share") else ""
            parts.append(f"{name} {r['median_ms']:.3g} ms{share}" + (
                f" ({r['median_ms'] / base:.2f}x)" if base and name != row["baseline"] else ""))
        failed = "; failed: " + ", ".join(row["failed"]) if row.get("failed") else ""
        auto = f" (auto: {row['auto']})" if row.get("auto") else ""
        lines.append(f"- {row['panel']}, {row['case']}{auto}: " + "; ".join(parts) + failed)
    return lines


def main(out: str) -> int:
    summary = {"steps": (_read(out, "steps.txt") or "").splitlines(),
               "commit": (_read(out, "commit.txt") or "").strip() or None}
    md = ["# portable_rnn on a TPU", ""]
    if summary["commit"]:
        md += [f"Commit: {summary['commit']}", ""]
    doctor = _read(out, "doctor.txt")
    if doctor:
        lines = [line for line in doctor.splitlines() if not line.startswith((" ", "/"))]
        head = lines[:4]
        summary["doctor"] = head
        md += ["## Environment", "", *[f"    {line}" for line in head], ""]
    accuracy = _read(out, "float32_accuracy.json")
    if accuracy:
        summary["float32_accuracy"] = acc = json.loads(accuracy)
        md += ["## float32 accuracy (relative error against float64)", "",
               ", ".join(f"{k} {v:.2g}" for k, v in acc["functions"].items()) + "; matmul "
               + ", ".join(f"{k} {v:.2g}" for k, v in acc["matmul"].items()), ""]
    selftest = _read(out, "selftest.json")
    if selftest:
        report = json.loads(selftest)
        rows = report["rows"]
        status = collections.Counter(r["status"] for r in rows)
        env = report["environment"]
        summary["selftest"] = {"ok": report["ok"], "status": dict(status),
                               "wall_s": env.get("wall_s"), "platform": env.get("platform"),
                               "device_kind": env.get("device_kind"), "jax": env.get("jax"),
                               "failed": [f"{r['case']}: {r['error']}" for r in rows
                                          if r["status"] == "failed"]}
        md += ["## Self-test", "",
               f"{status['ok']} ok, {status['failed']} failed, {status['skipped']} skipped in "
               f"{env.get('wall_s')} s on {env.get('device_kind')} (jax {env.get('jax')}).", ""]
        md += [f"- failed: {f}" for f in summary["selftest"]["failed"]]
    elif _read(out, "selftest.txt"):
        # stopped before writing its JSON: the rows it printed
        rows = [line for line in _read(out, "selftest.txt").splitlines()
                if re.search(r"\s(ok|failed|skipped)\s", line) and not line.startswith(" ")]
        status = collections.Counter(re.search(r"\s(ok|failed|skipped)\s", r)[1] for r in rows)
        summary["selftest"] = {"status": dict(status), "rows": rows, "complete": False}
        md += ["## Self-test", "", f"Stopped before its end: {status['ok']} ok, "
               f"{status['failed']} failed, {status['skipped']} skipped in the rows it printed:",
               "", *[f"    {r}" for r in rows], ""]
    if any(f.startswith("suite_") and f.endswith(".xml") for f in os.listdir(out)):
        md += ["## Test suite", ""]
    parts = sorted(f[:-4] for f in os.listdir(out) if re.fullmatch(r"suite_tpu\w*\.xml", f))
    for name in (*parts, "suite_cpu"):
        result = suite(out, name)
        if result is None:
            continue
        summary[name] = result
        c = result["counts"]
        md.append(f"- {name}: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
                  f"{c.get('errors', 0)} errors, {c.get('skipped', 0)} skipped in "
                  f"{result['seconds']} s" + (" (stopped at its time limit: incomplete)" if any(
                      step.startswith(f"{name}: exit 124") for step in summary["steps"]) else ""))
        md += [f"  - failed: {f}" for f in result["failures"]]
        md += [f"  - skipped ({n}): {why}" for why, n in result["skip_reasons"].items()]
    if md[-1]:
        md.append("")
    for name in sorted(n[:-5] for n in os.listdir(out)
                       if n.startswith("example") and n.endswith(".json")):
        run = json.loads(_read(out, f"{name}.json"))
        summary[name] = {k: run.get(k) for k in ("held_out", "tokens_per_s", "platform",
                                                 "implementation")}
        summary[name]["first_loss"] = run["losses"][0] if run.get("losses") else None
        md += ["", f"## Example ({run.get('implementation', 'auto')})", "",
               f"bfloat16 char-LSTM, {len(run['steps'])} steps on {run.get('platform')}: loss "
               f"{summary[name]['first_loss']:.3f} -> held-out {run['held_out']:.3f}, "
               f"{run.get('tokens_per_s') or 0:,.0f} tokens/s", ""]
    for family in ("tpu_recurrent", "tpu_attention_blocks", "tpu_recurrent_kernel"):
        text = _read(out, f"{family}.json")
        if text:
            payload = json.loads(text)
            summary[family] = benchmark_lines(payload)
            md += [f"## {family} (median ms; ratio to portable_rnn's)", "",
                   *summary[family], ""]
    md += ["## Steps", "", *[f"- {s}" for s in summary["steps"]]]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--done":
        print(*done(sys.argv[2]), sep="\n")
        raise SystemExit(0)
    raise SystemExit(main(sys.argv[1]))

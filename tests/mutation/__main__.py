"""Applies each mutation of `tests/mutation/mutations.py` to a copy of the repository and runs
tests against it; prints which tests fail.

    python -m tests.mutation                      # every mutation, its own tests
    python -m tests.mutation NAME [NAME ...]      # some of them
    python -m tests.mutation --list               # names and bugs
    python -m tests.mutation --tests "tests/test_low_precision.py -m 'not slow'"  # your selection
    python -m tests.mutation --baseline           # the unmutated copy first (must pass)
    python -m tests.mutation --tier default       # only the default tier's tests of each selection

The copy holds the files git tracks or would track (so uncommitted work is included), in a
temporary directory; the tests run there (`python -m pytest`, this interpreter), importing the
copied package. Hypothesis draws from a fixed seed (`--seed`, default 0) so that a table can be
reproduced; the pinned `@example`s run with every seed. Exit status 1 if a mutation survives
(no test failed), or if the baseline fails.

Each row also names the tier that catches the mutation (`tests/tiers.py`): ``default`` when a
failing test is in the README's default tier, else ``full`` (CI runs both), with ``+tpu`` when
a failing test is one the TPU tier also runs on the chip. The tests run with ``--tier all``
unless ``--tier`` narrows them.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from .mutations import MUTATIONS, Mutation

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = "portable_rnn"


def repository_files() -> list[str]:
    """The files git tracks or would track (untracked ones not ignored), that exist."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=ROOT, check=True, capture_output=True).stdout.decode()
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def copy_repository(dest: pathlib.Path) -> None:
    for name in repository_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)


def apply(mutation: Mutation, repo: pathlib.Path) -> None:
    path = repo / PACKAGE / mutation.target
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        raise SystemExit(f"{mutation.name}: its snippet occurs {count} times in "
                         f"{PACKAGE}/{mutation.target} (must be once)")
    path.write_text(text.replace(mutation.old, mutation.new))


def failures(junit: pathlib.Path, tiers: dict[str, str] | None = None
             ) -> tuple[list[str], list[str]]:
    """(failed tests, errors) from a pytest JUnit XML report; `tiers`, if given, receives each
    failed test's tier (its ``tier`` property, which `tests/conftest.py` records)."""
    failed, errors = [], []
    if not junit.exists():
        return failed, ["no report: pytest did not run"]
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        if case.find("failure") is not None:
            failed.append(name)
            if tiers is not None:
                tiers[name] = next((p.get("value", "") for p in case.iter("property")
                                    if p.get("name") == "tier"), "")
        elif case.find("error") is not None:
            errors.append(name)
    return failed, errors


def catching_tier(tiers: dict[str, str]) -> str:
    """The tier that catches a mutation, from its failed tests' tiers (``default`` or
    ``full``, ``+tpu`` where a failed test is in the TPU tier too; ``?`` for a test without
    one)."""
    if not tiers:
        return "none"
    parts = [set(t.split(",")) for t in tiers.values()]
    cpu = ("default" if any("default" in p for p in parts)
           else "full" if any("full" in p for p in parts) else "?")
    return cpu + ("+tpu" if any("tpu" in p for p in parts) else "")


def run_tests(repo: pathlib.Path, selection: list[str], args, tiers: dict[str, str] | None = None
              ) -> tuple[list[str], list[str]]:
    junit = repo / "mutation-report.xml"
    junit.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(repo), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PORTABLE_RNN_TIER", None)
    cmd = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider",
           "--junitxml", str(junit), f"--hypothesis-seed={args.seed}", "-n", str(args.workers),
           "-o", "addopts=--dist loadfile", f"--tier={args.tier}"]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    failed, errors = failures(junit, tiers)
    if proc.returncode not in (0, 1) and not errors:  # collection errors, crashes
        errors.append(f"pytest exit {proc.returncode}: "
                      + (proc.stdout + proc.stderr).strip().splitlines()[-1:][0])
    return failed, errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--tests", help="pytest arguments to run instead of each mutation's own")
    parser.add_argument("--baseline", action="store_true",
                        help="first run the selection on the unmutated copy")
    parser.add_argument("--seed", type=int, default=0, help="--hypothesis-seed (default 0)")
    parser.add_argument("-n", "--workers", default="2", help="pytest-xdist workers (default 2)")
    parser.add_argument("--tier", default="all", choices=("default", "full", "all", "tpu"),
                        help="the tier of the selection's tests to run (tests/tiers.py; "
                             "default all)")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTATIONS}
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:40s} {m.bug}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown mutations {unknown}; --list shows them")
    chosen = [known[n] for n in args.names] or list(MUTATIONS)
    status = 0
    with tempfile.TemporaryDirectory(prefix="portable-rnn-mutation-") as tmp:
        pristine = pathlib.Path(tmp) / "pristine"
        copy_repository(pristine)
        if args.baseline:
            selection = (shlex.split(args.tests) if args.tests
                         else sorted({t for m in chosen for t in m.tests}))
            failed, errors = run_tests(pristine, selection, args)
            print(f"baseline ({' '.join(selection)}): "
                  + ("passes" if not failed + errors else f"FAILS {failed + errors}"), flush=True)
            if failed or errors:
                return 1
        print("| mutation | bug | tests run | failing tests | caught | caught by tier |")
        print("|---|---|---|---|---|---|")
        for m in chosen:
            repo = pathlib.Path(tmp) / m.name
            shutil.copytree(pristine, repo)
            apply(m, repo)
            selection = shlex.split(args.tests) if args.tests else list(m.tests)
            start = time.perf_counter()
            tiers: dict[str, str] = {}
            failed, errors = run_tests(repo, selection, args, tiers)
            caught = bool(failed)
            status |= not caught
            shown = ", ".join(f"`{f}`" for f in failed) or "none"
            if errors:
                shown += "; errors: " + ", ".join(f"`{e}`" for e in errors)
            print(f"| {m.name} | {m.bug} | {' '.join(selection)} | {shown} | "
                  f"{'yes' if caught else 'NO'} ({time.perf_counter() - start:.0f} s) | "
                  f"{catching_tier(tiers)} |", flush=True)
            shutil.rmtree(repo, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

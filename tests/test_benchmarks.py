"""Smoke test of the benchmark suite: `python -m benchmarks --quick` in a subprocess.

Checks that every family runs, that every implementation agreed with its reference and produced
a finite positive number, and that the files exist; never anything about speed.
"""

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FAMILIES = ("lstm", "equinox", "recurrent", "keras_layers", "attention", "overhead", "compile")


@pytest.mark.slow
def test_quick_run_writes_checked_finite_results(tmp_path):
    readme = (ROOT / "README.md").read_text()
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out-dir",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for family in FAMILIES:
        payload = json.loads((tmp_path / f"{family}.json").read_text())
        assert payload["quick"] and payload["rows"] and payload["environment"]["jax"]
        for row in payload["rows"]:
            where = (family, row["panel"], row["case"])
            assert not row["failed"], where
            assert row["baseline"] in row["results"], where
            for name, r in row["results"].items():
                value = r[row["metric"]]
                assert math.isfinite(value) and value > 0, (*where, name, r)
                assert math.isfinite(r["ratio"]) and r["ratio"] > 0, (*where, name, r)
        assert (tmp_path / f"{family}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lstm = json.loads((tmp_path / "lstm.json").read_text())["rows"][0]
    for peer in ("portable_rnn", "flax_optimized", "flax_lstmcell", "lstm_ref", "keras_jax",
                 "torch"):
        assert peer in lstm["results"] or peer in lstm["skipped"], peer
    equinox = json.loads((tmp_path / "equinox.json").read_text())["rows"]
    for peer in ("portable_rnn", "equinox", "equinox_cells", "flax_optimized"):
        assert all(peer in row["results"] for row in equinox), peer
    recurrent = json.loads((tmp_path / "recurrent.json").read_text())["rows"]
    assert {row["cell"] for row in recurrent} == {"gru", "simple_rnn"}
    for peer in ("portable_rnn", "flax", "keras_jax", "torch"):
        assert all(peer in row["results"] or peer in row["skipped"] for row in recurrent), peer
    compile_rows = json.loads((tmp_path / "compile.json").read_text())["rows"]
    assert {m for row in compile_rows for m in row["results"]} == {"portable_rnn", "flax"}
    assert all(row["results"]["flax"]["compile_ms"] > 0 for row in compile_rows
               if row["mode"] == "compile")
    for family in ("lstm", "equinox", "recurrent", "attention", "compile"):  # a value per target
        goals = json.loads((tmp_path / f"{family}.json").read_text())["targets"]["rows"]
        if family == "attention" and importlib.util.find_spec("torch") is None:
            assert goals == []  # every attention target is relative to PyTorch SDPA
            continue
        assert goals and all(math.isfinite(g["value"]) and isinstance(g["met"], bool)
                             for g in goals), (family, goals)
    results = (tmp_path / "RESULTS.md").read_text()
    assert "](lstm.png)" in results and "](recurrent.png)" in results
    assert "| target | case | measured | met |" in results
    assert "| portable_rnn (baseline) |" in results
    assert (ROOT / "README.md").read_text() == readme  # only a full run rewrites the README

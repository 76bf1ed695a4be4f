"""Smoke test of the benchmark suite: `python -m benchmarks --quick`, and each benchmark's own
command, run as `python -m` runs them (`_run`: in this process, for time).

Checks that every family runs, that every implementation agreed with its reference and produced
a finite positive number, and that the files exist; never anything about speed.
"""

import contextlib
import importlib.util
import io
import json
import math
import os
import pathlib
import runpy
import subprocess
import sys
import warnings
from types import SimpleNamespace

import jax
import pytest

pytestmark = pytest.mark.cpu  # the CPU benchmark suite

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(module, *args):
    """`python -m module args...` from the checkout's root, in this process (each fresh
    interpreter spent seconds importing JAX, Flax and PyTorch): the module run as ``__main__``
    (`runpy`, as ``-m`` does), with a fresh interpreter's settings: JAX's standard dtype
    promotion (the suite's is strict), Python's default warning filters (the suite's make
    warnings errors); its environment variables and PyTorch's thread count restored after.
    Returns what `subprocess.run` would: ``returncode``, ``stdout``, ``stderr``."""
    out, err, code = io.StringIO(), io.StringIO(), 0
    environ, argv, cwd = dict(os.environ), sys.argv, os.getcwd()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    try:
        os.chdir(ROOT)
        sys.argv = [module, *map(str, args)]
        with (contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
              warnings.catch_warnings(), jax.numpy_dtype_promotion("standard")):
            warnings.resetwarnings()
            warnings.simplefilter("default")
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int | None):
            err.write(f"{e.code}\n")
    finally:
        os.chdir(cwd)
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
        if (torch := sys.modules.get("torch")) is not None:
            torch.set_num_threads(threads or torch.get_num_threads())
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


FAMILIES = ("lstm", "equinox", "recurrent", "keras_layers", "attention", "overhead", "compile")


@pytest.mark.slow
def test_quick_run_writes_checked_finite_results(tmp_path):
    readme = (ROOT / "README.md").read_text()
    proc = _run("benchmarks", "--quick", "--out-dir", str(tmp_path))
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


def test_pytorch_algorithm_follows_pytorchs_rules():
    """`benchmarks.gpu_torch.pytorch_algorithm` against cases read off PyTorch's `get_algo`
    (aten/src/ATen/native/cudnn/RNN.cpp), for an sm90 GPU with 132 SMs and one for sm86."""
    from benchmarks.gpu_torch import DRY_DEVICE, pytorch_algorithm

    sm90, sm86 = DRY_DEVICE, {"major": 8, "minor": 6, "multi_processor_count": 128}

    def algo(cell="lstm", dtype="float16", B=64, T=256, I=512, H=512, L=1, bidir=False,
             forward=True, device=sm90, **kw):
        return pytorch_algorithm(cell, dtype, B, T, I, H, L, bidir, forward, device, **kw)

    assert algo() == "PERSIST_STATIC"  # half, one layer, H and I multiples of 128, B % 8 == 0
    assert algo(dtype="bfloat16") == algo(dtype="float32") == "STANDARD"  # CUDNN_DATA_HALF only
    assert algo(cell="gru") == "STANDARD"  # persistent GRU excluded
    assert algo(cell="rnn_tanh", B=96, H=1024, I=1024) == "STANDARD"  # B >= 96 and H >= 896
    assert algo(cell="rnn_tanh", B=64, H=1024, I=1024) == "PERSIST_STATIC"
    assert algo(B=12) == algo(B=256) == algo(L=2) == algo(bidir=True) == "STANDARD"
    assert algo(device=sm86) == "STANDARD"  # A40-class parts excluded
    assert algo(H=192, I=192) == "PERSIST_STATIC_SMALL_H"  # forward: H <= 192 (LSTM, GRU)
    assert algo(H=192, I=256, forward=False) == "STANDARD"  # backward: H <= 128 only
    assert algo(cell="rnn_tanh", H=384, I=384, dtype="float32") == "PERSIST_STATIC_SMALL_H"
    assert algo(H=128, proj_size=64) == algo(H=128, packed=True) == "STANDARD"
    assert algo(H=128, cudnn_version=8100) == "PERSIST_STATIC"  # no SMALL_H before cuDNN 8.2.1


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_gpu_benchmark_torch_family_dry_run(tmp_path):
    """The GPU anchor's plumbing on a CPU: PyTorch's CPU kernels stand in for cuDNN, and every
    row was checked against portable_rnn before it was timed."""
    out = tmp_path / "gpu.json"
    proc = _run("benchmarks.gpu", "--dry-run", "--only", "torch", "--rounds", "1", "--out",
                str(out))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    payload = json.loads(out.read_text())
    rows = payload["rows"]
    assert {(r["cell"], r["dtype"], r["mode"]) for r in rows} == {
        (c, d, m) for c in ("lstm", "gru", "rnn_tanh") for d in ("bfloat16", "float32")
        for m in ("fwd+bwd", "fwd")}
    for row in rows:
        assert set(row["results"]) == {"portable_rnn", "torch"}
        assert row["check"]["torch"], row  # agreement errors recorded, below the tolerance
        # portable_rnn's own cuDNN call: left out on a CPU, with the route's reason
        assert row["check"]["cudnn_ffi"]["skipped"].startswith("platform is 'cpu'"), row
        for r in row["results"].values():
            assert r["median_ms"] > 0 and r["tflops"] > 0 and r["us_per_step"] > 0
        assert row["pytorch_algorithm"]["forward"] == "PERSIST_STATIC_SMALL_H"  # H = 32
    from benchmarks import gpu

    table = gpu.markdown(payload)
    assert "| lstm | bfloat16 | (8, 16, 32, 32, 1) | fwd+bwd |" in table
    assert "| `cudnn_ffi` (/ PyTorch) |" in table and table.count("| skipped |") == len(rows)


def test_tpu_recurrent_kernel_quick_run(tmp_path):
    """The Pallas kernel benchmark's plumbing on a CPU (the kernel interpreted): every row
    checked against the float32 loop before it was timed (the time loop's forced forms too,
    `--loop-forms`), the JSON and `--resume`."""
    proc = _run("benchmarks.tpu_recurrent_kernel", str(tmp_path), "--quick", "--rounds", "1",
                "--cells", "gru", "--loop-forms")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    payload = json.loads((tmp_path / "tpu_recurrent_kernel.json").read_text())
    assert not payload["errors"] and not payload["skipped"]
    assert {r["mode"] for r in payload["rows"]} == {"fwd", "fwd+bwd"}
    for row in payload["rows"]:
        assert not row["failed"] and set(row["results"]) == {
            "pallas", "pallas_recompute", "scan", "flax", "pallas_1_scratch", "pallas_4_scratch",
            "pallas_1_values", "pallas_4_values"}, row
        assert row["check"]["pallas"]["tol"] > 0
    # --resume keeps what the JSON measured and runs only the rest (here, nothing); --only
    # keeps the cases whose label holds one of its parts (here T8)
    proc = _run("benchmarks.tpu_recurrent_kernel", str(tmp_path), "--quick", "--rounds", "1",
                "--cells", "gru", "--resume", "--only", "B99,T8")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "MEASURED EARLIER gru B4 T8 I8 H128" in proc.stdout
    resumed = json.loads((tmp_path / "tpu_recurrent_kernel.json").read_text())
    assert resumed["rows"] == payload["rows"] and not resumed["skipped"]
    # a case whose label holds none of --only's parts is not run; --loop-forms names forms
    proc = _run("benchmarks.tpu_recurrent_kernel", str(tmp_path / "none"), "--quick", "--only",
                "B99,T99", "--loop-forms", "pallas_16_values,pallas_2_scratch")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert json.loads((tmp_path / "none" / "tpu_recurrent_kernel.json").read_text())["rows"] == []
    proc = _run("benchmarks.tpu_recurrent_kernel", str(tmp_path), "--loop-forms",
                "pallas_0_values")
    assert proc.returncode == 2 and "loop form 'pallas_0_values': expected" in proc.stderr


def test_autodiff_backward_quick_run_and_table(tmp_path):
    """The autodiff-backward benchmark's plumbing: both paths timed, their gradients agreeing,
    and `--table-from` writing the table between the markers of a copy of the docs page."""
    proc = _run("benchmarks.autodiff_backward", str(tmp_path), "--quick", "--rounds", "1",
                "--cells", "simple_rnn", "--dtypes", "float32")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    payload = json.loads((tmp_path / "autodiff_backward.json").read_text())
    (row,) = payload["rows"]
    assert not payload["errors"] and not payload["skipped"]
    assert set(row["times"]) == {"hand_written", "autodiff"} and row["time_ratio"] > 0
    assert row["max_rel_err"] < 1e-5
    page = tmp_path / "development.md"
    page.write_text((ROOT / "docs/development.md").read_text())
    proc = _run("benchmarks.autodiff_backward", "--table-from",
                str(tmp_path / "autodiff_backward.json"), "--docs-path", str(page))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    text = page.read_text()
    assert "Not measured yet." not in text
    assert "| simple_rnn | float32 | B4 T8 I8 H16 L2 bidir |" in text
    assert text.count("<!-- autodiff-backward-table -->") == 1


def test_classic_gru_benchmark_quick_run(tmp_path):
    """The classic GRU benchmark's plumbing: the three implementations timed, the classic GRU
    agreeing with Keras' GRU(reset_after=False) on the same weights."""
    proc = _run("benchmarks.classic_gru", str(tmp_path), "--quick", "--rounds", "1", "--dtypes",
                "float32")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    payload = json.loads((tmp_path / "classic_gru.json").read_text())
    (row,) = payload["rows"]
    assert not payload["errors"]
    assert set(row["times"]) == {"classic_gru", "gru", "keras_gru_reset_after_false"}
    assert row["ratio_to_classic_gru"]["classic_gru"] == 1.0
    assert row["max_rel_err_vs_keras"] < 1e-5


def test_mgu_benchmark_quick_run(tmp_path):
    """The MGU benchmark's plumbing: the MGU checked against Flax's nn.MGUCell, all three
    timed in both modes, ratios to the MGU's median."""
    out = tmp_path / "mgu.json"
    proc = _run("benchmarks.mgu", str(out), "--quick", "--rounds", "1")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["mode"] for r in rows] == ["fwd", "fwd+bwd"]
    for row in rows:
        assert not row["failed"] and set(row["results"]) == {"mgu", "gru", "flax_mgu"}, row
        assert row["results"]["mgu"]["ratio"] == 1.0 and row["results"]["flax_mgu"]["ratio"] > 0
        check = row["check"]["mgu"]
        assert check["y vs Flax"] <= check["tol"] and check["dx vs Flax"] <= check["tol"]


def test_slstm_cpu_benchmark_quick_run(tmp_path):
    """The sLSTM-against-FlashRNN benchmark's plumbing: FlashRNN's vanilla PyTorch backend run on
    the weights `weights_to_flashrnn` writes from ours (with heads), its outputs and input
    gradient checked against ours, both timed in both modes, ratios to ours; without PyTorch
    or FlashRNN, ours alone and the reason."""
    out = tmp_path / "slstm_cpu.json"
    proc = _run("benchmarks.slstm_cpu", str(out), "--quick", "--rounds", "1")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["mode"] for r in rows] == ["fwd", "fwd+bwd"]
    peer = importlib.util.find_spec("torch") and importlib.util.find_spec("flashrnn")
    for row in rows:
        assert row["params"]["NH"] == 2 and row["results"]["slstm"]["ratio"] == 1.0, row
        if not peer:
            assert set(row["results"]) == {"slstm"} and "flashrnn_vanilla" in row["failed"]
            continue
        assert not row["failed"] and row["results"]["flashrnn_vanilla"]["ratio"] > 0, row
        check = row["check"]["flashrnn_vanilla"]
        assert check["y vs ours"] <= check["tol"] and check["dx vs ours"] <= check["tol"]


def test_tpu_attention_benchmark_quick_run(tmp_path):
    """The TPU attention benchmark's plumbing on any backend (the splash route interpreted off a
    TPU) and `--resume`."""
    proc = _run("benchmarks.tpu_attention", "--quick", "--rounds", "1", "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (row,) = json.loads((tmp_path / "tpu_attention_blocks.json").read_text())["rows"]
    assert not row["failed"] and "error" not in row, row
    assert {"chunked", "xla", "jax_nn", "auto", "splash_128"} <= set(row["results"])
    # --resume keeps the measured case and runs nothing; a case not asked for stays in the JSON
    results = tmp_path / "tpu_attention_blocks.json"
    other = {"name": "causal_512", "case": "B8 T512 N8 D128 causal", "error": "skipped"}
    results.write_text(json.dumps(dict(json.loads(results.read_text()), rows=[row, other])))
    proc = _run("benchmarks.tpu_attention", "--quick", "--out-dir", str(tmp_path), "--resume")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "tpu_attention | " not in proc.stdout
    assert json.loads(results.read_text())["rows"] == [other, row]


def test_routing_grid_and_fit_quick_run(tmp_path, monkeypatch):
    """The routing grid's plumbing (tiny shapes, every route this machine serves, both passes,
    the split drawn before measuring), `--resume`, and the fit's report and `--install`, which
    the routing model then reads for this device kind."""
    grid = tmp_path / "grid.json"
    proc = _run("benchmarks.routing_grid", str(grid), "--quick", "--rounds", "1",
                "--sample-ms", "2")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    payload = json.loads(grid.read_text())
    assert payload["sample_ms"] == 2
    rows = payload["rows"]
    assert {r["op"] for r in rows} == {"recurrent", "attention"} and len(rows) == 8
    assert all(set(t) == {"fwd", "fwdbwd"} for r in rows for t in r["ms"].values())
    assert {r["split"] for r in rows} <= {"fit", "held_out"}
    attention = [r for r in rows if r["op"] == "attention"]
    assert all({"chunked", "xla"} <= set(r["ms"]) for r in attention), attention
    proc = _run("benchmarks.routing_grid", str(grid), "--quick", "--rounds", "1", "--resume")
    assert proc.returncode != 0 and "resume it the same way" in proc.stderr  # timed otherwise
    proc = _run("benchmarks.routing_grid", str(grid), "--quick", "--rounds", "1", "--resume",
                "--sample-ms", "2")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert json.loads(grid.read_text())["rows"] == rows

    from benchmarks import routing_fit

    # every shape fitted, so that each route of four tiny shapes has rows to fit
    grid.write_text(json.dumps(dict(payload, rows=[dict(r, split="fit") for r in rows])))
    merged = routing_fit.merge([str(grid)])
    assert len(merged["rows"]) == 8 and "errors" not in merged["rows"][0]
    report = routing_fit.report(merged)
    assert report["attention"]["fitted"] == len(attention)
    from portable_rnn._src.core import routing

    monkeypatch.setattr(routing, "GRIDS", tmp_path / "grids")
    routing.grid.cache_clear()
    routing.model.cache_clear()
    try:
        assert routing_fit.main([str(grid), "--install"]) == 0
        installed = json.loads((tmp_path / "grids" / "cpu.json").read_text())
        assert installed["rows"] == merged["rows"]
        model = routing.model("cpu", "attention")
        assert model.fitted == report["attention"]["fitted"] and model.routes() >= {"xla"}
    finally:
        routing.grid.cache_clear()
        routing.model.cache_clear()


def _attention_row(T, ms, split="held_out"):
    return dict(op="attention", dtype="bfloat16", B=2, T=T, S=T, N=4, K=4, H=64, causal=True,
                window=None, split=split,
                ms={v: {"fwd": t / 2, "fwdbwd": t} for v, t in ms.items()})


def test_routing_repeat_judges_each_run_on_the_other(monkeypatch):
    """`benchmarks.routing_repeat` on two hand-made runs: the oracle's ratios both ways round,
    the installed model's pick judged on each run and on their geometric mean, the floor's
    subset, and the shapes one run lacks left out."""
    from benchmarks import routing_repeat
    from portable_rnn._src.core import routing

    first = dict(device_kind="cpu", platform="cpu", rows=[
        _attention_row(128, {"xla": 1.0, "chunked": 1.1}),
        _attention_row(256, {"xla": 2.0, "chunked": 3.0}),
        _attention_row(512, {"xla": 4.0, "chunked": 5.0})])  # the second run lacks it
    second = dict(device_kind="cpu", platform="cpu", rows=[
        _attention_row(128, {"xla": 1.2, "chunked": 1.0}),
        _attention_row(256, {"xla": 2.0, "chunked": 3.5, "cudnn": 0.1})])  # one run's only

    class Chunked:  # a model that predicts the chunked path faster everywhere
        pick = routing.Model.pick

        def predict(self, shape, variant):
            return {"fwdbwd": 1.0 if variant == "chunked" else 2.0}

        def describe(self):
            return "a stand-in"

    monkeypatch.setattr(routing, "model", lambda key, group: Chunked())
    got = routing_repeat.report(first, second, floor_ms=1.5)["attention"]
    every, large = got["all"], got[">= 1.5 ms"]
    assert every["oracle, first judged on second"]["n"] == 2
    # the first run's best (xla) on the second: 1.2 / 1.0; the second's (chunked) on the first
    assert every["oracle, first judged on second"]["max"] == pytest.approx(1.2)
    assert every["oracle, second judged on first"]["max"] == pytest.approx(1.1)
    assert every["oracle, first judged on second"]["within_1.05"] == 0.5
    # the stand-in picks chunked: 1.1 and 1.5 on the first, 1.0 and 1.75 on the second
    assert every["installed, on the first"]["max"] == pytest.approx(1.5)
    assert every["installed, on the first"]["min"] == pytest.approx(1.1)
    assert every["installed, on the second"]["min"] == pytest.approx(1.0)
    assert every["installed, on the second"]["max"] == pytest.approx(1.75)
    mean = (3.0 * 3.5) ** 0.5 / 2.0
    assert every["installed, on both (geometric mean)"]["max"] == pytest.approx(mean)
    # T 128's fastest variant takes about 1.05 ms (geometric mean), under the floor
    assert large["oracle, first judged on second"]["n"] == 1
    assert large["installed, on the first"]["max"] == pytest.approx(1.5)


def test_a_timed_sample_runs_calls_back_to_back_for_about_the_time_asked():
    from benchmarks import routing_grid

    assert routing_grid.calls_per_sample(0.1, 0.0) == 1  # without --sample-ms: one call
    assert routing_grid.calls_per_sample(0.1, 5.0) == 50
    assert routing_grid.calls_per_sample(8.0, 5.0) == 1  # a call longer than the sample
    assert routing_grid.calls_per_sample(0.001, 5.0) == routing_grid.MOST_CALLS


def test_grids_timed_two_ways_are_not_merged_nor_compared(tmp_path):
    """A run timed with ``--sample-ms`` and one without are refused together by
    `routing_fit` (merging them, or judging the installed grid's model on the other kind) and by
    `routing_repeat`."""
    from benchmarks import routing_fit, routing_repeat

    rows = [_attention_row(128, {"xla": 1.0, "chunked": 2.0})]
    one, other = tmp_path / "one.json", tmp_path / "other.json"
    one.write_text(json.dumps(dict(device_kind="cpu", platform="cpu", rows=rows)))
    other.write_text(json.dumps(dict(device_kind="cpu", platform="cpu", sample_ms=5, rows=rows)))
    with pytest.raises(SystemExit, match="one way of timing"):
        routing_fit.merge([str(one), str(other)])
    assert routing_fit.merge([str(other)])["sample_ms"] == 5
    with pytest.raises(SystemExit, match="timed with --sample-ms 5"):
        routing_fit.installed(routing_fit.merge([str(other)]))  # the CPU's grid: one call
    with pytest.raises(SystemExit, match="two ways of timing"):
        routing_repeat.main([str(one), str(other)])


def test_routing_fit_judges_the_installed_model_on_unseen_shapes(tmp_path, monkeypatch):
    """`benchmarks.routing_fit --installed`: the committed grid's model, not refitted, on the
    shapes of a run that the committed grid does not hold (its splits ignored)."""
    from benchmarks import routing_fit
    from portable_rnn._src.core import routing

    seen = _attention_row(128, {"xla": 1.0, "chunked": 9.0}, split="fit")
    monkeypatch.setattr(routing, "grid", lambda key: dict(device_kind="cpu", rows=[seen]))

    class Xla:
        fitted, group = 7, "attention"
        pick = routing.Model.pick

        def predict(self, shape, variant):
            return {"fwd": 1.0, "fwdbwd": 1.0 if variant == "xla" else 2.0}

    monkeypatch.setattr(routing, "model", lambda key, group: Xla())
    run = tmp_path / "run.json"
    run.write_text(json.dumps(dict(device_kind="cpu", platform="cpu", rows=[
        seen,
        _attention_row(256, {"xla": 2.0, "chunked": 1.0}, split="fit"),
        _attention_row(512, {"xla": 4.0, "chunked": 5.0})])))
    got = routing_fit.installed(routing_fit.merge([str(run)]))["attention"]
    assert got["fitted"] == 7
    unseen = got["unseen"]
    assert unseen["n"] == 2 and unseen["max"] == 2.0 and unseen["min"] == 1.0
    assert [o["shape"]["T"] for o in unseen["over"]] == [256]
    assert routing_fit.main([str(run), "--installed", "--json", str(tmp_path / "r.json")]) == 0
    with pytest.raises(SystemExit):
        routing_fit.main([str(run), "--installed", "--install"])


def test_tpu_benchmark_quick_run(tmp_path):
    """`benchmarks.tpu` on a CPU: the recurrent rows (ours and Flax) are finite and checked,
    each with its products' flops (no peak share off a TPU)."""
    proc = _run("benchmarks.tpu", "--quick", "--rounds", "1", "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = json.loads((tmp_path / "tpu_recurrent.json").read_text())["rows"]
    assert rows and all("flax" in row["results"] for row in rows)
    for row in rows:
        assert row["baseline"] in row["results"] and not row["failed"], row
        assert row["flops"] > 0 and all(r["peak_share"] is None for r in row["results"].values())
        assert all(math.isfinite(r["median_ms"]) and r["median_ms"] > 0
                   for r in row["results"].values()), row


def test_attention_flops_count_the_visible_logits():
    """Causal: T(T+1)/2 logits; a causal window of 2 on T = 4: 1 + 2 + 3 + 3; full: T^2."""
    from benchmarks import tpu_attention as ta

    per_logit = 4 * 2 * 3 * 128 * 3.5
    case = ta.Case("c", "t", B=2, T=4, N=3, K=3)
    assert ta.flops(case) == per_logit * 10
    assert ta.flops(case._replace(window=(2, 0))) == per_logit * 9
    assert ta.flops(case._replace(causal=False)) == per_logit * 16
    assert ta.flops(case._replace(causal=False, window=(1, 1))) == per_logit * 10


def _junit(cases) -> str:
    body = "".join(f'<testcase classname="tests.t" name="{name}" time="1.0">{inner}</testcase>'
                   for name, inner in cases)
    return f'<testsuites><testsuite time="{len(cases)}.0">{body}</testsuite></testsuites>'


def test_tpu_summary_reads_every_step(tmp_path):
    """The TPU check's summary from hand-made step outputs: counts, a failure's first lines, a
    suite stopped at its limit, skip reasons, a self-test stopped before its JSON, the example."""
    from benchmarks import tpu_summary

    (tmp_path / "commit.txt").write_text("abc1234\n")
    (tmp_path / "steps.txt").write_text("suite_tpu: exit 124 in 431 s (limit 430 s)\n"
                                        "suite_cpu: exit 0 in 300 s (limit 430 s)\n")
    (tmp_path / "suite_tpu.xml").write_text(_junit([
        ("test_a", ""),
        ("test_b", '<failure message="AssertionError: &#10;Not equal to tolerance rtol=1e-05"/>'),
        ("test_c", '<skipped message="tests/t.py:3: needs torch (CPU)&#10;detail"/>')]))
    (tmp_path / "suite_cpu.xml").write_text(_junit([("test_d", ""), ("test_e", "")]))
    (tmp_path / "selftest.txt").write_text(
        "case   dtype   route  vs  status  out err\n"
        "lstm float32   float32  scan  scan  ok      0.00e+00\n"
        "lstm, cudnn_ffi asked  float32  scan  scan  skipped -\n")
    (tmp_path / "tpu_attention_blocks.json").write_text(json.dumps({"rows": [
        {"case": "B2 T8192", "error": "skipped: past the 220 s budget"},
        {"case": "B4 T2048", "panel": "bfloat16, fwd+bwd", "auto": "splash", "baseline": "chunked",
         "failed": {}, "results": {"chunked": {"median_ms": 4.0, "peak_share": 0.25},
                                   "splash_512": {"median_ms": 2.0, "peak_share": 0.5}}}]}))
    (tmp_path / "example.json").write_text(json.dumps(
        {"steps": [1, 2], "losses": [5.5, 3.0], "held_out": 2.9, "tokens_per_s": 1000.0,
         "platform": "tpu"}))
    (tmp_path / "example_scan.json").write_text(json.dumps(
        {"steps": [1, 2], "losses": [5.5, 3.1], "held_out": 3.0, "tokens_per_s": 800.0,
         "platform": "tpu", "implementation": "scan"}))
    assert tpu_summary.main(str(tmp_path)) == 0
    md = (tmp_path / "summary.md").read_text()
    assert "Commit: abc1234" in md
    assert ("- suite_tpu: 1 passed, 1 failed, 0 errors, 1 skipped in 3.0 s (stopped at its time "
            "limit: incomplete)") in md
    assert "tests.t::test_b: AssertionError: Not equal to tolerance rtol=1e-05" in md
    assert "  - skipped (1): needs torch (CPU)\n" in md
    assert "- suite_cpu: 2 passed, 0 failed, 0 errors, 0 skipped in 2.0 s\n" in md
    assert "Stopped before its end: 1 ok, 0 failed, 1 skipped" in md
    assert ("## Example (auto)\n\nbfloat16 char-LSTM, 2 steps on tpu: loss 5.500 -> held-out "
            "2.900, 1,000 tokens/s") in md
    assert ("## Example (scan)\n\nbfloat16 char-LSTM, 2 steps on tpu: loss 5.500 -> held-out "
            "3.000, 800 tokens/s") in md
    assert "- B2 T8192: skipped: past the 220 s budget" in md
    assert ("- bfloat16, fwd+bwd, B4 T2048 (auto: splash): chunked 4 ms, 25% of peak; splash_512 "
            "2 ms, 50% of peak (0.50x)") in md
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["suite_tpu"]["counts"] == {"passed": 1, "failed": 1, "skipped": 1}
    assert summary["example_scan"]["tokens_per_s"] == 800.0


def test_float32_accuracy_on_this_cpu(tmp_path):
    """XLA:CPU's float32 functions and products are within a few float32 ulps of float64 (a
    TPU's tanh measured 8.1e-5): the measurement tells them apart."""
    from benchmarks import float32_accuracy

    assert float32_accuracy.main([str(tmp_path / "f32.json")]) == 0
    result = json.loads((tmp_path / "f32.json").read_text())
    assert set(result["functions"]) == set(float32_accuracy.FUNCTIONS)
    assert all(0 <= err < 2e-6 for err in result["functions"].values()), result
    assert all(0 < err < 2e-6 for err in result["matmul"].values()), result


def test_tpu_check_script_parses():
    proc = subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "tpu_check.sh")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_tpu_summary_done_reads_the_xml_and_the_verbose_output_of_an_aborted_part(tmp_path):
    """SUITE_TPU_RESUME's list: the passed and skipped tests of every part, from its JUnit XML
    or, for a part that aborted before writing one, from its verbose output; failures rerun."""
    from benchmarks import tpu_summary

    (tmp_path / "suite_tpu_1.xml").write_text(_junit([
        ("test_a", ""), ("test_b", '<failure message="no"/>'), ("test_c", "<skipped/>")]))
    (tmp_path / "suite_tpu_2.txt").write_text(
        "tests/t.py::test_d[x y] PASSED                      [  1%]\n"
        "tests/t.py::test_e SKIPPED (needs torch)             [  2%]\n"
        "tests/t.py::test_f FAILED                            [  3%]\n"
        "tests/t.py::test_a PASSED                            [  4%]\n"
        "Fatal Python error: Aborted\n")
    (tmp_path / "suite_cpu.txt").write_text("tests/t.py::test_g PASSED  [ 1%]\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("")
    assert tpu_summary.done(str(tmp_path), root=str(tmp_path)) == [
        "tests/t.py::test_a", "tests/t.py::test_c", "tests/t.py::test_d[x y]",
        "tests/t.py::test_e"]


def test_registry_check_quick_run_and_compare(tmp_path):
    """Every registered family's op and gradient run on each route this machine has, agree
    with the scan path, and two runs of one checkout lower to the same programs."""
    proc = _run("benchmarks.registry_check", str(tmp_path), "--quick")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "registry_check.json").read_text())["rows"]
    from portable_rnn._src.recurrent.families import FAMILIES as CELLS
    assert sorted({r["family"] for r in rows}) == sorted([*CELLS, "attention"])
    assert not [r for r in rows if "error" in r], rows
    for r in rows:
        assert r["max_rel_err_vs_scan"] <= (0.0 if r["decision"] == "scan" else 1e-2), r
    same = _run("benchmarks.registry_check", "--compare", str(tmp_path / "registry_check.json"),
                str(tmp_path / "registry_check.json"))
    assert same.returncode == 0 and "0 case(s) differ" in same.stdout, same.stdout


def test_packed_attention_benchmark_quick_run(tmp_path):
    """The packed-attention benchmark's plumbing on any backend (the splash kernel interpreted
    off a TPU): every implementation checked against the float32 reference before it was timed,
    the routes the automatic calls took, the documents and each program's temporaries; `--impls`
    leaves out the implementations it does not name (here the route at fixed blocks), never the
    baseline."""
    proc = _run("benchmarks.packed_attention", "--quick", "--rounds", "1", "--impls",
                "auto,mask,chunked,splash_dynamic_128", "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (row,) = json.loads((tmp_path / "packed_attention.json").read_text())["rows"]
    assert "error" not in row and not row["failed"] and not row["skipped"], row
    assert set(row["results"]) == {"auto", "mask", "chunked", "splash_128", "splash_dynamic_128"}
    assert row["baseline"] == "splash_128" and row["results"]["splash_128"]["ratio"] == 1.0
    assert all(math.isfinite(r["median_ms"]) and r["median_ms"] > 0
               for r in row["results"].values())
    assert all(check["out"] <= check["tol"] for check in row["check"].values()), row["check"]
    assert set(row["route"]) == {"auto", "mask"} and row["flops"] > 0
    assert [sum(lengths) for lengths in row["document_lengths"]] == [256]
    assert len(row["document_lengths"][0]) == 3

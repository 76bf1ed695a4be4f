"""`python -m portable_rnn selftest`: on this CPU, on an emulated GPU, and with a broken route."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax.numpy as jnp
import pytest

import portable_rnn
from cudnn_emulation import emulated_cudnn, emulated_cudnn_attention, emulated_cudnn_ffi
from portable_rnn.__main__ import main
from portable_rnn._src.attention.routes import chunked as _chunked
from portable_rnn._src.tools import selftest as _selftest

pytestmark = pytest.mark.cpu  # the self-test on a CPU and on an emulated GPU

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPU = portable_rnn.Capabilities("gpu", 91300, (9, 0), "NVIDIA H100")


@pytest.mark.slow  # the emulated-GPU test below runs the same cases in-process
def test_command_passes_on_this_cpu(tmp_path):
    path = tmp_path / "selftest.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "portable_rnn", "selftest", "--json", str(path),
                           "--repeats", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [c for c in _selftest.CASES if not c.requires]
    skipped = len(_selftest.CASES) - len(ran)
    assert (f"{len(ran)}/{len(ran)} ok" in proc.stdout
            and f"{skipped} skipped (their route cannot serve them here)" in proc.stdout)
    report = json.loads(path.read_text())
    assert report["ok"] is True
    assert report["environment"]["capabilities"]["platform"] == "cpu"
    assert report["environment"]["tolerances"] == _selftest.TOLERANCE
    assert report["environment"]["repeats"] == 1
    rows = report["rows"]
    assert [r["case"] for r in rows] == [c.name for c in _selftest.CASES]
    for row in rows:
        if "cudnn_ffi asked" in row["case"]:  # portable_rnn's cuDNN call: a GPU only
            assert row["status"] == "skipped" and row["error"].startswith(
                "cudnn_ffi cannot serve it here: platform is 'cpu'"), row
            continue
        if "pallas asked" in row["case"]:  # the Pallas TPU kernel: a TPU only
            assert row["status"] == "skipped" and row["error"].startswith(
                "pallas cannot serve it here: platform is 'cpu'"), row
            continue
        if "splash asked" in row["case"]:  # JAX's Pallas TPU kernel: a TPU only
            assert row["status"] == "skipped" and row["error"].startswith(
                "splash cannot serve it here: platform is 'cpu'"), row
            continue
        assert row["status"] == "ok" and row["error"] is None, row
        assert row["route"] in ("scan", "chunked", "xla"), row  # no cuDNN on a CPU
        assert max(row["output_error"], row["gradient_error"]) <= row["tolerance"], row
        assert row["speedup"] > 0
        assert row["case"] in proc.stdout
    lstm = [r for r in rows if r["op"] == "lstm" and r["status"] == "ok"]
    assert all(r["output_error"] == r["gradient_error"] == 0 for r in lstm)  # scan vs scan
    # ... which is why each case is also held to JAX's own float64 computation
    for row in rows:
        if row["status"] == "skipped":
            continue
        assert 0 < row["float64_error"] <= row["tolerance"], row
        if row["dtype"] == "float32":
            assert row["float64_error"] < 1e-5, row


# `slow`: the emulated cuDNN routes it runs are each checked by quicker tests
# (tests/test_cudnn_route.py, test_cudnn_ffi.py, test_attention_cudnn.py)
@pytest.mark.slow
def test_emulated_gpu_takes_the_cudnn_routes_and_matches_the_portable_path():
    """The cases a GPU routes otherwise than a CPU (the LSTM's, attention's, portable_rnn's cuDNN
    call's) run on the emulated GPU; every other case is decided for it (the scan path, as on
    the CPU, whose run `test_command_passes_on_this_cpu` checks)."""
    gpu_cases = [c for c in _selftest.CASES
                 if c.op in ("lstm", "attention") or c.prefer == "cudnn_ffi"]
    with portable_rnn.policy(capabilities=GPU):
        for case in _selftest.CASES:
            if case not in gpu_cases:
                with portable_rnn.policy(**({case.op: case.prefer} if case.prefer else {})):
                    route = _selftest._decision(case, case.inputs()).implementation
                assert route == "scan", (case.name, route)
    with emulated_cudnn(), emulated_cudnn_attention(), emulated_cudnn_ffi():
        rows = _selftest.run(capabilities=GPU, cases=gpu_cases, repeats=1)
    splash = [r for r in rows if r["case"].endswith("splash asked")]
    assert splash and all(r["status"] == "skipped" and "platform is 'gpu'" in r["error"]
                          for r in splash), splash
    rows = [r for r in rows if r not in splash]
    for row in rows:
        if row["case"].endswith("cudnn_ffi asked"):  # every dtype and family it has
            assert row["route"] == "cudnn_ffi", row
        elif row["case"].endswith("pallas asked"):  # a TPU kernel: skipped on a GPU
            assert row["status"] == "skipped", row
        elif row["op"] == "lstm":  # cuDNN when asked for (float32), else the scan path
            asked = row["case"].endswith("cuDNN asked")
            assert row["route"] == ("cudnn" if asked and row["dtype"] == "float32"
                                    else "scan"), row
        elif row["op"] != "attention":  # every other family: the scan path unless asked
            assert row["route"] == "scan", row
        elif row["dtype"] in ("bfloat16", "float16"):
            assert row["route"] == "cudnn", row
        else:  # float32 attention: cuDNN is 16-bit only; dense below 4096^2 logits on a GPU
            assert row["route"] == "xla", row
    rows = [r for r in rows if not r["case"].endswith("pallas asked")]
    failed = {r["case"]: r["error"] for r in rows if r["status"] != "ok"}
    assert not failed, failed
    for row in rows:
        assert max(row["output_error"], row["gradient_error"], row["float64_error"]) <= (
            row["tolerance"]), row
        assert row["float64_error"] > 0, row  # a computation of its own


def _case(name):
    return [c for c in _selftest.CASES if c.name == name]


def _chunked_case():
    """The self-test's bfloat16 attention case on the chunked route (the routing model may take
    the dense one, the self-test's reference, on this machine)."""
    return [dataclasses.replace(c, prefer="chunked") for c in _case("attention bfloat16")]


def test_splash_case_on_a_pretend_tpu_runs_the_interpreted_kernel():
    """Told it runs on a TPU, the self-test's splash case takes the route (interpreted off a
    TPU) and holds it to the dense path and the float64 reference."""
    (case,) = [c for c in _selftest.CASES if c.name.endswith("splash asked")]
    tpu = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")
    with portable_rnn.policy(capabilities=tpu):
        row = _selftest.run_case(case, repeats=1)
    assert row["status"] == "ok" and row["route"] == "splash", row
    assert max(row["output_error"], row["gradient_error"], row["float64_error"]) <= (
        row["tolerance"]), row


def test_report_names_the_probe_device(monkeypatch, tmp_path):
    """On a GPU the probed capabilities hold the device to compile probes on (a jax Device,
    which `dataclasses.asdict` cannot copy): the report gives its name."""
    import dataclasses

    import jax

    device = jax.devices("cpu")[0]
    caps = dataclasses.replace(portable_rnn.capabilities(), probe_device=device)
    monkeypatch.setattr(_selftest, "capabilities", lambda: caps)
    monkeypatch.setattr(_selftest, "CASES", _chunked_case())
    path = tmp_path / "selftest.json"
    assert main(["selftest", "--json", str(path), "--repeats", "1"]) == 0
    reported = json.loads(path.read_text())["environment"]["capabilities"]
    assert reported["probe_device"] == str(device)
    assert reported["platform"] == caps.platform


def test_a_route_that_raises_fails_its_row_and_the_exit_code(monkeypatch, tmp_path, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("broken chunked route\nsecond line")

    monkeypatch.setattr(_chunked, "attention_chunked", broken)
    monkeypatch.setattr(_selftest, "CASES", _chunked_case())
    path = tmp_path / "selftest.json"
    assert main(["selftest", "--json", str(path)]) == 1
    (row,) = json.loads(path.read_text())["rows"]
    assert row["status"] == "failed" and row["route"] == "chunked"
    assert row["error"] == "chunked (automatic): RuntimeError: broken chunked route"
    out = capsys.readouterr().out
    assert "broken chunked route" in out and "second line" not in out
    assert "0/1 ok" in out and "failed: attention bfloat16" in out


def test_a_route_with_wrong_results_fails_by_tolerance(monkeypatch):
    chunked = _chunked.attention_chunked
    monkeypatch.setattr(_chunked, "attention_chunked",
                        lambda *a, **kw: chunked(*a, **kw) * jnp.bfloat16(1.1))
    (row,) = _selftest.run(cases=_chunked_case(), repeats=1)
    assert row["status"] == "failed" and row["output_error"] > row["tolerance"]
    assert row["error"].startswith("error ") and "bfloat16 tolerance 0.05" in row["error"]


def test_a_wrong_portable_path_fails_against_the_float64_reference(monkeypatch):
    """On a CPU the route is the portable path, so comparing them cannot fail; the float64
    reference (JAX's own lstm_ref) still catches a wrong scan path."""
    from portable_rnn._src.recurrent.routes import scan as _scan

    scan = _scan.rnn_scan

    def wrong(*args, **kwargs):
        y, states = scan(*args, **kwargs)
        return y * 1.02, states

    monkeypatch.setattr(_scan, "rnn_scan", wrong)
    (row,) = _selftest.run(cases=_case("lstm float32"), repeats=1)
    assert row["route"] == "scan" and row["output_error"] == row["gradient_error"] == 0
    assert row["status"] == "failed" and row["float64_error"] > row["tolerance"], row

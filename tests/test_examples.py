"""Smoke tests of every example, at tiny sizes, checking something real about each run."""

import json
import os
import pathlib
import runpy
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

pytestmark = pytest.mark.cpu  # the examples at tiny sizes on the 8 CPU devices

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load(name):
    return runpy.run_path(str(ROOT / "examples" / name))


@pytest.fixture(autouse=True)
def _standard_promotion():
    with jax.numpy_dtype_promotion("standard"):  # optax and flax promote implicitly
        yield


def _check_char_run(out, api, tmp_path, module):
    """The run learned, its parameters are replicated, its plot and losses are real, and its
    Orbax checkpoint restores the trained parameters and optimizer state."""
    assert out["held_out"] < out["first"] - 1.0, (out["first"], out["held_out"])
    assert all(np.isfinite(out["losses"]))
    assert out["steps"] == list(range(1, len(out["losses"]) + 1))  # every step, step 1 included
    leaf = jax.tree.leaves(out["params"])[0]
    assert len(leaf.sharding.device_set) == 8  # replicated over the mesh
    assert leaf.sharding.mesh.axis_types == (jax.sharding.AxisType.Explicit,)
    png = pathlib.Path(out["plot"])
    assert png.parent == tmp_path and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(pathlib.Path(out["metrics"]).read_text())["losses"] == out["losses"]
    assert pathlib.Path(out["checkpoint"]) == tmp_path / "checkpoints" / str(out["steps"][-1])
    state = (out["params"], out["opt_state"])
    restored = module["restore_checkpoint"](out["checkpoint"], state)  # read from the files
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_char_lstm_trains_data_parallel_and_writes_files(api, tmp_path, capsys):
    """The README's main example on the 8 CPU devices of the test session."""
    assert len(jax.devices()) == 8
    module = load("train_char_lstm.py")
    out = module["main"](
        ["--api", api, "--steps", "40", "--hidden", "48", "--embed", "16", "--layers", "2",
         "--batch", "12", "--seq", "24", "--max-bytes", "40000", "--no-progress",
         "--out-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert "batch 16 split over a {'batch': 8} mesh" in text  # 12 rounded up to 8 devices
    assert "lstm: scan" in text and "cudnn rejected" in text and "sample:" in text
    assert len(out["losses"]) == 40
    assert out["title"] == (f"char LSTM ({api}): 2 layers x 48 hidden, bfloat16, batch 16, "
                            "seq 24, 40 steps")
    _check_char_run(out, api, tmp_path, module)


@pytest.mark.parametrize("cell, api, layer, family, implementation, heads", [
    ("gru", "equinox", "GRU", "gru", "pallas", 1),
    ("rnn", "linen", "SimpleRNN", "simple_rnn", None, 1),
    ("slstm", "nnx", "SLSTM", "slstm", None, 2)])
def test_char_example_trains_the_other_cells(cell, api, layer, family, implementation, heads,
                                             tmp_path, capsys, monkeypatch):
    """``--cell``: one small bfloat16 run per other cell, one API each (linen with the bar;
    equinox where tqdm cannot be imported: log lines instead); ``--implementation`` asks for a
    route, which falls back with its reasons where it cannot serve (the Pallas kernel, here);
    ``--heads`` splits the recurrence into heads."""
    if api != "linen":
        for name in ("tqdm", "tqdm.auto"):  # imported already, tqdm.auto would be found
            monkeypatch.setitem(sys.modules, name, None)  # `import tqdm` raises ImportError
    module = load("train_char_lstm.py")
    out = module["main"](
        ["--cell", cell, "--api", api, "--steps", "50", "--hidden", "32", "--embed", "16",
         "--layers", "1", "--batch", "8", "--seq", "16", "--max-bytes", "20000",
         "--out-dir", str(tmp_path), "--heads", str(heads),
         *(["--implementation", implementation] if implementation else [])])
    text = capsys.readouterr().out
    if implementation:
        assert f"{family}: scan (requested '{implementation}'" in text
        assert f"  {implementation} rejected:\n    - platform is 'cpu'" in text
    assert json.loads(pathlib.Path(out["metrics"]).read_text())["implementation"] == (
        implementation or "auto")
    if api != "linen":
        assert "tqdm is not installed" in text and "step 50: loss" in text
    shown = f"32, {heads} heads" if heads > 1 else "32"
    assert f"1x {layer}({shown}) computing in bfloat16" in text
    assert f"{family}: scan" in text and "cudnn rejected" in text and "sample:" in text
    _check_char_run(out, api, tmp_path, module)


def _free_port() -> int | None:
    """A free TCP port on localhost, or None on a machine without sockets."""
    try:
        with socket.socket() as s:
            s.bind(("localhost", 0))
            return s.getsockname()[1]
    except OSError:
        return None


# A small float32 run: its losses compare within float32 rounding (a bfloat16 computation's
# would differ by bfloat16 roundings of tiny differences in the summed gradients).
SMALL = ["--steps", "2", "--hidden", "16", "--embed", "8", "--layers", "2", "--batch", "8",
         "--seq", "12", "--max-bytes", "20000", "--dtype", "float32", "--no-progress",
         "--sample-bytes", "0"]


def test_char_lstm_on_two_processes_equals_one_and_its_checkpoint_resumes_in_one(tmp_path):
    """`jax.distributed` on localhost: two processes of one CPU device each (JAX's CPU
    collectives, gloo) train 2 steps on a global mesh, each feeding its rows of the batch, and
    write an Orbax checkpoint; their losses equal this process's run (one process, 8 devices)
    with the same global batch and seed; the checkpoint restores here, and the resumed step 3
    has the loss of step 3 of the run that never stopped."""
    port = _free_port()
    if port is None:
        pytest.skip("this machine has no sockets: jax.distributed needs one on localhost")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PYTEST_"))}
    env["JAX_NUM_CPU_DEVICES"] = "1"
    multi = tmp_path / "two"
    args = [sys.executable, str(ROOT / "examples" / "train_char_lstm.py"), *SMALL,
            "--out-dir", str(multi), "--num-processes", "2", "--coordinator",
            f"localhost:{port}"]
    procs = [subprocess.Popen([*args, "--process-id", str(i)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=150)[0])
    finally:
        for proc in procs:
            proc.kill()
    for proc, text in zip(procs, outputs):
        assert proc.returncode == 0, text[-3000:]
    assert "in 2 process(es); batch 8 split over a {'batch': 2} mesh" in outputs[0]
    assert "process 1: 1 devices, rows 4:8 of the batch" in outputs[1]
    two = json.loads((multi / "losses.json").read_text())
    assert (two["processes"], two["devices"], two["steps"]) == (2, 2, [1, 2])

    main = load("train_char_lstm.py")["main"]
    one = main([*SMALL, "--steps", "3", "--out-dir", str(tmp_path / "one")])
    np.testing.assert_allclose(two["losses"], one["losses"][:2], rtol=1e-5, atol=0)
    resumed = main([*SMALL, "--steps", "3", "--out-dir", str(multi), "--resume"])
    assert resumed["steps"] == [3]
    np.testing.assert_allclose(resumed["losses"], one["losses"][2:], rtol=1e-5, atol=0)
    print(f"two processes vs one: max |loss difference| "
          f"{np.max(np.abs(np.subtract(two['losses'], one['losses'][:2]))):.3g}; resumed step 3: "
          f"{abs(resumed['losses'][0] - one['losses'][2]):.3g}")


def test_attention_vmap_heads(capsys):
    err = load("attention_vmap_heads.py")["main"](["--seq", "32", "--heads", "3",
                                                     "--head-dim", "8"])
    text = capsys.readouterr().out
    assert err < 1e-2 and "OK" in text
    assert "attention: " in text and "vmap(in_axes=2)" in text


def test_transformer_bf16_learns_the_counting_task(capsys):
    losses = load("transformer_bf16.py")["main"](["--steps", "40", "--seq", "32", "--batch", "8"])
    assert losses[-1] < 0.5 * losses[0] and np.isfinite(losses).all()
    assert "attention: " in capsys.readouterr().out

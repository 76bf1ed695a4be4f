"""Smoke tests of every example, at tiny sizes, checking something real about each run."""

import pathlib
import runpy

import jax
import numpy as np
import pytest
from flax import nnx, serialization

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load(name):
    return runpy.run_path(str(ROOT / "examples" / name))


@pytest.fixture(autouse=True)
def _standard_promotion():
    with jax.numpy_dtype_promotion("standard"):  # optax and flax promote implicitly
        yield


def _check_char_run(out, api, tmp_path):
    """The run learned, its parameters are replicated, and its plot and checkpoint are real."""
    assert out["held_out"] < out["first"] - 1.0, (out["first"], out["held_out"])
    assert all(np.isfinite(out["losses"]))
    assert out["steps"] == list(range(1, len(out["losses"]) + 1))  # every step, step 1 included
    leaf = jax.tree.leaves(out["params"])[0]
    assert len(leaf.sharding.device_set) == 8  # replicated over the mesh
    assert leaf.sharding.mesh.axis_types == (jax.sharding.AxisType.Explicit,)
    png = pathlib.Path(out["plot"])
    assert png.parent == tmp_path and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = serialization.msgpack_restore(pathlib.Path(out["checkpoint"]).read_bytes())
    params = out["params"] if api == "linen" else nnx.to_pure_dict(out["params"])
    for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(jax.device_get(params)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_char_lstm_trains_data_parallel_and_writes_files(api, tmp_path, capsys):
    """The README's main example on the 8 CPU devices of the test session."""
    assert len(jax.devices()) == 8
    out = load("train_char_lstm.py")["main"](
        ["--api", api, "--steps", "40", "--hidden", "48", "--embed", "16", "--layers", "2",
         "--batch", "12", "--seq", "24", "--max-bytes", "40000", "--no-progress",
         "--out-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert "batch 16 split over a {'batch': 8} mesh" in text  # 12 rounded up to 8 devices
    assert "lstm: scan" in text and "cudnn rejected" in text and "sample:" in text
    assert len(out["losses"]) == 40
    assert out["title"] == (f"char LSTM ({api}): 2 layers x 48 hidden, bfloat16, batch 16, "
                            "seq 24, 40 steps")
    _check_char_run(out, api, tmp_path)


@pytest.mark.parametrize("cell, api, layer, family", [("gru", "nnx", "GRU", "gru"),
                                                      ("rnn", "linen", "SimpleRNN", "simple_rnn")])
def test_char_example_trains_a_gru_and_a_simple_rnn(cell, api, layer, family, tmp_path, capsys):
    """``--cell``: one small bfloat16 run per other cell, one API each (linen with the bar)."""
    out = load("train_char_lstm.py")["main"](
        ["--cell", cell, "--api", api, "--steps", "20", "--hidden", "32", "--embed", "16",
         "--layers", "1", "--batch", "8", "--seq", "16", "--max-bytes", "20000",
         *(["--no-progress"] if api == "nnx" else []), "--out-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert f"1x {layer}(32) computing in bfloat16" in text
    assert f"{family}: scan" in text and "cudnn rejected" in text and "sample:" in text
    _check_char_run(out, api, tmp_path)


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

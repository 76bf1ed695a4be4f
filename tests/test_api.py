"""The public surface: __all__ equals the README's API table; the README quickstart runs."""

import pathlib
import re

import jax
import pytest

import portable_rnn
from portable_rnn import _dispatch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_all_matches_readme_api_table():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## API", 1)[1].split("\n## ", 1)[0]
    first_cells = re.findall(r"^\| ([^|]+) \|", table, flags=re.M)
    names = {n for cell in first_cells for n in re.findall(r"`([a-z_A-Z]+)`", cell)}
    assert names == set(portable_rnn.__all__)
    for name in portable_rnn.__all__:
        assert getattr(portable_rnn, name).__doc__, name


def test_readme_quickstart_runs(capsys):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    first, family = [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]
    namespace = {}
    exec(compile(first, "README.md#quickstart", "exec"), namespace)
    y = namespace["y"]
    assert y.shape == (8, 100, 128) and y.dtype == jax.numpy.bfloat16
    assert not bool(jax.numpy.any(y[2]))  # length 0: no output
    assert "lstm: " in capsys.readouterr().out
    exec(compile(family, "README.md#quickstart-family", "exec"), namespace)
    assert namespace["y"].shape == (8, 100, 32) and namespace["h_n"].shape == (4, 8, 16)


def test_readme_dispatch_block_runs(capsys):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Dispatch\n", 1)[1].split("\n## ", 1)[0]
    (block,) = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    _dispatch._WARNED.clear()
    namespace = {}
    with pytest.warns(portable_rnn.FallbackWarning, match="cudnn rejected") as record:
        exec(compile(block, "README.md#dispatch", "exec"), namespace)
    assert {r.filename for r in record} == {"README.md#dispatch"}
    assert "lstm: scan" in capsys.readouterr().out  # bfloat16: the scan path everywhere
    assert namespace["grads"].shape == namespace["w"].shape
    assert bool(jax.numpy.isfinite(namespace["value"]))

"""The public surface: the API reference documents exactly `__all__`; the README quickstart runs.

Every other code block of the documentation and the README runs in `tests/test_docs.py`.
"""

import ast
import importlib
import importlib.util
import pathlib
import re

import jax
import pytest

import portable_rnn

ROOT = pathlib.Path(__file__).resolve().parents[1]


def documented(page: str) -> list[str]:
    """The objects a page of the API reference renders (its ``::: name`` lines)."""
    return re.findall(r"^::: (\S+)$", (ROOT / "docs" / "api" / page).read_text(), flags=re.M)


def test_api_reference_lists_exactly_all():
    names = documented("portable_rnn.md")
    assert len(names) == len(set(names))
    assert {n.removeprefix("portable_rnn.") for n in names} == set(portable_rnn.__all__)
    for name in portable_rnn.__all__:
        assert getattr(portable_rnn, name).__doc__, name


@pytest.mark.parametrize("module", ["linen", "nnx", "keras", "equinox"])
def test_api_reference_lists_each_layer_module(module):
    if module in ("keras", "equinox") and importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} (the {module} extra)")
    mod = importlib.import_module(f"portable_rnn.{module}")
    names = documented(f"{module}.md")
    assert sorted(n.removeprefix(f"portable_rnn.{module}.") for n in names) == sorted(mod.__all__)
    for name in mod.__all__:
        assert getattr(mod, name).__doc__, name


def test_readme_quickstart_runs(capsys):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    (block,) = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    namespace = {}
    exec(compile(block, "README.md#quickstart", "exec"), namespace)
    y = namespace["y"]
    assert y.shape == (8, 100, 128) and y.dtype == jax.numpy.bfloat16
    assert not bool(jax.numpy.any(y[2]))  # length 0: no output
    assert "lstm: " in capsys.readouterr().out


# The one module that writes docstrings at import: each registered family's functions are made
# there from its facts (`Family`), each docstring whole, when the function is made.
GENERATED = {("portable_rnn", "_src", "recurrent", "functions")}


def test_docstrings_are_written_not_patched():
    """Every docstring in the package is the text its source writes (``help()``, the API
    reference and the source agree): none is assigned or completed at import, but for the
    functions made per family from the registry (`GENERATED`)."""
    differ = []
    for path in sorted((ROOT / "portable_rnn").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        tree = ast.parse(path.read_text())
        differ += [f"{path.name}:{n.lineno} assigns a __doc__" for n in ast.walk(tree)
                   if parts not in GENERATED
                   if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                   if getattr(t, "attr", getattr(t, "id", None)) == "__doc__"]
        if parts[-1] == "__main__" or any(
                parts[-1] == extra and importlib.util.find_spec(extra) is None
                for extra in ("keras", "equinox")):
            continue
        module = importlib.import_module(".".join(parts).removesuffix(".__init__"))
        for node in tree.body:
            if (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and hasattr(module, node.name)
                    and ast.get_docstring(node, clean=False) is not None
                    and getattr(module, node.name).__doc__ != ast.get_docstring(node,
                                                                                clean=False)):
                differ.append(f"{module.__name__}.{node.name}")
    assert not differ, differ

"""Without an extra's framework, `portable_rnn.keras` and `portable_rnn.equinox` say which package
is missing and which extra installs it (the import, and the lazy attribute of `portable_rnn`);
`python -m portable_rnn` lists the extras' frameworks, installed or not.

Each import runs in a fresh interpreter with the framework hidden, either as Python's own marker
for a module that must not be imported (``sys.modules[name] = None``) or as an uninstalled
package looks (a `sys.meta_path` finder that finds nothing under that name).
"""

import importlib.metadata
import subprocess
import sys

import pytest

from portable_rnn._src.tools import env

HIDE = {
    "none": "sys.modules[{name!r}] = None\n",
    "finder": """
class NotInstalled:  # finds no module under `name`, as if its package were not installed
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] == {name!r}:
            raise ModuleNotFoundError(f"No module named {{fullname!r}}", name=fullname)

sys.meta_path.insert(0, NotInstalled())
""",
}

# What each import prints: the error's type, `.name` and message, one line each.
PROBE = """
import portable_rnn

def show(error):
    print(type(error).__name__, error.name, error, sep=" | ")

try:
    import portable_rnn.{module}
except ImportError as e:
    show(e)
try:
    from portable_rnn import {module}
except ImportError as e:
    show(e)
print(hasattr(portable_rnn, {module!r}))
try:
    portable_rnn.{module}
except AttributeError as e:
    print(e)
"""


def _run(hidden: str, how: str, module: str) -> list[str]:
    code = "import sys\n" + HIDE[how].format(name=hidden) + PROBE.format(module=module)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("how", ["none", "finder"])
@pytest.mark.parametrize("module, framework", [("keras", "Keras"), ("equinox", "Equinox")])
def test_a_missing_extra_names_the_package_and_the_extra(module, framework, how):
    install = f'pip install "portable_rnn[{module}]"'
    error = (f"ModuleNotFoundError | {module} | portable_rnn.{module} needs {framework}, which "
             f"is not installed: {install}")
    assert _run(module, how, module) == [
        error, error, "False",
        f"module 'portable_rnn' has no attribute '{module}': portable_rnn.{module} needs "
        f"'{module}', which is not installed: {install}"]


def test_a_missing_dependency_of_an_installed_framework_is_named_as_python_names_it():
    """Equinox installed but its `jaxtyping` missing: no claim that Equinox is missing."""
    out = _run("jaxtyping", "finder", "equinox")
    error = "ModuleNotFoundError | jaxtyping | No module named 'jaxtyping'"
    assert out == [error, error, "False",
                   "module 'portable_rnn' has no attribute 'equinox': portable_rnn.equinox "
                   "needs 'jaxtyping' (No module named 'jaxtyping')"]


def test_the_environment_report_lists_the_extras_installed_or_not(monkeypatch):
    installed = importlib.metadata.version

    def version(name):
        if name in ("keras", "equinox", "torch"):
            raise importlib.metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    lines = env.versions()
    assert "keras not installed" in lines and "equinox not installed" in lines
    assert not any(line.startswith("torch") for line in lines)  # listed only when installed
    monkeypatch.undo()
    lines = env.versions()
    for name in ("keras", "equinox"):
        try:
            assert f"{name} {installed(name)}" in lines
        except importlib.metadata.PackageNotFoundError:
            assert f"{name} not installed" in lines

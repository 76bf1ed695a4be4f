"""The package as a distribution: one version, valid and installed; every folder of the package
is a package that the wheel ships.

`.ci/run` builds the sdist and the wheel, checks them against the checkout
(`.ci/check_dist.py`) and runs the installed wheel from outside the checkout;
`tests/test_dispatch.py` checks that ``python -m portable_rnn`` prints the version.
"""

import importlib.metadata
import pathlib

import pytest
from packaging.version import Version

import portable_rnn

pytestmark = pytest.mark.cpu  # about the package's files

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_version_is_pep440_in_normal_form():
    # The normal form: the one the metadata carries (setuptools normalizes "1.0-rc1" to "1.0rc1").
    assert str(Version(portable_rnn.__version__)) == portable_rnn.__version__


def test_installed_version_is_the_package_version():
    try:
        installed = importlib.metadata.version("portable_rnn")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("portable_rnn is imported from the checkout, not installed")
    assert installed == portable_rnn.__version__, (
        f"installed as {installed}, but portable_rnn.__version__ is {portable_rnn.__version__}: "
        "reinstall (python -m pip install -e .)")


def test_every_folder_of_the_package_is_a_package():
    # pyproject.toml finds the packages by their __init__.py: a folder without one imports from
    # the checkout (a namespace package) but is left out of the wheel.
    package = ROOT / "portable_rnn"
    folders = {parent for path in package.rglob("*.py") if "__pycache__" not in path.parts
               for parent in path.relative_to(package).parents}
    missing = sorted(str(package.name / f) for f in folders
                     if not (package / f / "__init__.py").is_file())
    assert not missing, f"folders without an __init__.py: {missing}"


def test_ci_newest_leg_shares_partition_the_suite():
    """`.ci/newest_share.py`: each test file (and the package's doctests) in exactly one of the
    `SHARES` shares CI's newest leg takes turns at, the excluded files in none, the shares within
    10% of each other's measured time."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("newest_share", ROOT / ".ci" / "newest_share.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    excluded = {"tests/test_mutations.py"}
    shares = module.shares(ROOT, excluded)
    files = sorted(f for share in shares for f in share)
    expected = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py"))
    assert files == sorted({*expected, "portable_rnn"} - excluded)
    times = json.loads((ROOT / ".ci" / "newest_times.json").read_text())
    totals = [sum(times.get(f, 0.0) for f in share) for share in shares]
    assert len(shares) == module.SHARES and max(totals) <= 1.1 * min(totals), totals

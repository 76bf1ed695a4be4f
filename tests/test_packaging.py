"""The package as a distribution: every folder of the package is a package that the wheel ships.

`.ci/run` builds the sdist and the wheel, checks them against the checkout
(`.ci/check_dist.py`) and runs the installed wheel from outside the checkout.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_folder_of_the_package_is_a_package():
    # pyproject.toml finds the packages by their __init__.py: a folder without one imports from
    # the checkout (a namespace package) but is left out of the wheel.
    package = ROOT / "portable_rnn"
    folders = {parent for path in package.rglob("*.py") if "__pycache__" not in path.parts
               for parent in path.relative_to(package).parents}
    missing = sorted(str(package.name / f) for f in folders
                     if not (package / f / "__init__.py").is_file())
    assert not missing, f"folders without an __init__.py: {missing}"

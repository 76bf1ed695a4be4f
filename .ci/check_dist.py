"""Checks the built distributions against the checkout: ``python .ci/check_dist.py DIST_DIR``.

DIST_DIR holds one wheel and one sdist (``python -m build --outdir DIST_DIR``). Every file of
the package in the checkout (``portable_rnn/**/*.py``, the C++ sources ``*.cc`` built on first
use, and ``py.typed``) must be in both, under the same path, and the wheel must hold nothing
else under ``portable_rnn/`` (a stale build folder can ship a module the checkout no longer
has). The wheel carries the license text, and
the sdist what a source build needs: pyproject.toml, the README (the long description), LICENSE
and the changelog. Each missing file is printed, with its module's name; the exit code is 1 if
any is missing. Only the standard library: any Python runs it.
"""

from __future__ import annotations

import pathlib
import sys
import tarfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "portable_rnn"
# the package's files a distribution must carry (*.cc: native sources built on first use;
# *.json: the routing model's measured grids)
SHIPPED = ("*.py", "*.pyi", "*.cc", "*.json", "py.typed")
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "PKG-INFO")


def package_files() -> set[str]:
    """The paths, relative to the checkout, of the package's files to ship."""
    return {path.relative_to(ROOT).as_posix()
            for pattern in SHIPPED for path in (ROOT / PACKAGE).rglob(pattern)
            if "__pycache__" not in path.parts}


def module(path: str) -> str:
    """``portable_rnn/_src/core/__init__.py`` -> ``portable_rnn._src.core``."""
    parts = path.removesuffix(".py").removesuffix(".pyi").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def report(archive: pathlib.Path, expected: set[str], found: set[str], exact: bool) -> list[str]:
    """One line per file of `expected` not in `found` (and, if `exact`, per file of the package
    in `found` that the checkout does not have)."""
    lines = []
    for path in sorted(expected - found):
        name = f" (module {module(path)})" if path.endswith((".py", ".pyi")) else ""
        lines.append(f"{archive.name} lacks {path}{name}")
    if exact:
        for path in sorted(p for p in found - expected if p.startswith(f"{PACKAGE}/")):
            lines.append(f"{archive.name} has {path}, which the checkout does not")
    return lines


def main(dist: str) -> int:
    dist_dir = pathlib.Path(dist)
    wheels, sdists = sorted(dist_dir.glob("*.whl")), sorted(dist_dir.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"{dist_dir}: expected one wheel and one sdist; found {wheels + sdists}")
        return 1
    expected = package_files()
    with zipfile.ZipFile(wheels[0]) as z:
        wheel = {n for n in z.namelist() if not n.endswith("/")}
    problems = report(wheels[0], expected, wheel, exact=True)
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel):
        problems.append(f"{wheels[0].name} lacks *.dist-info/licenses/LICENSE")
    with tarfile.open(sdists[0]) as t:  # paths under the sdist's top folder
        sdist = {m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile() and "/" in m.name}
    problems += report(sdists[0], expected | set(SDIST_FILES), sdist, exact=False)
    if problems:
        print("\n".join(problems))
        print(f"FAILED: {len(problems)} problem(s). pyproject.toml's package discovery "
              "([tool.setuptools.packages.find]) finds folders with an __init__.py; a file other "
              "than a module needs [tool.setuptools.package-data] (and SHIPPED here).")
        return 1
    modules = sum(p.endswith(".py") for p in expected)
    packages = sum(p.endswith("/__init__.py") for p in expected)
    print(f"{wheels[0].name}: the checkout's {len(expected)} package files ({modules} modules, "
          f"{packages} package{'s' * (packages != 1)}) and the license; {len(wheel)} files in all")
    print(f"{sdists[0].name}: the package files and {', '.join(SDIST_FILES)}; "
          f"{len(sdist)} files in all")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[0])
    sys.exit(main(sys.argv[1]))

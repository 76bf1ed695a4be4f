"""The environment report: the versions of portable_rnn, Python and the libraries around it."""

from __future__ import annotations

import importlib
import importlib.metadata
import platform

from ... import __version__

EXTRAS = ("keras", "equinox")  # the frameworks of portable_rnn's extras: always listed
OPTIONAL = ("optax", "torch")  # listed when installed


def versions() -> list[str]:
    lines = [f"portable_rnn {__version__}",
             f"python {platform.python_version()} ({platform.machine()})"]
    for name in ("jax", "jaxlib", "flax", "numpy"):
        try:
            lines.append(f"{name} {importlib.import_module(name).__version__}")
        except ImportError:
            lines.append(f"{name} not installed")
    for name in EXTRAS + OPTIONAL:  # read from the installed metadata: importing them is slow
        try:
            lines.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            if name in EXTRAS:
                lines.append(f"{name} not installed")
    return lines

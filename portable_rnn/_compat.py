"""Every use of JAX internals, in one place, with what it needs and since which version.

portable_rnn supports jax 0.10.2 to 0.12.x. Public API is used wherever it exists; each function
below wraps one private detail and says why it is needed. A change in a new JAX release should
need a change here only.
"""

from __future__ import annotations

import types


def cuda_versions() -> types.ModuleType | None:
    """jaxlib's CUDA plugin version module (`cudnn_get_version`, `cuda_runtime_get_version`).

    `jax._src.lib.cuda_versions` (jax 0.10 to 0.12): None on a jaxlib without a CUDA plugin.
    """
    try:
        from jax._src.lib import cuda_versions as module
    except ImportError:
        return None
    return module


def cudnn_version() -> int | None:
    """cuDNN version as jaxlib reports it (e.g. 91000 for 9.10.0), or None."""
    module = cuda_versions()
    try:
        return None if module is None else int(module.cudnn_get_version())
    except Exception:  # noqa: BLE001 - a broken CUDA install means "no cuDNN", not a crash
        return None


def cuda_runtime_version() -> int | None:
    """CUDA runtime version as jaxlib reports it (e.g. 13000 for 13.0), or None."""
    module = cuda_versions()
    try:
        return None if module is None else int(module.cuda_runtime_get_version())
    except Exception:  # noqa: BLE001 - as above
        return None

"""What the machine can do: platform, cuDNN and CUDA versions, compute capability (probed once)."""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import jax

from . import compat


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """The facts routing decisions depend on. Pass one as ``capabilities=`` to pretend, e.g.

    >>> Capabilities(platform="gpu", cudnn_version=90800, compute_capability=(9, 0),
    ...              device_kind="NVIDIA H100")
    ... # doctest: +NORMALIZE_WHITESPACE
    Capabilities(platform='gpu', cudnn_version=90800, compute_capability=(9, 0),
                 device_kind='NVIDIA H100', cuda_version=None)

    Attributes:
      platform: JAX's platform name of the devices that will run the call: ``"cpu"``, ``"gpu"``
        (CUDA), ``"rocm"``, ``"tpu"``, ...
      cudnn_version: cuDNN version as jaxlib reports it (e.g. 90800 for 9.8.0), or None.
      compute_capability: CUDA compute capability, e.g. (9, 0) for Hopper, or None.
      device_kind: the device's name, e.g. "NVIDIA H100 80GB HBM3", or None.
      cuda_version: CUDA runtime version as jaxlib reports it (e.g. 13000 for 13.0), or None.
      probe_device: a device on which a route that only the hardware can vouch for (cuDNN
        attention: it fails to compile on some CUDA/cuDNN combinations) is compiled and run
        once, and rejected if that fails. `capabilities()` sets it to the GPU it probed; a
        `Capabilities` made by hand has None, and its routes are decided by the rules alone.
    """

    platform: str
    cudnn_version: int | None = None
    compute_capability: tuple[int, int] | None = None
    device_kind: str | None = None
    cuda_version: int | None = None
    probe_device: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def is_cuda_gpu(self) -> bool:
        return self.platform in ("gpu", "cuda")

    @property
    def tpu_generation(self) -> int | None:
        """The TPU generation from `device_kind` ("TPU v5 lite" -> 5, "TPU v4" -> 4, "TPU7x"
        -> 7), or None on another platform or an unknown name."""
        if self.platform != "tpu" or not self.device_kind:
            return None
        found = re.match(r"TPU\s*v?(\d+)", self.device_kind, re.IGNORECASE)
        return int(found.group(1)) if found else None

    def __str__(self) -> str:
        parts = [self.platform]
        if self.device_kind and self.device_kind != self.platform:
            parts.append(self.device_kind)
        if self.compute_capability:
            parts.append("sm{}{}".format(*self.compute_capability))
        if self.cuda_version:
            parts.append(f"CUDA {self.cuda_version // 1000}.{self.cuda_version // 10 % 100}")
        cudnn = self.cudnn_version
        parts.append(f"cuDNN {cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn
                     else "no cuDNN")
        return ", ".join(parts)


GIB = 1 << 30
# The memory of one device by kind (prefixes of `device_kind`), where no probe reads it (a
# `Capabilities` made by hand for another machine): one TPU chip's HBM, one GPU's.
DEVICE_MEMORY = {"TPU v5 lite": 16 * GIB, "TPU v5e": 16 * GIB, "TPU v4": 32 * GIB,
                 "TPU v5p": 95 * GIB, "TPU v6": 32 * GIB, "NVIDIA H200": 141 * GIB,
                 "NVIDIA H100": 80 * GIB, "NVIDIA A100": 40 * GIB}
# A CPU's figure is fixed, not the host's memory, so that a program traced for a CPU is the
# same on every host; and the figure for a device of unknown kind.
CPU_MEMORY = 16 * GIB
DEFAULT_MEMORY = 16 * GIB


def device_memory(caps: Capabilities) -> tuple[int, str]:
    """The memory of one device of `caps`, in bytes, and where the figure comes from: the
    device's own report (``memory_stats()["bytes_limit"]``) where `caps` is this machine's,
    else a size its kind states ("80GB") or its kind's in `DEVICE_MEMORY`, else
    `DEFAULT_MEMORY`; a CPU's is `CPU_MEMORY`."""
    if caps.platform == "cpu":
        return CPU_MEMORY, "a CPU's fixed figure"
    if caps == capabilities():
        found = _reported_memory(caps.platform)
        if found:
            return found, f"as the {caps.device_kind or caps.platform} reports it"
    kind = caps.device_kind or ""
    stated = re.search(r"(\d+)\s*GB", kind)
    if stated:
        return int(stated.group(1)) * GIB, f"the {kind}'s stated size"
    for prefix, size in DEVICE_MEMORY.items():
        if kind.startswith(prefix):
            return size, f"a {prefix}'s"
    return DEFAULT_MEMORY, f"assumed for {kind or caps.platform}, an unknown kind"


@functools.cache
def _reported_memory(platform: str) -> int | None:
    """``bytes_limit`` of this machine's first device of `platform` (None where it reports
    none)."""
    for device in jax.devices():
        if device.platform == platform or (platform == "gpu" and device.platform in ("cuda",
                                                                                     "rocm")):
            try:
                stats = device.memory_stats()
            except Exception:  # noqa: BLE001 - a backend without memory statistics
                return None
            return (stats or {}).get("bytes_limit")
    return None


def cudnn_platform_rejects(caps: Capabilities, what: str) -> list[str]:
    """Why `caps` cannot run cuDNN's `what` at all (empty when it can)."""
    if not caps.is_cuda_gpu:
        return [f"platform is {caps.platform!r}: the cuDNN {what} needs a CUDA GPU"]
    if caps.cudnn_version is None:
        return ["no cuDNN: jaxlib reports no cuDNN version"]
    return []


def _device():
    """A GPU if JAX has one, whichever backend is the default; else the default backend's."""
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:  # no GPU backend
        return jax.devices()[0]


@functools.cache
def capabilities() -> Capabilities:
    """Probes the machine once: its GPU (or default device), and jaxlib's CUDA/cuDNN versions.

    The answer comes from the devices, never from whether an import succeeds
    (`jax.experimental.rnn` imports fine on a CPU and fails only when traced). A GPU counts even
    when the CPU is the default backend: which platform runs a call is settled per lowering (a
    call routed to cuDNN carries a portable branch for the other platforms).
    """
    device = _device()
    platform = device.platform
    if platform == "gpu":
        version = getattr(device.client, "platform_version", "").lower()
        if "rocm" in version or "hip" in version:
            platform = "rocm"
    if platform != "gpu":
        return Capabilities(platform=platform, device_kind=device.device_kind)
    cc = getattr(device, "compute_capability", None)
    compute = tuple(int(v) for v in str(cc).split(".")[:2]) if cc else None
    return Capabilities(platform="gpu", cudnn_version=compat.cudnn_version(),
                        compute_capability=compute, device_kind=device.device_kind,
                        cuda_version=compat.cuda_runtime_version(), probe_device=device)

"""Native code built on first use: a C++ source of the package compiled into a shared library
against jaxlib's XLA FFI headers and the CUDA and cuDNN headers of the NVIDIA wheels that
``jax[cuda12]`` / ``jax[cuda13]`` install, cached on disk, and loaded with `ctypes`.

Installing portable_rnn needs no compiler and no CUDA package: nothing here runs until a route
that needs native code is asked for on a machine with a GPU. Every way the build can fail (no
compiler, a missing header or library, a failing compile, a library that does not load) raises
`Unavailable`, whose message names what is missing and where it was looked for; the routes turn
it into a rejection reason, never an error of a routed call.

Where things are found (the first that has them):

- the compiler: ``$CXX``, else ``c++``, ``g++``, ``clang++`` on ``PATH``;
- the FFI headers: `jax.ffi.include_dir()` (``xla/ffi/api/ffi.h``);
- cuDNN (``cudnn.h``, ``cudnn_version.h``, ``libcudnn.so.<major>``): ``$CUDNN_PATH`` (a folder
  with ``include/`` and ``lib/`` or ``lib64/``), then the installed ``nvidia-cudnn-cu13`` /
  ``nvidia-cudnn-cu12`` wheels (the one matching jaxlib's CUDA plugin first), then
  ``/usr/local/cuda``, ``/usr``;
- the CUDA runtime (``cuda_runtime_api.h``, ``libcudart.so.<major>``): ``$CUDA_HOME`` /
  ``$CUDA_PATH``, then the ``nvidia-cuda-runtime`` (CUDA 13) / ``nvidia-cuda-runtime-cu12``
  wheels, then ``/usr/local/cuda``.

The cache lives in ``$PORTABLE_RNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/portable_rnn``, else
``~/.cache/portable_rnn``. A library's file name carries the jaxlib, CUDA and cuDNN versions it
was built for and a hash of everything else that shapes it (the source, the compiler and its
version, the flags, the FFI headers); a change to any of them builds a new file, and a build
writes under a temporary name first, so concurrent processes never load half a file.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib.metadata
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

CACHE_ENV = "PORTABLE_RNN_CACHE_DIR"
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared")
COMPILE_TIMEOUT_S = 600


class Unavailable(RuntimeError):
    """The native library cannot be built or loaded here; the message says why."""


@dataclasses.dataclass(frozen=True)
class Prefix:
    """A place headers and libraries were found: an include folder, a library folder, and the
    include folders of headers that the first one's headers include from elsewhere (the CUDA
    runtime wheels leave ``crt/`` to the ``nvidia-cuda-nvcc`` wheels)."""

    include: str
    lib: str
    origin: str  # where it came from, for messages: "$CUDNN_PATH", "nvidia-cudnn-cu12 9.8.0"
    extra: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Everything a build needs, found on this machine."""

    compiler: str
    compiler_version: str  # the first line of ``compiler --version``
    ffi_include: str
    cuda: Prefix
    cudnn: Prefix
    cuda_version: int  # CUDART_VERSION of the headers, e.g. 12090 for 12.9
    cudnn_version: int  # CUDNN_VERSION of the headers, e.g. 92800 for 9.28.0
    cudart: str  # the runtime library to link, e.g. "libcudart.so.12"
    cudnn_lib: str  # e.g. "libcudnn.so.9"

    def describe(self) -> str:
        return (f"{os.path.basename(self.compiler)} ({self.compiler_version}); CUDA "
                f"{version_text(self.cuda_version, cuda=True)} headers from {self.cuda.origin}; "
                f"cuDNN {version_text(self.cudnn_version)} headers from {self.cudnn.origin}")


def version_text(version: int, cuda: bool = False) -> str:
    """12090 -> "12.9" (CUDA); 92800 -> "9.28.0" (cuDNN)."""
    if cuda:
        return f"{version // 1000}.{version // 10 % 100}"
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"


def cache_dir() -> pathlib.Path:
    """Where built libraries are kept (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return pathlib.Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "portable_rnn"


# --- finding the toolchain -----------------------------------------------------------------------

def find_compiler(environ: Mapping[str, str] | None = None) -> str:
    """The C++ compiler: ``$CXX`` (a path or a name on ``PATH``), else the first of ``c++``,
    ``g++``, ``clang++`` on ``PATH``."""
    environ = os.environ if environ is None else environ
    path = environ.get("PATH", "")
    if environ.get("CXX"):
        found = shutil.which(environ["CXX"], path=path)
        if not found:
            raise Unavailable(f"the C++ compiler CXX={environ['CXX']!r} was not found")
        return found
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name, path=path)
        if found:
            return found
    raise Unavailable("no C++ compiler: none of c++, g++, clang++ is on PATH and CXX is not set "
                      "(install one, e.g. `apt-get install g++`, or set CXX)")


def compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise Unavailable(f"the C++ compiler {compiler} does not run: {e}") from e
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown version"


def ffi_include_dir() -> str:
    """jaxlib's XLA FFI headers (`jax.ffi.include_dir`)."""
    import jax.ffi

    include = jax.ffi.include_dir()
    if not os.path.isfile(os.path.join(include, "xla", "ffi", "api", "ffi.h")):
        raise Unavailable(f"jaxlib's XLA FFI headers are missing: no xla/ffi/api/ffi.h under "
                          f"jax.ffi.include_dir()={include}")
    return include


def plugin_cuda_major() -> int | None:
    """The CUDA major version of jaxlib's installed CUDA plugin (13 before 12), or None."""
    for major in (13, 12):
        if importlib.util.find_spec(f"jax_cuda{major}_plugin") is not None:
            return major
    return None


CUDNN_WHEELS = {13: "nvidia-cudnn-cu13", 12: "nvidia-cudnn-cu12"}
CUDA_RUNTIME_WHEELS = {13: "nvidia-cuda-runtime", 12: "nvidia-cuda-runtime-cu12"}
CUDA_NVCC_WHEELS = {13: "nvidia-cuda-nvcc", 12: "nvidia-cuda-nvcc-cu12"}
CRT = os.path.join("crt", "host_defines.h")  # cuda_runtime_api.h includes it


def _wheel_prefixes(dists: Mapping[int, str], header: str, cuda_major: int | None
                    ) -> list[Prefix]:
    """The folders of installed NVIDIA wheels that hold `header` (a path under an ``include``
    folder; the wheel of `cuda_major` first), each with the library folder beside its include
    folder."""
    order = sorted(dists, key=lambda m: (m != cuda_major, -m))
    depth = len(pathlib.PurePath(header).parts)
    found = []
    for major in order:
        name = dists[major]
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            parts = pathlib.PurePath(f).parts
            if parts[-depth:] == pathlib.PurePath(header).parts and parts[-depth - 1] == "include":
                include = pathlib.Path(dist.locate_file(f)).parents[depth - 1]
                found.append(Prefix(str(include), str(include.parent / "lib"),
                                    f"{name} {dist.version}"))
    return found


def _root_prefix(root: str, origin: str) -> Prefix:
    lib = next((os.path.join(root, d) for d in ("lib64", "lib")
                if os.path.isdir(os.path.join(root, d))), os.path.join(root, "lib"))
    return Prefix(os.path.join(root, "include"), lib, origin)


def cudnn_prefixes(environ: Mapping[str, str] | None = None,
                   cuda_major: int | None = None) -> list[Prefix]:
    """Where cuDNN is looked for, in order (the module docstring)."""
    environ = os.environ if environ is None else environ
    out = []
    if environ.get("CUDNN_PATH"):
        out.append(_root_prefix(environ["CUDNN_PATH"], f"$CUDNN_PATH={environ['CUDNN_PATH']}"))
    out += _wheel_prefixes(CUDNN_WHEELS, "cudnn.h", cuda_major)
    out += [_root_prefix("/usr/local/cuda", "/usr/local/cuda"),
            Prefix("/usr/include", "/usr/lib/x86_64-linux-gnu", "/usr")]
    return out


def cuda_prefixes(environ: Mapping[str, str] | None = None,
                  cuda_major: int | None = None) -> list[Prefix]:
    """Where the CUDA runtime is looked for, in order (the module docstring)."""
    environ = os.environ if environ is None else environ
    out = [_root_prefix(environ[v], f"${v}={environ[v]}") for v in ("CUDA_HOME", "CUDA_PATH")
           if environ.get(v)]
    out += _wheel_prefixes(CUDA_RUNTIME_WHEELS, "cuda_runtime_api.h", cuda_major)
    out.append(_root_prefix("/usr/local/cuda", "/usr/local/cuda"))
    return out


def crt_prefixes(environ: Mapping[str, str] | None = None,
                 cuda_major: int | None = None) -> list[Prefix]:
    """Where ``crt/host_defines.h`` is looked for when the CUDA runtime's include folder lacks it:
    the ``nvidia-cuda-nvcc`` wheels (which jax[cuda12] and jax[cuda13] install), then the
    CUDA roots."""
    environ = os.environ if environ is None else environ
    out = _wheel_prefixes(CUDA_NVCC_WHEELS, CRT, cuda_major)
    out += [_root_prefix(environ[v], f"${v}={environ[v]}") for v in ("CUDA_HOME", "CUDA_PATH")
            if environ.get(v)]
    out.append(_root_prefix("/usr/local/cuda", "/usr/local/cuda"))
    return out


def _define(path: str, name: str) -> int | None:
    try:
        text = pathlib.Path(path).read_text(errors="replace")
    except OSError:
        return None
    m = re.search(rf"^\s*#\s*define\s+{name}\s+(\d+)", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def _first_library(prefix: Prefix, stem: str) -> str | None:
    """The file name of ``<stem>.so.<major>`` in `prefix`'s library folder (highest major)."""
    names = sorted((os.path.basename(p) for p in glob.glob(os.path.join(prefix.lib, stem + ".so.*"))
                    if re.fullmatch(re.escape(stem) + r"\.so\.\d+", os.path.basename(p))),
                   key=lambda n: int(n.rsplit(".", 1)[1]), reverse=True)
    return names[0] if names else None


def _looked_in(prefixes: Sequence[Prefix]) -> str:
    return "; ".join(f"{p.include} ({p.origin})" for p in prefixes)


def find_cudnn(prefixes: Sequence[Prefix]) -> tuple[Prefix, int, str]:
    """The first prefix with cuDNN's headers and library: (prefix, CUDNN_VERSION, library)."""
    for p in prefixes:
        if not os.path.isfile(os.path.join(p.include, "cudnn.h")):
            continue
        version_h = os.path.join(p.include, "cudnn_version.h")
        parts = [_define(version_h, n) for n in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL")]
        if None in parts:
            raise Unavailable(f"cudnn_version.h is missing or unreadable in {p.include} "
                              f"({p.origin}): cannot tell the cuDNN version")
        lib = _first_library(p, "libcudnn")
        if lib is None:
            raise Unavailable(f"cudnn.h is in {p.include} ({p.origin}) but libcudnn.so.<major> "
                              f"is not in {p.lib}")
        major, minor, patch = parts
        return p, major * 10000 + minor * 100 + patch, lib
    raise Unavailable("the cuDNN header cudnn.h was not found (looked in: "
                      f"{_looked_in(prefixes)}); install jax[cuda12] or jax[cuda13], whose "
                      "nvidia-cudnn wheel has it, or set CUDNN_PATH")


def find_cuda_runtime(prefixes: Sequence[Prefix], crt: Sequence[Prefix] = ()
                      ) -> tuple[Prefix, int, str]:
    """The first prefix with the CUDA runtime's headers and library: (prefix, CUDART_VERSION,
    library). Where its include folder lacks ``crt/host_defines.h``, the first of `crt` that has
    it (for the same CUDA major version) joins as an extra include folder."""
    for p in prefixes:
        header = os.path.join(p.include, "cuda_runtime_api.h")
        if not os.path.isfile(header):
            continue
        version = _define(header, "CUDART_VERSION")
        if version is None:
            raise Unavailable(f"cuda_runtime_api.h in {p.include} ({p.origin}) defines no "
                              "CUDART_VERSION")
        lib = _first_library(p, "libcudart")
        if lib is None:
            raise Unavailable(f"cuda_runtime_api.h is in {p.include} ({p.origin}) but "
                              f"libcudart.so.<major> is not in {p.lib}")
        if not os.path.isfile(os.path.join(p.include, CRT)):
            extra = next((c for c in crt if os.path.isfile(os.path.join(c.include, CRT))
                          and _same_major(c, version)), None)
            if extra is None:
                raise Unavailable(
                    f"cuda_runtime_api.h in {p.include} ({p.origin}) includes crt/host_defines.h,"
                    f" which was not found for CUDA {version // 1000} (looked in: "
                    f"{_looked_in(crt)}); install nvidia-cuda-nvcc-cu12 (CUDA 12) or "
                    "nvidia-cuda-nvcc (CUDA 13), which jax[cuda12] / jax[cuda13] install")
            p = dataclasses.replace(p, extra=(extra.include,),
                                    origin=f"{p.origin}, crt/ from {extra.origin}")
        return p, version, lib
    raise Unavailable("the CUDA runtime header cuda_runtime_api.h was not found (looked in: "
                      f"{_looked_in(prefixes)}); install jax[cuda12] or jax[cuda13], whose "
                      "nvidia-cuda-runtime wheel has it, or set CUDA_HOME")


def _same_major(prefix: Prefix, cudart_version: int) -> bool:
    """Whether `prefix` belongs to the CUDA major version of `cudart_version` (a wheel of that
    major, or a root whose own cuda_runtime_api.h says so)."""
    origin = prefix.origin
    for major, name in CUDA_NVCC_WHEELS.items():
        if origin.startswith(name + " "):
            return major == cudart_version // 1000
    own = _define(os.path.join(prefix.include, "cuda_runtime_api.h"), "CUDART_VERSION")
    return own is None or own // 1000 == cudart_version // 1000


def find_toolchain(environ: Mapping[str, str] | None = None, cuda_major: int | None = None,
                   cudnn: Sequence[Prefix] | None = None,
                   cuda: Sequence[Prefix] | None = None,
                   crt: Sequence[Prefix] | None = None) -> Toolchain:
    """Everything a build needs, or `Unavailable` naming the first thing missing.

    `cudnn`, `cuda` and `crt` replace the places searched (`cudnn_prefixes`, `cuda_prefixes`,
    `crt_prefixes`)."""
    if not sys.platform.startswith("linux"):
        raise Unavailable(f"native builds are supported on Linux only; this is {sys.platform}")
    environ = os.environ if environ is None else environ
    cuda_major = plugin_cuda_major() if cuda_major is None else cuda_major
    compiler = find_compiler(environ)
    ffi = ffi_include_dir()
    cuda_prefix, cuda_version, cudart = find_cuda_runtime(
        cuda_prefixes(environ, cuda_major) if cuda is None else cuda,
        crt_prefixes(environ, cuda_major) if crt is None else crt)
    cudnn_prefix, cudnn_version, cudnn_lib = find_cudnn(
        cudnn_prefixes(environ, cuda_major) if cudnn is None else cudnn)
    return Toolchain(compiler, compiler_version(compiler), ffi, cuda_prefix, cudnn_prefix,
                     cuda_version, cudnn_version, cudart, cudnn_lib)


# --- building -------------------------------------------------------------------------------------

def jaxlib_version() -> str:
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        import jaxlib

        return jaxlib.__version__


def compile_command(source: str, output: str, tc: Toolchain) -> list[str]:
    """The compiler's command line: the source into a shared library linked against the cuDNN
    and CUDA runtime libraries found (their folders on the library's run path)."""
    includes = [tc.ffi_include, tc.cuda.include, *tc.cuda.extra, tc.cudnn.include]
    return [tc.compiler, *FLAGS, *(f"-I{d}" for d in includes), source, "-o", output,
            "-L", tc.cudnn.lib, "-L", tc.cuda.lib, f"-l:{tc.cudnn_lib}", f"-l:{tc.cudart}",
            f"-Wl,-rpath,{tc.cudnn.lib}:{tc.cuda.lib}"]


def _ffi_headers_digest(include: str) -> str:
    h = hashlib.sha256()
    for name in ("api.h", "c_api.h", "ffi.h"):
        try:
            h.update(pathlib.Path(include, "xla", "ffi", "api", name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()


def cache_key(name: str, source: bytes, tc: Toolchain, jaxlib: str) -> str:
    """The library's file stem: ``<name>-jaxlib<v>-cuda<v>-cudnn<v>-<hash>``; the hash covers the
    source, the compiler and its version, the flags, the FFI headers and the folders built
    against."""
    h = hashlib.sha256()
    for part in (source, tc.compiler.encode(), tc.compiler_version.encode(),
                 " ".join(FLAGS).encode(), _ffi_headers_digest(tc.ffi_include).encode(),
                 tc.cuda.include.encode(), *(e.encode() for e in tc.cuda.extra),
                 tc.cudnn.include.encode(), tc.cudart.encode(),
                 tc.cudnn_lib.encode()):
        h.update(part)
        h.update(b"\0")
    return (f"{name}-jaxlib{jaxlib}-cuda{version_text(tc.cuda_version, cuda=True)}"
            f"-cudnn{version_text(tc.cudnn_version)}-{h.hexdigest()[:16]}")


def _error_lines(log: str, limit: int = 3) -> str:
    lines = [line.strip() for line in log.splitlines() if "error" in line.lower()]
    lines = lines or [line.strip() for line in log.splitlines() if line.strip()]
    return " | ".join(lines[:limit])


def build(source: str | os.PathLike, name: str, toolchain: Toolchain | None = None,
          directory: str | os.PathLike | None = None, jaxlib: str | None = None) -> pathlib.Path:
    """The shared library built from `source` (from the cache when it is there).

    Raises `Unavailable` when the toolchain is incomplete or the compile fails; the message of a
    failed compile names the compiler, its first error lines and the log file it kept.
    """
    source = pathlib.Path(source)
    tc = find_toolchain() if toolchain is None else toolchain
    text = source.read_bytes()
    out_dir = pathlib.Path(cache_dir() if directory is None else directory)
    stem = cache_key(name, text, tc, jaxlib_version() if jaxlib is None else jaxlib)
    target = out_dir / f"{stem}.so"
    if target.is_file():
        return target
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Unavailable(f"the cache folder {out_dir} cannot be created ({e}); set "
                          f"{CACHE_ENV} to a writable folder") from e
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".so.tmp", dir=out_dir)
    os.close(fd)
    command = compile_command(str(source), tmp, tc)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        os.unlink(tmp)
        raise Unavailable(f"compiling {source.name} with {tc.compiler} took longer than "
                          f"{COMPILE_TIMEOUT_S} s") from e
    except OSError as e:
        os.unlink(tmp)
        raise Unavailable(f"the C++ compiler {tc.compiler} could not be run: {e}") from e
    if proc.returncode != 0 or not os.path.getsize(tmp):
        os.unlink(tmp)
        log = out_dir / f"{stem}.log"
        log.write_text(" ".join(command) + "\n\n" + proc.stdout + proc.stderr)
        raise Unavailable(f"compiling {source.name} with {tc.compiler} failed (exit "
                          f"{proc.returncode}): {_error_lines(proc.stdout + proc.stderr)}; "
                          f"full log: {log}")
    os.replace(tmp, target)
    return target

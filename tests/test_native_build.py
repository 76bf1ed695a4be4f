"""Building native code on first use (`portable_rnn._src.core.native`): where the toolchain is
found, every way the build fails (each a message naming what is missing), the cache and its key.

A stand-in compiler (a shell script) and made-up header folders keep these tests independent of
what the machine has installed; the last test compiles the real C++ source of the cudnn_ffi route
where a compiler and the NVIDIA headers are present (docs/development.md says how to give it
them on a machine without a GPU).
"""

import ctypes
import os
import pathlib
import stat

import pytest

from portable_rnn._src.core import native

pytestmark = pytest.mark.cpu  # builds for and runs on the host

SOURCE = (pathlib.Path(__file__).resolve().parents[1] / "portable_rnn" / "_src" / "recurrent"
          / "cudnn_ffi" / "cudnn_rnn.cc")


def fake_compiler(tmp_path, fail: str | None = None) -> pathlib.Path:
    """A compiler that counts its compiles in ``calls`` and writes its output (or fails)."""
    calls = tmp_path / "calls"
    body = (f'echo "{fail}" >&2; exit 1' if fail else
            'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out=$2; shift; done; echo lib > "$out"')
    script = tmp_path / "fakecc"
    script.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fakecc 1.0"; exit 0; '
                      f'fi\necho x >> {calls}\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def fake_cuda(root: pathlib.Path, version=12090, crt=True) -> native.Prefix:
    (root / "include" / "crt").mkdir(parents=True)
    (root / "include" / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION {version}\n")
    if crt:
        (root / "include" / "crt" / "host_defines.h").write_text("\n")
    (root / "lib").mkdir()
    (root / "lib" / f"libcudart.so.{version // 1000}").write_text("")
    return native.Prefix(str(root / "include"), str(root / "lib"), f"test CUDA {root.name}")


def fake_cudnn(root: pathlib.Path, version=(9, 13, 1)) -> native.Prefix:
    (root / "include").mkdir(parents=True)
    (root / "include" / "cudnn.h").write_text("\n")
    (root / "include" / "cudnn_version.h").write_text(
        "".join(f"#define CUDNN_{n} {v}\n" for n, v in zip(("MAJOR", "MINOR", "PATCHLEVEL"),
                                                           version)))
    (root / "lib").mkdir()
    (root / "lib" / f"libcudnn.so.{version[0]}").write_text("")
    return native.Prefix(str(root / "include"), str(root / "lib"), f"test cuDNN {root.name}")


def source(tmp_path) -> pathlib.Path:
    path = tmp_path / "lib.cc"
    path.write_text("int answer = 42;\n")
    return path


def toolchain(tmp_path, fail=None, **kw) -> native.Toolchain:
    return native.find_toolchain(
        environ={"CXX": str(fake_compiler(tmp_path, fail)), "PATH": ""}, cuda_major=12,
        cuda=[fake_cuda(tmp_path / "cuda")], cudnn=[fake_cudnn(tmp_path / "cudnn")], crt=[],
        **kw)


def test_a_missing_compiler_is_named():
    with pytest.raises(native.Unavailable, match=r"the C\+\+ compiler CXX='/nowhere/c\+\+' was "
                                                 "not found"):
        native.find_compiler({"CXX": "/nowhere/c++", "PATH": os.environ.get("PATH", "")})
    with pytest.raises(native.Unavailable, match=r"no C\+\+ compiler: none of c\+\+, g\+\+, "
                                                 r"clang\+\+ is on PATH and CXX is not set"):
        native.find_compiler({"PATH": ""})


def test_missing_headers_and_libraries_are_named(tmp_path):
    cc = {"CXX": str(fake_compiler(tmp_path)), "PATH": ""}
    cuda = fake_cuda(tmp_path / "cuda")
    empty = native.Prefix(str(tmp_path / "none" / "include"), str(tmp_path / "none" / "lib"),
                          "an empty folder")
    with pytest.raises(native.Unavailable, match=r"the cuDNN header cudnn.h was not found \("
                                                 r"looked in: .*none/include \(an empty folder\)"
                                                 r"\); install jax\[cuda12\] or jax\[cuda13\]"):
        native.find_toolchain(cc, 12, cudnn=[empty], cuda=[cuda], crt=[])
    with pytest.raises(native.Unavailable, match="the CUDA runtime header cuda_runtime_api.h was "
                                                 "not found"):
        native.find_toolchain(cc, 12, cudnn=[fake_cudnn(tmp_path / "cudnn")], cuda=[empty],
                              crt=[])
    no_crt = fake_cuda(tmp_path / "cuda_no_crt", crt=False)
    with pytest.raises(native.Unavailable, match=r"includes crt/host_defines.h, which was not "
                                                 r"found for CUDA 12 .*nvidia-cuda-nvcc-cu12"):
        native.find_toolchain(cc, 12, cudnn=[fake_cudnn(tmp_path / "cudnn2")], cuda=[no_crt],
                              crt=[])
    # crt/ from another folder of the same CUDA major joins the include path
    tc = native.find_toolchain(cc, 12, cudnn=[fake_cudnn(tmp_path / "cudnn3")], cuda=[no_crt],
                               crt=[fake_cuda(tmp_path / "cuda13", 13000), cuda])
    assert tc.cuda.extra == (cuda.include,)
    assert f"-I{cuda.include}" in native.compile_command("a.cc", "a.so", tc)
    bare = fake_cudnn(tmp_path / "cudnn_no_lib")
    os.unlink(os.path.join(bare.lib, "libcudnn.so.9"))
    with pytest.raises(native.Unavailable, match=r"libcudnn.so.<major> is not in .*cudnn_no_lib"):
        native.find_toolchain(cc, 12, cudnn=[bare], cuda=[cuda], crt=[])


def test_the_toolchain_reads_the_versions(tmp_path):
    tc = toolchain(tmp_path)
    assert (tc.cuda_version, tc.cudnn_version) == (12090, 91301)
    assert (tc.cudart, tc.cudnn_lib) == ("libcudart.so.12", "libcudnn.so.9")
    assert tc.compiler_version == "fakecc 1.0"
    assert tc.describe().startswith("fakecc (fakecc 1.0); CUDA 12.9 headers from test CUDA cuda")


def test_a_failing_compile_names_the_compiler_its_error_and_its_log(tmp_path):
    tc = toolchain(tmp_path, fail="lib.cc:1:1: error: cudnn.h: no such thing")
    with pytest.raises(native.Unavailable) as e:
        native.build(source(tmp_path), "lib", tc, tmp_path / "cache", jaxlib="0.0.1")
    message = str(e.value)
    assert message.startswith(f"compiling lib.cc with {tc.compiler} failed (exit 1): "
                              "lib.cc:1:1: error: cudnn.h: no such thing; full log: ")
    log = pathlib.Path(message.rsplit("full log: ", 1)[1])
    assert log.is_file() and "error: cudnn.h" in log.read_text()
    assert not list((tmp_path / "cache").glob("*.so*"))  # nothing half-written is left


def test_a_build_is_cached_under_its_key(tmp_path):
    tc, src = toolchain(tmp_path), source(tmp_path)
    first = native.build(src, "lib", tc, tmp_path / "cache", jaxlib="0.10.2")
    again = native.build(src, "lib", tc, tmp_path / "cache", jaxlib="0.10.2")
    assert first == again and first.read_text() == "lib\n"
    assert (tmp_path / "calls").read_text().count("x") == 1  # compiled once
    assert first.name.startswith("lib-jaxlib0.10.2-cuda12.9-cudnn9.13.1-")
    other = native.build(src, "lib", tc, tmp_path / "cache", jaxlib="0.12.0")
    assert other != first and (tmp_path / "calls").read_text().count("x") == 2


def test_the_cache_key(tmp_path, monkeypatch):
    tc = toolchain(tmp_path)
    key = native.cache_key("lib", b"source", tc, "0.10.2")
    assert key.startswith("lib-jaxlib0.10.2-cuda12.9-cudnn9.13.1-")
    assert key == native.cache_key("lib", b"source", tc, "0.10.2")
    changed = [native.cache_key("lib", b"source 2", tc, "0.10.2"),
               native.cache_key("lib", b"source", tc, "0.12.0"),
               native.cache_key("lib", b"source", native.dataclasses.replace(
                   tc, cudnn_version=91900), "0.10.2"),
               native.cache_key("lib", b"source", native.dataclasses.replace(
                   tc, compiler_version="fakecc 2.0"), "0.10.2")]
    assert len({key, *changed}) == 5
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "mine"))
    assert native.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(native.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_dir() == tmp_path / "xdg" / "portable_rnn"


@pytest.mark.slow
def test_the_cudnn_source_compiles_against_the_installed_headers(tmp_path):
    """The real C++ source, compiled with this machine's compiler against the headers found as a
    GPU machine finds them (the NVIDIA wheels of jax[cuda12]/jax[cuda13], CUDNN_PATH,
    CUDA_HOME); then loaded, without a GPU, for the versions it was built with."""
    try:
        tc = native.find_toolchain()
    except native.Unavailable as e:
        pytest.skip(f"cannot compile the cuDNN route here: {e}")
    path = native.build(SOURCE, "cudnn_rnn", tc, tmp_path, jaxlib="test")
    lib = ctypes.CDLL(str(path))
    out = (ctypes.c_int64 * 3)()
    lib.PortableRnnCudnnRnnVersions(out)
    assert (out[0], out[2]) == (tc.cudnn_version, tc.cuda_version)
    for symbol in ("PortableRnnCudnnRnnForward", "PortableRnnCudnnRnnBackward",
                   "PortableRnnCudnnRnnPlan", "PortableRnnCudnnRnnDevice"):
        assert hasattr(lib, symbol)
    # The plan query: without a GPU an error message comes back (never a crash); with one, the
    # weight space holds at least the LSTM's parameters.
    config = (ctypes.c_int64 * 12)(2, 0, 8, 16, 0, 1, 0, 4, 5, 0, 1, 1)
    plan, error = (ctypes.c_int64 * 256)(), ctypes.create_string_buffer(512)
    if lib.PortableRnnCudnnRnnPlan(config, 12, plan, 256, error, 512):
        assert error.value, "a failed plan query says why"
    else:
        assert plan[2] >= 4 * (4 * 16 * (8 + 16) + 8 * 16)

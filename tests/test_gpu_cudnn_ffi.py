"""On a real CUDA GPU: portable_rnn's own cuDNN call (the ``cudnn_ffi`` route) builds, compiles
to its FFI custom calls and matches the scan path.

Marked `gpu`; skipped without a GPU (conftest.py). Run with ``pytest -m gpu``. The route is asked
for explicitly (``implementation="cudnn_ffi"``): the automatic choice does not take it until it
has been measured (docs/dispatch.md). The first test builds the native library (compiler, NVIDIA
headers: docs/development.md); on a GPU machine a failed build fails here, with its reason.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import family_helpers
import portable_rnn
from jaxpr_helpers import binds, trace
from lstm_helpers import make_inputs
from portable_rnn._src.core import native
from portable_rnn._src.recurrent.routes.cudnn_ffi import call as ffi_call

pytestmark = pytest.mark.gpu

B, T, I, H, L = 8, 20, 16, 32, 2
LENGTHS = jnp.array([20, 3, 0, 17, 20, 1, 9, 20])
HIGHEST = lax.Precision.HIGHEST
FWD, BWD = ffi_call.FWD_TARGET, ffi_call.BWD_TARGET


@pytest.fixture(scope="module", autouse=True)
def backend():
    try:
        built = ffi_call.backend()
    except native.Unavailable as e:
        pytest.fail(f"portable_rnn's cuDNN call did not build on this GPU machine: {e}")
    headers, loaded, cudart = built.versions()
    print(f"cudnn_ffi: built against cuDNN {headers} and CUDA runtime {cudart}, loaded cuDNN "
          f"{loaded}; device {built.device()}")
    return built


def hlo(f, *args) -> str:
    return jax.jit(f).lower(*args).compile().as_text()


def close(a, b, tol):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        u, v = np.asarray(u, np.float32), np.asarray(v, np.float32)
        assert u.shape == v.shape
        np.testing.assert_allclose(u, v, atol=tol * (1 + np.abs(v).max()), rtol=tol)


def lstm(impl, *args, seq=LENGTHS, layers=L, bidir=True, precision=HIGHEST, **kw):
    return portable_rnn.lstm(*args[:4], seq, I, H, layers, kw.pop("dropout", 0.0), bidir,
                             precision, implementation=impl, **kw)


def grads(f):
    return jax.jit(jax.grad(lambda *a: sum(jnp.sum(o.astype(jnp.float32) ** 2)
                                           for o in jax.tree.leaves(f(*a))), (0, 1, 2, 3)))


def test_the_route_serves_an_explicit_request_on_this_machine():
    args = make_inputs(B, T, I, H, L, True, 0)
    d = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True,
                                  implementation="cudnn_ffi")
    assert d.implementation == "cudnn_ffi"
    print("\n".join(d.notes))
    auto = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True)
    assert auto.implementation == "scan" and "not measured" in auto.rejected["cudnn_ffi"][0]


@pytest.mark.parametrize("seq", [None, LENGTHS], ids=["full", "ragged"])
def test_lstm_float32_compiles_to_the_ffi_calls_and_matches_scan(seq):
    args = make_inputs(B, T, I, H, L, True, 1)
    f = lambda impl: lambda *a: lstm(impl, *a, seq=seq)
    assert FWD in hlo(f("cudnn_ffi"), *args) and FWD not in hlo(f("scan"), *args)
    close(jax.jit(f("cudnn_ffi"))(*args), jax.jit(f("scan"))(*args), 2e-5)
    text = hlo(jax.grad(lambda *a: jnp.sum(f("cudnn_ffi")(*a)[0] ** 2), (0, 3)), *args)
    assert FWD in text and BWD in text
    close(grads(f("cudnn_ffi"))(*args), grads(f("scan"))(*args), 2e-4)


def test_tf32_by_default():
    args = make_inputs(B, T, I, H, L, True, 2)
    close(jax.jit(lambda *a: lstm("cudnn_ffi", *a, precision=None))(*args),
          jax.jit(lambda *a: lstm("scan", *a))(*args), 1e-2)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_16_bit(dtype):
    caps = portable_rnn.capabilities()
    if dtype == jnp.bfloat16 and (caps.cudnn_version < 91300 or caps.compute_capability < (8, 0)):
        pytest.skip(f"cuDNN's bfloat16 RNN needs cuDNN 9.13 and sm80; this is {caps}")
    args = [a.astype(dtype) for a in make_inputs(B, T, I, H, L, True, 3)]
    f = lambda impl: lambda *a: lstm(impl, *a, precision=None)
    assert FWD in hlo(f("cudnn_ffi"), *args)
    ref = [a.astype(jnp.float32) for a in args]
    close(jax.jit(f("cudnn_ffi"))(*args), jax.jit(f("scan"))(*ref), 5e-2)
    close(grads(f("cudnn_ffi"))(*args), grads(f("scan"))(*ref), 1e-1)


@pytest.mark.parametrize("shape", [(64, 32, 256, 256), (64, 32, 64, 64)],
                         ids=["PERSIST_STATIC", "PERSIST_STATIC_SMALL_H"])
def test_persistent_algorithms_in_float16(shape):
    """The algorithms PyTorch's rules pick for these shapes (on a GPU with >= 98 SMs), run."""
    B_, T_, I_, H_ = shape
    ks = jax.random.split(jax.random.key(4), 2)
    x = jax.random.normal(ks[0], (B_, T_, I_), jnp.float16)
    z = jnp.zeros((1, B_, H_), jnp.float16)
    w = portable_rnn.init_lstm_weight(ks[1], I_, H_, 1, False)
    f = lambda impl: lambda x, w: portable_rnn.lstm(x, z, z, w, None, I_, H_, 1, 0.0, False,
                                                    implementation=impl)[0]
    algos = [ffi_call.ALGORITHMS[e.params["algo"]]
             for fn in (f("cudnn_ffi"), jax.grad(lambda x, w: jnp.sum(f("cudnn_ffi")(x, w))))
             for e in binds(trace(fn, x, w), "portable_rnn_cudnn_rnn_fwd")]
    print(f"{shape}: inference, training: {algos}")
    close(jax.jit(f("cudnn_ffi"))(x, w), jax.jit(f("scan"))(x.astype(jnp.float32), w), 2e-2)
    g = lambda impl: jax.jit(jax.grad(lambda x, w: jnp.sum(f(impl)(x, w).astype(jnp.float32)),
                                      (0, 1)))
    close(g("cudnn_ffi")(x, w), g("scan")(x.astype(jnp.float32), w), 1e-1)


@pytest.mark.parametrize("kind", ["gru", "rnn_tanh", "rnn_relu", "lstm_proj"])
def test_gru_rnn_and_projection_match_scan(kind):
    P = 8 if kind == "lstm_proj" else 0
    x, states, w = family_helpers.make_inputs(kind, B, T, I, H, P, L, True, 5)
    f = lambda impl: lambda x, s, w: family_helpers.call(
        kind, x, s, w, LENGTHS, I, H, P, L, True, precision=HIGHEST, implementation=impl)
    assert FWD in hlo(f("cudnn_ffi"), x, states, w)
    close(jax.jit(f("cudnn_ffi"))(x, states, w), jax.jit(f("scan"))(x, states, w), 2e-5)
    g = lambda impl: jax.jit(jax.grad(lambda *a: sum(jnp.sum(o ** 2) for o in jax.tree.leaves(
        f(impl)(*a))), (0, 1, 2)))
    close(g("cudnn_ffi")(x, states, w), g("scan")(x, states, w), 2e-4)


def test_dropout_runs_one_call_per_layer():
    args = make_inputs(B, T, I, H, 3, True, 6)
    kw = dict(layers=3, dropout=0.3, dropout_rng=jax.random.key(0))
    f = lambda impl: lambda *a: lstm(impl, *a, **kw)
    assert hlo(f("cudnn_ffi"), *args).count(f'custom_call_target="{FWD}"') == 3
    close(jax.jit(f("cudnn_ffi"))(*args), jax.jit(f("scan"))(*args), 2e-5)
    close(grads(f("cudnn_ffi"))(*args), grads(f("scan"))(*args), 2e-4)


def test_vmap_over_an_inner_axis_and_vmap_of_grad():
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 7)
    xs = jnp.stack([x, -x, 0.5 * x], axis=1)
    f = lambda impl: lambda x: jnp.sum(lstm(impl, x, h0, c0, w)[0] ** 2)
    assert FWD in hlo(jax.vmap(jax.grad(f("cudnn_ffi")), in_axes=1), xs)
    got = jax.jit(jax.vmap(jax.grad(f("cudnn_ffi")), in_axes=1, out_axes=1))(xs)
    want = jnp.stack([jax.grad(f("scan"))(xs[:, v]) for v in range(3)], axis=1)
    close(got, want, 2e-4)


def test_a_preference_keeps_the_portable_branch_for_the_cpu():
    args = make_inputs(B, T, I, H, L, True, 8)
    with portable_rnn.policy(lstm="cudnn_ffi"):
        f = lambda *a: lstm(None, *a)
        d = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True, HIGHEST)
        assert {p: v.implementation for p, v in d.platforms.items()} == {
            "cuda": "cudnn_ffi", "cpu": "scan", "default": "scan"}
        assert FWD in hlo(f, *args)
        cpu = jax.devices("cpu")[0]
        with jax.default_device(cpu):
            cpu_args = [jax.device_put(a, cpu) for a in args]
            assert FWD not in jax.jit(f).lower(*cpu_args).as_text()
            got = jax.jit(f)(*cpu_args)
    close(got, jax.jit(lambda *a: lstm("scan", *a))(*args), 2e-5)

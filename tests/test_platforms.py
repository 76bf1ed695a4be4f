"""Routing per lowering platform: a call routed to cuDNN carries a portable branch for the others.

Which platform runs a program is not known while it is traced (a default device, inputs committed
to a CPU, `jax.export` for several platforms). An automatic route to cuDNN therefore emits
`lax.platform_dependent`, and each lowering keeps its own branch. On a CPU machine the test-only
emulation plays both sides: with a CPU lowering of JAX's cuDNN primitives (the cuDNN branch runs
on the CPU), and without one ("a GPU host whose default device is the CPU"). LSTM calls here run
under policy(lstm='cudnn'), as a user who asks for cuDNN does: the automatic choice alone takes the
scan path on a GPU (measured faster), which needs no per-platform branches.
"""

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.experimental import rnn as jrnn

import portable_rnn
import portable_rnn.linen
from cudnn_emulation import emulated_cudnn, emulated_cudnn_attention
from jaxpr_helpers import primitive_names, trace
from lstm_helpers import make_inputs

pytestmark = pytest.mark.cpu  # the cuDNN emulation lowers for the CPU only

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
CPU = portable_rnn.Capabilities("cpu")
B, T, I, H, L = 3, 6, 4, 5, 2
LENGTHS = jnp.array([6, 2, 4])


@pytest.fixture(autouse=True)
def _prefer_cudnn():
    with portable_rnn.policy(lstm="cudnn"):
        yield


def primitives(f, *args) -> set[str]:
    """Names of every primitive in `f`'s jaxpr, sub-jaxprs (cond branches, scans, ...) included."""
    return set(primitive_names(trace(f, *args)))


def lstm(caps, impl=None):
    return lambda x, h0, c0, w: portable_rnn.lstm(x, h0, c0, w, LENGTHS, I, H, L, 0.0, True,
                                                  implementation=impl, capabilities=caps)


def attention(caps, impl=None):
    return lambda q, k, v: portable_rnn.dot_product_attention(
        q, k, v, is_causal=True, implementation=impl, capabilities=caps)


def attention_inputs(T=16, dtype=jnp.bfloat16):
    ks = jax.random.split(jax.random.key(0), 3)
    return tuple(jax.random.normal(k, (2, T, 4, 16), dtype) for k in ks)


def close(a, b, tol=2e-6):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(u, np.float32), np.asarray(v, np.float32),
                                   atol=tol, rtol=tol)


def test_one_platform_machine_emits_one_path():
    """Nothing per platform where cuDNN is not chosen: no platform_dependent, no extra trace."""
    args = make_inputs(B, T, I, H, L, True, 0)
    d = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True, capabilities=CPU)
    assert d.implementation == "scan" and not d.platforms
    prims = primitives(lstm(CPU), *args)
    assert "platform_index" not in prims and "cond" not in prims
    assert "platform_index" not in primitives(attention(CPU), *attention_inputs())


def test_pretend_gpu_without_cuda_plugin_is_portable_everywhere():
    """Explaining a GPU from a CPU-only jaxlib: cuDNN there, but this program cannot hold it."""
    args = make_inputs(B, T, I, H, L, True, 1)
    d = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True, capabilities=GPU)
    assert d.implementation == "cudnn"
    assert {p: x.implementation for p, x in d.platforms.items()} == {
        "cuda": "scan", "cpu": "scan", "default": "scan"}
    assert d.platforms["cuda"].rejected["cudnn"] == (
        "this jaxlib has no CUDA plugin, so a program traced here cannot hold the cuDNN call",)
    text = str(d)
    assert "per platform" in text and "cuda: scan (this jaxlib has no CUDA plugin" in text
    prims = primitives(lstm(GPU), *args)
    assert "rnn_fwd" not in prims
    # one scan path everywhere, unless the platforms run it differently (a CPU's input
    # projection inside the loop, where the routing model ranks it faster)
    assert ("platform_index" in prims) == (d.platforms["cpu"].notes != d.platforms["cuda"].notes)
    close(lstm(GPU)(*args), lstm(CPU)(*args))
    with pytest.raises(ValueError, match="implementation='cudnn' cannot be traced here: this "
                                         "jaxlib has no CUDA plugin"):
        lstm(GPU, "cudnn")(*args)


def test_emulated_gpu_carries_both_branches_and_the_cpu_runs_cudnn():
    args = make_inputs(B, T, I, H, L, True, 2)
    with emulated_cudnn():
        d = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True, capabilities=GPU)
        assert {p: x.implementation for p, x in d.platforms.items()} == {
            "cuda": "cudnn", "cpu": "cudnn", "default": "scan"}
        prims = primitives(jax.grad(lambda *a: jnp.sum(lstm(GPU)(*a)[0])), *args)
        assert {"platform_index", "rnn_fwd", "rnn_bwd", "scan"} <= prims  # scan: the default
        hlo = jax.jit(lstm(GPU)).lower(*args).as_text(debug_info=True)
        got = jax.jit(lstm(GPU))(*args)
    # the CPU lowering kept the (emulated) cuDNN branch alone
    assert "portable_rnn.lstm.cudnn" in hlo and "portable_rnn.lstm.scan" not in hlo
    close(got, lstm(CPU, "scan")(*args), tol=2e-3)  # the emulated cuDNN rounds to TF32


def test_gpu_host_with_cpu_default_device_runs_the_portable_branch_on_cpu():
    """The cuDNN branch has no CPU lowering: routing by the default backend would fail here."""
    args = make_inputs(B, T, I, H, L, True, 3)
    q, k, v = attention_inputs()
    cpu = jax.devices("cpu")[0]
    with emulated_cudnn(cpu_lowering=False), emulated_cudnn_attention(cpu_lowering=False):
        stock = jax.jit(lambda *a: jrnn.lstm(
            *a, LENGTHS.astype(jnp.int32), I, H, L, 0.0, True))
        with pytest.raises(NotImplementedError, match="rnn_fwd"):
            stock.lower(*args)  # what the default-backend choice would hand the CPU
        d = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True, capabilities=GPU)
        assert {p: x.implementation for p, x in d.platforms.items()} == {
            "cuda": "cudnn", "cpu": "scan", "default": "scan"}
        assert "rnn_fwd" in primitives(lstm(GPU), *args)  # the cuda branch holds cuDNN
        with jax.default_device(cpu):
            got = jax.jit(lstm(GPU))(*args)
            g = jax.jit(jax.grad(lambda *a: jnp.sum(lstm(GPU)(*a)[0] ** 2), (0, 3)))(*args)
            a = portable_rnn.explain_attention(q, k, v, is_causal=True, capabilities=GPU)
            assert {p: x.implementation for p, x in a.platforms.items()} == {
                "cuda": "cudnn", "cpu": "xla", "default": "xla"}
            assert any("dot_product_attention" in p for p in primitives(attention(GPU), q, k, v))
            out = jax.jit(attention(GPU))(q, k, v)
    close(got, lstm(CPU, "scan")(*args))
    close(g, jax.grad(lambda *a: jnp.sum(lstm(CPU, "scan")(*a)[0] ** 2), (0, 3))(*args),
          tol=1e-5)
    close(out, attention(CPU, "xla")(q, k, v), tol=1e-2)


def _exported(f, *args):
    """`f` exported for CPU and CUDA, serialized, deserialized and called here."""
    exp = export.export(jax.jit(f), platforms=("cpu", "cuda"))(*args)
    assert exp.platforms == ("cpu", "cuda")
    return export.deserialize(exp.serialize()).call(*args)


@pytest.mark.parametrize("caps", [None, GPU], ids=["probed", "pretend-gpu"])
def test_export_for_cpu_and_cuda_runs_here(caps):
    args = make_inputs(B, T, I, H, L, True, 4)
    q, k, v = attention_inputs(T=32)
    with portable_rnn.policy(capabilities=caps or portable_rnn.capabilities()):
        close(_exported(lstm(None), *args), lstm(None)(*args))
        close(_exported(attention(None), q, k, v), attention(None)(q, k, v))


def test_export_flax_layers_for_cpu_and_cuda():
    x = jax.random.normal(jax.random.key(5), (2, 7, 6))
    layer = portable_rnn.linen.LSTM(8, num_layers=2, bidirectional=True)
    params = layer.init(jax.random.key(6), x)
    f = lambda x: layer.apply(params, x, seq_lengths=jnp.array([7, 3]))
    close(_exported(f, x), f(x))

    mha = fnn.MultiHeadDotProductAttention(num_heads=4, qkv_features=32,
                                           attention_fn=portable_rnn.linen.attention_fn)
    tokens = jax.random.normal(jax.random.key(7), (2, 10, 32))
    mask = fnn.make_causal_mask(jnp.ones((2, 10)))
    mparams = mha.init(jax.random.key(8), tokens, mask=mask)
    g = lambda t: mha.apply(mparams, t, mask=mask)
    close(_exported(g, tokens), g(tokens), tol=1e-5)

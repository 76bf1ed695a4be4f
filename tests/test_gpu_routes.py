"""The cuDNN routes where real hardware fails late, against the strict CPU emulation of cuDNN.

Each case is one that an automatic route used to hand to cuDNN, which then failed after routing
(at trace, compile or run time), where nothing can fall back: odd sequence lengths in attention
gradients, LSTM sequences of length 0, a cuDNN attention that does not compile on this machine,
second-order derivatives, and broadcast masks. The emulation raises where cuDNN and JAX raise.
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn
from cudnn_emulation import emulated_cudnn, emulated_cudnn_attention
from lstm_helpers import make_inputs
from portable_rnn._src.attention.routes import cudnn as _cudnn_attention

pytestmark = pytest.mark.cpu  # the cuDNN emulation lowers for the CPU only

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
BF = jnp.bfloat16


def close(a, b, tol):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        u, v = np.asarray(u, np.float32), np.asarray(v, np.float32)
        assert u.shape == v.shape
        np.testing.assert_allclose(u, v, atol=tol * (1 + np.abs(v).max()), rtol=tol)


# --- attention ------------------------------------------------------------------------------

def attn_inputs(T, S, N=4, H=16, seed=0):
    ks = jax.random.split(jax.random.key(seed), 3)
    return (draws.normal(ks[0], (2, T, N, H), BF),
            draws.normal(ks[1], (2, S, N, H), BF),
            draws.normal(ks[2], (2, S, N, H), BF))


def attn_loss(impl, **kw):
    def f(q, k, v, *bias):
        out = portable_rnn.dot_product_attention(q, k, v, *bias, implementation=impl,
                                                 capabilities=GPU, **kw)
        return jnp.sum(out.astype(jnp.float32) ** 2)
    return f


@pytest.fixture
def attention_emulation():
    with emulated_cudnn_attention():
        yield


@pytest.mark.parametrize("T, S, bias", [(77, 77, False), (8, 7, False), (9, 8, True)])
def test_odd_lengths_keep_the_cudnn_forward_and_take_a_portable_gradient(
        attention_emulation, T, S, bias):
    """JAX's cuDNN training forward always passes a bias, so its backward refuses odd T or S."""
    q, k, v = attn_inputs(T, S)
    extra = (draws.normal(jax.random.key(1), (1, 4, T, S), BF),) if bias else ()
    stock = lambda q, k, v: jnp.sum(jax.nn.dot_product_attention(
        q, k, v, implementation="cudnn").astype(jnp.float32))
    with pytest.raises(NotImplementedError, match="Unsupported sequence length"):
        jax.grad(stock)(q, k, v)  # what the route used to run
    d = portable_rnn.explain_attention(q, k, v, *extra, capabilities=GPU)
    assert d.implementation == "cudnn"
    assert any(n.startswith("forward on cuDNN; gradients on the xla path: odd T=") for n in d.notes)
    argnums = tuple(range(3 + len(extra)))
    got = jax.jit(jax.value_and_grad(attn_loss(None), argnums))(q, k, v, *extra)
    want = jax.value_and_grad(attn_loss("xla"), argnums)(q, k, v, *extra)
    close(got, want, 2e-2)
    # the forward alone still runs on cuDNN (the emulated kernel's primitive is in the program)
    jaxpr = str(jax.make_jaxpr(attn_loss(None))(q, k, v, *extra))
    assert "dot_product_attention_fwd" in jaxpr


def test_odd_lengths_under_vmap_of_grad(attention_emulation):
    q, k, v = attn_inputs(7, 7)
    qs = jnp.stack([q, -q, 0.5 * q], axis=2)  # vmapped over a heads-like axis
    f = lambda impl: jax.vmap(jax.grad(attn_loss(impl, is_causal=True), (0, 1)),
                              in_axes=(2, None, None))
    close(jax.jit(f(None))(qs, k, v), f("xla")(qs, k, v), 2e-2)


@pytest.mark.parametrize("shape", [(1, 1, 1, 8), (2, 1, 1, 8), (2, 1, 8, 1)])
def test_broadcast_mask_and_bias_stay_on_cudnn(attention_emulation, shape):
    """A (1, S) padding mask or bias is broadcast to (T, S) for cuDNN, gradients summed back."""
    q, k, v = attn_inputs(8, 8)
    mask = jnp.arange(np.prod(shape)).reshape(shape) % 3 != 1
    bias = draws.normal(jax.random.key(2), shape, BF)
    d = portable_rnn.explain_attention(q, k, v, bias, mask, capabilities=GPU)
    assert d.implementation == "cudnn" and not d.rejected
    loss = lambda impl: lambda q, b: attn_loss(impl, mask=mask)(q, k, v, b)
    (value, (dq, dbias)) = jax.jit(jax.value_and_grad(loss(None), (0, 1)))(q, bias)
    (value_ref, (dq_ref, dbias_ref)) = jax.value_and_grad(loss("xla"), (0, 1))(q, bias)
    close((value, dq), (value_ref, dq_ref), 2e-2)
    assert dbias.shape == shape
    # cuDNN returns the (T, S) bias gradient in bfloat16; summing it back to `shape` adds up to
    # T*S/size terms, each rounded to 2^-8 of the largest.
    full = jax.grad(loss("xla"), 1)(q, jnp.broadcast_to(bias, (2, 1, 8, 8)))
    terms = 64 * 2 // int(np.prod(shape))
    atol = 2.0 ** -8 * terms * float(jnp.abs(full.astype(jnp.float32)).max())
    np.testing.assert_allclose(np.asarray(dbias, np.float32), np.asarray(dbias_ref, np.float32),
                               atol=atol, rtol=2e-2)


@pytest.mark.parametrize("second", ["hessian", "grad_of_grad", "jvp_of_grad"])
def test_second_order_derivatives_say_what_to_do(attention_emulation, second):
    q, k, v = attn_inputs(8, 8, N=1, H=8)
    f = lambda impl: lambda q: attn_loss(impl)(q, k, v)
    apply = {
        "hessian": lambda f: jax.hessian(f)(q),
        "grad_of_grad": lambda f: jax.grad(lambda q: jnp.sum(jax.grad(f)(q).astype(
            jnp.float32)))(q),
        "jvp_of_grad": lambda f: jax.jvp(jax.grad(f), (q,), (jnp.ones_like(q),)),
    }[second]
    with pytest.raises(NotImplementedError, match=r"second-order derivatives .* through cuDNN "
                       r"attention are not supported.*implementation='xla' or 'chunked'"):
        apply(f(None))
    out = apply(f("xla"))  # the portable paths have them
    assert all(np.isfinite(np.asarray(a, np.float32)).all() for a in jax.tree.leaves(out))


def _model_choice(d) -> bool:
    """Whether cuDNN served decision `d` (the routing model ranks only the routes that serve a
    call: the machine's grid, the NVIDIA H200's) and the route taken is the one it predicts
    fastest."""
    return ("cudnn" in d.predicted
            and d.implementation == min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"]))


def test_probe_rejects_a_cudnn_attention_that_fails_to_compile():
    """Some CUDA/cuDNN pairs (CUDA 13) fail only when the kernel compiles: probed once."""
    q, k, v = attn_inputs(8, 8)
    cpu = jax.devices("cpu")[0]
    probed = portable_rnn.Capabilities("gpu", 91000, (9, 0), "NVIDIA H200", cuda_version=13000,
                                       probe_device=cpu)
    _cudnn_attention.probe.cache_clear()
    try:
        with emulated_cudnn_attention(fail_compile="cuDNN creates no execution plans"):
            d = portable_rnn.explain_attention(q, k, v, capabilities=probed)
            assert d.implementation == "xla"
            (reason,) = d.rejected["cudnn"]
            assert reason.startswith("a one-time check compiling and running cuDNN attention on "
                                     "this machine failed (on CUDA 13")
            assert "cuDNN creates no execution plans" in reason
            out = portable_rnn.dot_product_attention(q, k, v, capabilities=probed)
            hand_made = portable_rnn.Capabilities("gpu", 91000, (9, 0), "NVIDIA H200",
                                                  cuda_version=13000)
            # a pretend GPU is not probed: cuDNN serves it, and the H200's routing model ranks
            assert _model_choice(portable_rnn.explain_attention(q, k, v, capabilities=hand_made))
        close(out, portable_rnn.dot_product_attention(q, k, v, implementation="xla"), 1e-2)
        assert _cudnn_attention.probe.cache_info().misses == 1  # once per process and device
        _cudnn_attention.probe.cache_clear()
        with emulated_cudnn_attention():
            assert _model_choice(portable_rnn.explain_attention(q, k, v, capabilities=probed))
    finally:
        _cudnn_attention.probe.cache_clear()


def test_probed_capabilities_carry_cuda_version_and_device():
    caps = portable_rnn.capabilities()
    assert caps.probe_device is None or caps.is_cuda_gpu
    gpu = portable_rnn.Capabilities("gpu", 91000, (9, 0), "NVIDIA H200", cuda_version=13000)
    assert str(gpu) == "gpu, NVIDIA H200, sm90, CUDA 13.0, cuDNN 9.10.0"


# --- LSTM -----------------------------------------------------------------------------------

B, T, I, H, L = 3, 5, 4, 3, 2


def lstm(impl, seq, **kw):
    return lambda x, h0, c0, w: portable_rnn.lstm(
        x, h0, c0, w, seq, I, H, L, kw.get("dropout", 0.0), True, implementation=impl,
        capabilities=GPU, dropout_rng=kw.get("dropout_rng"))


def lstm_loss(impl, seq, **kw):
    def f(x, h0, c0, w):
        y, h, c = lstm(impl, seq, **kw)(x, h0, c0, w)
        return jnp.sum(y ** 2) + jnp.sum(h * 0.7) + jnp.sum(c ** 3)
    return f


@pytest.mark.parametrize("lengths, dropout", [([0, 0, 0], 0.0), ([5, 0, 2], 0.3)])
def test_length_zero_never_reaches_cudnn(lengths, dropout):
    """cuDNN fails at run time on length 0 (forward: all 0; backward: any 0)."""
    args = make_inputs(B, T, I, H, L, True, 7)
    x, h0, c0, w = args
    seq = jnp.array(lengths)
    kw = dict(dropout=dropout, dropout_rng=jax.random.key(3) if dropout else None)
    with emulated_cudnn():
        stock = jax.jit(lambda *a: jax.experimental.rnn.lstm(*a, seq.astype(jnp.int32), I, H, L,
                                                             0.0, True))
        with pytest.raises(Exception, match="CUDNN_STATUS_EXECUTION_FAILED"):
            jax.block_until_ready(jax.grad(lambda *a: jnp.sum(stock(*a)[0]), (0, 3))(*args))
        y, h, c = jax.jit(lstm("cudnn", seq, **kw))(*args)
        g = jax.jit(jax.grad(lstm_loss("cudnn", seq, **kw), (0, 1, 2, 3)))(*args)
    empty = np.asarray(seq) == 0
    np.testing.assert_array_equal(np.asarray(h)[:, empty], np.asarray(h0)[:, empty])
    np.testing.assert_array_equal(np.asarray(c)[:, empty], np.asarray(c0)[:, empty])
    assert not np.asarray(y)[empty].any()
    assert not np.asarray(g[0])[empty].any()  # no gradient into the steps of an empty sequence
    close((y, h, c), lstm("scan", seq, **kw)(*args), 2e-3)  # TF32 on the emulated cuDNN
    close(g, jax.grad(lstm_loss("scan", seq, **kw), (0, 1, 2, 3))(*args), 2e-3)

"""The cuDNN route end to end on a CPU, through the test-only emulation of JAX's cuDNN primitives.

portable_rnn routes to `jax.experimental.rnn`'s cuDNN functions; the emulation computes them with
`lstm_ref`. Everything portable_rnn adds (length-0 patch, int casts, per-layer dropout, upcasts,
folding vmap axes into the batch, the scan VJP as the backward under vmap) is checked against the
scan path, which shares no code with the emulation.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import rnn as jrnn

import portable_rnn
from cudnn_emulation import emulated_cudnn
from jaxpr_helpers import binds, binds_any, trace
from lstm_helpers import make_inputs
from portable_rnn._src.recurrent.routes import cudnn as _cudnn_lstm

pytestmark = pytest.mark.cpu  # the cuDNN emulation lowers for the CPU only

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
B, T, I, H, L = 3, 5, 4, 3, 2
LENGTHS = jnp.array([5, 2, 0])
HIGHEST = jax.lax.Precision.HIGHEST  # no TF32: the emulation rounds TF32 operands as cuDNN does


@pytest.fixture(autouse=True)
def _emulation():
    with emulated_cudnn():
        yield


def call(impl, x, h0, c0, w, seq=LENGTHS, bidir=True, layers=L, **kw):
    """`impl` None: the routed cuDNN path (automatic, with cuDNN preferred by the policy: the
    automatic choice alone takes the scan path, see test_automatic_route_takes_the_scan_path)."""
    with portable_rnn.policy(lstm="cudnn"):
        return portable_rnn.lstm(x, h0, c0, w, seq, I, H, layers, kw.pop("dropout", 0.0), bidir,
                                 kw.pop("precision", HIGHEST), implementation=impl,
                                 capabilities=GPU, **kw)


def assert_close(a, b, tol=2e-6):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert u.shape == v.shape and u.dtype == v.dtype
        np.testing.assert_allclose(np.asarray(u, np.float32), np.asarray(v, np.float32),
                                   atol=tol, rtol=tol)


def loss(impl, **kw):
    def f(x, h0, c0, w):
        y, h, c = call(impl, x, h0, c0, w, **kw)
        return jnp.sum(y ** 2) + jnp.sum(h * 0.7) + jnp.sum(c ** 3)
    return f


def test_automatic_route_takes_the_scan_path():
    """cuDNN could serve the call, but the automatic choice passes over it (on a GPU without a
    grid, the stated rule takes the scan path); preferring cuDNN binds its primitive."""
    args = make_inputs(B, T, I, H, L, True, 0)
    auto = lambda *a: portable_rnn.lstm(*a, LENGTHS, I, H, L, 0.0, True, HIGHEST,
                                        capabilities=GPU)
    assert not binds_any(trace(auto, *args), "rnn_fwd")
    d = portable_rnn.explain_lstm(*args, LENGTHS, I, H, L, 0.0, True, HIGHEST, capabilities=GPU)
    assert d.implementation == "scan"
    assert "measured faster" in d.rejected["cudnn"][0]
    assert "policy(lstm='cudnn')" in d.rejected["cudnn"][0]
    assert binds_any(trace(lambda *a: call(None, *a), *args), "rnn_fwd")
    assert not binds_any(trace(lambda *a: call("scan", *a), *args), "rnn_fwd")


def test_vmapped_backward_runs_the_scan_vjp_not_cudnn():
    """Per-instance gradients under vmap come from the scan path's VJP: no cuDNN backward is
    bound (on a GPU, XLA returns a zero weight gradient from per-instance cuDNN backward calls),
    while the forward stays one folded cuDNN call; outside vmap the backward is cuDNN's."""
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 12)
    xs = jnp.stack([x, -x, 0.5 * x])
    f = lambda x, w: jnp.sum(call(None, x, h0, c0, w)[0] ** 2)
    fs = lambda x, w: jnp.sum(call("scan", x, h0, c0, w)[0] ** 2)
    per_instance = jax.vmap(jax.grad(f, (0, 1)), in_axes=(0, None))
    summed = jax.grad(lambda xs, w: jnp.sum(jax.vmap(f, in_axes=(0, None))(xs, w)), (0, 1))
    for g in (per_instance, summed):
        jaxpr = trace(g, xs, w)
        assert binds_any(jaxpr, "rnn_fwd") and not binds_any(jaxpr, "rnn_bwd")
    assert binds_any(trace(jax.grad(f, (0, 1)), x, w), "rnn_bwd")
    assert_close(jax.jit(per_instance)(xs, w),
                 jax.vmap(jax.grad(fs, (0, 1)), in_axes=(0, None))(xs, w), tol=1e-5)
    assert_close(jax.jit(summed)(xs, w), jax.grad(
        lambda xs, w: jnp.sum(jax.vmap(fs, in_axes=(0, None))(xs, w)), (0, 1))(xs, w), tol=1e-5)


@pytest.mark.parametrize("bidir", [False, True])
def test_outputs_and_gradients_match_scan(bidir):
    args = make_inputs(B, T, I, H, L, bidir, 1)
    assert_close(call("cudnn", *args, bidir=bidir), call("scan", *args, bidir=bidir))
    g = [jax.grad(loss(i, bidir=bidir), (0, 1, 2, 3))(*args) for i in ("cudnn", "scan")]
    assert_close(*g, tol=1e-5)


def test_length_zero_gets_initial_state_although_the_primitive_does_not():
    """lstm_ref (like cuDNN may) returns the last step's carry for length 0; we patch it."""
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 2)
    y, h, c = call("cudnn", x, h0, c0, w)
    np.testing.assert_array_equal(np.asarray(h[:, 2]), np.asarray(h0[:, 2]))
    np.testing.assert_array_equal(np.asarray(c[:, 2]), np.asarray(c0[:, 2]))
    np.testing.assert_array_equal(np.asarray(y[2]), 0)
    raw = jrnn.lstm(x, h0, c0, w, LENGTHS.astype(jnp.int32), I, H, L, 0.0, True)
    assert not np.allclose(np.asarray(raw[1][:, 2]), np.asarray(h0[:, 2]))


@pytest.mark.parametrize("dtype", ["int64", "uint8", None])
def test_any_integer_lengths(dtype):
    args = make_inputs(B, T, I, H, L, True, 3)
    with jax.enable_x64(True):
        seq = None if dtype is None else np.asarray(LENGTHS, dtype)
        assert_close(call("cudnn", *args, seq=seq), call("scan", *args, seq=seq))


def test_dropout_per_layer_calls_equal_scan_with_the_same_key():
    args = make_inputs(B, T, I, H, 3, True, 4)
    kw = dict(layers=3, dropout=0.4, dropout_rng=jax.random.key(7))
    assert_close(call("cudnn", *args, **kw), call("scan", *args, **kw))
    g = [jax.grad(loss(i, **kw), (0, 3))(*args) for i in ("cudnn", "scan")]
    assert_close(*g, tol=1e-5)
    layers = [eqn.params["num_layers"]
              for eqn in binds(trace(lambda *a: call("cudnn", *a, **kw), *args), "rnn_fwd")]
    assert len(layers) >= 3 and set(layers) == {1}  # one single-layer call per layer


def test_upcast_policy_runs_low_precision_on_cudnn():
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 5)
    bf = lambda a: a.astype(jnp.bfloat16)
    with portable_rnn.policy(lstm_low_precision="upcast"):
        y, h, c = call(None, bf(x), bf(h0), c0, bf(w))
        jaxpr = trace(lambda *a: call(None, *a), bf(x), bf(h0), c0, bf(w))
    assert binds_any(jaxpr, "rnn_fwd")
    assert (y.dtype, h.dtype, c.dtype) == (jnp.bfloat16, jnp.bfloat16, jnp.float32)
    # cuDNN computes in float32 on the bfloat16 values and rounds once: the float32 result
    # rounded, but for a last-place flip (2**-8: one bfloat16 ulp at |y| in [0.5, 1))
    ref = call("scan", *(a.astype(jnp.float32) for a in (bf(x), bf(h0), c0, bf(w))))
    assert_close((y, h, c), tuple(r.astype(a.dtype) for r, a in zip(ref, (y, h, c))),
                 tol=2**-8)


@pytest.mark.parametrize("arg, axis", [(0, 0), (0, 1),
                                       *(pytest.param(a, ax, marks=pytest.mark.slow)
                                         for a, ax in [(1, 1), (2, 0), (3, 1), (4, 0)])],
                         ids=["x-0", "x-1", "h_0-1", "c_0-0", "weights-1", "seq_lengths-0"])
def test_vmap_any_axis_forward_and_gradients(arg, axis):
    """vmap over an axis of one argument, forward, vmap(grad) and grad(vmap), equal to a loop:
    each argument batched, on a leading and on an inner axis."""
    V, layers = 2, 1  # one layer: the folding does not depend on depth, compile time does
    base = list(make_inputs(B, T, I, H, layers, True, 6)) + [LENGTHS]
    slices = [list(make_inputs(B, T, I, H, layers, True, 20 + v))
              + [jnp.array([[4, 1, 5], [0, 3, 2]][v])] for v in range(V)]
    stacked = list(base)
    stacked[arg] = jnp.stack([s[arg] for s in slices], axis=axis)
    in_axes = [None] * 5
    in_axes[arg] = axis

    def f(impl):
        return lambda x, h0, c0, w, seq: loss(impl, seq=seq, layers=layers)(x, h0, c0, w)

    per_slice = []
    for v in range(V):
        one = list(base)
        one[arg] = slices[v][arg]
        per_slice.append(one)
    # forward
    got = jax.vmap(lambda *a: call(None, *a[:4], seq=a[4], layers=layers), in_axes=in_axes)(
        *stacked)
    want = [call("scan", *p[:4], seq=p[4], layers=layers) for p in per_slice]
    assert_close(got, jax.tree.map(lambda *a: jnp.stack(a), *want))
    # vmap(grad): per-instance gradients, for shared weights too
    g = jax.vmap(jax.grad(f(None), (0, 1, 2, 3)), in_axes=in_axes)(*stacked)
    want = [jax.grad(f("scan"), (0, 1, 2, 3))(*p) for p in per_slice]
    assert_close(g, jax.tree.map(lambda *a: jnp.stack(a), *want), tol=1e-5)
    # grad(vmap): shared arguments get the sum
    total = lambda impl: lambda *a: jnp.sum(jax.vmap(f(impl), in_axes=in_axes)(*a))
    assert_close(jax.grad(total(None), (0, 1, 2, 3))(*stacked),
                 jax.grad(total("scan"), (0, 1, 2, 3))(*stacked), tol=1e-5)


def test_vmap_folds_into_one_call_and_nests():
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 8)
    xs = jnp.stack([jnp.stack([x, -x, 2 * x]), jnp.stack([x * 0.5, x, -x])])  # (2, 3, B, T, I)
    f = lambda x: call(None, x, h0, c0, w)[0]
    calls = binds(trace(jax.vmap(jax.vmap(f)), xs), "rnn_fwd")
    # both vmap levels folded into the batch: one call on (2 * 3 * B, T, I)
    assert [eqn.invars[0].aval.shape for eqn in calls] == [(2 * 3 * B, T, I)]
    got = jax.jit(jax.vmap(jax.vmap(f)))(xs)
    want = jnp.stack([jnp.stack([call("scan", xs[i, j], h0, c0, w)[0] for j in range(3)])
                      for i in range(2)])
    assert_close(got, want)
    g = jax.jit(jax.vmap(jax.vmap(jax.grad(lambda x: jnp.sum(f(x) ** 2)))))(xs)
    gs = jax.grad(lambda x: jnp.sum(call("scan", x, h0, c0, w)[0] ** 2))
    assert_close(g, jnp.stack([jnp.stack([gs(xs[i, j]) for j in range(3)]) for i in range(2)]),
                 tol=1e-5)


def test_vmap_with_weights_and_inputs_batched_on_different_levels():
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 9)
    ws = jnp.stack([w, w * 0.5])
    xs = jnp.stack([x, -x, 0.3 * x])
    f = lambda x, w: jnp.sum(call(None, x, h0, c0, w)[0] ** 2)
    fs = lambda x, w: jnp.sum(call("scan", x, h0, c0, w)[0] ** 2)
    got = jax.vmap(jax.vmap(jax.grad(f, (0, 1)), in_axes=(0, None)), in_axes=(None, 0))(xs, ws)
    want = jax.vmap(jax.vmap(jax.grad(fs, (0, 1)), in_axes=(0, None)), in_axes=(None, 0))(xs, ws)
    assert_close(got, want, tol=1e-5)


def test_weights_per_instance_run_the_scan_path_not_cudnn_per_instance():
    """vmap over the weights: no cuDNN call per instance (`lax.map` of cuDNN calls is what
    XLA:GPU miscompiled in the backward, and is unproven in the forward: see tests/test_gpu.py).
    The scan path serves the whole call, forward and backward, and every cuDNN decision says
    so; weights shared by the instances keep the one folded cuDNN call."""
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 12)
    ws = jnp.stack([w, w * 0.5, -w])
    f = lambda w: call(None, x, h0, c0, w)
    per_instance = trace(jax.vmap(jax.grad(lambda w: jnp.sum(f(w)[0] ** 2))), ws)
    assert not binds_any(per_instance, "rnn_fwd") and not binds_any(per_instance, "rnn_bwd")
    shared = trace(jax.vmap(lambda x: call(None, x, h0, c0, w)), jnp.stack([x, -x]))
    assert len(binds(shared, "rnn_fwd")) == 1
    assert_close(jax.jit(jax.vmap(f))(ws), jax.tree.map(
        lambda *a: jnp.stack(a), *[call("scan", x, h0, c0, wi) for wi in ws]))
    with portable_rnn.policy(lstm="cudnn"):
        d = portable_rnn.explain_lstm(x, h0, c0, w, LENGTHS, I, H, L, 0.0, True,
                                      capabilities=GPU)
    assert d.implementation == "cudnn" and _cudnn_lstm.PER_INSTANCE_WEIGHTS in d.notes


def test_stock_jax_lstm_cannot_vmap():
    """The problem the wrapper solves: jax.experimental.rnn.lstm has no batching rule."""
    x, h0, c0, w = make_inputs(B, T, I, H, 1, False, 10)
    f = lambda x: jrnn.lstm(x, h0, c0, w, jnp.full((B,), T, jnp.int32), I, H, 1, 0.0, False)
    with pytest.raises(NotImplementedError, match="rnn_fwd"):
        jax.vmap(f)(jnp.stack([x, x]))


def test_jit_and_checkpoint_compose():
    args = make_inputs(B, T, I, H, L, True, 11)
    g1 = jax.jit(jax.grad(jax.checkpoint(loss(None)), (0, 3)))(*args)
    g2 = jax.grad(loss("scan"), (0, 3))(*args)
    assert_close(g1, g2, tol=1e-5)

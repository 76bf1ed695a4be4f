"""Sharded calls give the unsharded results and gradients, keep the batch sharding, gather nothing.

On the 8 CPU devices of conftest.py: `jax.jit` over inputs placed with `NamedSharding`, on meshes
of both axis types (`Explicit`, the default of `jax.make_mesh` in JAX 0.10, where shardings are
part of the types and every operation must follow them; `Auto`, where XLA propagates them), and
`jax.shard_map`. The cuDNN routes run through the test-only CPU emulation of JAX's cuDNN
primitives. Each case compiles once: outputs and gradients come from one `jax.value_and_grad`,
and the same compiled program's HLO is checked for all-gathers (weight gradients legitimately
need an all-reduce).
"""

import functools
import math

import draws
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import portable_rnn
from cudnn_emulation import emulated_cudnn, emulated_cudnn_attention, emulated_cudnn_ffi
from jaxpr_helpers import binds_any, trace
from lstm_helpers import make_inputs
from portable_rnn import linen as prnn_linen
from portable_rnn import nnx as prnn_nnx
from portable_rnn._src.attention.routes.chunked import attention_chunked

pytestmark = pytest.mark.cpu  # on the 8 CPU devices of conftest.py

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
EXPLICIT, AUTO = AxisType.Explicit, AxisType.Auto
B, T, I, H = 8, 4, 4, 8
LENGTHS = jnp.array([4, 1, 0, 3, 4, 2, 4, 1], jnp.int32)
ROWS, STATES = P("batch"), P(None, "batch")  # x, y, lengths: batch axis 0; h, c: batch axis 1


def make_mesh(kind=EXPLICIT, shape=(8,), names=("batch",)):
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(shape),
                         devices=jax.devices("cpu")[:math.prod(shape)])


def place(mesh, arrays, specs):
    return [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(arrays, specs)]


def with_grads(f, argnums):
    """``((loss, outputs), grads)`` of a fixed loss of `f`'s outputs, in one function."""
    def loss(*args):
        out = f(*args)
        leaves = [o.astype(jnp.float32) for o in jax.tree.leaves(out)]
        return sum(jnp.sum(o * jnp.cos(o)) for o in leaves), out
    return jax.value_and_grad(loss, argnums, has_aux=True)


def compiled(f, *args):
    """The outputs of `jax.jit(f)` and the HLO of the one program that computed them."""
    program = jax.jit(f).lower(*args).compile()
    return program(*args), program.as_text()


def assert_close(got, want, tol=1e-5):
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * (1 + np.abs(w).max()))


def assert_sharded(a, mesh, spec):
    assert a.sharding.is_equivalent_to(NamedSharding(mesh, spec), a.ndim), (a.sharding, spec)


def assert_no_all_gather(hlo):
    gathers = [line.strip()[:160] for line in hlo.splitlines() if "all-gather" in line]
    assert not gathers, "\n".join(gathers)


# --- LSTM, scan path --------------------------------------------------------------------------

def scan_lstm(x, h0, c0, w, seq):
    return portable_rnn.lstm(x, h0, c0, w, seq, I, H, 1, 0.0, True, implementation="scan")


@functools.cache
def lstm_reference():
    args = make_inputs(B, T, I, H, 1, True, 0) + (LENGTHS,)
    return args, jax.jit(with_grads(scan_lstm, (0, 1, 2, 3)))(*args)


def check_lstm(got, want, mesh, hlo):
    assert_close(got, want)
    (_, (y, h, c)), (dx, dh, dc, dw) = got
    for a, spec in ((y, ROWS), (h, STATES), (c, STATES), (dx, ROWS), (dh, STATES),
                    (dc, STATES), (dw, P())):
        assert_sharded(a, mesh, spec)
    assert_no_all_gather(hlo)


@pytest.mark.parametrize("kind", [EXPLICIT, AUTO])
def test_lstm_scan_jit_batch_sharded(kind):
    """Bidirectional, ragged. Explicit axes: the time-major GEMMs and the weight-gradient
    contractions over the sharded batch must type-check (they used to fail)."""
    mesh = make_mesh(kind)
    args, want = lstm_reference()
    placed = place(mesh, args, (ROWS, STATES, STATES, P(), ROWS))
    got, hlo = compiled(with_grads(scan_lstm, (0, 1, 2, 3)), *placed)
    check_lstm(got, want, mesh, hlo)


def test_lstm_with_heads_jit_batch_sharded():
    """Heads (a block-diagonal ``W_hh``): the per-head weight gradient contracts over the
    sharded batch too, and must type-check on explicit axes (it did not); equal to the
    unsharded run, the gradient replicated as the weights."""
    w = portable_rnn.init_lstm_weight(jax.random.key(3), I, H, 1, True, num_heads=2)
    args = make_inputs(B, T, I, H, 1, True, 0)[:3] + (w, LENGTHS)

    def heads(x, h0, c0, w, seq):
        return portable_rnn.lstm(x, h0, c0, w, seq, I, H, 1, 0.0, True, implementation="scan",
                                 num_heads=2)

    want = jax.jit(with_grads(heads, (0, 1, 2, 3)))(*args)
    for kind in (EXPLICIT, AUTO):
        mesh = make_mesh(kind)
        placed = place(mesh, args, (ROWS, STATES, STATES, P(), ROWS))
        got, hlo = compiled(with_grads(heads, (0, 1, 2, 3)), *placed)
        check_lstm(got, want, mesh, hlo)


def lstm_in_shard_map(f, mesh):
    """Per-shard outputs and gradients; the replicated weights' gradient is the sum over the
    shards (JAX transposes the implicit broadcast of the weights into a psum)."""
    grads = with_grads(f, (0, 1, 2, 3))

    def per_shard(*args):
        (_, out), g = grads(*args)
        return out, g

    return jax.shard_map(per_shard, mesh=mesh, in_specs=(ROWS, STATES, STATES, P(), ROWS),
                         out_specs=((ROWS, STATES, STATES), (ROWS, STATES, STATES, P())))


def test_lstm_scan_shard_map_gradients():
    """Inside shard_map the hand-written VJP must return a weight gradient that varies like the
    weights (it used to fail: "the manual axis types do not match")."""
    mesh = make_mesh(EXPLICIT)
    args, ((_, want_out), want_grads) = lstm_reference()
    placed = place(mesh, args, (ROWS, STATES, STATES, P(), ROWS))
    (out, grads), hlo = compiled(lstm_in_shard_map(scan_lstm, mesh), *placed)
    assert_close((out, grads), (want_out, want_grads))
    assert_sharded(out[0], mesh, ROWS)
    assert_no_all_gather(hlo)


# --- the classic GRU: the autodiff path (no hand-written backward) ----------------------------

def scan_classic_gru(x, h0, w, seq):
    return portable_rnn.classic_gru(x, h0, w, seq, I, H, 1, 0.0, True, implementation="scan")


@functools.cache
def classic_gru_reference():
    x, h0, _, _ = make_inputs(B, T, I, H, 1, True, 0)
    w = portable_rnn.init_classic_gru_weight(jax.random.key(1), I, H, 1, True)
    args = (x, h0, w, LENGTHS)
    return args, jax.jit(with_grads(scan_classic_gru, (0, 1, 2)))(*args)


@pytest.mark.parametrize("kind", [EXPLICIT, AUTO])
def test_classic_gru_jit_batch_sharded(kind):
    """JAX's transpose of the loop (the cell's step, its recurrent products its own) over a
    batch-sharded call: the unsharded results, the batch sharding kept, no all-gather. Under
    the mesh set with `jax.set_mesh` (docs/sharding-export.md): on explicit axes, jax 0.12's
    transpose of the per-step products reads it."""
    mesh = make_mesh(kind)
    args, want = classic_gru_reference()
    placed = place(mesh, args, (ROWS, STATES, P(), ROWS))
    with jax.set_mesh(mesh):
        got, hlo = compiled(with_grads(scan_classic_gru, (0, 1, 2)), *placed)
    assert_close(got, want)
    (_, (y, h)), (dx, dh, dw) = got
    for a, spec in ((y, ROWS), (h, STATES), (dx, ROWS), (dh, STATES), (dw, P())):
        assert_sharded(a, mesh, spec)
    assert_no_all_gather(hlo)


def test_classic_gru_shard_map_gradients():
    mesh = make_mesh(EXPLICIT)
    args, ((_, want_out), want_grads) = classic_gru_reference()
    placed = place(mesh, args, (ROWS, STATES, P(), ROWS))
    grads = with_grads(scan_classic_gru, (0, 1, 2))

    def per_shard(*args):
        (_, out), g = grads(*args)
        return out, g

    f = jax.shard_map(per_shard, mesh=mesh, in_specs=(ROWS, STATES, P(), ROWS),
                      out_specs=((ROWS, STATES), (ROWS, STATES, P())))
    (out, g), hlo = compiled(f, *placed)
    # the replicated weights' gradient: JAX sums it over the shards
    assert_close((out, g), (want_out, want_grads))
    assert_sharded(out[0], mesh, ROWS)
    assert_no_all_gather(hlo)


# --- attention, dense and chunked paths -------------------------------------------------------

N, K, HD = 8, 4, 8  # GQA; heads split 2 or 4 ways on the 2-D meshes
LAYOUTS = {  # mesh shape, axis names, (B, T, N, H) spec of query/key/value, (1, N, T, S) of bias
    "batch": ((8,), ("batch",), P("batch"), P()),
    "batch4_heads2": ((4, 2), ("batch", "heads"), P("batch", None, "heads"), P(None, "heads")),
    "batch2_heads4": ((2, 4), ("batch", "heads"), P("batch", None, "heads"), P(None, "heads")),
}


def attention_inputs(dtype=jnp.float32):
    ks = jax.random.split(jax.random.key(1), 4)
    return (draws.normal(ks[0], (B, T * 2, N, HD), dtype),
            draws.normal(ks[1], (B, T * 2, K, HD), dtype),
            draws.normal(ks[2], (B, T * 2, K, HD), dtype),
            draws.normal(ks[3], (1, N, T * 2, T * 2), dtype),
            jnp.array([8, 3, 0, 1, 8, 5, 2, 7], jnp.int32))


def attention(impl, lengths=True):
    if impl == "chunked_blocks":  # the chunked path with several query and key blocks
        def f(q, k, v, bias, kv_len):
            return attention_chunked(q, k, v, bias, None, None, kv_len, scale=0.3,
                                     is_causal=True, window=None, block_q=4, block_k=4)
        return f
    return lambda q, k, v, bias, kv_len: portable_rnn.dot_product_attention(
        q, k, v, bias, scale=0.3, is_causal=True, key_value_seq_lengths=kv_len if lengths else None,
        implementation=impl, capabilities=GPU if impl == "cudnn" else None)


@functools.cache
def attention_reference(impl, dtype=jnp.float32, lengths=True):
    args = attention_inputs(dtype)
    return args, jax.jit(with_grads(attention(impl, lengths), (0, 1, 2, 3)))(*args)


@pytest.mark.parametrize("impl, layout, kind", [
    ("xla", "batch", EXPLICIT),
    ("xla", "batch2_heads4", AUTO),
    ("chunked", "batch", AUTO),
    ("chunked_blocks", "batch4_heads2", EXPLICIT),
    ("chunked_blocks", "batch2_heads4", AUTO),
])
def test_attention_jit_batch_and_heads_sharded(impl, layout, kind):
    shape, names, qkv, bias_spec = LAYOUTS[layout]
    mesh = make_mesh(kind, shape, names)
    args, want = attention_reference(impl)
    placed = place(mesh, args, (qkv, qkv, qkv, bias_spec, ROWS))
    got, hlo = compiled(with_grads(attention(impl), (0, 1, 2, 3)), *placed)
    assert_close(got, want)
    (_, out), (dq, dk, dv, dbias) = got
    for a, spec in ((out, qkv), (dq, qkv), (dk, qkv), (dv, qkv), (dbias, bias_spec)):
        assert_sharded(a, mesh, spec)
    assert_no_all_gather(hlo)


def attention_in_shard_map(f, mesh, qkv, bias_spec):
    grads = with_grads(f, (0, 1, 2, 3))

    def per_shard(*args):
        (_, out), g = grads(*args)
        return out, g

    return jax.shard_map(per_shard, mesh=mesh, in_specs=(qkv, qkv, qkv, bias_spec, ROWS),
                         out_specs=(qkv, (qkv, qkv, qkv, bias_spec)))


@pytest.mark.parametrize("impl, layout", [("xla", "batch4_heads2"),
                                          ("chunked_blocks", "batch4_heads2")])
def test_attention_shard_map_gradients(impl, layout):
    """Dense (differentiated by JAX) and chunked (hand-written VJP) inside shard_map: the
    chunked loop carries and its batch-broadcast bias gradient must vary like their operands
    (both used to fail type checks)."""
    shape, names, qkv, bias_spec = LAYOUTS[layout]
    mesh = make_mesh(EXPLICIT, shape, names)
    args, ((_, want_out), want_grads) = attention_reference(impl)
    placed = place(mesh, args, (qkv, qkv, qkv, bias_spec, ROWS))
    (out, grads), hlo = compiled(attention_in_shard_map(attention(impl), mesh, qkv, bias_spec),
                                 *placed)
    assert_close((out, grads), (want_out, want_grads))
    assert_sharded(out, mesh, qkv)
    assert_no_all_gather(hlo)


# --- Flax layers ------------------------------------------------------------------------------

def test_linen_lstm_train_step_explicit_mesh():
    """A data-parallel train step: replicated params, batch-sharded inputs. The layer makes its
    zero initial carry replicated; the scan carry must still follow the batch (it did not, and
    every step all-gathered `h`)."""
    layer = prnn_linen.LSTM(H)
    x = draws.normal(jax.random.key(2), (B, T, I))
    params = layer.init(jax.random.key(3), x)

    def step(params, x, seq):
        def loss(params):
            y = layer.apply(params, x, seq)
            return jnp.mean(y ** 2), y
        (value, y), grads = jax.value_and_grad(loss, has_aux=True)(params)
        return value, y, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    want = jax.jit(step)(params, x, LENGTHS)
    mesh = make_mesh(EXPLICIT)
    placed = place(mesh, (params, x, LENGTHS), (P(), ROWS, ROWS))
    got, hlo = compiled(step, *placed)
    assert_close(got, want)
    assert_sharded(got[1], mesh, ROWS)
    for p in jax.tree.leaves(got[2]):
        assert_sharded(p, mesh, P())
    assert_no_all_gather(hlo)


def test_linen_lstm_in_shard_map():
    layer = prnn_linen.LSTM(H)
    x = draws.normal(jax.random.key(4), (B, T, I))
    params = layer.init(jax.random.key(5), x)
    grads = with_grads(lambda p, x, seq: layer.apply(p, x, seq), (0, 1))
    want = jax.jit(grads)(params, x, LENGTHS)
    mesh = make_mesh(AUTO)

    def per_shard(params, x, seq):
        (_, y), g = grads(params, x, seq)
        return y, g

    f = jax.shard_map(per_shard, mesh=mesh, in_specs=(P(), ROWS, ROWS),
                      out_specs=(ROWS, (P(), ROWS)))
    (y, g), _ = compiled(f, *place(mesh, (params, x, LENGTHS), (P(), ROWS, ROWS)))
    assert_close((y, g), (want[0][1], want[1]))
    assert_sharded(y, mesh, ROWS)


def test_nnx_lstm_under_nnx_jit():
    model = prnn_nnx.LSTM(I, H, bidirectional=True, rngs=nnx.Rngs(0))
    x = draws.normal(jax.random.key(6), (B, T, I))
    want = model(x, LENGTHS)
    mesh = make_mesh(EXPLICIT)
    xs, seq = place(mesh, (x, LENGTHS), (ROWS, ROWS))
    y = nnx.jit(lambda model, x, seq: model(x, seq))(model, xs, seq)
    assert_close(y, want)
    assert_sharded(y, mesh, ROWS)


def test_linen_multi_head_attention_with_attention_fn():
    mha = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16,
                                          attention_fn=prnn_linen.attention_fn)
    x = draws.normal(jax.random.key(7), (B, T, 16))
    params = mha.init(jax.random.key(8), x)
    f = with_grads(lambda p, x: mha.apply(p, x), (0, 1))
    want = jax.jit(f)(params, x)
    mesh = make_mesh(EXPLICIT)
    got, hlo = compiled(f, *place(mesh, (params, x), (P(), ROWS)))
    assert_close(got, want)
    assert_sharded(got[0][1], mesh, ROWS)
    assert_no_all_gather(hlo)


def test_nnx_multi_head_attention_with_attention_fn():
    mha = nnx.MultiHeadAttention(num_heads=2, in_features=16, qkv_features=16, decode=False,
                                 attention_fn=prnn_nnx.attention_fn, rngs=nnx.Rngs(0))
    x = draws.normal(jax.random.key(9), (B, T, 16))
    want = mha(x)
    mesh = make_mesh(AUTO)
    y = nnx.jit(lambda m, x: m(x))(mha, jax.device_put(x, NamedSharding(mesh, ROWS)))
    assert_close(y, want)
    assert_sharded(y, mesh, ROWS)


# --- the cuDNN routes, emulated -----------------------------------------------------------------

def routed_lstm(route):
    """The LSTM on cuDNN route `route` (``"cudnn"``, JAX's call, or ``"cudnn_ffi"``,
    portable_rnn's own), preferred by the policy: the automatic choice takes the scan path."""
    def f(x, h0, c0, w, seq):
        with portable_rnn.policy(lstm=route):
            return portable_rnn.lstm(x, h0, c0, w, seq, I, H, 1, 0.0, True,
                                     jax.lax.Precision.HIGHEST,  # no TF32 rounding emulated
                                     capabilities=GPU)
    return f


# Each cuDNN LSTM route: its emulation and the custom call its programs bind.
CUDNN_ROUTES = {"cudnn": (emulated_cudnn, "rnn_fwd"),
                "cudnn_ffi": (emulated_cudnn_ffi, "portable_rnn_cudnn_rnn_fwd")}


@pytest.mark.parametrize("route", CUDNN_ROUTES)
@pytest.mark.parametrize("kind", [EXPLICIT, AUTO])
def test_cudnn_lstm_jit_batch_sharded(kind, route):
    """The cuDNN calls type their output as replicated and XLA cannot partition them; on an
    explicit mesh the wrapper runs one call per batch shard (shard_map), so `y` keeps the batch
    sharding and nothing is gathered. On an auto mesh the custom_vjp and custom_vmap wrappers
    go through XLA's partitioner; the emulation's math is partitionable where the real call is
    not (XLA replicates it: docs/sharding-export.md), so only results and shardings are checked."""
    emulated, call = CUDNN_ROUTES[route]
    mesh = make_mesh(kind)
    args, want = lstm_reference()
    placed = place(mesh, args, (ROWS, STATES, STATES, P(), ROWS))
    with emulated():
        assert binds_any(trace(routed_lstm(route), *placed), call)
        got, hlo = compiled(with_grads(routed_lstm(route), (0, 1, 2, 3)), *placed)
    check_lstm(got, want, mesh, hlo if kind is EXPLICIT else "")


@pytest.mark.parametrize("route", CUDNN_ROUTES)
def test_cudnn_lstm_shard_map_gradients(route):
    """The calls type `y` as equal on every shard inside shard_map; unfixed, autodiff summed
    the output cotangents over the shards before the cuDNN backward (wrong gradients)."""
    emulated, _ = CUDNN_ROUTES[route]
    mesh = make_mesh(EXPLICIT)
    args, ((_, want_out), want_grads) = lstm_reference()
    placed = place(mesh, args, (ROWS, STATES, STATES, P(), ROWS))
    with emulated():
        (out, grads), hlo = compiled(lstm_in_shard_map(routed_lstm(route), mesh), *placed)
    assert_close((out, grads), (want_out, want_grads))
    assert_no_all_gather(hlo)


@pytest.mark.parametrize("layout, kind, lengths, length_spec", [
    ("batch", AUTO, False, ROWS),
    ("batch4_heads2", EXPLICIT, True, P()),
])
def test_cudnn_attention_jit_sharded(layout, kind, lengths, length_spec):
    """JAX's fused attention carries a partitioning rule (batch and heads) that our custom_vjp
    and custom_vmap wrappers keep working. The rule hands each shard the sequence lengths as they
    are sharded, and cuDNN reads the first B/n: on an explicit mesh the wrapper splits them like
    the batch (here they are placed replicated), and synthesises the missing query lengths
    split alike."""
    shape, names, qkv, bias_spec = LAYOUTS[layout]
    mesh = make_mesh(kind, shape, names)
    f = attention("cudnn", lengths)
    with emulated_cudnn_attention():
        args, want = attention_reference("cudnn", jnp.bfloat16, lengths)
        placed = place(mesh, args, (qkv, qkv, qkv, bias_spec, length_spec))
        assert binds_any(trace(f, *placed), "dot_product_attention_fwd_wrapper")
        got, hlo = compiled(with_grads(f, (0, 1, 2, 3)), *placed)
    assert_close(got, want, tol=1e-2)
    (_, out), grads = got
    for a in (out,) + grads[:3]:
        assert_sharded(a, mesh, qkv)
    assert_no_all_gather(hlo)


def test_cudnn_attention_shard_map_gradients():
    shape, names, qkv, bias_spec = LAYOUTS["batch4_heads2"]
    mesh = make_mesh(EXPLICIT, shape, names)
    with emulated_cudnn_attention():
        args, ((_, want_out), want_grads) = attention_reference("cudnn", jnp.bfloat16)
        placed = place(mesh, args, (qkv, qkv, qkv, bias_spec, ROWS))
        (out, grads), _ = compiled(
            attention_in_shard_map(attention("cudnn"), mesh, qkv, bias_spec), *placed)
    assert_close((out, grads), (want_out, want_grads), tol=1e-2)


@pytest.mark.parametrize("layout", ["batch", "batch4_heads2"])
def test_chunked_attention_bias_gradient_with_a_replicated_bias_and_sharded_batch(layout):
    """The bias gradient sums over the sharded batch into an accumulator split like the heads
    of the block gradients (explicit axes; a replicated bias with a full heads axis): it must
    type-check and equal the unsharded gradient."""
    B, T, S, N, K, H = 8, 6, 5, 4, 2, 4
    ks = jax.random.split(jax.random.key(0), 4)
    q = draws.normal(ks[0], (B, T, N, H))
    k, v = (draws.normal(key, (B, S, K, H)) for key in ks[1:3])
    bias = draws.normal(ks[3], (1, N, T, S))  # shared by the batch, not on the mesh
    shape, names, qkv, _ = LAYOUTS[layout]
    mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Explicit,) * len(names),
                         devices=jax.devices("cpu")[:math.prod(shape)])
    put = lambda a: jax.device_put(a, NamedSharding(mesh, qkv))

    def loss(q, k, v, b):
        out = portable_rnn.dot_product_attention(q, k, v, bias=b, is_causal=True,
                                                 implementation="chunked")
        return jnp.sum(out ** 2)
    want = jax.grad(loss, (0, 1, 2, 3))(q, k, v, bias)
    got = jax.jit(jax.grad(loss, (0, 1, 2, 3)))(put(q), put(k), put(v), bias)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=2e-5)

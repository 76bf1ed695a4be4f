"""bfloat16 products on XLA:CPU run in every form the recurrent driver emits.

On CPUs the driver hands XLA bfloat16 operands with float32 accumulation
(`routes.scan.native_products`).
XLA:CPU runs such a dot natively (its YNNPACK fusion) where the left operand's contracting axis
is its last, converts the operands of other dots to float32 itself, and fails at run time on a
dot that a later pass makes out of a transpose of a product ("UNIMPLEMENTED: Unsupported element
type for DotThunk::Execute: BF16 x BF16 = F32"; jaxlib 0.10.2 and 0.12: ``dot(a, b).T``). The
driver fences every product (`scan.Products`). These tests run, forward and gradient, every way
a call can reach those dots: each cell, both projection forms, `vmap` over each argument and
axis, `vmap` of the gradient and the gradient of `vmap`, `shard_map` over the 8 test devices,
recurrent dropout masks, explicit precisions; the results within the bfloat16 bound of the
float32 computation on the same (bfloat16-rounded) values.
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as Ps

import family_helpers as fam
import portable_rnn
from portable_rnn._src.recurrent.driver import Products

pytestmark = pytest.mark.cpu  # about XLA:CPU's products

I, H, P, T, L = 3, 4, 2, 5, 2
BF16_BOUND = dict(atol=1e-2, rtol=2**-7)  # tests/test_equivalence_matrix.py: outputs
# Gradients are sums over steps and sequences (some cancel): their error is bounded relative to
# the largest value of each (the benchmarks' check: 5e-2 there).
GRAD_BOUND = dict(atol=1e-2, scaled=2**-6)


KINDS = ("lstm", "lstm_proj", "gru", "rnn_tanh")  # `family_helpers`' kinds and the plain LSTM


def _inputs(kind, batch, bidirectional=True):
    """(x, states, weights, lengths) of `kind`: batch `batch`, a length 0 among them."""
    x, states, w = fam.make_inputs("lstm_proj" if kind == "lstm" else kind, batch, T, I, H, P,
                                   L, bidirectional, 0)
    if kind == "lstm":
        states = (jnp.zeros_like(states[1]), states[1])
        w = portable_rnn.init_lstm_weight(jax.random.key(3), I, H, L, bidirectional)
    return x, states, w, jnp.asarray(np.arange(batch) % (T + 1), jnp.int32)


def _call(kind, x, states, w, lengths, bidirectional, **kw):
    if kind == "lstm":
        y, h, c = portable_rnn.lstm(x, *states, w, lengths, I, H, L, 0.0, bidirectional, **kw)
        return y, (h, c)
    return fam.call(kind, x, states, w, lengths, I, H, P, L, bidirectional, **kw)


def _loss(kind, lengths, bidirectional=True, **kw):
    def loss(x, states, w):
        y, finals = _call(kind, x, states, w, lengths, bidirectional, **kw)
        return jnp.sum(jnp.sin(y.astype(jnp.float32))) + sum(
            jnp.sum(s.astype(jnp.float32) ** 2) for s in finals)
    return loss


def _both(transform, *args):
    """`transform(*args)` in bfloat16 and in float32 on the bfloat16-rounded values."""
    bf = jax.tree.map(lambda a: a.astype(jnp.bfloat16)
                      if jnp.issubdtype(a.dtype, jnp.floating) else a, args)
    f32 = jax.tree.map(lambda a: a.astype(jnp.float32)
                       if jnp.issubdtype(a.dtype, jnp.floating) else a, bf)
    return jax.jit(transform)(*bf), jax.jit(transform)(*f32)


def _assert_within_bound(got, want):
    (value, grads), (value_want, grads_want) = got, want
    np.testing.assert_allclose(np.asarray(value, np.float32), value_want,
                               rtol=BF16_BOUND["rtol"], atol=BF16_BOUND["atol"] * value.size)
    for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_want)):
        assert g.dtype == jnp.bfloat16
        w = np.asarray(w)
        bound = GRAD_BOUND["atol"] + GRAD_BOUND["scaled"] * np.max(np.abs(w))
        np.testing.assert_array_less(np.abs(np.asarray(g, np.float32) - w), bound)


@pytest.mark.parametrize("batch", [2, 8])  # input projection before the loop, and inside it
@pytest.mark.parametrize("kind", KINDS)
def test_forward_and_gradient(kind, batch):
    x, states, w, lengths = _inputs(kind, batch)
    loss = jax.value_and_grad(_loss(kind, lengths), argnums=(0, 1, 2))
    _assert_within_bound(*_both(loss, x, states, w))


@pytest.mark.parametrize("where", ["x0", "x1", "x2", "x3", "w", "states2", "all_out1"])
@pytest.mark.parametrize("kind", KINDS)
def test_vmap_of_the_gradient(kind, where):
    """An extra axis of 3 on `x` (at each position), on the weights, on the states, or on all of
    them with the gradients' axis at 1."""
    x, states, w, lengths = _inputs(kind, 8)
    grad = jax.value_and_grad(_loss(kind, lengths), argnums=(0, 1, 2))

    def stack(a, axis):
        return jnp.stack([a, -0.5 * a, 0.25 * a], axis)

    if where.startswith("x"):
        axis = int(where[1])
        args, in_axes, out_axes = (stack(x, axis), states, w), (axis, None, None), 0
    elif where == "w":
        args, in_axes, out_axes = (x, states, stack(w, 0)), (None, None, 0), 0
    elif where == "states2":
        args = (x, tuple(stack(s, 2) for s in states), w)
        in_axes, out_axes = (None, 2, None), 0
    else:
        args = (stack(x, 1), tuple(stack(s, 2) for s in states), stack(w, 0))
        in_axes, out_axes = (1, 2, 0), (0, 1)  # the value at 0, the gradients at 1
    _assert_within_bound(*_both(jax.vmap(grad, in_axes, out_axes), *args))


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_of_vmap(kind):
    x, states, w, lengths = _inputs(kind, 8)
    loss = _loss(kind, lengths)

    def mapped(xs, states, w):
        return jnp.sum(jax.vmap(loss, in_axes=(2, None, None))(xs, states, w))

    xs = jnp.stack([x, -x], 2)
    _assert_within_bound(*_both(jax.value_and_grad(mapped, argnums=(0, 1, 2)), xs, states, w))


@pytest.mark.parametrize("kind", KINDS)
def test_shard_map(kind):
    """The batch over the 8 test devices, one sequence each; the weight gradient summed."""
    x, states, w, lengths = _inputs(kind, 8)
    mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("b",))

    def local(x, states, w, lengths):
        value, (dx, ds, dw) = jax.value_and_grad(_loss(kind, lengths), argnums=(0, 1, 2))(
            x, states, w)
        return lax.psum(value, "b"), (dx, ds, lax.psum(dw, "b"))

    f = jax.shard_map(local, mesh=mesh, in_specs=(Ps("b"), Ps(None, "b"), Ps(), Ps("b")),
                  out_specs=(Ps(), (Ps("b"), Ps(None, "b"), Ps())))
    _assert_within_bound(*_both(f, x, states, w, lengths))


@pytest.mark.parametrize("per_gate", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "lstm_proj", "gru", "rnn_tanh"])
def test_recurrent_dropout_mask_under_vmap(kind, per_gate):
    """One mask, or one per gate (a batched product whose result the driver transposes)."""
    if per_gate and kind == "rnn_tanh":
        pytest.skip("the simple RNN has one gate: its per-gate mask is the single mask "
                    "(the per_gate=False case)")
    x, states, w, lengths = _inputs(kind, 8)
    gates = {"lstm": 4, "lstm_proj": 4, "gru": 3}.get(kind, 1)
    shape = (2 * L,) + ((gates,) if per_gate else ()) + (8, P if kind == "lstm_proj" else H)
    mask = draws.bernoulli(jax.random.key(5), 0.7, shape).astype(jnp.float32) / 0.7

    def f(x, states, w, mask):
        return jax.value_and_grad(_loss(kind, lengths, recurrent_dropout_mask=mask),
                                  argnums=(0, 1, 2))(x, states, w)

    xs = jnp.stack([x, -x], 1)
    _assert_within_bound(*_both(jax.vmap(f, in_axes=(1, None, None, None)), xs, states, w,
                                mask))


@pytest.mark.parametrize("precision", [lax.Precision.DEFAULT, lax.Precision.HIGHEST,
                                       lax.DotAlgorithmPreset.BF16_BF16_F32])
def test_explicit_precision(precision):
    x, states, w, lengths = _inputs("gru", 8)
    loss = jax.value_and_grad(_loss("gru", lengths, precision=precision), argnums=(0, 1, 2))
    _assert_within_bound(*_both(loss, x, states, w))


def test_the_fence_keeps_a_transposed_product_running():
    """``dot(a, b).T`` of bfloat16 operands, which XLA:CPU turns into a dot it cannot run: the
    fenced product runs, and equals the float32 one (the products are exact)."""
    a = draws.normal(jax.random.key(0), (8, 16)).astype(jnp.bfloat16)
    b = draws.normal(jax.random.key(1), (16, 12)).astype(jnp.bfloat16)
    fenced = jax.jit(lambda a, b: Products(fence=True)(a, b, jnp.float32).T)(a, b)
    want = (a.astype(jnp.float32) @ b.astype(jnp.float32)).T
    np.testing.assert_allclose(fenced, want, rtol=1e-6, atol=1e-6)


def test_decision_says_which_products_run():
    cpu = portable_rnn.Capabilities("cpu")
    x, states, w, lengths = _inputs("gru", 2)
    notes = {dt: portable_rnn.explain_gru(x.astype(dt), states[0].astype(dt), w, lengths, I, H,
                                          L, 0.0, True, capabilities=cpu).notes
             for dt in (jnp.bfloat16, jnp.float16, jnp.float32)}
    assert ("CPU: bfloat16 x bfloat16 = float32 products (XLA:CPU's native dot; exact "
            "products)") in notes[jnp.bfloat16]
    assert ("CPU: float16 matmul operands multiplied as float32 (exact products; XLA:CPU has "
            "no float16 dot)") in notes[jnp.float16]
    assert not any("products" in n for n in notes[jnp.float32])

"""A cell without a backward step: the driver lets JAX differentiate its forward loop.

Each family's cell, seen through `ForwardOnly` (its forward part of the cell protocol and
nothing else), runs on the autodiff path of `scan.rnn_layer`; the same cell as it is runs on
the hand-written backward. The two are independent ways to the same gradients (JAX's transpose
of the loop against the cell's own backward step and the driver's GEMMs after the loop), so
each checks the other: over shapes, lengths (0 among them), directions, layers, dropout between
layers, recurrent dropout masks and the loop options, in float32 and in float64.
"""

import dataclasses

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from jax.test_util import check_grads

import family_helpers as fam
import portable_rnn
import references
from portable_rnn._src.recurrent import cell as cell_protocol
from portable_rnn._src.recurrent.cell import ForwardOnly
from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan
from portable_rnn._src.recurrent.gru.cell import GRUCell
from portable_rnn._src.recurrent.lstm.cell import LSTMCell
from portable_rnn._src.recurrent.routes.scan import scan_options
from portable_rnn._src.recurrent.simple_rnn.cell import SimpleRNNCell

GATES = {"lstm": 4, "lstm_proj": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _cell(kind, P):
    return {"lstm": lambda: LSTMCell(), "lstm_proj": lambda: LSTMCell(P), "gru": GRUCell,
            "rnn_tanh": lambda: SimpleRNNCell("tanh"),
            "rnn_relu": lambda: SimpleRNNCell("relu")}[kind]()


@st.composite
def cases(draw):
    """A `family_helpers.family_cases` draw (every kind), with the options of the driver:
    dropout between layers, a recurrent dropout mask (one for every gate block, or one per
    block), the input projection inside the loop, and the unroll factors."""
    case = draw(fam.family_cases(kinds=fam.ALL_KINDS))
    dropout = draw(st.sampled_from((0.0, 0.0, 0.4)))
    rmask = draw(st.sampled_from((None, "one", "per_gate")))
    in_loop = draw(st.booleans())
    unroll = draw(st.sampled_from((None, 1, 3)))
    return case, dropout, rmask, in_loop, unroll


def _case(kind, B, T, I, H, L, bidir, lengths, seed, P=0, dropout=0.0, rmask=None,
          in_loop=False, unroll=None):
    """A `cases` draw, for `@example`."""
    return ((kind, B, T, I, H, P, L, bidir, np.array(lengths, np.int32), seed), dropout, rmask,
            in_loop, unroll)


def _run(draw, dtype):
    """Outputs and gradients (of x, the initial states, the weights) of both paths: (hand-written,
    autodiff)."""
    (kind, B, T, I, H, P, L, bidir, lengths, seed), dropout, rmask, in_loop, unroll = draw
    P = P if kind == "lstm_proj" else 0
    D = 2 if bidir else 1
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed, dtype)
    w = w.astype(dtype)
    rm = None
    if rmask is not None:
        k = GATES[kind] if rmask == "per_gate" else 1
        rm = draws.bernoulli(jax.random.key(seed + 1), 0.7, (L * D, k, B, P or H))
        rm = rm.astype(dtype) / 0.7
    rng = jax.random.key(seed + 2) if dropout else None
    cot = draws.normal(jax.random.key(seed + 3), (B, T, D * (P or H)), dtype)

    def results(cell):
        def f(x, states, w):
            config = ScanConfig(cell, I, H, L, bidir, dropout, proj_size=P,
                                project_in_loop=in_loop, unroll=unroll)
            y, finals = rnn_scan(config, x, states, w, jnp.asarray(lengths), rng, rm)
            return y, finals

        def loss(x, states, w):
            y, finals = f(x, states, w)
            return jnp.sum(y * cot) + sum(jnp.sum(jnp.sin(s)) for s in finals)
        return jax.jit(f)(x, states, w), jax.jit(jax.grad(loss, (0, 1, 2)))(x, states, w)

    inner = _cell(kind, P)
    return results(inner), results(ForwardOnly(inner))


def _assert_close(got, want, tol):
    """Elementwise within `tol`, relative to the element or to the array's largest value (a
    gradient summed in another order cancels to other small values)."""
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max())))


HARD = (
    # a length 0 beside a full one, two bidirectional layers, dropout between them
    _case("lstm", 3, 5, 3, 4, 2, True, [5, 0, 2], 1, dropout=0.4),
    # the projection with a recurrent mask per gate block, the projection inside the loop
    _case("lstm_proj", 2, 6, 3, 5, 2, True, [6, 1], 2, P=2, rmask="per_gate", in_loop=True),
    # the GRU's recurrent product in pieces, one mask for every block, unrolled by 3
    _case("gru", 3, 7, 2, 4, 1, True, [0, 7, 3], 3, rmask="one", unroll=3),
    # relu's kink, every length 0
    _case("rnn_relu", 2, 4, 3, 3, 2, False, [0, 0], 4),
    # long and wide, ragged
    _case("rnn_tanh", 2, 64, 8, 32, 1, True, [64, 17], 5, rmask="one"),
)


@given(cases())
@example(HARD[0])
@example(HARD[1])
@example(HARD[2])
@example(HARD[3])
@example(HARD[4])
def test_hand_written_backward_equals_autodiff_float32(draw):
    """float32: outputs and final states agree, and the gradients of x, the initial states and
    the weights agree to float32 rounding of sums taken in another order."""
    (out_hand, grad_hand), (out_auto, grad_auto) = _run(draw, jnp.float32)
    tol = references.float32_tol(1e-5)
    _assert_close(out_auto, out_hand, tol)
    _assert_close(grad_auto, grad_hand, tol)


@pytest.mark.parametrize("draw", HARD, ids=lambda d: d[0][0])
def test_hand_written_backward_equals_autodiff_float64(draw):
    """float64 on the host's CPU: both gradients agree to 1e-11, far below float32 rounding, so
    neither path hides an approximation that float32 would mask."""
    with references.float64():
        (out_hand, grad_hand), (out_auto, grad_auto) = _run(draw, jnp.float64)
        _assert_close(out_auto, out_hand, 1e-12)
        _assert_close(grad_auto, grad_hand, 1e-11)


@pytest.mark.parametrize("dtype", (jnp.bfloat16, jnp.float16))
@pytest.mark.parametrize("kind", fam.ALL_KINDS)
def test_16_bit_inputs_hand_written_backward_equals_autodiff(kind, dtype):
    """16-bit inputs with the platform's options (`routes.scan.scan_options`: on CPUs native
    bfloat16
    products behind barriers, float16 products in float32, float32 stacks): both paths accumulate
    in float32 and keep the wide state in float32, so the gradients (in the inputs' dtypes)
    differ only by where each rounds to 16 bits: within 4 ulps of the largest."""
    B, T, I, H, L = 8, 12, 5, 6, 2
    P = 3 if kind == "lstm_proj" else 0
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, True, 5, dtype)
    lengths = jnp.asarray([12, 0, 1, 5, 12, 7, 3, 11], jnp.int32)
    inner = _cell(kind, P)
    opts = scan_options(inner, x, portable_rnn.capabilities())

    def grads(cell):
        def loss(x, states, w):
            config = ScanConfig(cell, I, H, L, True, proj_size=P, **opts)
            y, finals = rnn_scan(config, x, states, w, lengths)
            return (jnp.sum(jnp.sin(y.astype(jnp.float32)))
                    + sum(jnp.sum(s.astype(jnp.float32)) for s in finals))
        return jax.jit(jax.grad(loss, (0, 1, 2)))(x, states, w)

    got, want = grads(ForwardOnly(inner)), grads(inner)
    names = ("x", "h0", "c0")[:1 + len(states)] + ("w",)
    for a, b, what in zip(jax.tree.leaves(got), jax.tree.leaves(want), names, strict=True):
        assert a.dtype == b.dtype, what
        references.assert_ulps(a, b, dtype, 4, f"{kind} d{what}")


def test_autodiff_path_is_exact_in_float64_against_finite_differences():
    """The autodiff path, forward and reverse mode (a custom_vjp allows reverse only), against
    finite differences in float64, ragged and bidirectional."""
    with references.float64():
        x, states, w = fam.make_inputs("gru", 2, 4, 3, 3, 0, 2, True, 7, jnp.float64)
        cell = ForwardOnly(GRUCell())

        def f(x, h0, w):
            y, (h,) = rnn_scan(ScanConfig(cell, 3, 3, 2, True), x, (h0,), w,
                               jnp.asarray([4, 1], jnp.int32))
            return y, h
        check_grads(f, (x, states[0], w.astype(jnp.float64)), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16))
def test_jit_vmap_and_grad_compose_on_the_autodiff_path(dtype):
    """vmap of grad under jit, over a batch of inputs, equals grad of each input one by one (in
    bfloat16 with the platform's options: on CPUs, products that vmap must not re-layout);
    in float32 both equal the hand-written path's."""
    kind, B, T, I, H, L = "lstm", 2, 5, 3, 4, 2
    lengths = jnp.asarray([5, 2], jnp.int32)
    xs = draws.normal(jax.random.key(0), (3, B, T, I), dtype)
    _, states, w = fam.make_inputs(kind, B, T, I, H, 0, L, True, 1, dtype)
    opts = scan_options(LSTMCell(), xs[0], portable_rnn.capabilities())

    def grad_fn(cell):
        def loss(x, w):
            y, (h, c) = rnn_scan(ScanConfig(cell, I, H, L, True, **opts), x, states, w,
                                 lengths)
            return jnp.sum(jnp.sin(y.astype(jnp.float32))) + jnp.sum(c.astype(jnp.float32))
        return jax.grad(loss, (0, 1))

    auto = grad_fn(ForwardOnly(LSTMCell()))
    got = jax.jit(jax.vmap(auto, in_axes=(0, None)))(xs, w)
    one_auto, one_hand = jax.jit(auto), jax.jit(grad_fn(LSTMCell()))  # each compiled once
    want = [one_auto(x, w) for x in xs]
    hand = [one_hand(x, w) for x in xs]
    for i in range(len(xs)):
        if dtype == jnp.float32:
            tol = references.float32_tol(1e-5)
            _assert_close([g[i] for g in got], want[i], tol)
            _assert_close(want[i], hand[i], tol)
        else:  # vmap may fuse and round differently: a few ulps
            for a, b in zip((g[i] for g in got), want[i]):
                references.assert_ulps(a, b, dtype, 2, "vmap")


def test_recurrent_mask_is_a_constant_on_both_paths():
    """Differentiated with respect to the recurrent dropout mask, both paths give zero (the
    hand-written backward returns none for it, the autodiff path stops its gradient)."""
    x, (h0,), w = fam.make_inputs("rnn_tanh", 2, 4, 3, 3, 0, 1, False, 0)
    rm = jnp.full((1, 1, 2, 3), 0.5)
    for cell in (SimpleRNNCell(), ForwardOnly(SimpleRNNCell())):
        g = jax.grad(lambda rm, cell=cell: jnp.sum(
            rnn_scan(ScanConfig(cell, 3, 3, 1), x, (h0,), w, None, None, rm)[0]))(rm)
        np.testing.assert_array_equal(g, np.zeros_like(g))


def test_which_path_a_cell_takes_and_a_partial_backward_is_an_error():
    assert cell_protocol.hand_written_backward(LSTMCell())
    assert cell_protocol.hand_written_backward(GRUCell())
    assert not cell_protocol.hand_written_backward(ForwardOnly(GRUCell()))

    @dataclasses.dataclass(frozen=True)
    class Partial(ForwardOnly):
        shared_dz = False
        dz_inplace = None

        def step_bwd(self, saved, dstate, p, mm, write):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match=r"`cell` Partial .* lacks saved, param_grads"):
        cell_protocol.hand_written_backward(Partial(GRUCell()))

    @dataclasses.dataclass(frozen=True)
    class NoPieces(Partial):
        def saved(self, prev, new, aux):
            return new

        def param_grads(self, *args):
            return {}

    with pytest.raises(TypeError, match=r"lacks dzh_pieces \(shared_dz is False\)"):
        cell_protocol.hand_written_backward(NoPieces(GRUCell()))

"""The sLSTM (`portable_rnn.slstm`) against references that share no code with it: a float64 step
loop of FlashRNN's sLSTM equations written here (NumPy, and `jax.numpy` for gradients), and
FlashRNN's own vanilla PyTorch backend (``flashrnn==1.0.8``, on CPU; skipped without it) on
weights converted with ``slstm.flashrnn``; forward, final states and every gradient, ragged
lengths (0 included), both directions, two layers, dropout between layers, zero and non-zero
initial states, bfloat16 within the documented 16-bit bounds, and long sequences whose gates
saturate and whose input gate's ``exp`` overflows float32 without the stabilizer. Then its
hand-written backward step against `jax.vjp` of its forward step (ties of the stabilizer's max
and of the normalizer's clamp included) and against float64, and through the driver against
JAX's autodiff of its forward (`ForwardOnly`); the converters, the explanation, jit/vmap/grad
and the errors.

The equations (FlashRNN's ``flashrnn/vanilla/slstm.py``), gates i, f, z, o, states h, c, n, m::

    m' = max(a_i, log sigmoid(a_f) + m)     (a_i where n == 0)
    i = exp(a_i - m'),  f = exp(log sigmoid(a_f) + m - m')
    c' = f c + i tanh(a_z),  n' = max(f n + i, 1),  h' = sigmoid(a_o) c' / n'

FlashRNN's vanilla backend tests ``n == 0`` over the whole batch (``torch.all``); its CUDA and
Triton kernels, and portable_rnn, per unit. The two agree wherever the initial ``n`` is zero
everywhere or nowhere, which is what the comparisons with FlashRNN draw.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import family_helpers as fam
import portable_rnn
import references
from portable_rnn._src.recurrent.cell import ForwardOnly, hand_written_backward
from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan
from portable_rnn._src.recurrent.slstm import flashrnn as conv
from portable_rnn._src.recurrent.slstm import reference as folder_reference
from portable_rnn._src.recurrent.slstm.cell import SLSTMCell
from references import RECURRENT_ULPS, assert_ulps, round_to

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")
STATES = ("h", "c", "n", "m")
F32_MAX_LOG = float(np.log(np.finfo(np.float32).max))  # 88.7: exp overflows float32 above it


# --- the reference: FlashRNN's equations, one step at a time -------------------------------------

class Rounding:
    """Where a 16-bit call rounds (docs/semantics.md, "Dtypes"): weight matrices and matmul
    operands to `dtype` (`op`), the hidden state h (a matmul operand, the output) and the outputs
    to `dtype` (`out`), the memory states c, n, m to float32 after each step (`keep`); a bfloat16
    backward rounds each product's output gradient (`product`) and the gradient of each layer's
    16-bit output and of the next layer's 16-bit input, after dropout (`cotangent`)."""

    def __init__(self, dtype=None, xp=np, gradient_dtype=None):
        ident = lambda a: a  # noqa: E731
        self.product = self.cotangent = ident if gradient_dtype is None else (
            lambda a: references.round_gradient(a, gradient_dtype))
        if dtype is None:
            self.op = self.keep = self.out = ident
        else:
            self.op = self.out = lambda a: round_to(a, dtype, xp)
            self.keep = lambda a: round_to(a, np.float32, xp)


def slstm_loop(x, states, w, lengths, I, H, L, bidir, *, xp=np, dropout=None, rnd=None):
    """y (B, T, D*H), zero past each length, and the final (h, c, n, m), each (L*D, B, H), at
    each sequence's last valid step. `states`: the initial (h, c, n, m); `dropout`: ``(keep
    masks, rate)`` between layers. The maxima as selects, a tie's derivative split in half as
    `jnp.maximum`'s and `torch.maximum`'s: XLA:CPU at this suite's fast-compile flags (jaxlib
    0.10.2) evaluated `jnp.maximum`'s derivative wrongly inside this masked loop."""
    rnd = rnd or Rounding(xp=xp)

    def maximum(a, b):
        return xp.where(a > b, a, xp.where(a < b, b, (a + b) / 2))
    D, T = (2 if bidir else 1), x.shape[1]
    layers = references.flat_layers(w, 4, I, H, L, bidir)
    valid = (np.arange(T)[None, :] < np.asarray(lengths)[:, None])[..., None]  # (B, T, 1)
    inp, finals = rnd.op(x), []
    for layer in range(L):
        outs = []
        for d in range(D):
            p = layer * D + d
            W_ih, W_hh, b_ih, b_hh = layers[p]
            W_ih, W_hh = rnd.op(W_ih), rnd.op(W_hh)
            bias = rnd.keep(b_ih) + rnd.keep(b_hh)

            def step(state, inputs, W_ih=W_ih, W_hh=W_hh, bias=bias):
                x_t, valid_t = inputs
                h, c, n, m = state
                a = rnd.product(x_t @ W_ih.T) + rnd.product(rnd.op(h) @ W_hh.T) + bias
                a_i, a_f, a_z, a_o = (a[:, g * H:(g + 1) * H] for g in range(4))
                log_f = -xp.logaddexp(0.0, -a_f)  # log sigmoid(a_f)
                m_new = xp.where(n == 0, a_i, maximum(a_i, log_f + m))
                # exp(0) = 1 on a first step written as 1: the clamp's tie u = 1 exact even
                # where XLA computes a_i twice and rounds the copies apart (see the cell)
                i = xp.where(n == 0, 1.0, xp.exp(a_i - m_new))
                f = xp.exp(log_f + m - m_new)
                c_new = f * c + i * xp.tanh(a_z)
                n_new = maximum(f * n + i, 1.0 + 0 * n)
                h_new = c_new / n_new / (1.0 + xp.exp(-a_o))
                new = (rnd.out(h_new), rnd.keep(c_new), rnd.keep(n_new), rnd.keep(m_new))
                state = tuple(xp.where(valid_t, a, b) for a, b in zip(new, state))
                return state, xp.where(valid_t, state[0], 0 * state[0])

            state = (rnd.out(states[0][p]),) + tuple(rnd.keep(s[p]) for s in states[1:])
            if xp is np:
                out = [None] * T
                for t in (reversed(range(T)) if d else range(T)):
                    state, out[t] = step(state, (inp[:, t], valid[:, t]))
                out = np.stack(out, axis=1)
            else:  # one traced step (a Python loop of T steps compiles slowly)
                state, out = jax.lax.scan(
                    step, state, (xp.swapaxes(inp, 0, 1), np.swapaxes(valid, 0, 1)),
                    reverse=bool(d))
                out = xp.swapaxes(out, 0, 1)
            outs.append(out)
            finals.append(state)
        inp = references.next_input(outs, layer, L, dropout, rnd.out, rnd.cotangent, xp)
    return (inp, *(xp.stack(s) for s in zip(*finals)))


# --- draws ----------------------------------------------------------------------------------

@st.composite
def cases(draw, max_T=6, max_H=5, inits=("zeros", "random", "mixed")):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, max_T))
    L = draw(st.integers(1, 2))
    return dict(B=B, T=T, I=draw(st.integers(1, 5)), H=draw(st.integers(1, max_H)), L=L,
                bidir=draw(st.booleans()),
                lengths=draw(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                dropout=draw(st.sampled_from((0.0, 0.4))) if L > 1 else 0.0,
                init=draw(st.sampled_from(inits)),
                seed=draw(st.integers(0, 2**16)))


def _case(B, T, I, H, L, bidir, lengths, init="zeros", dropout=0.0, seed=0):
    return dict(B=B, T=T, I=I, H=H, L=L, bidir=bidir, lengths=lengths, init=init,
                dropout=dropout, seed=seed)


def _states(c, dtype=jnp.float32):
    """The initial (h, c, n, m): ``zeros`` (FlashRNN's default), ``random`` (n in [0.2, 2]: the
    clamp at 1 both ways) or ``mixed`` (random, with n = 0 on about half the units)."""
    D = 2 if c["bidir"] else 1
    shape = (c["L"] * D, c["B"], c["H"])
    if c["init"] == "zeros":
        return tuple(jnp.zeros(shape, dtype) for _ in STATES)
    k = jax.random.split(jax.random.key(c["seed"] + 11), 4)
    h0, c0, m0 = (jax.random.normal(k[i], shape, dtype) for i in (0, 1, 2))
    n0 = jax.random.uniform(k[3], shape, dtype, 0.2, 2.0)
    if c["init"] == "mixed":
        n0 = jnp.where(jax.random.bernoulli(jax.random.key(c["seed"] + 12), 0.5, shape), 0.0, n0)
    return h0, c0, n0, m0


def _inputs(c, dtype=jnp.float32):
    k = jax.random.split(jax.random.key(c["seed"]), 3)
    x = jax.random.normal(k[0], (c["B"], c["T"], c["I"]), dtype)
    # init's uniform weights, scaled so that the gates spread, biases pushed away from 0
    w = portable_rnn.init_slstm_weight(k[1], c["I"], c["H"], c["L"], c["bidir"])
    w = (w * 2.0 + 0.1 * jax.random.normal(k[2], w.shape, w.dtype)).astype(dtype)
    return x, _states(c, dtype), w


def _ours(c, key, **kw):
    def f(x, states, w):
        return portable_rnn.slstm(x, *states, w, jnp.asarray(c["lengths"], jnp.int32), c["I"],
                                  c["H"], c["L"], c["dropout"], c["bidir"], dropout_rng=key, **kw)
    return f


def _reference(c, masks, xp=np, rnd=None):
    def f(x, states, w):
        return slstm_loop(x, states, w, c["lengths"], c["I"], c["H"], c["L"], c["bidir"], xp=xp,
                          dropout=masks, rnd=rnd)
    return f


def _loss(f, cot):
    """A scalar of y and every final state, so that each state's gradient path is taken."""
    def loss(x, states, w):
        y, h_n, c_n, n_n, m_n = f(x, states, w)
        return (jnp.sum(y * cot) + jnp.sum(jnp.sin(h_n)) + jnp.sum(jnp.sin(c_n))
                + jnp.sum(jnp.cos(n_n)) + jnp.sum(jnp.sin(m_n)))
    return loss


def _outputs_and_grads(f, cot):
    """A jitted function of (x, states, w): ``f``'s outputs and the gradients of `_loss`, from
    one compiled program."""
    def loss(x, states, w):
        outs = f(x, states, w)
        return _loss(lambda *_: outs, cot)(x, states, w), outs

    def both(x, states, w):
        (_, outs), grads = jax.value_and_grad(loss, (0, 1, 2), has_aux=True)(x, states, w)
        return outs, grads
    return jax.jit(both)


def _as64(tree):
    return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def _close(got, want, tol):
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol * max(1.0, np.abs(r).max(initial=0)))


HARD = [
    _case(3, 5, 3, 4, 2, True, [5, 0, 2], "mixed", dropout=0.4),  # length 0, both ways, dropout
    _case(2, 4, 2, 3, 2, True, [0, 0], "random"),  # every length 0
    _case(2, 24, 6, 16, 1, True, [24, 9], "zeros", seed=3),  # long and wide, FlashRNN's states
]


# --- against the float64 loop ---------------------------------------------------------------

# The default tier: the float64 op against the loop (test_float64_equals_the_loop_to_rounding)
# and float32 against it on the long saturated sequence
@pytest.mark.slow
@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(cases())
@example(HARD[0])
def test_equals_the_float64_loop_of_flashrnns_equations(c):
    """float32 against the float64 loop: outputs, every final state, and the gradients of x,
    every initial state and the weights against JAX's autodiff of the loop in float64."""
    key, masks = fam.case_dropout(c)
    x, states, w = _inputs(c)
    D = 2 if c["bidir"] else 1
    cot = jax.random.normal(jax.random.key(c["seed"] + 1), (c["B"], c["T"], D * c["H"]))
    got, grads = _outputs_and_grads(_ours(c, key), cot)(x, states, w)
    want = _reference(c, masks)(*_as64((x, states, w)))
    _close(got, want, references.float32_tol(2e-5))
    with references.float64():
        args = jax.tree.map(jnp.asarray, _as64((x, states, w, cot)))
        ref = jax.jit(jax.grad(_loss(_reference(c, masks, jnp), args[3]), (0, 1, 2)))(*args[:3])
    _close(grads, _as64(ref), references.float32_tol(1e-4))


@pytest.mark.parametrize("c", [HARD[0], *(pytest.param(h, marks=pytest.mark.slow)
                                         for h in HARD[1:])],
                         ids=["mixed states, dropout", "lengths 0", "long and wide"])
def test_float64_equals_the_loop_to_rounding(c):
    """Under x64 the op computes the loop's float64 to rounding: outputs, final states and
    every gradient (the dropout masks drawn there, from the same key)."""
    key, _ = fam.case_dropout(c)
    with references.float64():
        x, states, w = jax.tree.map(lambda a: a.astype(jnp.float64), _inputs(c))
        _, masks = fam.case_dropout(c)
        D = 2 if c["bidir"] else 1
        cot = jax.random.normal(jax.random.key(c["seed"] + 1), (c["B"], c["T"], D * c["H"]),
                                jnp.float64)
        want = _reference(c, masks)(*_as64((x, states, w)))
        ref = jax.jit(jax.grad(_loss(_reference(c, masks, jnp), cot), (0, 1, 2)))(x, states, w)
        got, grads = _as64(_outputs_and_grads(_ours(c, key), cot)(x, states, w))
        ref = _as64(ref)
    _close(got, want, 1e-12)
    _close(grads, ref, 1e-11)


def test_the_folders_references_equal_the_loop():
    """The folder's references (`reference.float64`, the self-test's, and `reference.numpy_loop`)
    against the loop here, in float64."""
    c = _case(3, 5, 2, 3, 2, True, [5, 0, 3], "mixed", seed=4)
    x, states, w = _as64(_inputs(c))
    want = slstm_loop(x, states, w, c["lengths"], 2, 3, 2, True)
    _close(folder_reference.numpy_loop(x, states, w, c["lengths"], 2, 3, 2, True), want, 1e-13)
    full = slstm_loop(x, states, w, [5] * 3, 2, 3, 2, True)
    with references.float64():
        got = folder_reference.float64(*map(jnp.asarray, (x, *states, w)), None, 2, 3, 2, 0.0,
                                       True)
    _close(got, full, 1e-13)
    with pytest.raises(ValueError, match="every length T"):
        folder_reference.float64(x, *states, w, np.array([5, 0, 3]), 2, 3, 2, 0.0, True)


# --- long sequences, saturated gates --------------------------------------------------------

def _saturated(T, B=2, I=3, H=8, L=1, seed=0):
    """Inputs whose gates saturate: input-gate biases from -20 to 120 across the units (so that
    ``exp(a_i)`` overflows float32 from the first step on most of them), forget-gate biases from
    -30 to 16 (``sigmoid`` 1 to float32 rounding, and ``log sigmoid`` far below the input gate),
    small input weights."""
    k = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(k[0], (B, T, I))
    groups = portable_rnn.unpack_slstm_weights(
        portable_rnn.init_slstm_weight(k[1], I, H, L, False), I, H, L, False)
    b_i, b_f = jnp.linspace(-20.0, 120.0, H), jnp.linspace(-30.0, 16.0, H)[::-1]
    for p in range(L):
        groups[2][p] = groups[2][p].at[:2 * H].set(jnp.concatenate([b_i, b_f]))
    w = portable_rnn.pack_slstm_weights(*groups, I, H, L, False)
    states = tuple(jnp.zeros((L, B, H)) for _ in STATES)
    return x, states, w


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_long_saturated_sequences_stay_finite_and_exact(dtype):
    """T = 128 with saturated gates and ``a_i`` up to 120 (``exp(a_i)`` is inf in float32: the
    form without the stabilizer gives NaN): outputs, final states and every gradient against
    float64 (float32: to float32 rounding; bfloat16: within `RECURRENT_ULPS` of the loop
    rounded where a 16-bit call rounds)."""
    T, B, I, H = 128, 2, 3, 8
    c = _case(B, T, I, H, 1, False, [T, 101])
    x, states, w = _saturated(T, B, I, H)
    bias = np.asarray(portable_rnn.unpack_slstm_weights(w, I, H, 1, False)[2][0])
    assert bias[:H].max() - 10 > F32_MAX_LOG  # |W_ih x| < 10 here: exp(a_i) overflows
    dt = jnp.dtype(dtype)
    rnd = Rounding(dt) if dt == jnp.bfloat16 else None
    x, w = x.astype(dt), w.astype(dt)
    states = (states[0].astype(dt),) + states[1:]
    want = _reference(c, None, rnd=rnd)(*_as64((x, states, w)))
    assert float(np.max(want[4])) > F32_MAX_LOG  # the stabilizer holds what exp cannot
    cot = np.asarray(jax.random.normal(jax.random.key(1), (B, T, H)).astype(dt), np.float32)

    def loss(f, reference=False):
        def scalar(x, states, w):
            y, h_n, c_n, n_n, m_n = f(x, states, w)
            if reference and rnd is not None:  # the outputs rounded as the call rounds them
                y, h_n = round_to(y, dt, jnp), round_to(h_n, dt, jnp)
            t = jnp.float64 if reference else jnp.float32
            return (jnp.sum(y.astype(t) * jnp.asarray(cot, t)) + jnp.sum(jnp.sin(h_n.astype(t)))
                    + jnp.sum(jnp.sin(c_n)) + jnp.sum(jnp.cos(n_n)) + jnp.sum(jnp.sin(m_n)))
        return scalar

    def with_outputs(x, states, w):
        outs = _ours(c, None)(x, states, w)
        return loss(lambda *_: outs)(x, states, w), outs

    (_, got), grads = jax.jit(jax.value_and_grad(with_outputs, (0, 1, 2), has_aux=True))(
        x, states, w)
    assert all(np.isfinite(np.asarray(a, np.float32)).all() for a in jax.tree.leaves(
        (got, grads)))
    with references.float64():
        grnd = None if rnd is None else Rounding(dt, jnp, gradient_dtype=dt)
        args = jax.tree.map(jnp.asarray, _as64((x, states, w)))
        ref = _as64(jax.jit(jax.grad(loss(_reference(c, None, jnp, grnd), True), (0, 1, 2)))(
            *args))
    if rnd is None:
        _close(got, want, references.float32_tol(2e-5))
        # A float32 stabilizer near 120 holds ``log sigmoid(a_f) + m`` to 8e-6 (its ulp), so
        # each forget gate ``f`` ~ 1 is 1e-5 off, over 128 steps: measured 1.1e-4 of the
        # largest gradient, alike for JAX's autodiff of the forward (`ForwardOnly`), which
        # computes the same sum (as FlashRNN does)
        _close(grads, ref, references.float32_tol(1e-3))
        return
    assert_ulps(got[0], want[0], dt, RECURRENT_ULPS, "y")
    assert_ulps(got[1], want[1], dt, RECURRENT_ULPS, "h_n")
    for name, g, r in zip(STATES[1:], got[2:], want[2:]):
        assert_ulps(g, r, dt, references.state_ulps(dt), f"{name}_n")
    names = ("dx", *(f"d{s}_0" for s in STATES), "dweights")
    for g, r, name in zip(jax.tree.leaves(grads), jax.tree.leaves(ref), names, strict=True):
        assert_ulps(g, np.asarray(r, np.float32), dt, RECURRENT_ULPS, name)


# --- 16-bit ------------------------------------------------------------------------------------

@pytest.mark.slow  # the default tier: the long saturated sequence in bfloat16
@settings(max_examples=max(2, settings.default.max_examples // 2))
# The states a sequence starts from: FlashRNN's zeros, or any with n > 0 (a carry). Not
# "mixed": n = 0 beside a non-zero c, which no step produces, makes the first step's forget
# gate exp(lf - a_i) unbounded; there a gradient measured 2.6 ulps from the rounded loop.
@given(cases(max_T=24, max_H=24, inits=("zeros", "random")))
@example(_case(3, 16, 8, 16, 2, True, [16, 0, 11], "random", dropout=0.25, seed=1))
# dh_0 2.99 ulps off while the reference kept the gradient between the layers unrounded: 0.38
@example(_case(2, 3, 3, 1, 2, True, [3, 0], "random", dropout=0.4, seed=207))
def test_bfloat16_equals_the_rounded_float64_loop(c):
    """docs/semantics.md's 16-bit rules (tests/test_low_precision.py): y, h_n and every gradient
    within `RECURRENT_ULPS` bfloat16 ulps of the array's largest value, the float32 c_n, n_n,
    m_n within `references.state_ulps`."""
    dt = jnp.bfloat16
    key, masks = fam.case_dropout(c)
    x, states, w = _inputs(c)
    x, w = x.astype(dt), w.astype(dt)
    states = (states[0].astype(dt),) + states[1:]  # h in the compute dtype, c, n, m in float32
    got = jax.jit(_ours(c, key))(x, states, w)
    want = _reference(c, masks, rnd=Rounding(dt))(*_as64((x, states, w)))
    assert got[0].dtype == dt and got[1].dtype == dt and got[2].dtype == jnp.float32
    assert_ulps(got[0], want[0], dt, RECURRENT_ULPS, "y")
    assert_ulps(got[1], want[1], dt, RECURRENT_ULPS, "h_n")
    for name, g, r in zip(STATES[1:], got[2:], want[2:]):
        assert_ulps(g, r, dt, references.state_ulps(dt), f"{name}_n")
    D = 2 if c["bidir"] else 1
    cot = np.asarray(jax.random.normal(jax.random.key(c["seed"] + 1),
                                       (c["B"], c["T"], D * c["H"])).astype(dt), np.float32)

    def loss(f, rounded):
        def weighted(x, states, w):
            y, h_n, c_n, n_n, m_n = f(x, states, w)
            if rounded:
                y, h_n = round_to(y, dt, jnp), round_to(h_n, dt, jnp)
            t = jnp.float64 if rounded else jnp.float32
            return (jnp.sum(y.astype(t) * jnp.asarray(cot, t)) + jnp.sum(jnp.sin(h_n.astype(t)))
                    + jnp.sum(jnp.sin(c_n)) + jnp.sum(jnp.cos(n_n)) + jnp.sum(jnp.sin(m_n)))
        return weighted

    grads = jax.jit(jax.grad(loss(_ours(c, key), False), (0, 1, 2)))(x, states, w)
    with references.float64():
        rnd = Rounding(dt, jnp, gradient_dtype=dt)
        args = jax.tree.map(jnp.asarray, _as64((x, states, w)))
        ref = _as64(jax.jit(jax.grad(loss(_reference(c, masks, jnp, rnd), True), (0, 1, 2)))(
            *args))
    names = ("dx", *(f"d{s}_0" for s in STATES), "dweights")
    for g, r, name in zip(jax.tree.leaves(grads), jax.tree.leaves(ref), names, strict=True):
        assert_ulps(g, np.asarray(r, np.float32), dt, RECURRENT_ULPS, name)


# --- the hand-written backward step ---------------------------------------------------------

def _step_inputs(dtype, B=4, H=6, seed=0):
    """One step's (zx, zh, state, bias) whose units take every branch of the stabilizer and the
    clamp: column 0 a first step (n = 0: m' = a_i, and u = 1, the clamp's tie), column 1 a tie
    of the max (a_i = log sigmoid(a_f) + m exactly: a_f = 40, whose log sigmoid rounds to 0 next
    to m = 1), column 2 a forget gate whose exp underflows (u = 1 again), column 3 n < 1 with
    the forget side winning (the clamp at 1 from below), column 4 an input gate far above the
    forget side (s = 1, f = 2e-4) and no gradient from m' (where autodiff's ``d(i) * i``
    cancels), the rest drawn."""
    k = jax.random.split(jax.random.key(seed), 11)
    zx = jax.random.normal(k[0], (B, 4 * H), dtype) * 2
    zh = jax.random.normal(k[1], (B, 4 * H), dtype)
    h = jax.random.normal(k[2], (B, H), dtype)
    c = jax.random.normal(k[3], (B, H), dtype)
    n = jax.random.uniform(k[4], (B, H), dtype, 0.5, 3.0)
    m = jax.random.normal(k[5], (B, H), dtype)
    bias = jax.random.normal(k[6], (4 * H,), dtype)
    i_, f_ = 0, H  # the columns of a_i and a_f
    zh = zh.at[:, :5].set(0).at[:, H:H + 5].set(0)
    bias = bias.at[:5].set(0).at[H:H + 5].set(0)
    n = n.at[:, 0].set(0).at[:, 3].set(0.3).at[:, 4].set(1.0)
    m = m.at[:, 1].set(1.0).at[:, 3].set(2.0).at[:, 4].set(-5.0)
    c = c.at[:, 4].set(1.0)
    zx = zx.at[:, f_ + 1].set(40.0).at[:, i_ + 1].set(1.0)
    zx = zx.at[:, i_ + 2].set(0.0).at[:, f_ + 2].set(-200.0).at[:, i_ + 3].set(-5.0)
    zx = zx.at[:, f_ + 3].set(3.0).at[:, i_ + 4].set(3.0).at[:, f_ + 4].set(0.0)
    dstate = tuple(jax.random.normal(k[7 + j], (B, H), dtype) for j in range(4))
    dstate = dstate[:3] + (dstate[3].at[:, 4].set(0.0),)
    return zx, zh, (h, c, n, m), bias, dstate


@jax.jit
def _step_vjp(zx, zh, state, bias, dstate):
    """JAX's derivative of the cell's forward step: d(zx), d(zh), d(state), d(bias)."""
    cell = SLSTMCell()

    def f(zx, zh, state, bias):
        return cell.step(zx, zh, state, {"bias": bias}, None)[0]
    _, vjp = jax.vjp(f, zx, zh, state, bias)
    return vjp(dstate)


@jax.jit
def _step_hand_written(zx, zh, state, bias, dstate):
    cell = SLSTMCell()
    _, aux = cell.step(zx, zh, state, {"bias": bias}, None)
    saved = cell.saved(None, None, aux)
    dzx, dzh, direct, emit = cell.step_bwd(saved, dstate, {"bias": bias}, None, lambda a: a)
    dbias = cell.param_grads(dzx[None], dzh[None], emit, saved, {"bias": bias}, None)["bias"]
    return dzx, dzh, direct, dbias


def test_backward_step_equals_jax_vjp_of_the_forward_step():
    """At every branch of the stabilizer's max and the normalizer's clamp (`_step_inputs`):
    float64 to rounding against `jax.vjp` of the forward step (a tie's half-and-half split
    included); float32 against float64 to float32 rounding, and per element where JAX's
    autodiff of the float32 step cancels ``d(i) * i`` against itself (column 4: the input
    gate's gradient there is 1e-4 of those terms; autodiff measured 1e-4 to 5e-4 off, relative,
    the hand-written step 7e-7)."""
    with references.float64():
        args = _step_inputs(jnp.float64)
        dzx, dzh, dstate, dbias = _step_vjp(*args)
        h_dzx, h_dzh, h_direct, h_dbias = _step_hand_written(*args)
        _close(h_dzx, dzx, 1e-13)
        np.testing.assert_array_equal(np.asarray(h_dzh), np.asarray(h_dzx))  # shared_dz
        _close(h_dzh, dzh, 1e-13)
        assert h_direct[0] is None
        np.testing.assert_array_equal(np.asarray(dstate[0]), 0)  # h reaches the step via zh
        _close(h_direct[1:], dstate[1:], 1e-13)
        _close(h_dbias, dbias, 1e-13)
        # the branches: the tie's 1/2 is in the gradient (a_i's share of dm' at column 1)
        cell_aux = SLSTMCell().step(*args[:3], {"bias": args[3]}, None)[1]
        s, k = np.asarray(cell_aux[4]), np.asarray(cell_aux[3])
        assert (s[:, 0] == 1).all() and (s[:, 1] == 0.5).all() and (k[:, 0] == 0.5).all()
        assert (k[:, 2] == 0.5).all() and (k[:, 3] == 0).all()
        want = _as64((h_dzx, h_direct[1:]))
    got = _as64(_step_hand_written(*jax.tree.map(lambda a: a.astype(jnp.float32), args)))
    tol = references.float32_tol(2e-6)
    for g, r in zip(jax.tree.leaves((got[0], got[2][1:])), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol * np.abs(r).max())
    np.testing.assert_allclose(got[0][:, 4], want[0][:, 4], rtol=references.float32_tol(5e-6))


@st.composite
def driver_cases(draw):
    c = draw(cases())
    return c | dict(rmask=draw(st.sampled_from((None, "one", "per_gate"))),
                    in_loop=draw(st.booleans()), unroll=draw(st.sampled_from((None, 1, 3))))


# The default tier: the backward step against `jax.vjp` of the forward step at every branch
# (test_backward_step_equals_jax_vjp_of_the_forward_step), and through the driver against the
# float64 loop's autodiff (test_float64_equals_the_loop_to_rounding)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(driver_cases())
@example(HARD[0] | dict(rmask="per_gate", in_loop=True, unroll=3))
def test_hand_written_backward_equals_autodiff(dtype, c):
    """`SLSTMCell` (its own backward step) against `ForwardOnly(SLSTMCell)`, which JAX
    differentiates, through the driver: ragged lengths, both directions, two layers, dropout,
    recurrent dropout masks, the projection inside or before the loop, unrolled loops."""
    cell = SLSTMCell()
    assert hand_written_backward(cell) and not hand_written_backward(ForwardOnly(cell))
    ctx = references.float64() if dtype == "float64" else contextlib.nullcontext()
    with ctx:
        x, states, w = _inputs(c, dtype)
        D = 2 if c["bidir"] else 1
        rm = None
        if c["rmask"]:
            k = 4 if c["rmask"] == "per_gate" else 1
            rm = jax.random.bernoulli(jax.random.key(c["seed"] + 1), 0.7,
                                      (c["L"] * D, k, c["B"], c["H"])).astype(dtype) / 0.7
        key, _ = fam.case_dropout(c)
        cot = jax.random.normal(jax.random.key(c["seed"] + 3), (c["B"], c["T"], D * c["H"]),
                                dtype)

        def results(cell):
            def f(x, states, w):
                config = ScanConfig(cell, c["I"], c["H"], c["L"], c["bidir"], c["dropout"],
                                    project_in_loop=c["in_loop"], unroll=c["unroll"])
                y, finals = rnn_scan(config, x, tuple(states), w,
                                     jnp.asarray(c["lengths"], jnp.int32), key, rm)
                return (y, *finals)
            return _outputs_and_grads(f, cot)(x, states, w)

        got, want = results(cell), results(ForwardOnly(cell))
    tol = 1e-12 if dtype == "float64" else references.float32_tol(1e-5)
    _close(got, want, tol)


# --- against FlashRNN's vanilla PyTorch backend -------------------------------------------------

def _flashrnn_stack(torch, flashrnn, layers, x, states, bidir):
    """FlashRNN's sLSTM layer after layer (its vanilla backend, one pseudo-layer per call; the
    reverse direction on the time-reversed sequence): (y (B, T, D*H), final states per
    pseudo-layer, each (4, B, 1, 1, H))."""
    D = 2 if bidir else 1
    finals, y = [], x
    for layer in range(len(layers) // D):
        outs = []
        for d in range(D):
            p = layer * D + d
            inp = torch.flip(y, (1,)) if d else y
            Wx = torch.einsum("bti,ghdi->btghd", inp, layers[p]["W"])
            hs, last = flashrnn(Wx, layers[p]["R"], layers[p]["b"], states=states[p],
                                function="slstm", backend="vanilla",
                                dtype=str(x.dtype).removeprefix("torch."))
            out = hs[0, :, :, 0]  # h at every step: (B, T, H)
            outs.append(torch.flip(out, (1,)) if d else out)
            finals.append(last)
        y = torch.cat(outs, dim=-1)
    return y, finals


@pytest.mark.slow  # an optional peer (CI's lowest leg installs it): the full tier
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_equals_flashrnn_vanilla_forward_final_states_and_gradients(dtype):
    """FlashRNN's vanilla PyTorch backend (autograd through its forward), one call per layer and
    direction, on weights written by `weights_to_flashrnn` and states by `states_to_flashrnn`:
    every step's output, the final (h, c, n, m) and the gradients of x, every initial state and
    every weight (read back with `weights_from_flashrnn`); float64 to rounding, float32 to
    float32 rounding. Two bidirectional layers, the first from zero states (FlashRNN's default:
    its first step takes m' = a_i), the second from non-zero ones with n > 0 everywhere
    (FlashRNN's batch-wide n == 0 test and ours per unit agree on both)."""
    torch = pytest.importorskip("torch")
    flashrnn = pytest.importorskip("flashrnn").flashrnn
    B, T, I, H, L, bidir = 3, 7, 4, 5, 2, True
    c = _case(B, T, I, H, L, bidir, [T] * B, "random", seed=5)
    x, states, w = _inputs(c)
    states = states[:2] + (jnp.abs(states[2]) + 0.5,) + states[3:]
    states = tuple(s.at[:2].set(0) for s in states)  # layer 0: zeros
    D = 2
    cot = jax.random.normal(jax.random.key(9), (B, T, D * H))
    tdt = getattr(torch, dtype)

    def t(a):
        return torch.tensor(np.asarray(a, np.float64), dtype=tdt, requires_grad=True)

    ctx = references.float64 if dtype == "float64" else contextlib.nullcontext
    with ctx():  # the biases summed in the dtype of the weights handed over
        layers = [{k: t(v) for k, v in p.items()} for p in conv.weights_to_flashrnn(
            jnp.asarray(np.asarray(w), dtype), I, H, L, bidir)]
    tx = t(x)
    tstates = [t(s) for s in conv.states_to_flashrnn(*states)]
    ty, tfinals = _flashrnn_stack(torch, flashrnn, layers, tx, tstates, bidir)
    tcot = torch.tensor(np.asarray(cot), dtype=tdt)
    loss = (ty * tcot).sum() + sum(torch.sin(f[0]).sum() + torch.sin(f[1]).sum()
                                   + torch.cos(f[2]).sum() + torch.sin(f[3]).sum()
                                   for f in tfinals)
    loss.backward()
    theirs_finals = conv.states_from_flashrnn([f.detach() for f in tfinals])
    theirs_dstates = conv.states_from_flashrnn([s.grad for s in tstates])
    with ctx():
        theirs_dw, *sizes = conv.weights_from_flashrnn(
            [{k: v.grad for k, v in p.items()} for p in layers], bidirectional=bidir)
        assert tuple(sizes) == (I, H, L, 1)
        theirs_dw = np.asarray(theirs_dw, np.float64)
        args = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), dtype), (x, states, w, cot))
        got, grads = _as64(_outputs_and_grads(_ours(c, None), args[3])(*args[:3]))
    tol = 1e-12 if dtype == "float64" else references.float32_tol(2e-5)
    _close(got[0], ty.detach().numpy(), tol)
    _close(got[1:], theirs_finals, tol)
    gtol = 1e-11 if dtype == "float64" else references.float32_tol(1e-4)
    _close(grads[0], tx.grad.numpy(), gtol)
    _close(grads[1], theirs_dstates, gtol)
    # FlashRNN has one bias: its gradient is both of ours (b_hh's read back as zero)
    for ours, theirs in zip(references.flat_layers(grads[2], 4, I, H, L, bidir),
                            references.flat_layers(theirs_dw, 4, I, H, L, bidir), strict=True):
        _close(ours[:3], theirs[:3], gtol)
        np.testing.assert_array_equal(theirs[3], 0)
        np.testing.assert_array_equal(ours[3], ours[2])


# --- the converters -------------------------------------------------------------------------

def test_flashrnn_converters_round_trip_and_check_their_arrays():
    I, H = 3, 4
    w = portable_rnn.init_slstm_weight(jax.random.key(0), I, H, 2, True)
    layers = conv.weights_to_flashrnn(w, I, H, 2, True)
    assert [tuple(p[k].shape for k in "WRb") for p in layers[1:3]] == [
        ((4, 1, H, I), (4, 1, H, H), (4, 1, H)), ((4, 1, H, 2 * H), (4, 1, H, H), (4, 1, H))]
    back, *sizes = conv.weights_from_flashrnn(layers, bidirectional=True)
    assert sizes == [I, H, 2, 1]
    groups, again = (portable_rnn.unpack_slstm_weights(a, I, H, 2, True) for a in (w, back))
    for p in range(4):  # the biases arrive summed in b_ih
        for name in (0, 1):
            np.testing.assert_array_equal(np.asarray(groups[name][p]), np.asarray(again[name][p]))
        np.testing.assert_allclose(np.asarray(again[2][p]),
                                   np.asarray(groups[2][p] + groups[3][p]), rtol=1e-7)
        np.testing.assert_array_equal(np.asarray(again[3][p]), 0)
    # without W, the input is FlashRNN's Wx itself: W_ih the identity, I = 4H
    p0 = {k: layers[0][k] for k in "Rb"}
    w1, I1, H1, L1, _ = conv.weights_from_flashrnn(p0)
    assert (I1, H1, L1) == (4 * H, H, 1)
    np.testing.assert_array_equal(portable_rnn.unpack_slstm_weights(w1, 4 * H, H, 1, False)[0][0],
                                  np.eye(4 * H))
    states = tuple(np.full((4, 2, H), v, np.float32) for v in range(4))
    flash = conv.states_to_flashrnn(*states)
    assert len(flash) == 4 and flash[0].shape == (4, 2, 1, 1, H)
    for a, b in zip(conv.states_from_flashrnn(flash), states):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"`layers\[1\]\['R'\]` has 2 heads of 2 units; "
                       r"`layers\[0\]`'s has 1 of 4"):
        conv.weights_from_flashrnn([layers[0], {"R": np.zeros((4, 2, 2, 2)),
                                                "b": np.zeros((4, 2, 2))}], bidirectional=True)
    with pytest.raises(ValueError, match=r"`layers\[0\]\['b'\]` must have shape \(4, 1, 4\)"):
        conv.weights_from_flashrnn({"R": p0["R"], "b": p0["b"][:, :, :2]})
    with pytest.raises(ValueError, match=r"is missing \['b'\]"):
        conv.weights_from_flashrnn({"R": p0["R"]})
    with pytest.raises(ValueError, match=r"a layer past the first reads its previous layer's"):
        conv.weights_from_flashrnn([layers[0], layers[0]])
    with pytest.raises(TypeError, match=r"`layers` must be a dict"):
        conv.weights_from_flashrnn(np.zeros(3))


# --- layers, routing ------------------------------------------------------------------------

def test_the_peers_it_has_and_has_not():
    for name in ("slstm", "explain_slstm", "init_slstm_weight", "get_num_params_in_slstm",
                 "pack_slstm_weights", "unpack_slstm_weights"):
        assert callable(getattr(portable_rnn, name)), name
    assert not hasattr(portable_rnn, "slstm_weights_from_torch")  # no torch.nn module
    assert not hasattr(portable_rnn, "slstm_weights_from_flax")  # no Flax cell
    assert not hasattr(portable_rnn, "slstm_weights_from_keras")  # no Keras layer
    assert hasattr(portable_rnn.linen, "SLSTM") and hasattr(portable_rnn.nnx, "SLSTM")


def _flat(params, I, H, L):
    """The flat weights of a layer's parameter tree (Linen's, NNX's, Equinox's: one layout)."""
    pseudo = [(f"layer_{l}", d) for l in range(L) for d in ("forward", "reverse")]
    group = [[params[l][d][n] for l, d in pseudo] for n in ("W_ih", "W_hh", "b_ih", "b_hh")]
    return portable_rnn.pack_slstm_weights(*group, I, H, L, True)


def test_the_layers_equal_the_functional_call_and_carry_four_states():
    """Linen, NNX and Equinox `SLSTM` layers: outputs and the carry (h, c, n, m) equal the
    functional call on their packed parameters, from zero states (FlashRNN's default; the
    layers' default carry, h in the computation dtype and c, n, m in float32) and from a given
    carry, which must be a tuple of four."""
    from flax import nnx

    I, H, L, T = 3, 5, 2, 6
    x = jax.random.normal(jax.random.key(0), (4, T, I))
    lengths = jnp.array([6, 3, 0, 1])
    layer = portable_rnn.linen.SLSTM(hidden_size=H, num_layers=L, bidirectional=True)
    variables = layer.init(jax.random.key(2), x)
    w = _flat(variables["params"], I, H, L)
    zeros = tuple(jnp.zeros((2 * L, 4, H)) for _ in STATES)
    want = portable_rnn.slstm(x, *zeros, w, lengths, I, H, L, 0.0, True)
    y, carry = layer.apply(variables, x, lengths, return_carry=True)
    assert isinstance(carry, tuple) and len(carry) == 4
    _close((y, *carry), want, 1e-6)
    # a carry fed back (one direction): the second half from the first half's final states
    one = portable_rnn.linen.SLSTM(hidden_size=H, num_layers=L)
    v1 = one.init(jax.random.key(5), x)
    y1, carry1 = one.apply(v1, x[:, :3], return_carry=True)
    y2, carry2 = one.apply(v1, x[:, 3:], initial_carry=carry1, return_carry=True)
    y12, carry12 = one.apply(v1, x, return_carry=True)
    _close((jnp.concatenate([y1, y2], axis=1), *carry2), (y12, *carry12),
           references.float32_tol(1e-5))
    with pytest.raises(TypeError, match=r"`initial_carry` must be a tuple \(h, c, n, m\) of "
                                        r"arrays; got a tuple of length 2"):
        layer.apply(variables, x, initial_carry=carry[:2])
    bf = portable_rnn.linen.SLSTM(hidden_size=H, num_layers=L, bidirectional=True,
                                  dtype=jnp.bfloat16)
    _, bf_carry = jax.eval_shape(lambda v, x: bf.apply(v, x, return_carry=True), variables, x)
    assert [a.dtype for a in bf_carry] == [jnp.bfloat16] + [jnp.float32] * 3

    model = portable_rnn.nnx.SLSTM(I, H, num_layers=L, bidirectional=True, rngs=nnx.Rngs(3))
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    got = model(x, lengths, return_carry=True)
    _close((got[0], *got[1]), portable_rnn.slstm(x, *zeros, _flat(params, I, H, L), lengths, I,
                                                 H, L, 0.0, True), 1e-6)
    pytest.importorskip("equinox")
    model = portable_rnn.equinox.SLSTM(I, H, L, bidirectional=True, return_state=True,
                                       key=jax.random.key(4))
    got = model(x, lengths, carry)
    _close((got[0], *got[1]), portable_rnn.slstm(x, *carry, _flat(model.params, I, H, L),
                                                 lengths, I, H, L, 0.0, True), 1e-6)


def _explain(H=4, B=2, T=3, **kw):
    S = jax.ShapeDtypeStruct
    w = S((portable_rnn.get_num_params_in_slstm(4, H, 1, False),), jnp.float32)
    return portable_rnn.explain_slstm(S((B, T, 4), jnp.float32), *[S((1, B, H), jnp.float32)] * 4,
                                      w, None, 4, H, 1, 0.0, False, **kw)


@pytest.mark.parametrize("caps", [None, GPU, TPU], ids=["here", "pretend H100", "pretend TPU"])
def test_explain_says_why_each_route_cannot_serve(caps):
    d = _explain(capabilities=caps)
    assert d.op == "slstm"
    cudnn = "cuDNN has no slstm cell (no cudnnRNNMode_t computes it)"
    assert d.rejected["cudnn"][0].startswith(cudnn) and d.rejected["cudnn_ffi"] == (cudnn,)
    assert str(d).startswith(f"slstm: {d.implementation}")
    assert d.implementation == "scan"
    if caps is TPU:  # the TPU's grid timed the sLSTM: the routing model ranks the kernel
        assert d.rejected["pallas"][0].startswith("predicted ") and set(d.predicted) == {
            "pallas", "scan"}
        big = _explain(capabilities=TPU, H=512, B=16, T=1024)  # 0.44x the scan's time measured
        assert big.implementation == "pallas" and big.passed_over["scan"][0].startswith(
            "predicted ")
    with pytest.raises(ValueError, match=r"implementation='cudnn' cannot serve this slstm call"):
        _explain(capabilities=caps, implementation="cudnn")


# --- transforms and errors ------------------------------------------------------------------

@pytest.mark.slow  # the driver's transforms: the LSTM's default-tier tests run them
def test_jit_vmap_grad_compose():
    c = _case(2, 4, 3, 4, 1, True, [4, 1], "random")
    x, states, w = _inputs(c)
    xs = jnp.stack([x, 2 * x, -x])
    lengths = jnp.asarray(c["lengths"])

    def one(x, w):
        y, *finals = portable_rnn.slstm(x, *states, w, lengths, 3, 4, 1, 0.0, True)
        return jnp.sum(y ** 2) + sum(jnp.sum(s) for s in finals)

    per = jax.jit(jax.vmap(jax.grad(one, (0, 1)), in_axes=(0, None)))(xs, w)
    for i in range(3):
        _close((per[0][i], per[1][i]), jax.grad(one, (0, 1))(xs[i], w),
               references.float32_tol(1e-5))


def test_bad_arguments_name_the_argument():
    c = _case(1, 2, 3, 4, 1, False, [2])
    x, (h0, c0, n0, m0), w = _inputs(c)
    with pytest.raises(ValueError, match=r"`n_0`"):
        portable_rnn.slstm(x, h0, c0, n0[:, :, :2], m0, w, None, 3, 4, 1, 0.0, False)
    with pytest.raises(ValueError, match=r"`weights` must have shape \(get_num_params_in_slstm"):
        portable_rnn.slstm(x, h0, c0, n0, m0, w[:-1], None, 3, 4, 1, 0.0, False)
    with pytest.raises(TypeError, match=r"slstm\(\) missing a required argument: 'num_layers'"):
        portable_rnn.slstm(x, h0, w, None, 3, 4, 1, 0.0, False)

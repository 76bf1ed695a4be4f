"""The MGU (`portable_rnn.mgu`) against references that share no code with it: a float64 step
loop of Flax's ``nn.MGUCell`` equations written here (NumPy, and `jax.numpy` for gradients), and
Flax's own ``nn.MGUCell`` run through ``nn.RNN`` / ``nn.Bidirectional`` on the converted
parameters; forward and gradients, ragged lengths (0 included), both directions, two layers,
dropout between layers, ``reset_gate`` both ways, bfloat16 within the documented 16-bit bounds.
Then its hand-written backward step against JAX's autodiff of its forward (`ForwardOnly`), its
Linen, NNX and Equinox layers, its explanation, the Pallas route in interpret mode, jit/vmap/grad
and its errors.

The equations (Flax's ``nn.MGUCell``, Zhou et al. 2016), in the flat layout's gate order f, n::

    f = sigmoid(W_if x + b_if + W_hf h + b_hf)
    n = tanh(W_in x + b_in + f * (W_hn h + b_hn))      reset_gate=True (Flax's default)
    n = tanh(W_in x + b_in + W_hn h + b_hn)            reset_gate=False
    h' = (1 - f) * n + f * h
"""

import contextlib
import importlib.util
import re

import draws
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import example, given, settings
from hypothesis import strategies as st

import family_helpers as fam
import portable_rnn
import references
from portable_rnn._src.recurrent.cell import ForwardOnly, hand_written_backward
from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan
from portable_rnn._src.recurrent.mgu.cell import MGUCell
from portable_rnn._src.recurrent.routes.pallas import route as pallas
from references import RECURRENT_ULPS, assert_ulps, round_gradient, round_to

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")


# --- the reference: Flax's equations, one step at a time ---------------------------------------

def unpack(w, I, H, L, bidir):
    """The documented flat layout (`references.flat_layers`): per layer and direction W_ih (2H,
    I or D*H) and W_hh (2H, H); then likewise every b_ih (2H,) and b_hh (2H,)."""
    return references.flat_layers(w, 2, I, H, L, bidir)


class Rounding:
    """Where a 16-bit call rounds (docs/semantics.md, "Dtypes"): weight matrices and matmul
    operands to `dtype` (`op`), the hidden state to float32 after each step (`keep`), outputs to
    `dtype` (`out`); a bfloat16 backward rounds each product's output gradient (`product`) and
    the gradient of each layer's 16-bit output and of the next layer's input (`cotangent`)."""

    def __init__(self, dtype=None, xp=np, gradient_dtype=None):
        ident = lambda a: a  # noqa: E731
        self.product = self.cotangent = ident if gradient_dtype is None else (
            lambda a: round_gradient(a, gradient_dtype))
        if dtype is None:
            self.op = self.keep = self.out = ident
        else:
            self.op = self.out = lambda a: round_to(a, dtype, xp)
            self.keep = lambda a: round_to(a, np.float32, xp)


def mgu_loop(x, h0, w, lengths, I, H, L, bidir, reset_gate=True, *, xp=np, dropout=None,
             rmask=None, rnd=None):
    """y (B, T, D*H), zero past each length, and h_n (L*D, B, H) at each last valid step.
    `dropout` ``(keep masks, rate)`` between layers; `rmask` (L*D, K, B, H): gate block g of
    ``W_hh h`` reads ``h * rmask[p, g]`` (K = 1: one mask for both)."""
    rnd = rnd or Rounding(xp=xp)
    sigmoid = lambda v: 1 / (1 + xp.exp(-v))  # noqa: E731
    D, T = (2 if bidir else 1), x.shape[1]
    layers = unpack(w, I, H, L, bidir)
    valid = (np.arange(T)[None, :] < np.asarray(lengths)[:, None])[..., None]  # (B, T, 1)
    inp, finals = rnd.op(x), []
    for layer in range(L):
        outs = []
        for d in range(D):
            p = layer * D + d
            W_ih, W_hh, b_ih, b_hh = layers[p]
            W_ih, W_hh = rnd.op(W_ih), rnd.op(W_hh)
            b_ih, b_hh = rnd.keep(b_ih), rnd.keep(b_hh)
            m = None if rmask is None else rmask[p]

            def step(h, inputs, W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh, m=m):
                x_t, valid_t = inputs
                zx = rnd.product(x_t @ W_ih.T) + b_ih
                if m is None:
                    zh = rnd.product(rnd.op(h) @ W_hh.T)
                else:
                    zh = xp.concatenate([rnd.product(rnd.op(h * m[g % m.shape[0]]) @ blk.T)
                                         for g, blk in enumerate((W_hh[:H], W_hh[H:]))], -1)
                zh = zh + b_hh
                f = sigmoid(zx[:, :H] + zh[:, :H])
                n = xp.tanh(zx[:, H:] + (f * zh[:, H:] if reset_gate else zh[:, H:]))
                h = xp.where(valid_t, rnd.keep((1 - f) * n + f * h), h)
                return h, xp.where(valid_t, rnd.out(h), 0 * h)

            h = rnd.keep(h0[p])
            if xp is np:
                out = [None] * T
                for t in (reversed(range(T)) if d else range(T)):
                    h, out[t] = step(h, (inp[:, t], valid[:, t]))
                out = np.stack(out, axis=1)
            else:  # one traced step (a Python loop of T steps compiles slowly)
                h, out = jax.lax.scan(step, h, (xp.swapaxes(inp, 0, 1), np.swapaxes(valid, 0, 1)),
                                      reverse=bool(d))
                out = xp.swapaxes(out, 0, 1)
            outs.append(out)
            finals.append(h)
        inp = references.next_input(outs, layer, L, dropout, rnd.out, rnd.cotangent, xp)
    return inp, xp.stack(finals)


# --- draws ----------------------------------------------------------------------------------

@st.composite
def cases(draw, max_T=6, max_H=5):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, max_T))
    L = draw(st.integers(1, 2))
    return dict(B=B, T=T, I=draw(st.integers(1, 5)), H=draw(st.integers(1, max_H)), L=L,
                bidir=draw(st.booleans()), reset_gate=draw(st.booleans()),
                lengths=draw(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                dropout=draw(st.sampled_from((0.0, 0.4))) if L > 1 else 0.0,
                seed=draw(st.integers(0, 2**16)))


def _case(B, T, I, H, L, bidir, lengths, reset_gate=True, dropout=0.0, seed=0):
    return dict(B=B, T=T, I=I, H=H, L=L, bidir=bidir, reset_gate=reset_gate, lengths=lengths,
                dropout=dropout, seed=seed)


def _inputs(c, dtype=jnp.float32):
    D = 2 if c["bidir"] else 1
    k = jax.random.split(jax.random.key(c["seed"]), 4)
    x = draws.normal(k[0], (c["B"], c["T"], c["I"]), dtype)
    h0 = draws.normal(k[1], (c["L"] * D, c["B"], c["H"]), dtype)
    # init's uniform weights, and biases pushed away from 0 so that every bias matters
    w = draws.init_weight(k[2], c["I"], c["H"], c["L"], c["bidir"], "mgu")  # init_mgu_weight
    # on the host: eagerly, each jnp op compiles again at each drawn shape
    w = np.asarray(w) * np.float32(2.0) + np.float32(0.1) * np.asarray(
        draws.normal(k[3], w.shape, w.dtype))
    return x, h0, jax.device_put(w.astype(dtype))


def _ours(c, key, **kw):
    def f(x, h0, w):
        return portable_rnn.mgu(x, h0, w, jnp.asarray(c["lengths"], jnp.int32), c["I"], c["H"],
                                c["L"], c["dropout"], c["bidir"], dropout_rng=key,
                                reset_gate=c["reset_gate"], **kw)
    return f


def _reference(c, masks, xp=np, rnd=None):
    def f(x, h0, w):
        return mgu_loop(x, h0, w, c["lengths"], c["I"], c["H"], c["L"], c["bidir"],
                        c["reset_gate"], xp=xp, dropout=masks, rnd=rnd)
    return f


def _loss(f, cot):
    def loss(x, h0, w):
        y, h_n = f(x, h0, w)
        return jnp.sum(y * cot) + jnp.sum(jnp.sin(h_n))
    return loss


def _close(got, want, tol):
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol * max(1.0, np.abs(r).max(initial=0)))


HARD = [
    _case(3, 5, 3, 4, 2, True, [5, 0, 2], dropout=0.4),  # a length 0, both directions, dropout
    _case(2, 4, 2, 3, 2, True, [0, 0], reset_gate=False),  # every length 0
    _case(2, 40, 6, 32, 1, True, [40, 13], seed=3),  # long and wide
    _case(1, 6, 5, 1, 2, False, [6], reset_gate=False, dropout=0.4, seed=5),
]


# --- against the float64 loop ---------------------------------------------------------------

@given(cases())
@example(HARD[0])
@example(HARD[1])
@example(HARD[2])
@example(HARD[3])
def test_equals_the_float64_loop_of_flaxs_equations(c):
    """float32 against the float64 loop, float64 (x64) against it to rounding; gradients of
    x, h_0 and the weights against JAX's autodiff of the loop."""
    key, masks = fam.case_dropout(c)
    x, h0, w = _inputs(c)
    got = jax.jit(_ours(c, key))(x, h0, w)
    as64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    want = _reference(c, masks)(as64(x), as64(h0), as64(w))
    tol = references.float32_tol(2e-5)
    _close(got, want, tol)
    D = 2 if c["bidir"] else 1
    cot = draws.normal(jax.random.key(c["seed"] + 1), (c["B"], c["T"], D * c["H"]))
    grads = jax.jit(jax.grad(_loss(_ours(c, key), cot), (0, 1, 2)))(x, h0, w)
    with references.float64():
        args = tuple(jax.device_put(as64(a)) for a in (x, h0, w, cot))
        ref = jax.jit(jax.grad(_loss(_reference(c, masks, jnp), args[3]), (0, 1, 2)))(
            *args[:3])
        ref = jax.tree.map(np.asarray, ref)
        # under x64 the same key draws other masks: the reference's drawn there too
        _, masks64 = fam.case_dropout(c)
        want64 = _reference(c, masks64)(*(np.asarray(a) for a in args[:3]))
        # without dropout the same loop at the same arguments: `ref`, not compiled again
        ref64 = ref if masks64 is None else jax.jit(
            jax.grad(_loss(_reference(c, masks64, jnp), args[3]), (0, 1, 2)))(*args[:3])
        got64 = jax.jit(_ours(c, key))(*args[:3])
        grads64 = jax.jit(jax.grad(_loss(_ours(c, key), args[3]), (0, 1, 2)))(*args[:3])
        ref64, grads64 = jax.tree.map(np.asarray, (ref64, grads64))
    _close(grads, ref, references.float32_tol(1e-4))
    _close(got64, want64, 1e-12)
    _close(grads64, ref64, 1e-11)


# --- against Flax's own nn.MGUCell --------------------------------------------------------------

def _map_cells(tree, fn):
    """`tree` with each Flax MGUCell's dict (the one holding ``hn``) replaced by ``fn(cell)``."""
    if "hn" in tree:
        return fn({k: dict(v) for k, v in tree.items()})
    return {k: _map_cells(v, fn) for k, v in tree.items()}


def _flax_trees(w, c):
    """Flax ``nn.RNN`` parameter trees from our weights (`mgu_weights_to_flax`); for
    ``reset_gate=False`` Flax's ``hn`` has no bias: b_hn folded into ``in``'s, as documented."""
    trees = portable_rnn.mgu_weights_to_flax(w, c["I"], c["H"], c["L"], c["bidir"])
    if c["reset_gate"]:
        return trees

    def fold(cell):
        cell["in"]["bias"] = cell["in"]["bias"] + cell["hn"].pop("bias")
        return cell
    return [_map_cells(t, fold) for t in trees]


def _flax_run(c, trees, x, h0):
    """Flax's layers one after another: y, and each pseudo-layer's final carry (Flax returns
    the carry of the last step for a sequence of length 0: not compared)."""
    cell = lambda: nn.MGUCell(c["H"], reset_gate=c["reset_gate"])  # noqa: E731
    lengths = jnp.asarray(c["lengths"])
    finals = []
    for layer, tree in enumerate(trees):
        if c["bidir"]:
            module = nn.Bidirectional(nn.RNN(cell()), nn.RNN(cell()), return_carry=True)
            carry, x = module.apply(tree, x, initial_carry=(h0[2 * layer], h0[2 * layer + 1]),
                                    seq_lengths=lengths)
            finals += list(carry)
        else:
            carry, x = nn.RNN(cell(), return_carry=True).apply(
                tree, x, initial_carry=h0[layer], seq_lengths=lengths)
            finals.append(carry)
    return x, jnp.stack(finals)


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(cases())
@example(HARD[0] | {"dropout": 0.0})
@example(HARD[1] | {"lengths": [4, 1]})
def test_equals_flax_mgu_cell_forward_and_gradients(c):
    """Outputs at valid steps, final carries of sequences with a length, and the gradients of
    x, h_0 and every Flax parameter (read back with `mgu_weights_from_flax`)."""
    c = c | {"dropout": 0.0}  # Flax's nn.RNN stack has no dropout between layers
    x, h0, w = _inputs(c)
    valid = (np.arange(c["T"])[None, :] < np.asarray(c["lengths"])[:, None])[..., None]
    has_length = np.asarray(c["lengths"]) > 0
    trees = _flax_trees(w, c)
    D = 2 if c["bidir"] else 1
    cot = draws.normal(jax.random.key(c["seed"] + 1), (c["B"], c["T"], D * c["H"]))

    def loss(run):
        def f(x, h0, params):
            y, h_n = run(x, h0, params)
            return (jnp.sum(jnp.where(valid, y, 0) * cot)
                    + jnp.sum(jnp.where(has_length[:, None], jnp.sin(h_n), 0)))
        return f

    ours = lambda x, h0, w: _ours(c, None)(x, h0, w)  # noqa: E731
    theirs = lambda x, h0, t: _flax_run(c, t, x, h0)  # noqa: E731
    y, h_n = jax.jit(ours)(x, h0, w)
    fy, fh = jax.jit(theirs)(x, h0, trees)
    tol = references.float32_tol(2e-5)
    _close(np.where(valid, y, 0), np.where(valid, fy, 0), tol)
    _close(np.asarray(h_n)[:, has_length], np.asarray(fh)[:, has_length], tol)

    gx, gh, gw = jax.jit(jax.grad(loss(ours), (0, 1, 2)))(x, h0, w)
    fx, fh0, ft = jax.jit(jax.grad(loss(theirs), (0, 1, 2)))(x, h0, trees)
    _close(gx, fx, references.float32_tol(1e-4))
    _close(gh, fh0, references.float32_tol(1e-4))
    if not c["reset_gate"]:  # Flax's hn has no bias: a zero one to read the tree back
        ft = [_map_cells(t, lambda cell: cell | {"hn": cell["hn"] | {"bias": jnp.zeros(c["H"])}})
              for t in ft]
    flax_grad = unpack(portable_rnn.mgu_weights_from_flax(ft), c["I"], c["H"], c["L"],
                       c["bidir"])
    H = c["H"]
    for (W_ih, W_hh, b_ih, b_hh), (fW_ih, fW_hh, fb_ih, fb_hh) in zip(
            unpack(gw, c["I"], H, c["L"], c["bidir"]), flax_grad, strict=True):
        _close((W_ih, W_hh, b_ih), (fW_ih, fW_hh, fb_ih), references.float32_tol(1e-4))
        # b_hf (and without the reset gate b_hn) adds up with its input bias: the same gradient
        summed = slice(0, 2 * H) if not c["reset_gate"] else slice(0, H)
        np.testing.assert_array_equal(np.asarray(b_hh[summed]), np.asarray(b_ih[summed]))
        if c["reset_gate"]:
            _close(b_hh[H:], fb_hh[H:], references.float32_tol(1e-4))


def test_reads_a_flax_mgu_and_writes_it_back():
    """`mgu_weights_from_flax` of an initialised ``nn.RNN(nn.MGUCell)`` computes Flax's outputs,
    and `mgu_weights_to_flax` gives back the same tree (its ``hf`` has no bias)."""
    I, H, T = 3, 6, 5
    x = draws.normal(jax.random.key(0), (2, T, I))
    rnn = nn.RNN(nn.MGUCell(H))
    tree = rnn.init(jax.random.key(1), x)
    w = portable_rnn.mgu_weights_from_flax(tree)
    y, _ = portable_rnn.mgu(x, jnp.zeros((1, 2, H)), w, None, I, H, 1, 0.0, False)
    tol = references.float32_tol(1e-5)
    np.testing.assert_allclose(np.asarray(y), np.asarray(rnn.apply(tree, x)), rtol=tol, atol=tol)
    (back,) = portable_rnn.mgu_weights_to_flax(w, I, H, 1, False)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match=r"missing \['hn/bias'\]"):  # a reset_gate=False tree
        portable_rnn.mgu_weights_from_flax(nn.RNN(nn.MGUCell(H, reset_gate=False)).init(
            jax.random.key(1), x))


# --- 16-bit ------------------------------------------------------------------------------------

@pytest.mark.slow  # the default tier: test_low_precision's 16-bit test of the driver's paths
@settings(max_examples=max(2, settings.default.max_examples // 2))
@given(cases(max_T=32, max_H=32))
@example(_case(3, 48, 8, 32, 2, True, [48, 0, 17], dropout=0.25, seed=1))
@example(_case(2, 32, 5, 32, 1, False, [32, 9], reset_gate=False, seed=2))
def test_bfloat16_equals_the_rounded_float64_loop(c):
    """docs/semantics.md's 16-bit rules (tests/test_low_precision.py): y and every gradient
    within `RECURRENT_ULPS` bfloat16 ulps of the array's largest value, the float32 h_n within
    `references.state_ulps`."""
    dt = jnp.bfloat16
    key, masks = fam.case_dropout(c)
    x, h0, w = _inputs(c)
    x, w, h0 = x.astype(dt), w.astype(dt), h0  # the hidden state in float32
    got = jax.jit(_ours(c, key))(x, h0, w)
    as64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    want = _reference(c, masks, rnd=Rounding(dt))(as64(x), as64(h0), as64(w))
    assert got[0].dtype == dt and got[1].dtype == jnp.float32
    assert_ulps(got[0], want[0], dt, RECURRENT_ULPS, "y")
    assert_ulps(got[1], want[1], dt, references.state_ulps(dt), "h_n")
    D = 2 if c["bidir"] else 1
    cot = np.asarray(draws.normal(jax.random.key(c["seed"] + 1),
                                  (c["B"], c["T"], D * c["H"])).astype(dt), np.float32)

    def loss(f, rounded):
        def weighted(x, h0, w):
            y, h_n = f(x, h0, w)
            if rounded:
                y = round_to(y, dt, jnp)
            t = jnp.float64 if rounded else jnp.float32
            return jnp.sum(y.astype(t) * jnp.asarray(cot, t)) + jnp.sum(jnp.sin(h_n))
        return weighted

    grads = jax.jit(jax.grad(loss(_ours(c, key), False), (0, 1, 2)))(x, h0, w)
    with references.float64():
        rnd = Rounding(dt, jnp, gradient_dtype=dt)
        args = tuple(jax.device_put(as64(a)) for a in (x, h0, w))
        ref = jax.jit(jax.grad(loss(_reference(c, masks, jnp, rnd), True), (0, 1, 2)))(*args)
        ref = jax.tree.map(np.asarray, ref)
    for g, r, name in zip(grads, ref, ("dx", "dh_0", "dweights")):
        assert_ulps(g, np.asarray(r, np.float32), dt, RECURRENT_ULPS, name)


# --- the hand-written backward step against JAX's autodiff of the forward ---------------------

@st.composite
def driver_cases(draw):
    c = draw(cases())
    return c | dict(rmask=draw(st.sampled_from((None, "one", "per_gate"))),
                    in_loop=draw(st.booleans()), unroll=draw(st.sampled_from((None, 1, 3))))


# float64 (x64) is the long one: `slow`, the float32 case runs the same code path
@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow)])
@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(driver_cases())
@example(HARD[0] | dict(rmask="per_gate", in_loop=True, unroll=3))
@example(HARD[1] | dict(rmask="one", in_loop=False, unroll=None))
@example(HARD[2] | dict(rmask=None, in_loop=True, unroll=1))
def test_hand_written_backward_equals_autodiff(dtype, c):
    """`MGUCell` (its own backward step, both ``reset_gate``s: the shared and the split
    recurrent gradient) against `ForwardOnly(MGUCell)`, which JAX differentiates."""
    cell = MGUCell(c["reset_gate"])
    assert hand_written_backward(cell) and not hand_written_backward(ForwardOnly(cell))
    assert cell.shared_dz is (not c["reset_gate"])
    ctx = references.float64() if dtype == "float64" else contextlib.nullcontext()
    with ctx:
        x, h0, w = _inputs(c, dtype)
        w = w.astype(dtype)
        D = 2 if c["bidir"] else 1
        rm = None
        if c["rmask"]:
            k = 2 if c["rmask"] == "per_gate" else 1
            rm = draws.bernoulli(jax.random.key(c["seed"] + 1), 0.7,
                                 (c["L"] * D, k, c["B"], c["H"])).astype(dtype) / 0.7
        key, _ = fam.case_dropout(c)
        cot = draws.normal(jax.random.key(c["seed"] + 3), (c["B"], c["T"], D * c["H"]),
                           dtype)

        def results(cell):
            def f(x, h0, w):
                config = ScanConfig(cell, c["I"], c["H"], c["L"], c["bidir"], c["dropout"],
                                    project_in_loop=c["in_loop"], unroll=c["unroll"])
                y, (h_n,) = rnn_scan(config, x, (h0,), w, jnp.asarray(c["lengths"], jnp.int32),
                                     key, rm)
                return y, h_n
            # the call and its gradient in one compiled program
            return jax.jit(lambda *a: (f(*a), jax.grad(_loss(f, cot), (0, 1, 2))(*a)))(x, h0, w)

        got, want = results(cell), results(ForwardOnly(cell))
    tol = 1e-12 if dtype == "float64" else references.float32_tol(1e-5)
    _close(got, want, tol)


# --- layers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("reset_gate", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_linen_nnx_equinox_and_the_functional_call_agree(reset_gate):
    """One parameter tree: Linen's, loaded into NNX and Equinox, and packed into the flat
    weights of the functional call; ragged lengths with a 0, an initial carry, two layers, both
    directions; and Linen's layer from a Flax ``nn.RNN(nn.MGUCell)``'s parameters."""
    eqx = pytest.importorskip("equinox")
    from portable_rnn import equinox as peqx
    I, H, L, T = 3, 5, 2, 6
    x = draws.normal(jax.random.key(0), (4, T, I))
    lengths = jnp.array([6, 0, 2, 5])
    h0 = draws.normal(jax.random.key(1), (2 * L, 4, H))
    layer = portable_rnn.linen.MGU(hidden_size=H, num_layers=L, bidirectional=True,
                                   reset_gate=reset_gate)
    variables = layer.init(jax.random.key(2), x)
    params = variables["params"]
    assert params["layer_1"]["reverse"]["W_hh"].shape == (2 * H, H)
    got = layer.apply(variables, x, lengths, h0, return_carry=True)
    model = portable_rnn.nnx.MGU(I, H, num_layers=L, bidirectional=True, reset_gate=reset_gate,
                                 rngs=nnx.Rngs(0)).load_params(params)
    emodel = peqx.MGU(I, H, num_layers=L, bidirectional=True, reset_gate=reset_gate,
                      return_state=True, key=jax.random.key(3))
    emodel = eqx.tree_at(lambda m: m.params, emodel, params)
    pseudo = [(f"layer_{l}", d) for l in range(L) for d in ("forward", "reverse")]
    group = [[params[l][d][n] for l, d in pseudo] for n in ("W_ih", "W_hh", "b_ih", "b_hh")]
    w = portable_rnn.pack_mgu_weights(*group, I, H, L, True)
    want = portable_rnn.mgu(x, h0, w, lengths, I, H, L, 0.0, True, reset_gate=reset_gate)
    ref = mgu_loop(*(np.asarray(a, np.float64) for a in (x, h0, w)), np.asarray(lengths), I, H,
                   L, True, reset_gate)
    for other in (model(x, lengths, h0, return_carry=True), emodel(x, lengths, h0), want):
        _close(other, got, 1e-6)
    _close(got, ref, references.float32_tol(2e-5))
    if reset_gate:  # Flax's tree: a reset_gate=True cell's
        flax_tree = nn.RNN(nn.MGUCell(H)).init(jax.random.key(4), x)
        one = portable_rnn.linen.MGU(hidden_size=H)
        tol = references.float32_tol(1e-5)
        np.testing.assert_allclose(
            np.asarray(one.apply(type(one).variables_from_flax(flax_tree), x)),
            np.asarray(nn.RNN(nn.MGUCell(H)).apply(flax_tree, x)), rtol=tol, atol=tol)


def test_the_peers_it_has_and_has_not():
    assert hasattr(portable_rnn.linen, "MGU") and hasattr(portable_rnn.nnx, "MGU")
    assert not hasattr(portable_rnn, "mgu_weights_from_torch")  # PyTorch has no MGU
    assert not hasattr(portable_rnn, "mgu_weights_from_keras")  # nor Keras
    if importlib.util.find_spec("keras") is not None:
        assert "MGU" not in portable_rnn.keras.__all__
    if importlib.util.find_spec("equinox") is not None:  # Equinox has no MGU cell to convert
        assert not hasattr(portable_rnn.equinox.MGU, "from_eqx_cells")


# --- routing --------------------------------------------------------------------------------

def _explain(H=4, **kw):
    x, h0 = jax.ShapeDtypeStruct((2, 3, 4), jnp.float32), jax.ShapeDtypeStruct((1, 2, H),
                                                                              jnp.float32)
    w = jax.ShapeDtypeStruct((portable_rnn.get_num_params_in_mgu(4, H, 1, False),), jnp.float32)
    return portable_rnn.explain_mgu(x, h0, w, None, 4, H, 1, 0.0, False, **kw)


@pytest.mark.parametrize("caps", [None, GPU, TPU], ids=["here", "pretend H100", "pretend TPU"])
def test_explain_says_why_each_route_cannot_serve(caps):
    d = _explain(capabilities=caps)
    assert d.op == "mgu"
    cudnn = "cuDNN has no mgu cell (no cudnnRNNMode_t computes it)"
    assert d.rejected["cudnn"][0].startswith(cudnn) and len(d.rejected["cudnn"]) == 1
    assert d.rejected["cudnn_ffi"] == (cudnn,)
    text = str(d)
    assert text.startswith(f"mgu: {d.implementation}") and cudnn in text
    if caps is TPU:  # the kernel serves H = 4, padded to the lanes; the model ranks it
        assert "pallas" in d.predicted  # it serves the call: the model ranked it
        assert d.implementation == min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"])
    else:
        assert d.implementation == "scan"
        assert "needs a TPU" in " ".join(d.rejected["pallas"])
    for impl in ("cudnn", "cudnn_ffi"):
        with pytest.raises(ValueError, match=rf"implementation='{impl}' cannot serve this mgu "
                                             rf"call:\n  - {re.escape(cudnn)}"):
            _explain(capabilities=caps, implementation=impl)


def test_on_a_tpu_the_pallas_kernel_serves_it_when_asked():
    d = _explain(H=128, capabilities=TPU)  # the routing model ranks the MGU like the others
    assert set(d.predicted) == {"pallas", "scan"}
    assert d.implementation == min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"])
    assert _explain(H=128, capabilities=TPU, implementation="pallas").implementation == "pallas"


@pytest.mark.slow  # the kernel template's path: test_pallas_route.py's drawn cases run the MGU
@pytest.mark.parametrize("c", [
    _case(3, 5, 3, 128, 2, True, [5, 0, 2], dropout=0.5, seed=1),
    _case(2, 4, 2, 128, 1, False, [1, 4], reset_gate=False, seed=2),
], ids=["reset gate, bidirectional, L=2, dropout", "no reset gate"])
def test_pallas_route_in_interpret_mode_equals_the_scan_path(c):
    """The Pallas TPU kernel template runs the MGU's step and backward step (interpreted on a
    CPU): outputs and gradients equal the scan path's."""
    key, _ = fam.case_dropout(c)
    x, h0, w = _inputs(c)
    D = 2 if c["bidir"] else 1
    cot = draws.normal(jax.random.key(c["seed"] + 1), (c["B"], c["T"], D * c["H"]))
    results = []
    for impl in ("pallas", "scan"):
        mode = pallas.interpret() if impl == "pallas" else contextlib.nullcontext()
        with mode:
            f = _ours(c, key, implementation=impl)
            results.append((jax.jit(f)(x, h0, w),
                            jax.jit(jax.grad(_loss(f, cot), (0, 1, 2)))(x, h0, w)))
    _close(results[0], results[1], references.float32_tol(1e-5))


# --- transforms and errors ------------------------------------------------------------------

@pytest.mark.slow  # the driver's transforms: the LSTM's default-tier tests run them
def test_jit_vmap_grad_compose():
    c = _case(2, 4, 3, 4, 2, True, [4, 1])
    x, h0, w = _inputs(c)
    xs = jnp.stack([x, 2 * x, -x])
    lengths = jnp.asarray(c["lengths"])

    def one(x, w):
        y, h_n = portable_rnn.mgu(x, h0, w, lengths, 3, 4, 2, 0.0, True)
        return jnp.sum(y ** 2) + jnp.sum(h_n)

    per = jax.jit(jax.vmap(jax.grad(one, (0, 1)), in_axes=(0, None)))(xs, w)
    for i in range(3):
        want = jax.grad(one, (0, 1))(xs[i], w)
        _close((per[0][i], per[1][i]), want, references.float32_tol(1e-5))
    batched = jax.grad(lambda xs, w: jnp.sum(jax.vmap(one, (0, None))(xs, w)), 1)(xs, w)
    _close(batched, per[1].sum(0), references.float32_tol(1e-5))


def test_bad_reset_gate_names_the_argument():
    c = _case(1, 2, 3, 4, 1, False, [2])
    x, h0, w = _inputs(c)
    with pytest.raises(TypeError, match=r"^`reset_gate` must be a Python bool; got 'yes'\.$"):
        portable_rnn.mgu(x, h0, w, None, 3, 4, 1, 0.0, False, reset_gate="yes")
    with pytest.raises(TypeError, match=r"`reset_gate` must be a Python bool; got 1\."):
        portable_rnn.linen.MGU(hidden_size=4, reset_gate=1).init(jax.random.key(0), x)
    with pytest.raises(TypeError, match=r"`nonlinearity` is not an argument of nnx.MGU \(only "
                                        r"SimpleRNN has it\)"):
        portable_rnn.nnx.MGU(3, 4, nonlinearity="relu", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"`weights` must have shape \(get_num_params_in_mgu"):
        portable_rnn.mgu(x, h0, w[:-1], None, 3, 4, 1, 0.0, False)

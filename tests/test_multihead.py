"""Multi-head (block-diagonal) recurrence, ``num_heads``: FlashRNN's heads (NX-AI's ``flashrnn``;
arXiv 2412.07752), ``NH`` heads of ``DH = H / NH`` units, each head's gates reading only its own
units of ``h``.

Against references that share no code with the driver's per-head products: a float64 step loop
written here that reads the flat vector as the layout documents it and multiplies head by
head and gate by gate (NumPy, and `jax.numpy` for gradients); FlashRNN's own vanilla PyTorch
backend (``flashrnn==1.0.8``, on CPU; skipped without torch or flashrnn) for the LSTM, the GRU
and the sLSTM, NH in {1, 2, 4}: outputs, final states and every gradient; hypothesis-drawn
families (those and the simple RNN and the MGU), shapes with ragged lengths (0 included), both
directions, two layers and dropout between layers; recurrent dropout masks; heads equal to
the dense layer whose ``W_hh`` is the block-diagonal matrix; NH = 1 bit-identical to not
passing it; the layers; the routes' refusals and the errors.

The equation (`layout`): gate ``g`` of head ``k``, unit ``j`` (row ``g*H + k*DH + j``) adds
``W_hh[p][k, g*DH + j, :] @ h[k*DH:(k+1)*DH]``, with ``W_hh[p]`` (NH, G*DH, DH).
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
from portable_rnn._src.recurrent.slstm import flashrnn as slstm_conv

GATES = {"lstm": 4, "gru": 3, "simple_rnn": 1, "mgu": 2, "slstm": 4}
STATES = {"lstm": 2, "gru": 1, "simple_rnn": 1, "mgu": 1, "slstm": 4}
GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")


# --- the reference: the equations, head by head, one step at a time ---------------------------

def _sigmoid(v, xp):
    return 1.0 / (1.0 + xp.exp(-v))


def _maximum(a, b, xp):
    """``max(a, b)``, a tie's derivative split in half (as `jnp.maximum` and `torch.maximum`)."""
    return xp.where(a > b, a, xp.where(a < b, b, (a + b) / 2))


def _step(family, zx, zh, state, xp):
    """The new states from the input side ``zx`` (with b_ih) and the recurrent side ``zh``
    (with b_hh), (B, G*H) each, gate-major."""
    H = state[0].shape[-1]

    def gate(z, g):
        return z[:, g * H:(g + 1) * H]
    if family == "lstm":
        a = zx + zh
        c = _sigmoid(gate(a, 1), xp) * state[1] + _sigmoid(gate(a, 0), xp) * xp.tanh(gate(a, 2))
        return (_sigmoid(gate(a, 3), xp) * xp.tanh(c), c)
    if family == "gru":
        r = _sigmoid(gate(zx, 0) + gate(zh, 0), xp)
        z = _sigmoid(gate(zx, 1) + gate(zh, 1), xp)
        n = xp.tanh(gate(zx, 2) + r * gate(zh, 2))
        return ((1 - z) * n + z * state[0],)
    if family == "simple_rnn":
        return (xp.tanh(zx + zh),)
    if family == "mgu":  # Flax's MGUCell, reset_gate=True
        f = _sigmoid(gate(zx, 0) + gate(zh, 0), xp)
        n = xp.tanh(gate(zx, 1) + f * gate(zh, 1))
        return ((1 - f) * n + f * state[0],)
    _, c, n, m = state  # the sLSTM, FlashRNN's equations
    a = zx + zh
    a_i, a_f, a_z, a_o = (gate(a, g) for g in range(4))
    log_f = -xp.logaddexp(0.0, -a_f) + m
    m_new = xp.where(n == 0, a_i, _maximum(a_i, log_f, xp))
    i = xp.where(n == 0, 1.0, xp.exp(a_i - m_new))
    f = xp.exp(log_f - m_new)
    c_new = f * c + i * xp.tanh(a_z)
    n_new = _maximum(f * n + i, 1.0 + 0 * n, xp)
    return (c_new / n_new * _sigmoid(a_o, xp), c_new, n_new, m_new)


def read_weights(w, family, I, H, NH, L, bidir):
    """The flat vector as `layout` documents it: per pseudo-layer W_ih (G*H, in) and W_hh (NH,
    G*DH, DH), then per pseudo-layer b_ih and b_hh (G*H,)."""
    return [(w_ih, w_hh.reshape(NH, -1, H // NH), b_ih, b_hh) for w_ih, w_hh, b_ih, b_hh
            in references.flat_layers(w, GATES[family], I, H, L, bidir, NH)]


def block_product(h, W_hh, xp, masks=None):
    """``zh`` (B, G*H) of h (B, H): head by head and gate by gate, gate-major. `masks`: the
    recurrent dropout masks (K, B, H), gate g reading ``h * masks[g]`` (``masks[0]`` for K =
    1), or None."""
    NH, GDH, DH = W_hh.shape
    G = GDH // DH
    if masks is not None:
        return xp.concatenate([
            (h * masks[g if len(masks) > 1 else 0])[:, k * DH:(k + 1) * DH]
            @ W_hh[k, g * DH:(g + 1) * DH].T for g in range(G) for k in range(NH)], axis=-1)
    heads = [h[:, k * DH:(k + 1) * DH] @ W_hh[k].T for k in range(NH)]  # (B, G*DH) each
    return xp.concatenate([z[:, g * DH:(g + 1) * DH] for g in range(G) for z in heads],
                          axis=-1)


def loop(family, x, states, w, lengths, I, H, NH, L, bidir, *, xp=np, dropout=None,
         recurrent_mask=None):
    """y (B, T, D*H) zero past each length, and the final states (L*D, B, H) at each sequence's
    last valid step; the reverse direction reads each sequence from its last valid step.
    `dropout`: ``(keep masks, rate)`` between layers; `recurrent_mask`: (L*D, K, B, H) or
    None. With ``xp=jax.numpy`` (differentiable) the time loop is a `lax.scan` of the same
    step (a loop of T Python steps compiles slowly)."""
    D, T = (2 if bidir else 1), x.shape[1]
    layers = read_weights(w, family, I, H, NH, L, bidir)
    valid = (np.arange(T)[:, None] < np.asarray(lengths)[None, :])[..., None]  # (T, B, 1)
    inp, finals = x, []
    for layer in range(L):
        outs = []
        for d in range(D):
            p = layer * D + d
            W_ih, W_hh, b_ih, b_hh = layers[p]
            masks = None if recurrent_mask is None else recurrent_mask[p]

            def step(state, inputs, W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh, masks=masks):
                x_t, valid_t = inputs
                new = _step(family, x_t @ W_ih.T + b_ih,
                            block_product(state[0], W_hh, xp, masks) + b_hh, state, xp)
                state = tuple(xp.where(valid_t, a, b) for a, b in zip(new, state))
                return state, xp.where(valid_t, state[0], 0 * state[0])

            state = tuple(s[p] for s in states)
            if xp is np:
                out = [None] * T
                for t in (reversed(range(T)) if d else range(T)):
                    state, out[t] = step(state, (inp[:, t], valid[t]))
                out = np.stack(out, axis=1)
            else:
                state, out = jax.lax.scan(step, state, (jnp.swapaxes(inp, 0, 1), valid),
                                          reverse=bool(d))
                out = jnp.swapaxes(out, 0, 1)
            outs.append(out)
            finals.append(state)
        inp = xp.concatenate(outs, axis=-1)
        if dropout is not None and layer < L - 1:
            keep, rate = dropout
            inp = xp.where(keep[layer], inp * (1 / (1 - rate)), 0.0)
    return (inp, *(xp.stack(s) for s in zip(*finals)))


# --- cases ---------------------------------------------------------------------------------

def _case(family, B, T, I, NH, DH, L, bidir, lengths, dropout=0.0, seed=0):
    return dict(family=family, B=B, T=T, I=I, NH=NH, H=NH * DH, L=L, bidir=bidir,
                lengths=lengths, dropout=dropout, seed=seed)


@st.composite
def cases(draw):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, 5))
    L = draw(st.integers(1, 2))
    return _case(draw(st.sampled_from(tuple(GATES))), B, T, draw(st.integers(1, 4)),
                 draw(st.sampled_from((1, 2, 3, 4))), draw(st.integers(1, 3)), L,
                 draw(st.booleans()), draw(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                 draw(st.sampled_from((0.0, 0.4))) if L > 1 else 0.0,
                 draw(st.integers(0, 2**16)))


def _inputs(c, dtype=jnp.float32):
    """x, the initial states (the sLSTM's n > 0 or 0 per unit: both branches of its first
    step) and weights spread so that the gates move."""
    k = jax.random.split(jax.random.key(c["seed"]), 4)
    D = 2 if c["bidir"] else 1
    shape = (c["L"] * D, c["B"], c["H"])
    x = jax.random.normal(k[0], (c["B"], c["T"], c["I"]), dtype)
    states = tuple(jax.random.normal(kk, shape, dtype)
                   for kk in jax.random.split(k[1], STATES[c["family"]]))
    if c["family"] == "slstm":
        n0 = jnp.abs(states[2]) + 0.2
        n0 = jnp.where(jax.random.bernoulli(k[3], 0.3, shape), 0.0, n0)
        states = states[:2] + (n0, states[3])
    init = getattr(portable_rnn, f"init_{c['family']}_weight")
    w = init(k[2], c["I"], c["H"], c["L"], c["bidir"], num_heads=c["NH"])
    w = (w * 2.0 + 0.1 * jax.random.normal(k[3], w.shape, w.dtype)).astype(dtype)
    return x, states, w


def _op(c, key=None, **kw):
    def f(x, states, w):
        return getattr(portable_rnn, c["family"])(
            x, *states, w, jnp.asarray(c["lengths"], jnp.int32), c["I"], c["H"], c["L"],
            c["dropout"], c["bidir"], dropout_rng=key, **{"num_heads": c["NH"], **kw})
    return f


def _reference(c, masks, xp):
    def f(x, states, w):
        return loop(c["family"], x, states, w, c["lengths"], c["I"], c["H"], c["NH"], c["L"],
                    c["bidir"], xp=xp, dropout=masks)
    return f


def _outputs_and_grads(f, cot):
    """A jitted function of (x, states, w, *more): ``f``'s outputs and the gradients (of x, the
    states and w) of a scalar of the output and of every final state."""
    def loss(x, states, w, *more):
        y, *finals = outs = f(x, states, w, *more)
        return jnp.sum(y * cot) + sum(jnp.sum(jnp.sin(s)) for s in finals), outs

    def both(x, states, w, *more):
        (_, outs), grads = jax.value_and_grad(loss, (0, 1, 2), has_aux=True)(x, states, w,
                                                                            *more)
        return outs, grads
    return jax.jit(both)


def _close(got, want, tol, what=""):
    """Each leaf within `tol` (relative, and absolute against the largest value); returns the
    largest relative error."""
    worst = 0.0
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        assert g.shape == r.shape, what
        scale = max(1.0, np.abs(r).max(initial=0))
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol * scale, err_msg=what)
        worst = max(worst, float(np.abs(g - r).max(initial=0)) / scale)
    return worst


def _float64_case(c):
    """The op in float64 against the loop: outputs and final states (NumPy), and every
    gradient against JAX's autodiff of the loop (`jax.numpy`); returns the largest errors."""
    with references.float64():  # the masks too: bernoulli draws in its probability's dtype
        key, masks = fam.case_dropout(c)
        x, states, w = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), _inputs(c))
        D = 2 if c["bidir"] else 1
        cot = jax.random.normal(jax.random.key(c["seed"] + 1), (c["B"], c["T"], D * c["H"]),
                                jnp.float64)
        got, grads = _outputs_and_grads(_op(c, key), cot)(x, states, w)
        as64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
        want = _reference(c, masks, np)(as64(x), tuple(map(as64, states)), as64(w))
        _, want_grads = _outputs_and_grads(_reference(c, masks, jnp), cot)(x, states, w)
    return (_close(got, want, 1e-12, "outputs and final states"),
            _close(grads, want_grads, 1e-10, "gradients of x, the states and the weights"))


HARD = [
    _case("lstm", 3, 5, 3, 2, 2, 2, True, [5, 0, 2], dropout=0.4),  # length 0, both ways, dropout
    _case("gru", 2, 4, 2, 4, 1, 2, True, [0, 3]),  # DH = 1: every head one unit
    _case("slstm", 2, 5, 3, 2, 3, 2, True, [5, 1], dropout=0.4),
    _case("simple_rnn", 2, 3, 2, 3, 2, 1, False, [3, 2]),
    _case("mgu", 2, 4, 2, 2, 2, 2, True, [4, 0], dropout=0.4),
]


# --- against the float64 loop ---------------------------------------------------------------

# NH = 1 is the dense layout (bit for bit the layer without heads: below) and NH = 2 the code
# path of NH = 4: both in the full tier
@pytest.mark.parametrize("family", ["lstm", "gru", "slstm"])
@pytest.mark.parametrize("num_heads", [pytest.param(1, marks=pytest.mark.slow),
                                       pytest.param(2, marks=pytest.mark.slow), 4])
def test_float64_equals_the_loop_of_the_block_diagonal_equations(family, num_heads):
    """float64, two bidirectional layers, ragged lengths (0 included): outputs and final states
    to 1e-12 of the loop, every gradient to 1e-10 of JAX's autodiff of it."""
    _float64_case(_case(family, 3, 4, 3, num_heads, 8 // num_heads, 2, True, [4, 0, 3],
                        seed=num_heads))


@pytest.mark.slow  # about 30 s on 2 cores: the full tier
@settings(max_examples=max(1, settings.default.max_examples // 4))
@given(cases())
@example(HARD[0])
@example(HARD[1])
@example(HARD[2])
@example(HARD[3])
@example(HARD[4])
def test_drawn_cases_equal_the_loop(c):
    """Drawn families, shapes, heads (DH = 1 included), ragged lengths, directions, layers and
    dropout between layers (the op's masks, which the loop applies as documented)."""
    _float64_case(c)


# the GRU's per-head products are the LSTM's code path (the full tier, with the sLSTM's)
@pytest.mark.parametrize("family", ["lstm", pytest.param("gru", marks=pytest.mark.slow), "slstm"])
def test_heads_equal_the_dense_layer_of_the_block_diagonal_matrix(family):
    """The same network written dense: W_hh (G*H, H) zero outside the heads' blocks (float32,
    to rounding: the dense product sums the zeros too)."""
    I, DH, NH, L, bidir = 3, 3, 4, 2, True
    H = NH * DH
    c = _case(family, 2, 6, I, NH, DH, L, bidir, [6, 4])
    x, states, w = _inputs(c)
    G = GATES[family]
    unpack = getattr(portable_rnn, f"unpack_{family}_weights")
    pack = getattr(portable_rnn, f"pack_{family}_weights")
    groups = unpack(w, I, H, L, bidir, num_heads=NH)
    dense = {}
    for p, blocks in groups[1].items():
        full = np.zeros((G * H, H), np.float32)
        for k in range(NH):
            for g in range(G):
                full[g * H + k * DH:g * H + (k + 1) * DH, k * DH:(k + 1) * DH] = \
                    np.asarray(blocks[k, g * DH:(g + 1) * DH])
        dense[p] = full
    w_dense = pack(groups[0], dense, groups[2], groups[3], I, H, L, bidir)
    got = jax.jit(_op(c))(x, states, w)
    want = jax.jit(_op(c, num_heads=1))(x, states, w_dense)
    _close(got, want, references.float32_tol(1e-5), family)


@pytest.mark.parametrize("family", ["lstm", pytest.param("gru", marks=pytest.mark.slow)])
def test_recurrent_dropout_masks_with_heads(family):
    """Keras' recurrent dropout with heads: one mask (L*D, B, H) and one per gate (L*D, G, B,
    H), each gate's block of every head reading ``h * mask``; float64 against the loop,
    outputs, final states and every gradient (the hand-written backward's masked products).
    The loop takes one mask as G equal ones (one compiled reference for both); the GRU's
    masked products are the LSTM's code path (the full tier)."""
    c = _case(family, 2, 4, 3, 2, 2, 2, True, [4, 2])
    D, G = 2, GATES[family]

    def reference(x, states, w, per_gate, xp=jnp):
        return loop(family, x, states, w, c["lengths"], c["I"], c["H"], c["NH"], c["L"], True,
                    xp=xp, recurrent_mask=per_gate)

    def ours(x, states, w, mask):
        return _op(c, recurrent_dropout_mask=mask)(x, states, w)

    with references.float64():
        x, states, w = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), _inputs(c))
        cot = jax.random.normal(jax.random.key(4), (c["B"], c["T"], D * c["H"]), jnp.float64)
        op, ref = _outputs_and_grads(ours, cot), _outputs_and_grads(reference, cot)
        for shape in ((c["L"] * D, c["B"], c["H"]), (c["L"] * D, G, c["B"], c["H"])):
            mask = jax.random.bernoulli(jax.random.key(6), 0.7, shape).astype(jnp.float64) / 0.7
            per_gate = jnp.broadcast_to(mask if mask.ndim == 4 else mask[:, None],
                                        (c["L"] * D, G, c["B"], c["H"]))
            got, grads = op(x, states, w, mask)
            _, want_grads = ref(x, states, w, per_gate)
            as64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
            want = reference(as64(x), tuple(map(as64, states)), as64(w), as64(per_gate), np)
            _close(got, want, 1e-12, f"outputs, mask {shape}")
            _close(grads, want_grads, 1e-10, f"gradients, mask {shape}")


# --- against FlashRNN's vanilla PyTorch backend -------------------------------------------------

def _flashrnn_inputs(torch, family, W_ih, W_hh, b_ih, b_hh, x, NH):
    """FlashRNN's (Wx (B, T, G_w, NH, DH), R (G_r, NH, DH, DH), b (G_t, NH, DH)) for one
    pseudo-layer, from our arrays (torch leaves, so that autograd maps the gradients back):
    R[g, k] is rows g*DH.. of head k's W_hh. Its GRU takes R in the order (n, r, z), Wx in
    ours (r, z, n) and four biases (b_hn, b_r, b_z, b_in)."""
    G = GATES[family]
    H = W_ih.shape[0] // G
    DH = H // NH
    R = W_hh.reshape(NH, G, DH, DH).permute(1, 0, 2, 3)
    Wx = torch.einsum("bti,ri->btr", x, W_ih).reshape(x.shape[0], x.shape[1], G, NH, DH)
    bi, bh = b_ih.reshape(G, NH, DH), b_hh.reshape(G, NH, DH)
    if family == "gru":
        return Wx, R[[2, 0, 1]], torch.stack([bh[2], bi[0] + bh[0], bi[1] + bh[1], bi[2]])
    return Wx, R, bi + bh


def _flashrnn_stack(torch, flashrnn, family, layers, x, states, NH, bidir):
    """FlashRNN layer after layer (one call per pseudo-layer; the reverse direction on the
    time-reversed sequence): (y (B, T, D*H), the final states per pseudo-layer, (S, B, 1, NH,
    DH) each)."""
    D = 2 if bidir else 1
    finals, y = [], x
    for layer in range(len(layers) // D):
        outs = []
        for d in range(D):
            p = layer * D + d
            inp = torch.flip(y, (1,)) if d else y
            Wx, R, b = _flashrnn_inputs(torch, family, *layers[p], inp, NH)
            hs, last = flashrnn(Wx, R, b, states=states[p], function=family, backend="vanilla",
                                dtype=str(x.dtype).removeprefix("torch."))
            out = hs[0].reshape(hs.shape[1], hs.shape[2], -1)  # h at every step: (B, T, H)
            outs.append(torch.flip(out, (1,)) if d else out)
            finals.append(last)
        y = torch.cat(outs, dim=-1)
    return y, finals


@pytest.mark.slow  # an optional peer (CI's lowest leg installs it): the full tier
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("family", ["lstm", "gru", "slstm"])
def test_equals_flashrnn_vanilla_for_every_head_count(family, dtype):
    """FlashRNN's vanilla backend (autograd through its forward), NH = 1, 2, 4 heads of H = 8,
    two bidirectional layers: every step's output, the final states and the gradients of x,
    every initial state and every weight; float64 to rounding, float32 to float32 rounding. The
    sLSTM's first layer starts from zero states, its second from n > 0 everywhere (FlashRNN's
    batch-wide n == 0 test and ours per unit agree on both)."""
    torch = pytest.importorskip("torch")
    flashrnn = pytest.importorskip("flashrnn").flashrnn
    B, T, I, H, L, bidir = 3, 6, 4, 8, 2, True
    D = 2
    tdt = getattr(torch, dtype)
    ctx = references.float64 if dtype == "float64" else contextlib.nullcontext
    errors = {}
    for NH in (1, 2, 4):
        c = _case(family, B, T, I, NH, H // NH, L, bidir, [T] * B, seed=NH + 17)
        x, states, w = _inputs(c)
        if family == "slstm":
            states = states[:2] + (jnp.abs(states[2]) + 0.5,) + states[3:]
            states = tuple(s.at[:2].set(0) for s in states)  # layer 0: zeros
        cot = jax.random.normal(jax.random.key(9), (B, T, D * H))

        def t(a):
            return torch.tensor(np.asarray(a, np.float64), dtype=tdt, requires_grad=True)
        groups = portable_rnn.__dict__[f"unpack_{family}_weights"](
            np.asarray(w, np.float64), I, H, L, bidir, num_heads=NH)
        layers = [tuple(t(g[p]) for g in groups) for p in range(L * D)]
        tx = t(x)
        tstates = [t(np.stack([np.asarray(s[p]).reshape(B, 1, NH, H // NH) for s in states]))
                   for p in range(L * D)]
        ty, tfinals = _flashrnn_stack(torch, flashrnn, family, layers, tx, tstates, NH, bidir)
        tcot = torch.tensor(np.asarray(cot), dtype=tdt)
        loss = (ty * tcot).sum() + sum(torch.sin(f).sum() for f in tfinals)
        loss.backward()

        def ours_layout(per_pseudo):  # (S, B, 1, NH, DH) per pseudo-layer -> S of (L*D, B, H)
            return tuple(np.stack([np.asarray(a.detach())[s].reshape(B, H) for a in per_pseudo])
                         for s in range(STATES[family]))
        with ctx():
            args = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), dtype), (x, states, w, cot))
            (y, *finals), grads = _outputs_and_grads(_op(c), args[3])(*args[:3])
            dw = portable_rnn.__dict__[f"unpack_{family}_weights"](grads[2], I, H, L, bidir,
                                                                   num_heads=NH)
        tol = 1e-12 if dtype == "float64" else references.float32_tol(2e-5)
        gtol = 1e-11 if dtype == "float64" else references.float32_tol(1e-4)
        errors[NH] = (
            _close(y, ty.detach().numpy(), tol, "y"),
            _close(tuple(finals), ours_layout(tfinals), tol, "final states"),
            max(_close(grads[0], tx.grad.numpy(), gtol, "dx"),
                _close(grads[1], ours_layout([s.grad for s in tstates]), gtol, "d states"),
                *(_close(dw[n][p], layers[p][n].grad.numpy(), gtol, f"d{n} {p}")
                  for p in range(L * D) for n in range(4))))
    print(f"{family} {dtype}: largest relative errors (y, finals, gradients) per NH: {errors}")


def test_slstm_converter_round_trips_heads():
    """`slstm.flashrnn` writes and reads NH heads: R (4, NH, DH, DH) is ours reshaped and
    transposed, W and b ours reshaped; states (4, B, 1, NH, DH)."""
    I, H, NH = 3, 6, 3
    DH = H // NH
    w = portable_rnn.init_slstm_weight(jax.random.key(0), I, H, 2, True, num_heads=NH)
    layers = slstm_conv.weights_to_flashrnn(w, I, H, 2, True, num_heads=NH)
    assert [tuple(p[k].shape for k in "WRb") for p in layers[1:3]] == [
        ((4, NH, DH, I), (4, NH, DH, DH), (4, NH, DH)),
        ((4, NH, DH, 2 * H), (4, NH, DH, DH), (4, NH, DH))]
    W_hh = portable_rnn.unpack_slstm_weights(w, I, H, 2, True, num_heads=NH)[1][0]
    for g in range(4):
        for k in range(NH):
            np.testing.assert_array_equal(layers[0]["R"][g, k], W_hh[k, g * DH:(g + 1) * DH])
    back, *sizes = slstm_conv.weights_from_flashrnn(
        [{k: v for k, v in p.items() if k != "b"} | {"b": p["b"]} for p in layers],
        bidirectional=True)
    assert sizes == [I, H, 2, NH]
    a, b = (portable_rnn.unpack_slstm_weights(v, I, H, 2, True, num_heads=NH) for v in (w, back))
    for p in range(4):
        for n in (0, 1):
            np.testing.assert_array_equal(np.asarray(a[n][p]), np.asarray(b[n][p]))
    states = tuple(np.arange(4 * 2 * H, dtype=np.float32).reshape(4, 2, H) + v for v in range(4))
    flash = slstm_conv.states_to_flashrnn(*states, num_heads=NH)
    assert flash[0].shape == (4, 2, 1, NH, DH)
    np.testing.assert_array_equal(flash[1][0, 1, 0, 2], states[0][1, 1, 2 * DH:3 * DH])
    for got, want in zip(slstm_conv.states_from_flashrnn(flash), states):
        np.testing.assert_array_equal(got, want)


# --- one head is the dense layer, bit for bit -------------------------------------------------

@pytest.mark.parametrize("family", ["lstm", "gru", "simple_rnn", "mgu", "slstm", "classic_gru"])
def test_one_head_is_the_layer_without_heads_bit_for_bit(family):
    """``num_heads=1`` gives the call without it, bit for bit (outputs, final states and every
    gradient), with the same weights (the layout without heads) and the same program: the same
    jaxpr and the same lowered module, its constants included (so the same bits, without
    compiling it twice)."""
    I, H, L, bidir = 3, 4, 2, True
    n_states = len(portable_rnn._src.recurrent.families.FAMILIES[family].states)
    k = jax.random.split(jax.random.key(3), 3)
    x = jax.random.normal(k[0], (2, 5, I))
    states = tuple(jax.random.normal(kk, (L * 2, 2, H)) for kk in jax.random.split(k[1], n_states))
    if family == "slstm":
        states = states[:2] + (jnp.abs(states[2]),) + states[3:]
    init = getattr(portable_rnn, f"init_{family}_weight")
    w = init(k[2], I, H, L, bidir)
    np.testing.assert_array_equal(w, init(k[2], I, H, L, bidir, num_heads=1))
    op = getattr(portable_rnn, family)
    lengths = jnp.array([5, 2])

    def run(**kw):
        def loss(x, states, w):
            y, *finals = op(x, *states, w, lengths, I, H, L, 0.0, bidir, **kw)
            return jnp.sum(y * y) + sum(jnp.sum(jnp.sin(s)) for s in finals), (y, *finals)
        return jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))

    jaxprs = [str(jax.make_jaxpr(run(**kw))(x, states, w)) for kw in ({}, {"num_heads": 1})]
    assert jaxprs[0] == jaxprs[1]
    modules = [run(**kw).lower(x, states, w).as_text() for kw in ({}, {"num_heads": 1})]
    assert modules[0] == modules[1]


# --- routes and errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("caps", [GPU, TPU], ids=["as_if_gpu", "as_if_tpu"])
def test_cudnn_refuses_heads_and_the_pallas_kernel_serves_them(caps):
    """The cuDNN routes multiply by a dense W_hh and reject heads; the Pallas kernel serves
    them (head by head), asked for or, on a TPU v5e, whose grid has timed calls with heads
    (benchmarks/results/tpu/95510b0/), where its routing model predicts it faster."""
    S = jax.ShapeDtypeStruct
    I, H, NH = 32, 128, 4
    n = portable_rnn.get_num_params_in_lstm(I, H, 1, False, num_heads=NH)
    args = (S((8, 10, I), jnp.float32), S((1, 8, H), jnp.float32), S((1, 8, H), jnp.float32),
            S((n,), jnp.float32), None, I, H, 1, 0.0, False)
    d = portable_rnn.explain_lstm(*args, capabilities=caps, num_heads=NH)
    for route in ("cudnn", "cudnn_ffi"):
        assert any(r.startswith(f"num_heads={NH}: ") and "dense W_hh" in r
                   for r in d.rejected[route]), (route, d.rejected[route])
    assert not any("num_heads" in r for r in d.rejected.get("pallas", ())), d.rejected
    if caps is TPU:
        assert set(d.predicted) == {"pallas", "scan"}, d.predicted
        assert d.implementation == min(d.predicted, key=lambda r: d.predicted[r]["fwdbwd"])
        asked = portable_rnn.explain_lstm(*args, capabilities=caps, num_heads=NH,
                                          implementation="pallas")
        assert asked.implementation == "pallas"
        assert any(n.startswith("4 heads of 32 units: ") for n in asked.notes), asked.notes
    else:
        assert d.implementation == "scan"
    one = portable_rnn.explain_lstm(*args[:3], S((portable_rnn.get_num_params_in_lstm(
        I, H, 1, False),), jnp.float32), *args[4:], capabilities=caps)
    assert not any("num_heads" in r for rs in one.rejected.values() for r in rs)


# the layers' parameter tree is one code path for every family (the GRU in the full tier)
@pytest.mark.parametrize("name, family", [("LSTM", "lstm"),
                                          pytest.param("GRU", "gru", marks=pytest.mark.slow),
                                          ("SLSTM", "slstm")])
def test_layers_take_heads_and_equal_the_functional_call(name, family):
    """Linen, NNX and Equinox layers with ``num_heads``: W_hh (NH, G*DH, DH) per layer and
    direction, drawn from U(-1/sqrt(H), 1/sqrt(H)) as without heads, and the functional call on
    the same weights."""
    pytest.importorskip("equinox")
    from flax import nnx

    from portable_rnn import equinox as peqx
    from portable_rnn import linen as plinen
    from portable_rnn import nnx as pnnx
    from portable_rnn._src.layers import params as _params

    I, H, NH = 3, 8, 4
    x = jax.random.normal(jax.random.key(0), (2, 5, I))
    G = GATES[family]
    layer = getattr(plinen, name)(H, num_layers=2, bidirectional=True, num_heads=NH)
    variables = layer.init(jax.random.key(1), x)
    tree = variables["params"]
    assert tree["layer_1"]["reverse"]["W_hh"].shape == (NH, G * H // NH, H // NH)
    assert float(jnp.abs(tree["layer_0"]["forward"]["W_hh"]).max()) <= 1 / np.sqrt(H)
    cfg = _params.config_of(layer)
    w = _params.to_flat(tree, I, cfg)
    states = [jnp.zeros((4, 2, H))] * STATES[family]
    want = getattr(portable_rnn, family)(x, *states, w, None, I, H, 2, 0.0, True,
                                         num_heads=NH)[0]
    np.testing.assert_allclose(layer.apply(variables, x), want, rtol=1e-6, atol=1e-6)
    assert getattr(pnnx, name)(I, H, num_heads=NH, rngs=nnx.Rngs(0))(x).shape == (2, 5, H)
    eqx_layer = getattr(peqx, name)(I, H, num_heads=NH, key=jax.random.key(0))
    assert eqx_layer.params["layer_0"]["forward"]["W_hh"].shape == (NH, G * 2, 2)
    assert eqx_layer(x).shape == (2, 5, H)


def test_layers_refuse_a_bad_head_count():
    """A bad head count is refused before any parameter is made."""
    from portable_rnn import linen as plinen

    x = jnp.zeros((2, 5, 3))
    with pytest.raises(ValueError, match=r"`hidden_size`=6 must be a multiple of `num_heads`=4"):
        plinen.GRU(6, num_heads=4).init(jax.random.key(1), x)


@pytest.mark.parametrize("name, family", [("LSTM", "lstm"), ("GRU", "gru")])
def test_heads_convert_to_equinox_cells_as_their_block_diagonal_matrix(name, family):
    """`to_eqx_cells` with heads: each cell's weight_hh holds head k's gate-g block at rows
    g*H + k*DH.., columns k*DH.. and zeros elsewhere, so Equinox's own cells, stepped over the
    sequence, compute the layer's outputs; `from_eqx_cells` reads them back as a layer without
    heads that computes the same."""
    pytest.importorskip("equinox")
    from portable_rnn import equinox as peqx

    I, H, NH = 3, 8, 2
    G, DH = GATES[family], H // NH
    cls = getattr(peqx, name)
    model = cls(I, H, num_heads=NH, key=jax.random.key(0))
    (cell,) = model.to_eqx_cells()
    W = np.asarray(model.params["layer_0"]["forward"]["W_hh"])  # (NH, G*DH, DH)
    dense = np.asarray(cell.weight_hh)
    assert dense.shape == (G * H, H)
    blocks = np.zeros_like(dense, bool)
    for k in range(NH):
        for g in range(G):
            rows, cols = slice(g * H + k * DH, g * H + (k + 1) * DH), slice(k * DH, (k + 1) * DH)
            np.testing.assert_array_equal(dense[rows, cols], W[k, g * DH:(g + 1) * DH])
            blocks[rows, cols] = True
    assert not dense[~blocks].any()
    x = np.random.default_rng(0).normal(size=(1, 6, I)).astype(np.float32)
    carry = (jnp.zeros(H), jnp.zeros(H)) if family == "lstm" else jnp.zeros(H)
    hs = []
    for t in range(x.shape[1]):
        carry = cell(jnp.asarray(x[0, t]), carry)
        hs.append(carry[0] if family == "lstm" else carry)
    want = np.asarray(model(x))[0]
    np.testing.assert_allclose(np.stack(hs), want, rtol=1e-5, atol=1e-6)
    again = cls.from_eqx_cells([cell])
    np.testing.assert_allclose(np.asarray(again(x)), np.asarray(model(x)), rtol=1e-5, atol=1e-6)


def test_jit_vmap_grad_compose_with_heads():
    I, H, NH = 3, 4, 2
    w = portable_rnn.init_gru_weight(jax.random.key(0), I, H, 1, True, num_heads=NH)

    def one(x, w):
        y, h = portable_rnn.gru(x, jnp.zeros((2, 2, H)), w, None, I, H, 1, 0.0, True,
                                num_heads=NH)
        return jnp.sum(y ** 2)
    xs = jax.random.normal(jax.random.key(1), (3, 2, 4, I))
    batched = jax.jit(jax.vmap(jax.grad(one, (0, 1)), (0, None)))(xs, w)
    for i in range(3):
        for a, b in zip(batched, jax.grad(one, (0, 1))(xs[i], w)):
            np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6)


def test_bad_heads_name_the_argument():
    x, h = jnp.zeros((2, 3, 3)), jnp.zeros((1, 2, 6))
    w = jnp.zeros(portable_rnn.get_num_params_in_gru(3, 6, 1, False))
    with pytest.raises(ValueError, match=r"`hidden_size`=6 must be a multiple of `num_heads`=4"):
        portable_rnn.gru(x, h, w, None, 3, 6, 1, 0.0, False, num_heads=4)
    with pytest.raises(ValueError, match=r"`hidden_size`=6 must be a multiple of `num_heads`=4"):
        portable_rnn.get_num_params_in_gru(3, 6, 1, False, num_heads=4)
    for bad in (0, -2, 1.5, "2", True):
        with pytest.raises(ValueError, match=r"`num_heads` must be an integer >= 1; got"):
            portable_rnn.init_gru_weight(jax.random.key(0), 3, 6, 1, False, num_heads=bad)
    with pytest.raises(ValueError, match=r"`weights` must have shape .*num_heads=2; got"):
        portable_rnn.unpack_gru_weights(w, 3, 6, 1, False, num_heads=2)
    with pytest.raises(ValueError, match=r"`weights` must have shape \(get_num_params_in_gru"):
        portable_rnn.gru(x, h, w, None, 3, 6, 1, 0.0, False, num_heads=2)
    with pytest.raises(ValueError, match=r"`num_heads`=2 with `proj_size`=3: a projected LSTM "
                                         r"has no heads"):
        portable_rnn.lstm(x, jnp.zeros((1, 2, 3)), h, jnp.zeros(10), None, 3, 6, 1, 0.0, False,
                          proj_size=3, num_heads=2)
    with pytest.raises(ValueError, match=r"`num_heads`=2: the classic GRU has no heads"):
        portable_rnn.classic_gru(x, h, w, None, 3, 6, 1, 0.0, False, num_heads=2)
    with pytest.raises(ValueError, match=r"`num_heads`=2: the classic GRU has no heads"):
        portable_rnn.explain_classic_gru(x, h, w, None, 3, 6, 1, 0.0, False, num_heads=2)
    with pytest.raises(ValueError, match=r"`W_hh\[0\]` must have shape \(2, 9, 3\); got"):
        portable_rnn.pack_gru_weights([np.zeros((18, 3))], [np.zeros((18, 6))], None, None, 3,
                                      6, 1, False, num_heads=2)

"""The Pallas TPU recurrent kernel (route ``"pallas"``) against the scan path and the float64
loop, for every family: ragged lengths (0 included), both directions, layers, dropout between
layers, recurrent dropout masks, gradients, vmap, sharding, export, and its rejections.

On a CPU the kernels run in Pallas interpret mode (`pallas.interpret`); on a TPU the same
tests run the compiled kernels (`INTERPRET` is False there). The kernel splits the gate blocks
along lanes at multiples of H, so H is 128 here (the tests of other hidden sizes, which the
kernel pads to a multiple of 128, name theirs); every other size is tiny.
"""

import contextlib
import dataclasses
import functools
import re

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import family_helpers as fam
import portable_rnn
import references
import test_low_precision as lp
from portable_rnn._src.recurrent.routes.pallas import kernel as pallas_kernel
from portable_rnn._src.recurrent.routes.pallas import route as pallas

TPU_BACKEND = jax.default_backend() == "tpu"
INTERPRET = not TPU_BACKEND
TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")
H = 128
# float32 results against the scan path: both round the same products, but a TPU's float32
# tanh in a Mosaic kernel and in XLA need not agree to the last bit (the platform's floor)
TOL = references.float32_tol(1e-5)


def kernel_mode(interpret=INTERPRET):
    """Where the kernels run: interpreted on a CPU, compiled on a TPU. Tests marked `cpu` run on
    the host's CPU devices on a TPU machine too, and interpret there."""
    return pallas.interpret() if interpret else contextlib.nullcontext()


def _call(kind, x, states, w, lengths, I, P, L, bidir, impl, **kw):
    with kernel_mode():
        y, finals = fam.call(kind, x, states, w, lengths, I, H, P, L, bidir,
                             implementation=impl, **kw)
    return (y, *finals)


def _loss(outs):
    return sum(jnp.sum(jnp.sin(o.astype(jnp.float32) * (1 + i)))
               for i, o in enumerate(jax.tree.leaves(outs)))


def _close(got, want, tol=TOL, what=""):
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, i, g.shape, w.shape)
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * (1 + np.abs(w).max()),
                                   err_msg=f"{what} output {i}")


def _binds_pallas(f, *args) -> int:
    """How many pallas_call equations the traced program holds (inner jaxprs included)."""
    def count(jaxpr):
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name == "pallas_call"
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                n += count(sub)
        return n
    return count(jax.make_jaxpr(f)(*args).jaxpr)


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(fam.ALL_KINDS))
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, 6))
    I = draw(st.integers(1, 4))
    P = draw(st.integers(1, 8)) if kind == "lstm_proj" else 0
    L = draw(st.integers(1, 2))
    bidir = draw(st.booleans())
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    dropout = draw(st.sampled_from([0.0, 0.5])) if L > 1 else 0.0
    rmask = draw(st.sampled_from([None, "one", "per_gate"]))
    seed = draw(st.integers(0, 2**16))
    return dict(kind=kind, B=B, T=T, I=I, P=P, L=L, bidir=bidir, lengths=lengths,
                dropout=dropout, rmask=rmask, seed=seed)


def _case(kind, B, T, I, L, bidir, lengths, P=0, dropout=0.0, rmask=None, seed=0):
    return dict(kind=kind, B=B, T=T, I=I, P=P, L=L, bidir=bidir, lengths=lengths,
                dropout=dropout, rmask=rmask, seed=seed)


def _inputs(c):
    x, states, w = fam.make_inputs(c["kind"], c["B"], c["T"], c["I"], H, c["P"], c["L"],
                                   c["bidir"], c["seed"])
    kw = {}
    if c["dropout"]:
        kw["dropout_rng"] = jax.random.key(c["seed"] + 1)
    if c["rmask"]:
        D = 2 if c["bidir"] else 1
        gates = {"lstm": 4, "gru": 3, "simple_rnn": 1}[fam.FAMILY[c["kind"]]]
        k = gates if c["rmask"] == "per_gate" and gates > 1 else None
        shape = (c["L"] * D,) + ((k,) if k else ()) + (c["B"], c["P"] or H)
        kw["recurrent_dropout_mask"] = draws.bernoulli(
            jax.random.key(c["seed"] + 2), 0.75, shape).astype(jnp.float32) / 0.75
    return x, states, w, np.asarray(c["lengths"], np.int32), kw


@settings(max_examples=max(2, settings.default.max_examples // 2))
@given(cases())
@example(_case("lstm", 3, 5, 3, 1, True, [5, 0, 2]))
@example(_case("gru", 2, 6, 2, 2, True, [0, 0], dropout=0.5))
@example(_case("rnn_tanh", 2, 4, 3, 2, False, [4, 1], rmask="one"))
@example(_case("lstm_proj", 2, 3, 2, 2, True, [3, 2], P=5, dropout=0.5, rmask="per_gate"))
@example(_case("rnn_relu", 1, 6, 1, 1, True, [3]))
def test_pallas_equals_the_scan_path(c):
    """Outputs, final states and the gradients of x, the initial states and the weights, in
    float32 (products at HIGHEST on a TPU: tests/conftest.py)."""
    x, states, w, lengths, kw = _inputs(c)
    args = (c["kind"], x, states, w, lengths, c["I"], c["P"], c["L"], c["bidir"])

    def run(impl):
        def f(x, states, w):
            outs = _call(c["kind"], x, states, w, lengths, c["I"], c["P"], c["L"], c["bidir"],
                         impl, dropout=c["dropout"], **kw)
            return _loss(outs), outs
        return jax.jit(jax.value_and_grad(f, (0, 1, 2), has_aux=True))(*args[1:4])

    got, want = run("pallas"), run("scan")
    _close(got, want, what=str(c))
    outs = got[0][1]
    y = np.asarray(outs[0])
    for b, n in enumerate(lengths):
        assert not y[b, n:].any(), "y past a length must be zero"
        if n == 0:  # length 0: the initial state comes back
            for s, f in zip(states, outs[1:]):
                np.testing.assert_array_equal(np.asarray(f)[:, b], np.asarray(s)[:, b])


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_pallas_equals_the_float64_loop(kind):
    """The kernel against `references.loop_rnn` in float64 (no code shared), ragged,
    bidirectional, two layers."""
    c = _case(kind, 3, 5, 3, 2, True, [5, 0, 3])
    x, states, w, lengths, _ = _inputs(c)
    got = _call(kind, x, states, w, lengths, 3, 0, 2, True, "pallas")
    y, finals = fam.reference(kind, x, states, w, lengths, 3, H, 0, 2, True)
    tol = references.float32_tol(2e-5)
    for g, r in zip(got, (y, *finals)):
        np.testing.assert_allclose(np.asarray(g, np.float64), r, rtol=tol, atol=tol)


@settings(max_examples=max(2, settings.default.max_examples // 3))
@given(st.sampled_from(fam.ALL_KINDS), st.integers(0, 2**16))
@example("lstm", 0)
@example("gru", 1)
def test_pallas_bfloat16_equals_the_rounded_float64_loop(kind, seed):
    """bfloat16 calls within the bounds of tests/test_low_precision.py: outputs and gradients
    at most `RECURRENT_ULPS` of bfloat16 from the rounded float64 loop, float32 states
    `FLOAT32_STATE_ULPS`."""
    dtype = "bfloat16"
    c = lp._case(kind, dtype, 2, 6, 3, H, 2, True, [6, 0], P=5 if kind == "lstm_proj" else 0,
                 seed=seed)
    x, states, w = lp._inputs(c)
    lengths = np.asarray(c["lengths"], np.int32)

    def ours(x, states, w):
        return _call(kind, x, states, w, lengths, c["I"], c["P"], c["L"], c["bidir"], "pallas")

    _assert_16_bit_bounds(c, ours, lambda xp: lp._reference(c, None, xp), (x, states, w))


def _assert_16_bit_bounds(c, ours, reference, args):
    """`ours` against `reference(xp)`, the float64 loop (NumPy, or jnp to differentiate) whose
    outputs the gradient's loss rounds to the 16-bit dtype: outputs and gradients at most
    `RECURRENT_ULPS` of the dtype, float32 states `FLOAT32_STATE_ULPS`."""
    dt, kind, seed = lp.DTYPES[c["dtype"]], c["kind"], c["seed"]
    got = jax.jit(ours)(*args)
    want = reference(np)(*args)
    for g, r, name in zip(got, want, ["y", "h_n", "c_n"]):
        ulps = lp.FLOAT32_STATE_ULPS if lp._float32_state(c, name, g.dtype) else lp.RECURRENT_ULPS
        references.assert_ulps(g, lp._as(g.dtype)(r), dt, ulps, f"{kind} {name}")
    cot = [np.asarray(draws.normal(jax.random.key(seed + i), g.shape).astype(g.dtype),
                      np.float32) for i, g in enumerate(got)]

    def loss(f, rounded):
        def weighted(*args):
            outs = f(*args)
            if rounded:
                outs = [references.round_to(o, g.dtype, jnp) for o, g in zip(outs, got)]
            d = jnp.float64 if rounded else jnp.float32
            return sum(jnp.sum(o.astype(d) * jnp.asarray(ct, d)) for o, ct in zip(outs, cot))
        return weighted

    grads = jax.jit(jax.grad(loss(ours, False), (0, 1, 2)))(*args)
    with references.float64():
        ref = jax.jit(jax.grad(loss(reference(jnp), True), (0, 1, 2)))(*args)
        ref = jax.tree.map(np.asarray, ref)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref)):
        references.assert_ulps(g, lp._as(g.dtype)(r), dt, lp.RECURRENT_ULPS, f"{kind} grad")


@pytest.mark.parametrize("precision", [None, "highest", jax.lax.Precision.HIGH])
def test_bfloat16_kernel_dots_at_default_under_any_precision(precision):
    """Mosaic contracts bfloat16 operands at DEFAULT only: whatever precision the call or
    ``jax.default_matmul_precision`` asks, the kernels' bfloat16 dots (forward and backward)
    ask for DEFAULT, whose products are the same, and the results do not change."""
    x, (h0, c0), w = fam.make_inputs("lstm", 2, 4, 3, H, 0, 1, True, 0)
    x, h0, c0, w = (a.astype(jnp.bfloat16) for a in (x, h0, c0, w))
    seq = jnp.array([4, 1], jnp.int32)
    asked = None if precision == "highest" else precision

    def loss(x, h0, c0, w):
        with kernel_mode(INTERPRET):
            y, h, c = portable_rnn.lstm(x, h0, c0, w, seq, 3, H, 1, 0.0, True,
                                        precision=asked, implementation="pallas")
        return jnp.sum(y.astype(jnp.float32) ** 2) + jnp.sum(c.astype(jnp.float32))

    plain = jax.jit(jax.value_and_grad(loss, (0, 1, 2, 3)))(x, h0, c0, w)
    with jax.default_matmul_precision("highest" if precision == "highest" else None):
        references.assert_bfloat16_kernel_dots_at_default(
            jax.grad(loss, (0, 1, 2, 3)), x, h0, c0, w)
        under = jax.jit(jax.value_and_grad(loss, (0, 1, 2, 3)))(x, h0, c0, w)
    for a, b in zip(jax.tree.leaves(under), jax.tree.leaves(plain)):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_float16_runs_the_scan_path_with_the_reason():
    """Mosaic converts nothing to float16 in a TPU kernel: the route rejects float16 and the
    automatic choice on a TPU runs the scan path."""
    with pytest.raises(ValueError, match="float16: Mosaic compiles no conversion"):
        _explain(dtype=jnp.float16, implementation="pallas", capabilities=TPU)
    d = _explain(dtype=jnp.float16, capabilities=TPU)
    assert d.implementation == "scan"
    assert any("float16" in r for r in d.rejected["pallas"])


@pytest.mark.parametrize("kind", ["lstm_proj", "gru", "rnn_tanh"])
def test_recomputed_backward_equals_the_scan_path(kind):
    """`pallas.recompute_backward()`: the gate factors recomputed from the saved states
    give the scan path's gradients (ragged, bidirectional, two layers, a recurrent mask)."""
    c = _case(kind, 3, 5, 2, 2, True, [5, 0, 3], P=6 if kind == "lstm_proj" else 0,
              rmask="per_gate")
    x, states, w, lengths, kw = _inputs(c)

    def run(impl, recompute):
        def f(x, states, w):
            outs = _call(kind, x, states, w, lengths, c["I"], c["P"], c["L"], True, impl, **kw)
            return _loss(outs)
        with pallas.recompute_backward() if recompute else contextlib.nullcontext():
            return jax.jit(jax.value_and_grad(f, (0, 1, 2)))(x, states, w)

    _close(run("pallas", True), run("scan", False), what=kind)


# --- hidden sizes off the lanes, any batch, cells without a backward step ---------------------

# the families the `fam` helpers do not cover: (op, weight initialiser)
OTHER = {"classic_gru": (portable_rnn.classic_gru, portable_rnn.init_classic_gru_weight),
         "mgu": (portable_rnn.mgu, portable_rnn.init_mgu_weight),
         "slstm": (portable_rnn.slstm, portable_rnn.init_slstm_weight)}
GATES = {"lstm": 4, "lstm_proj": 4, "gru": 3, "classic_gru": 3, "mgu": 2, "slstm": 4}


def _any_inputs(c):
    """`_inputs` for every gated family, at the case's hidden size ``c["H"]``."""
    kind, B, T, I, hidden, L, bidir = (c[k] for k in ("kind", "B", "T", "I", "H", "L", "bidir"))
    D = 2 if bidir else 1
    if kind in OTHER:
        k = jax.random.split(jax.random.key(c["seed"]), 3)
        x = draws.normal(k[0], (B, T, I))
        states = (draws.normal(k[1], (L * D, B, hidden)),)
        if kind == "slstm":  # c and m drawn, the normalizer n in [0.2, 2] (both sides of 1)
            ks = jax.random.split(k[1], 3)
            states += (draws.normal(ks[0], (L * D, B, hidden)),
                       draws.uniform(ks[1], (L * D, B, hidden), minval=0.2, maxval=2.0),
                       draws.normal(ks[2], (L * D, B, hidden)))
        w = OTHER[kind][1](k[2], I, hidden, L, bidir) * 2  # gates away from 1/2
    else:
        x, states, w = fam.make_inputs(kind, B, T, I, hidden, c["P"], L, bidir, c["seed"])
    kw = {}
    if c["dropout"]:
        kw["dropout_rng"] = jax.random.key(c["seed"] + 1)
    if c["rmask"]:
        k = GATES[kind] if c["rmask"] == "per_gate" else None
        shape = (L * D,) + ((k,) if k else ()) + (B, c["P"] or hidden)
        kw["recurrent_dropout_mask"] = draws.bernoulli(
            jax.random.key(c["seed"] + 2), 0.75, shape).astype(jnp.float32) / 0.75
    return x, states, w, np.asarray(c["lengths"], np.int32), kw


def _any_call(c, x, states, w, lengths, impl, interpret=INTERPRET, **kw):
    """The family's op through route `impl`: (y, final states...)."""
    kind, I, hidden, L, bidir = (c[k] for k in ("kind", "I", "H", "L", "bidir"))
    with kernel_mode(interpret) if impl == "pallas" else contextlib.nullcontext():
        if kind in OTHER:
            y, *finals = OTHER[kind][0](x, *states, w, lengths, I, hidden, L, c["dropout"],
                                        bidir, implementation=impl, **kw)
            return (y, *finals)
        y, finals = fam.call(kind, x, states, w, lengths, I, hidden, c["P"], L, bidir,
                             dropout=c["dropout"], implementation=impl, **kw)
    return (y, *finals)


def _kernel_and_scan(c, tol=TOL):
    """Values and the gradients of x, the initial states and the weights: the kernel against
    the scan path."""
    x, states, w, lengths, kw = _any_inputs(c)

    def run(impl):
        def f(x, states, w):
            outs = _any_call(c, x, states, w, lengths, impl, **kw)
            return _loss(outs), outs
        return jax.jit(jax.value_and_grad(f, (0, 1, 2), has_aux=True))(x, states, w)

    got, want = run("pallas"), run("scan")
    _close(got, want, tol, what=str(c))
    return got


def _any_case(kind, B, T, I, hidden, L, bidir, lengths, P=0, dropout=0.0, rmask=None, seed=0):
    return dict(_case(kind, B, T, I, L, bidir, lengths, P, dropout, rmask, seed), H=hidden)


@st.composite
def padded_cases(draw):
    kind = draw(st.sampled_from(sorted(GATES)))
    B = draw(st.sampled_from([1, 3, 7, 40]))
    T = draw(st.integers(1, 4))
    c = _any_case(kind, B, T, draw(st.integers(1, 4)), draw(st.sampled_from([72, 200])),
                  draw(st.integers(1, 2)), draw(st.booleans()),
                  draw(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                  P=draw(st.integers(1, 8)) if kind == "lstm_proj" else 0,
                  rmask=draw(st.sampled_from([None, "one", "per_gate"])),
                  seed=draw(st.integers(0, 2**16)))
    return c


@settings(max_examples=max(2, settings.default.max_examples // 2))
@given(padded_cases())
@example(_any_case("lstm", 40, 3, 3, 300, 1, True, [3, 0, 2, 1] * 10))
@example(_any_case("classic_gru", 7, 5, 3, 72, 2, True, [5, 0, 3, 1, 5, 2, 4],
                   rmask="per_gate", seed=1))
@example(_any_case("lstm_proj", 3, 4, 2, 200, 2, True, [4, 0, 3], P=5, rmask="one", seed=2))
@example(_any_case("gru", 7, 4, 2, 200, 1, False, [4, 1, 0, 4, 2, 3, 4], rmask="per_gate"))
@example(_any_case("mgu", 40, 2, 2, 72, 1, True, [2, 1] * 20, seed=3))
@example(_any_case("slstm", 7, 4, 3, 72, 2, True, [4, 0, 2, 1, 4, 3, 4], rmask="per_gate",
                   seed=4))
def test_hidden_sizes_off_the_lanes_and_any_batch_equal_the_scan_path(c):
    """H not a multiple of 128 (zero-padded per gate block inside the kernel's layer) and
    batches that are not multiples of 8 (B = 7, 40: one batch tile, the whole batch), ragged,
    both directions, layers, projections, recurrent masks: values and every gradient are the
    scan path's; y past a length is zero, and a length 0 returns the initial states."""
    got = _kernel_and_scan(c)
    outs = got[0][1]
    y = np.asarray(outs[0])
    assert y.shape[-1] == (2 if c["bidir"] else 1) * (c["P"] or c["H"])
    for b, n in enumerate(c["lengths"]):
        assert not y[b, n:].any(), "y past a length must be zero"


def test_padded_units_stay_zero():
    """Inside the kernel's layer the padded units of every gated family stay exactly zero
    (outputs, final states) and get zero gradients: what keeps them out of the real units."""
    from portable_rnn._src.recurrent import layout
    from portable_rnn._src.recurrent.driver import Products
    from portable_rnn._src.recurrent.families import FOLDERS

    hidden, padded, B, T, I = 72, 128, 3, 4, 2
    opts = pallas_kernel.Options(interpret=INTERPRET)
    for kind in ("lstm", "gru", "classic_gru", "mgu"):
        folder, G = FOLDERS[kind], GATES[kind]
        cell = folder.cell()
        keys = iter(jax.random.split(jax.random.key(G), 16))
        raw = [{n: draws.normal(next(keys), s) / 4 for n, s in p.items()}
               for p in layout.param_shapes(I, hidden, 1, True, folder.family)]
        x = draws.normal(next(keys), (T, B, I))
        state0 = tuple(draws.normal(next(keys), (2, B, hidden))
                       for _ in folder.family.states)
        mask = np.arange(T)[:, None] < np.array([4, 0, 2])[None]
        f = pallas_kernel._layer_op(cell, opts, Products())

        def loss(*a, f=f):  # of the real units, as the layer's slicing leaves them
            y, finals = f(*a)
            real = (y.reshape(T, B, 2, padded)[..., :hidden], [s[..., :hidden] for s in finals])
            return _loss(real), (y, finals)

        # one compiled program per family (eagerly, each op of the preparation, the padding and
        # the interpreted kernel compiled on its own: some 60 programs a family)
        @jax.jit
        def padded_run(raw, x, state0, mask, cell=cell, loss=loss, G=G):
            prepared = [cell.prepare(r, jnp.float32, jnp.float32, jnp.float32) for r in raw]
            w_ih, w_hh, params = jax.tree.map(lambda *a: jnp.stack(a), *prepared)
            args = pallas_kernel._padded((x, w_ih, w_hh, params, state0, mask, None), G,
                                        hidden, padded)
            return jax.value_and_grad(loss, (0, 1, 2, 3, 4), has_aux=True)(*args)

        (_, (y, finals)), grads = padded_run(raw, x, state0, mask)
        assert not np.asarray(y).reshape(T, B, 2, padded)[..., hidden:].any(), kind
        for s in finals:
            assert not np.asarray(s)[..., hidden:].any(), kind
        _, dw_ih, dw_hh, dparams, dstate0 = grads
        for g in (dw_ih, dw_hh, *jax.tree.leaves(dparams)):
            g = np.asarray(g)
            assert not g.reshape(g.shape[:-1] + (G, padded))[..., hidden:].any(), kind
        assert not np.asarray(dw_hh)[:, hidden:].any(), kind
        for g in dstate0:
            assert not np.asarray(g)[..., hidden:].any(), kind


CLASSIC = [
    _any_case("classic_gru", 3, 5, 3, H, 2, True, [5, 0, 2], dropout=0.5, seed=1),
    _any_case("classic_gru", 2, 6, 2, H, 1, False, [6, 3], rmask="one", seed=2),
    _any_case("classic_gru", 3, 4, 2, H, 1, True, [4, 4, 1], rmask="per_gate", seed=3),
]


@pytest.mark.parametrize("c", CLASSIC, ids=["two layers, dropout", "one mask", "mask per gate"])
def test_classic_gru_forward_and_backward_equal_the_scan_path(c):
    """The classic GRU (no hand-written backward step; its step computes its own recurrent
    products): the forward kernel hands its step the products, the backward kernel
    differentiates the step; values and every gradient are the scan path's (JAX's
    differentiation of the same step)."""
    _kernel_and_scan(c)


def test_classic_gru_bfloat16_is_close_to_the_scan_path():
    """bfloat16 (the cell holds its 16-bit kernels in float32): values and gradients within
    bfloat16 rounding of the scan path's."""
    c = _any_case("classic_gru", 3, 5, 3, H, 1, True, [5, 0, 2], seed=4)
    x, states, w, lengths, _ = _any_inputs(c)
    x, states = x.astype(jnp.bfloat16), tuple(s.astype(jnp.bfloat16) for s in states)
    w = w.astype(jnp.bfloat16)

    def run(impl):
        def f(x, states, w):
            return _loss(_any_call(c, x, states, w, lengths, impl))
        return jax.jit(jax.value_and_grad(f, (0, 1, 2)))(x, states, w)

    got, want = run("pallas"), run("scan")
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        np.testing.assert_allclose(g, r, rtol=3e-2, atol=3e-2 * (1 + np.abs(r).max()))


def test_classic_gru_kernel_is_asked_for_not_chosen_without_data():
    """The automatic choice on a TPU passes over the kernel for a cell without a backward
    step (no benchmark grid has timed its differentiated backward) and says why;
    implementation='pallas' runs it (two kernels per direction: forward, backward), and its
    notes say how the backward is computed."""
    c = CLASSIC[0]
    x, states, w, lengths, kw = _any_inputs(c)
    auto = portable_rnn.explain_classic_gru(x, *states, w, lengths, c["I"], H, c["L"], 0.0,
                                            True, capabilities=TPU)
    assert auto.implementation == "scan"
    (why,) = auto.rejected["pallas"]
    assert why.startswith("the ClassicGRUCell cell has no hand-written backward step "
                          "(step_bwd): the Pallas TPU kernel's backward differentiates its "
                          "step, which no benchmark grid has timed"), why
    asked = portable_rnn.explain_classic_gru(x, *states, w, lengths, c["I"], H, c["L"], 0.0,
                                             True, capabilities=TPU, implementation="pallas")
    assert asked.implementation == "pallas"
    assert any("differentiates its step (jax.vjp)" in n for n in asked.notes), asked.notes

    def loss(x):
        return _loss(_any_call(c, x, states, w, lengths, "pallas", **kw))
    assert _binds_pallas(jax.grad(loss), x) == 2 * 2 * c["L"]


# --- transforms -------------------------------------------------------------------------------

def _lstm_inputs(B=2, T=4, I=3, L=1, bidir=True, seed=0):
    x, (h0, c0), w = fam.make_inputs("lstm", B, T, I, H, 0, L, bidir, seed)
    return x, h0, c0, w, jnp.array([T, 1][:B] + [T] * max(B - 2, 0), jnp.int32)


def _lstm(impl, I=3, L=1, bidir=True, interpret=INTERPRET):
    def f(x, h0, c0, w, seq):
        with kernel_mode(interpret):
            return portable_rnn.lstm(x, h0, c0, w, seq, I, H, L, 0.0, bidir,
                                     implementation=impl)
    return f


def test_vmap_over_the_batch_folds_into_one_kernel_call():
    """vmap over x: the forward folds the vmapped axis into the batch (two kernels: one per
    direction); outputs and vmap(grad) equal the scan path's."""
    x, h0, c0, w, seq = _lstm_inputs()
    xs = jnp.stack([x, 2 * x, -x])
    in_axes = (0, None, None, None, None)
    got = jax.vmap(_lstm("pallas"), in_axes)(xs, h0, c0, w, seq)
    _close(got, jax.vmap(_lstm("scan"), in_axes)(xs, h0, c0, w, seq))
    assert _binds_pallas(jax.vmap(_lstm("pallas"), in_axes), xs, h0, c0, w, seq) == 2

    def grad(impl):
        return jax.vmap(jax.grad(lambda *a: _loss(_lstm(impl)(*a)), (0, 1, 2, 3)), in_axes)
    _close(grad("pallas")(xs, h0, c0, w, seq), grad("scan")(xs, h0, c0, w, seq))


def test_vmap_over_the_weights_runs_the_scan_path():
    """Weights that differ per instance cannot share a kernel call: the scan path, vmapped; the
    results and grad(vmap) still equal the scan path's."""
    x, h0, c0, w, seq = _lstm_inputs()
    ws = jnp.stack([w, 0.5 * w])
    in_axes = (None, None, None, 0, None)
    _close(jax.vmap(_lstm("pallas"), in_axes)(x, h0, c0, ws, seq),
           jax.vmap(_lstm("scan"), in_axes)(x, h0, c0, ws, seq))

    def grad(impl):
        return jax.grad(lambda ws: _loss(jax.vmap(_lstm(impl), in_axes)(x, h0, c0, ws, seq)))
    _close(grad("pallas")(ws), grad("scan")(ws))


def test_grad_of_vmap_and_nested_vmap():
    x, h0, c0, w, seq = _lstm_inputs(B=2, T=3)
    xs = jnp.stack([jnp.stack([x, -x]), jnp.stack([0.5 * x, x])])
    inner = (0, None, None, None, None)

    def f(impl):
        return jax.vmap(jax.vmap(_lstm(impl), inner), inner)

    _close(f("pallas")(xs, h0, c0, w, seq), f("scan")(xs, h0, c0, w, seq))
    g = {impl: jax.grad(lambda w, impl=impl: _loss(f(impl)(xs, h0, c0, w, seq)))(w)
         for impl in ("pallas", "scan")}
    _close(g["pallas"], g["scan"])


def _mesh():
    return jax.make_mesh((2,), ("batch",), axis_types=(AxisType.Explicit,),
                         devices=jax.devices("cpu")[:2])


@pytest.mark.cpu
def test_batch_sharded_over_an_explicit_mesh():
    """A batch sharded over explicit mesh axes runs one kernel call per shard (shard_map):
    results, gradients and the batch sharding as the scan path's."""
    x, h0, c0, w, seq = _lstm_inputs(B=4, T=3)
    mesh = _mesh()
    specs = (P("batch"), P(None, "batch"), P(None, "batch"), P(), P("batch"))
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, h0, c0, w, seq),
                                                                        specs)]

    def run(impl):
        f = _lstm(impl, interpret=True)
        return jax.jit(jax.value_and_grad(lambda *a: _loss(f(*a)), (0, 1, 2, 3)))(*placed)

    got = run("pallas")
    _close(got, run("scan"))
    y = jax.jit(_lstm("pallas", interpret=True))(*placed)[0]
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, P("batch")), 3), y.sharding


@pytest.mark.cpu
def test_inside_shard_map():
    """The kernels run per shard inside a user's shard_map. Interpreted (the host's CPU
    devices), under check_vma=False: Pallas interpret mode fails inside a shard_map that checks
    varying axes (jax 0.10.2: its grid loop drops them from its carries)."""
    x, h0, c0, w, seq = _lstm_inputs(B=4, T=3)
    mesh = _mesh()
    specs = (P("batch"), P(None, "batch"), P(None, "batch"), P(), P("batch"))

    def per_shard(impl):
        def f(*args):
            g = _lstm(impl, interpret=True)
            return jax.value_and_grad(lambda *a: _loss(g(*a)), (0, 1, 2, 3))(*args)
        return jax.jit(jax.shard_map(
            f, mesh=mesh, in_specs=specs,
            out_specs=(P(), (P("batch"), P(None, "batch"), P(None, "batch"), P())),
            check_vma=False))

    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, h0, c0, w, seq),
                                                                        specs)]
    got, want = per_shard("pallas")(*placed), per_shard("scan")(*placed)
    _close(got[1], want[1])


@pytest.mark.cpu
def test_rejected_inside_shard_map_that_checks_varying_axes():
    """Inside a shard_map with check_vma=True the route rejects the call, with the reason (the
    test above passes check_vma=False)."""
    x, h0, c0, w, seq = _lstm_inputs(B=4, T=3)
    mesh = _mesh()
    specs = (P("batch"), P(None, "batch"), P(None, "batch"), P(), P("batch"))

    def f(*args):
        with pallas.interpret():
            return portable_rnn.lstm(*args, 3, H, 1, 0.0, True, implementation="pallas")

    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, h0, c0, w, seq),
                                                                        specs)]
    with pytest.raises(ValueError, match="(?s)pallas.*inside jax.shard_map with check_vma=True"):
        jax.jit(jax.shard_map(f, mesh=mesh, in_specs=specs,
                              out_specs=(P("batch"), P(None, "batch"), P(None, "batch"))))(
            *placed)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_relu", "lstm_proj"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_exports_for_a_tpu_with_mosaic_kernels(kind, dtype):
    """`jax.export` for a TPU lowers the kernels with Mosaic (on any host): forward and
    backward, ragged, bidirectional, a recurrent mask. Catches a step Mosaic has no lowering
    for before a TPU sees it."""
    c = _case(kind, 8, 16, 128, 1, True, [16] * 7 + [3], P=64 if kind == "lstm_proj" else 0,
              rmask="one")
    x, states, w, lengths, kw = _inputs(c)
    x, states = x.astype(dtype), tuple(s.astype(dtype) for s in states)

    def loss(x, w):
        y, finals = fam.call(kind, x, states, w, lengths, c["I"], H, c["P"], 1, True,
                             implementation="pallas", capabilities=TPU, **kw)
        return _loss((y, finals))

    exported = jax.export.export(jax.jit(jax.grad(loss, (0, 1))), platforms=["tpu"])(x, w)
    assert exported.mlir_module().count("tpu_custom_call") == 4  # fwd, bwd; per direction


@pytest.mark.parametrize("kind, hidden, B", [("classic_gru", 128, 8), ("classic_gru", 200, 7),
                                             ("lstm", 300, 40), ("gru", 72, 7), ("mgu", 200, 8),
                                             ("lstm_proj", 200, 8)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_padded_and_differentiated_kernels_export_for_a_tpu(kind, hidden, B, dtype):
    """`jax.export` for a TPU lowers, with Mosaic, the kernels of hidden sizes off the lanes
    (padded), of batches that are not multiples of 8, and the classic GRU's (its step's own
    products forward, its step differentiated backward): forward and backward, ragged,
    bidirectional, a recurrent mask."""
    c = _any_case(kind, B, 16, 128, hidden, 1, True, [16] * (B - 1) + [3],
                  P=64 if kind == "lstm_proj" else 0, rmask="one")
    x, states, w, lengths, kw = _any_inputs(c)
    x, states = x.astype(dtype), tuple(s.astype(dtype) for s in states)

    def loss(x, w):
        return _loss(_any_call(c, x, states, w, lengths, "pallas", interpret=False,
                               capabilities=TPU, **kw))

    exported = jax.export.export(jax.jit(jax.grad(loss, (0, 1))), platforms=["tpu"])(x, w)
    assert exported.mlir_module().count("tpu_custom_call") == 4  # fwd, bwd; per direction


@pytest.mark.parametrize("precision", [None, jax.lax.Precision.DEFAULT, jax.lax.Precision.HIGH,
                                       jax.lax.Precision.HIGHEST, "global highest",
                                       "global tensorfloat32"])
def test_float32_exports_for_a_tpu_at_every_precision(precision):
    """float32 at every `lax.Precision`, asked for or through ``jax.default_matmul_precision``:
    Mosaic lowers the kernels' dots (HIGH, which some JAX versions' Mosaic lowering lacks, runs
    at HIGHEST in the kernel)."""
    x, (h0, c0), w = fam.make_inputs("lstm", 8, 4, 3, H, 0, 1, False, 0)
    setting = precision.split()[1] if isinstance(precision, str) else None
    asked = None if isinstance(precision, str) else precision

    def loss(x, w):
        y, h, c = portable_rnn.lstm(x, h0, c0, w, None, 3, H, 1, 0.0, False, precision=asked,
                                    implementation="pallas", capabilities=TPU)
        return jnp.sum(y ** 2) + jnp.sum(c)

    with jax.default_matmul_precision(setting):
        exported = jax.export.export(jax.jit(jax.grad(loss, (0, 1))), platforms=["tpu"])(x, w)
    assert exported.mlir_module().count("tpu_custom_call") == 2


# --- routing ----------------------------------------------------------------------------------

def _explain(kind="lstm", B=2, T=4, I=3, hidden=H, dtype=jnp.float32, num_heads=1, **kw):
    fam_name = fam.FAMILY[kind]
    op = {"lstm": portable_rnn.explain_lstm, "gru": portable_rnn.explain_gru,
          "simple_rnn": portable_rnn.explain_simple_rnn}[fam_name]
    n = {"lstm": portable_rnn.get_num_params_in_lstm, "gru": portable_rnn.get_num_params_in_gru,
         "simple_rnn": portable_rnn.get_num_params_in_simple_rnn}[fam_name](
        I, hidden, 1, False, num_heads=num_heads)
    sds = jax.ShapeDtypeStruct
    states = [sds((1, B, hidden), dtype)] * (2 if fam_name == "lstm" else 1)
    return op(sds((B, T, I), dtype), *states, sds((n,), dtype), None, I, hidden, 1, 0.0, False,
              num_heads=num_heads, **kw)


def test_automatic_choice_on_a_tpu_follows_the_routing_model():
    """At a call inside its grid, the model's choice is the route it predicts fastest, and the
    decision says so; a TPU generation without a grid gets the stated rule (the kernel)."""
    d = _explain(dtype=jnp.bfloat16, capabilities=TPU)
    assert set(d.predicted) == {"pallas", "scan"}
    fastest = min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"])
    assert d.implementation == fastest
    assert "model fitted on TPU v5 lite" in d.notes[-1]
    other = ({"pallas", "scan"} - {fastest}).pop()
    why = (d.rejected if other == "pallas" else d.passed_over)[other][0]
    assert why.startswith("predicted ") and f"x {fastest}'s time forward+backward" in why
    v9 = portable_rnn.Capabilities("tpu", device_kind="TPU v9")
    new = _explain(dtype=jnp.bfloat16, capabilities=v9)
    assert new.implementation == "pallas" and new.predicted == {}
    assert new.notes[-1].startswith("no measured grid for TPU v9: stated rule: pallas")


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("B,T,I,H,L", [(32, 512, 256, 1024, 1), (16, 1024, 128, 512, 1),
                                       (8, 1024, 256, 256, 1), (256, 512, 1024, 1024, 1)])
def test_the_kernel_stays_chosen_where_it_was_measured_faster(kind, B, T, I, H, L):
    """The shapes where earlier benchmark runs measured the kernel faster than the scan path
    forward+backward (benchmarks/results/tpu/82054a0 and 1812262: 0.18-0.79x its time)."""
    sds = jax.ShapeDtypeStruct
    op = {"lstm": portable_rnn.explain_lstm, "gru": portable_rnn.explain_gru}[kind]
    n = {"lstm": portable_rnn.get_num_params_in_lstm,
         "gru": portable_rnn.get_num_params_in_gru}[kind](I, H, L, False)
    states = [sds((L, B, H), jnp.bfloat16)] * (2 if kind == "lstm" else 1)
    d = op(sds((B, T, I), jnp.bfloat16), *states, sds((n,), jnp.bfloat16), None, I, H, L, 0.0,
           False, capabilities=TPU)
    assert d.implementation == "pallas", str(d)
    assert d.platforms["tpu"].implementation == "pallas"
    assert d.platforms["cpu"].implementation == "scan"


@pytest.mark.skipif(TPU_BACKEND, reason="on a TPU the probe finds one")
def test_rejected_off_a_tpu_and_raises_when_asked_for():
    d = _explain()
    assert any("needs a TPU" in r for r in d.rejected["pallas"])
    with pytest.raises(ValueError, match="(?s)implementation='pallas' cannot serve.*needs a TPU"):
        _explain(implementation="pallas")


def test_rejects_a_w_hh_too_large_for_vmem_and_says_what_would_serve_it():
    with pytest.raises(ValueError, match=r"W_hh \(4096 x 16384, 4-byte items\) needs 512.0 MiB "
                                         r"of VMEM.*streamed every step in tiles over its "
                                         r"output columns"):
        _explain(hidden=4096, implementation="pallas", capabilities=TPU)


def test_simple_rnn_has_no_lane_limit():
    d = _explain("rnn_tanh", hidden=100, capabilities=TPU, implementation="pallas")
    assert d.implementation == "pallas"
    assert not any("padded" in n for n in d.notes), d.notes


@pytest.mark.parametrize("kind, hidden, padded", [("lstm", 300, 384), ("gru", 100, 128),
                                                  ("lstm", 256, None), ("gru", 129, 256)])
def test_a_hidden_size_off_the_lanes_is_padded_and_the_notes_say_so(kind, hidden, padded):
    d = _explain(kind, hidden=hidden, capabilities=TPU, implementation="pallas")
    assert d.implementation == "pallas"
    said = [n for n in d.notes if "padded" in n]
    if padded is None:
        assert not said, d.notes
    else:
        assert said and said[0].startswith(f"hidden {hidden} padded to {padded} "), d.notes
    assert not any("multiple of 128" in r for r in _explain(kind, hidden=hidden).rejected.get(
        "pallas", ())), "rejects no longer lists the lanes"


def test_the_vmem_check_counts_the_padded_hidden_size():
    """W_hh's VMEM is that of the padded size: H=1400 bfloat16 LSTM (padded to 1408) fits, and
    the message of one that does not names the padded sizes."""
    assert pallas_kernel.padded_hidden(1400, 4) == 1408
    assert _explain(hidden=1400, dtype=jnp.bfloat16, capabilities=TPU,
                    implementation="pallas").implementation == "pallas"
    with pytest.raises(ValueError, match=r"W_hh \(2944 x 11776, 2-byte items\)"):
        _explain(hidden=2900, dtype=jnp.bfloat16, implementation="pallas", capabilities=TPU)


def test_rejects_zero_steps_and_dot_algorithms():
    with pytest.raises(ValueError, match="T=0"):
        _explain(T=0, implementation="pallas", capabilities=TPU)
    with pytest.raises(ValueError, match="dot algorithms"):
        _explain(precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32, implementation="pallas",
                 capabilities=TPU)


@pytest.mark.cpu
def test_rejects_float64():
    with references.float64():
        with pytest.raises(ValueError, match="float64"):
            _explain(dtype=jnp.float64, implementation="pallas", capabilities=TPU)


def test_plan_fits_the_scoped_vmem():
    """The time block and batch tile keep the double-buffered streams within the limit, down
    to smaller batch tiles where the whole batch does not fit."""
    big = pallas_kernel.plan(256, 512, 4096 * 4 * 4, 1024 * 4096 * 2, 8 * 1024)
    assert 2 * 1024 * 4096 * 2 + 2 * big.time_block * big.batch_tile * 4096 * 16 <= (
        pallas_kernel.VMEM_LIMIT)
    small = pallas_kernel.plan(8, 1024, 1024 * 4 * 4, 256 * 1024 * 2, 8 * 256)
    assert small == pallas_kernel.Plan(8, 32)
    assert pallas_kernel.plan(3, 5, 100, 100, 100).time_block == 4  # at most T


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("unroll, values", [(1, False), (1, True), (4, False), (2, True)])
def test_time_blocks_that_do_not_divide_t(kind, unroll, values):
    """T = 7 in blocks of 3: the last block is padded with invalid steps; each form of the time
    loop (unrolled 1, 2 or 4 steps: more than a block's; the state in VMEM scratch or carried as
    loop values) gives the scan path's results and gradients, the state crossing the blocks."""
    c = _case(kind, 2, 7, 2, 1, True, [7, 4])
    x, states, w, lengths, _ = _inputs(c)
    layer = pallas_kernel.Layer(pallas_kernel.Options(interpret=INTERPRET, time_block=3,
                                                    unroll=unroll, carry_values=values))
    from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan
    from portable_rnn._src.recurrent.families import FOLDERS

    def run(impl):
        f = functools.partial(rnn_scan, ScanConfig(FOLDERS[kind].cell(), input_size=2,
                                                   hidden_size=H, num_layers=1,
                                                   bidirectional=True, layer_impl=impl))
        return jax.value_and_grad(lambda x, s, w: _loss(f(x, s, w, jnp.asarray(lengths))),
                                  (0, 1, 2))(x, states, w)

    _close(run(layer), run(None))


@pytest.mark.parametrize("kind, B, hidden, form", [
    ("gru", 16, 512, "the state in registers (loop values); time blocks of 32 steps, batch tiles "
     "of 16, 16 steps per loop iteration"),
    ("lstm", 32, 1024, "the state in VMEM scratch; time blocks of 16 steps, batch tiles of 32, "
     "4 steps per loop iteration"),
    ("lstm", 256, 1024, "the state in VMEM scratch; time blocks of 2 steps, batch tiles of 256, "
     "1 step per loop iteration")])
def test_the_decision_says_how_the_kernel_runs_the_time_loop(kind, B, hidden, form):
    d = _explain(kind, B=B, T=512, I=hidden, hidden=hidden, dtype=jnp.bfloat16,
                 implementation="pallas", capabilities=TPU)
    assert d.implementation == "pallas"
    assert any(form in note for note in d.notes), d.notes


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_the_decision_describes_the_plan_the_kernels_run(monkeypatch, kind):
    """The notes' time block, batch tile and loop form are those of the kernels a training
    call runs, forward and backward; the scoped VMEM is made small (2 MiB) so that the plan is
    not the largest time block."""
    monkeypatch.setattr(pallas_kernel, "VMEM_LIMIT", 2 * pallas_kernel.MIB)
    ran = []
    time_loop = pallas_kernel._time_loop

    def spy(*args, plan_, reverse):
        # args[5]: the output streams' dtypes (the inference forward writes h only)
        kernel = "backward" if reverse else "training" if len(args[5]) > 1 else "inference"
        ran.append((kernel, (plan_.time_block, plan_.batch_tile, plan_.unroll,
                             plan_.carry_values)))
        return time_loop(*args, plan_=plan_, reverse=reverse)

    monkeypatch.setattr(pallas_kernel, "_time_loop", spy)
    B, T, I = 16, 12, 4
    d = _explain(kind, B=B, T=T, I=I, implementation="pallas", capabilities=TPU)
    said = re.search(r"state in (registers|VMEM scratch).*time blocks of (\d+) steps, batch "
                     r"tiles of (\d+), (\d+) steps? per loop iteration", " ".join(d.notes))
    assert said, d.notes
    x, states, w, lengths, _ = _inputs(_case(kind, B, T, I, 1, False, [T] * B))
    jax.grad(lambda x: _loss(_call(kind, x, states, w, jnp.asarray(lengths), I, 0, 1, False,
                                   "pallas")))(x)
    expected = (int(said[2]), int(said[3]), int(said[4]), said[1] == "registers")
    assert expected[0] < 8, expected  # the plan is not the largest block of 12 steps
    # the custom VJP also traces the inference forward, whose plan streams less per step
    trained = [form for kernel, form in ran if kernel != "inference"]
    assert trained == [expected, expected], (ran, d.notes)


def test_a_forced_loop_form_runs_and_is_said():
    """`pallas.loop_form` forces the time loop's form: the decision says so, and the
    kernel's results are the scan path's."""
    with pallas.loop_form(2, False):
        d = _explain("gru", B=16, T=512, I=512, hidden=512, dtype=jnp.bfloat16,
                     implementation="pallas", capabilities=TPU)
        c = _case("lstm", 3, 5, 2, 1, False, [5, 2, 0])
        x, states, w, lengths, _ = _inputs(c)
        got = _call("lstm", x, states, w, jnp.asarray(lengths), 2, 0, 1, False, "pallas")
    assert any("the state in VMEM scratch" in n and "2 steps per loop iteration" in n
               for n in d.notes), d.notes
    _close(got, _call("lstm", x, states, w, jnp.asarray(lengths), 2, 0, 1, False, "scan"))


def test_loop_form_unrolls_small_steps_and_carries_small_states_as_values():
    form = pallas_kernel.loop_form
    default = pallas_kernel.Options()
    # B32 H1024: the LSTM's product 32 x 4096 items is small; its h and c, 256 KiB, are not
    assert form(default, 32, 4 * 1024, 2 * 1024) == (4, False)
    assert form(default, 32, 3 * 1024, 1024) == (4, True)  # the GRU's
    # B16 H512: the LSTM's product, 32K items, and the GRU's, 24K, are smaller still
    assert form(default, 16, 4 * 512, 2 * 512) == (16, True)
    assert form(default, 16, 3 * 512, 512) == (16, True)
    assert form(default, 16, 4 * 512 + 1, 2 * 512) == (4, True)
    assert form(default, 256, 4 * 1024, 2 * 1024) == (1, False)  # B256 H1024
    assert form(pallas_kernel.Options(unroll=2, carry_values=False), 8, 256, 256) == (2, False)
    assert form(pallas_kernel.Options(unroll=1, carry_values=True), 256, 4096, 2048) == (1, True)


def test_a_cell_without_a_backward_step_is_served_when_asked_for():
    """A cell without the backward part (`ForwardOnly`, whose gradients JAX takes from the
    forward): the automatic choice passes over the kernel (its differentiated backward is in no
    grid) for the scan path, with the reason; asked for (implementation='pallas', or a policy
    preferring it), the kernel runs the cell, differentiating its step in the backward kernel,
    and its results and gradients are those of the same cell with its backward step."""
    import dataclasses
    import inspect

    from portable_rnn._src.recurrent import api, functions
    from portable_rnn._src.recurrent.cell import ForwardOnly
    from portable_rnn._src.recurrent.families import FOLDERS

    gru = FOLDERS["gru"]
    bare = dataclasses.replace(gru, cell=lambda: ForwardOnly(gru.cell()))
    x, (h0,), w = fam.make_inputs("gru", 2, 3, 4, H, 0, 1, False, 0)
    lengths = jnp.array([3, 1])

    def call(folder, **kw):
        a = inspect.signature(portable_rnn.gru).bind(x, h0, w, lengths, 4, H, 1, 0.0, False,
                                                     **kw)
        a.apply_defaults()
        return functions._checked_call(folder, dict(a.arguments))

    with pallas.interpret():
        d = api.decide(call(bare), TPU)
        assert api.decide(call(bare, implementation="pallas"), TPU).implementation == "pallas"
    why = ("the ForwardOnly cell has no hand-written backward step (step_bwd): the Pallas TPU "
           "kernel's backward differentiates its step, which no benchmark grid has timed, so "
           "the automatic choice takes the scan path; implementation='pallas' asks for the "
           "kernel")
    assert d.implementation == "scan" and d.rejected["pallas"] == (why,)

    def run(folder):
        def f(x, h0, w):
            c = dataclasses.replace(call(folder), preferred="pallas")
            y, h_n = api.run(c, TPU, x, (h0,), w, lengths, None, None)
            return _loss((y, h_n))
        with kernel_mode():
            assert _binds_pallas(jax.grad(f), x, h0, w) == 2
            return jax.value_and_grad(f, (0, 1, 2))(x, h0, w)

    _close(run(bare), run(gru), TOL)


# --- heads: a block-diagonal W_hh, multiplied head by head --------------------------------------

HEAD_FAMILIES = {"lstm": 4, "gru": 3, "simple_rnn": 1, "mgu": 2, "slstm": 4}  # their gates


def _heads_case(family, B, T, I, NH, DH, L, bidir, lengths, dropout=0.0, rmask=None,
                recompute=False, remat=None, seed=0):
    return dict(family=family, B=B, T=T, I=I, NH=NH, DH=DH, H=NH * DH, L=L, bidir=bidir,
                lengths=lengths, dropout=dropout, rmask=rmask, recompute=recompute,
                remat=remat, seed=seed)


@st.composite
def heads_cases(draw):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, 5))
    L = draw(st.integers(1, 2))
    return _heads_case(
        draw(st.sampled_from(sorted(HEAD_FAMILIES))), B, T, draw(st.integers(1, 4)),
        draw(st.sampled_from([2, 3, 4])), draw(st.sampled_from([2, 5, 128])), L,
        draw(st.booleans()), draw(st.lists(st.integers(0, T), min_size=B, max_size=B)),
        dropout=draw(st.sampled_from([0.0, 0.5])) if L > 1 else 0.0,
        rmask=draw(st.sampled_from([None, "one", "per_gate"])), recompute=draw(st.booleans()),
        remat=draw(st.sampled_from([None, 2])), seed=draw(st.integers(0, 2**16)))


def _heads_inputs(c, dtype=jnp.float32):
    """x, the initial states (the sLSTM's normalizer n in [0.2, 2]), weights with `c`'s heads
    spread so that the gates move, and the call's keywords (dropout, masks, segments)."""
    family, B, T, I, H, L = (c[k] for k in ("family", "B", "T", "I", "H", "L"))
    D = 2 if c["bidir"] else 1
    k = jax.random.split(jax.random.key(c["seed"]), 4)
    x = draws.normal(k[0], (B, T, I), dtype)
    n = {"lstm": 2, "slstm": 4}.get(family, 1)
    states = [draws.normal(kk, (L * D, B, H), dtype) for kk in jax.random.split(k[1], n)]
    if family == "slstm":
        states[2] = draws.uniform(k[3], (L * D, B, H), dtype, minval=0.2, maxval=2.0)
    init = getattr(portable_rnn, f"init_{family}_weight")
    w = (init(k[2], I, H, L, c["bidir"], num_heads=c["NH"]) * 2).astype(dtype)
    kw = {"num_heads": c["NH"]}
    if c["dropout"]:
        kw["dropout_rng"] = jax.random.key(c["seed"] + 1)
    if c["rmask"]:
        gates = HEAD_FAMILIES[family]
        shape = (L * D,) + ((gates,) if c["rmask"] == "per_gate" else ()) + (B, H)
        kw["recurrent_dropout_mask"] = draws.bernoulli(
            jax.random.key(c["seed"] + 2), 0.75, shape).astype(jnp.float32) / 0.75
    if c["remat"]:
        kw["remat_every"] = c["remat"]
    return x, tuple(states), w, np.asarray(c["lengths"], np.int32), kw


def _heads_call(c, x, states, w, lengths, impl, interpret=INTERPRET, **kw):
    """The family's op with heads through route `impl`: (y, final states...)."""
    op = getattr(portable_rnn, c["family"])
    recompute = c["recompute"] and impl == "pallas"
    with kernel_mode(interpret) if impl == "pallas" else contextlib.nullcontext():
        with pallas.recompute_backward() if recompute else contextlib.nullcontext():
            return tuple(op(x, *states, w, lengths, c["I"], c["H"], c["L"], c["dropout"],
                            c["bidir"], implementation=impl, **kw))


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(heads_cases())
@example(_heads_case("lstm", 3, 5, 3, 2, 3, 1, True, [5, 0, 2]))
@example(_heads_case("gru", 2, 4, 2, 4, 2, 1, False, [4, 1], rmask="per_gate", seed=1))
@example(_heads_case("mgu", 2, 4, 3, 2, 5, 2, True, [4, 2], dropout=0.5, rmask="one", seed=2))
@example(_heads_case("slstm", 3, 4, 2, 2, 5, 2, True, [4, 0, 3], rmask="per_gate", seed=3))
@example(_heads_case("lstm", 2, 5, 2, 2, 128, 1, True, [5, 3], rmask="per_gate",
                     recompute=True, seed=4))
@example(_heads_case("simple_rnn", 2, 7, 3, 3, 2, 2, True, [7, 0], dropout=0.5, remat=3,
                     seed=5))
def test_heads_equal_the_scan_path(c):
    """Heads (W_hh (NH, G*DH, DH) per layer and direction) in the kernel, multiplied head by
    head: outputs, final states and the gradients of x, the initial states and the weights
    are the scan path's (its batched per-head products), float32, for every family with
    heads: a gated cell's DH off the lanes (padded per head inside each gate block), DH =
    128, a single-gate cell's DH as it is, ragged lengths with a 0, both directions, two
    layers with dropout between them, recurrent masks (one, one per gate), the backward's
    gate factors recomputed, segment checkpointing."""
    x, states, w, lengths, kw = _heads_inputs(c)

    def run(impl):
        def f(x, states, w):
            outs = _heads_call(c, x, states, w, lengths, impl, **kw)
            return _loss(outs), outs
        return jax.jit(jax.value_and_grad(f, (0, 1, 2), has_aux=True))(x, states, w)

    got = run("pallas")
    _close(got, run("scan"), what=str(c))
    outs = got[0][1]
    y = np.asarray(outs[0])
    assert y.shape[-1] == (2 if c["bidir"] else 1) * c["H"]
    for b, n in enumerate(lengths):
        assert not y[b, n:].any(), "y past a length must be zero"
        if n == 0 and c["L"] == 1:  # length 0: the initial state comes back
            for s, f in zip(states, outs[1:]):
                np.testing.assert_array_equal(np.asarray(f)[:, b], np.asarray(s)[:, b])


def _block_diagonal(w_hh, xp):
    """A head's W_hh (NH, G*DH, DH) as the dense (G*H, H) matrix it is: zero off the heads'
    blocks (row g*H + k*DH + j, column k*DH + l is head k's row g*DH + j, column l)."""
    nh, width, dh = w_hh.shape
    gates = width // dh
    blocks = xp.transpose(w_hh.reshape(nh, gates, dh, 1, dh), (1, 0, 2, 3, 4))
    return (blocks * xp.eye(nh).reshape(1, nh, 1, nh, 1)).reshape(gates * nh * dh, nh * dh)


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(st.sampled_from(["lstm", "gru", "rnn_tanh"]), st.sampled_from([2, 4]),
       st.sampled_from([2, 3]), st.integers(0, 2**16))
@example("lstm", 2, 3, 0)
@example("gru", 4, 2, 1)
def test_heads_bfloat16_equal_the_rounded_float64_loop(kind, NH, DH, seed):
    """bfloat16 with heads within the bounds of tests/test_low_precision.py: outputs and
    gradients at most `RECURRENT_ULPS` of bfloat16 from the rounded float64 loop (whose W_hh is
    the heads' block-diagonal matrix: its zeros add nothing), float32 states
    `FLOAT32_STATE_ULPS`; ragged, bidirectional, two layers."""
    dt = jnp.bfloat16
    H, G = NH * DH, GATES[kind] if kind in GATES else 1
    c = lp._case(kind, "bfloat16", 2, 6, 3, H, 2, True, [6, 0], seed=seed)
    x, states, _ = lp._inputs(c)
    family = fam.FAMILY[kind]
    w = getattr(portable_rnn, f"init_{family}_weight")(jax.random.key(seed), 3, H, 2, True,
                                                        num_heads=NH) * 2
    lengths = np.asarray(c["lengths"], np.int32)
    kw = {"nonlinearity": "tanh"} if family == "simple_rnn" else {}

    def ours(x, states, w):
        with kernel_mode():
            return getattr(portable_rnn, family)(x, *states, w, lengths, 3, H, 2, 0.0, True,
                                                 num_heads=NH, implementation="pallas", **kw)

    def reference(xp):
        def f(x, states, w):
            if xp is jnp:
                x, w = x.astype(jnp.float64), w.astype(jnp.float64)
                states = tuple(s.astype(jnp.float64) for s in states)
            else:
                x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
                states = tuple(np.asarray(s, np.float64) for s in states)
            layers = references.flat_layers(w, G, 3, H, 2, True, NH)
            groups = {n: {p: (_block_diagonal(a, xp) if n == "W_hh" else a)
                          for p, a in enumerate(layer[i] for layer in layers)}
                      for i, n in enumerate(("W_ih", "W_hh", "b_ih", "b_hh"))}
            y, finals = references.loop_rnn(
                family, x, states, groups, lengths, 2, True, xp=xp, dtype=dt,
                gradient_dtype=jnp.bfloat16 if xp is jnp else None)
            return (y, *finals)
        return f

    _assert_16_bit_bounds(c, ours, reference, (x, states, w))


def test_heads_under_vmap_fold_into_one_kernel_call():
    """vmap over x with heads: the forward folds the vmapped axis into the batch (one kernel
    per direction); outputs and vmap(grad) equal the scan path's."""
    c = _heads_case("gru", 2, 4, 3, 2, 3, 1, True, [4, 1])
    x, states, w, lengths, kw = _heads_inputs(c)
    xs = jnp.stack([x, 2 * x, -x])

    def f(impl):
        return jax.vmap(lambda x: _heads_call(c, x, states, w, lengths, impl, **kw))

    _close(f("pallas")(xs), f("scan")(xs))
    assert _binds_pallas(f("pallas"), xs) == 2

    def grad(impl):
        return jax.vmap(jax.grad(lambda x, w: _loss(_heads_call(c, x, states, w, lengths, impl,
                                                                 **kw)), (0, 1)), (0, None))
    _close(grad("pallas")(xs, w), grad("scan")(xs, w))


@pytest.mark.parametrize("family, NH, DH, rmask", [
    ("lstm", 2, 128, "per_gate"), ("gru", 4, 72, "one"), ("simple_rnn", 3, 40, "one"),
    ("mgu", 2, 200, None), ("slstm", 4, 128, "per_gate")])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_heads_export_for_a_tpu_with_mosaic_kernels(family, NH, DH, rmask, dtype):
    """`jax.export` for a TPU lowers the kernels with heads with Mosaic (on any host): forward
    and backward, ragged, bidirectional, recurrent masks (one, one per gate), DH = 128, DH off
    the lanes (padded per head for a gated cell, as it is for a single-gate one)."""
    c = _heads_case(family, 8, 16, 128, NH, DH, 1, True, [16] * 7 + [3], rmask=rmask)
    x, states, w, lengths, kw = _heads_inputs(c, dtype)

    def loss(x, w):
        return _loss(_heads_call(c, x, states, w, lengths, "pallas", interpret=False,
                                 capabilities=TPU, **kw))

    exported = jax.export.export(jax.jit(jax.grad(loss, (0, 1))), platforms=["tpu"])(x, w)
    assert exported.mlir_module().count("tpu_custom_call") == 4  # fwd, bwd; per direction


def test_heads_are_served_when_asked_for_and_chosen_once_a_grid_times_them(monkeypatch):
    """The kernel serves heads (its notes say how); the automatic choice on a TPU ranks it for
    them where the device's grid has timed calls with heads (the TPU v5e's: `95510b0/`), and
    keeps the scan path, with the reason, where the grid has not (the same model without its
    `heads` set, or no grid at all)."""
    from portable_rnn._src.core import routing

    kw = dict(hidden=1024, B=16, T=512, I=512, dtype=jnp.bfloat16, num_heads=4,
              capabilities=TPU)
    asked = _explain(implementation="pallas", **kw)
    assert asked.implementation == "pallas"
    assert any(n.startswith("4 heads of 256 units: W_hh resident as 4 blocks of 256 x 1024")
               for n in asked.notes), asked.notes
    timed = _explain(**kw)
    assert set(timed.predicted) == {"pallas", "scan"}, str(timed)
    assert timed.implementation == "pallas", str(timed)  # 0.47x the scan path's time measured
    assert not any("heads" in r for r in timed.rejected.get("pallas", ())), str(timed)
    v9 = _explain(**dict(kw, capabilities=portable_rnn.Capabilities("tpu",
                                                                     device_kind="TPU v9")))
    assert v9.implementation == "scan"
    assert v9.rejected["pallas"][0].startswith(
        "num_heads=4: no grid of TPU v9 has timed calls with heads")
    model = routing.model(routing.device_key(TPU), "recurrent")
    monkeypatch.setattr(routing, "model", lambda key, group: dataclasses.replace(
        model, heads=False) if group == "recurrent" else None)
    auto = _explain(**kw)
    assert auto.implementation == "scan"
    (why,) = auto.rejected["pallas"]
    assert why.startswith("num_heads=4: the routing model (model fitted on TPU v5 lite") and (
        "has timed no call with heads") in why, why
    assert not any("heads" in r for r in _explain(**dict(kw, num_heads=1)).rejected.get(
        "pallas", ()))


def test_the_vmem_check_counts_the_heads_blocks():
    """W_hh with heads takes NH x DH x G*DH items of VMEM, not the dense matrix's: a float32
    LSTM of H = 4096 is rejected dense (512 MiB) and in 4 heads (128 MiB, the message naming
    the heads' blocks), and served in 16 (32 MiB)."""
    with pytest.raises(ValueError, match=r"W_hh \(4 heads of 1024 x 4096, 4-byte items\) needs "
                                         r"128.0 MiB"):
        _explain(hidden=4096, num_heads=4, implementation="pallas", capabilities=TPU)
    assert _explain(hidden=4096, num_heads=16, implementation="pallas",
                    capabilities=TPU).implementation == "pallas"
    assert pallas_kernel.padded_hidden(4 * 72, 4, 4) == 4 * 128
    assert pallas_kernel.padded_hidden(3 * 40, 1, 3) == 120

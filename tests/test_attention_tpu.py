"""The Pallas TPU attention route ("splash"), asked for with ``capabilities=`` a TPU.

Off a TPU the route's program runs JAX's splash kernel in Pallas interpret mode (the route
lowers the compiled kernel only for a TPU); on a TPU the same tests run the compiled kernel.
References: float64 softmax attention of the bfloat16 operands (`references.attention`) and
`jax.nn.dot_product_attention`; transforms are checked against the loop or the dense route
under the same transform.

Bounds (bfloat16, in ulps as `tests/test_low_precision.py` measures them): the route scales the
query in bfloat16 before the kernel (the kernel scales no logits; 1/sqrt(128) is no power of
two), which adds up to 1/2 ulp to every logit. The kernels round ds and p to bfloat16 before
their products, so a gradient element errs by up to an ulp of the terms it sums, which is many
ulps of itself where they cancel: gradients are measured at the magnitude of those terms where
it is larger (`references.attention_gradient_terms`; at the call's largest gradient alone, a
drawn dk of 40 queries measured 9.5 ulps, 1.0 of its terms). Measured in interpret mode at T, S
of 128 and 256 over 60 drawn cases: outputs up to 4.0 ulps, gradients up to 3.0; the dense
route with the same unrounded operands up to 3.0. The bound is 6.
"""

import math

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

import portable_rnn
import references
from portable_rnn._src.attention.routes import splash
from references import assert_ulps

TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")
BF = jnp.bfloat16
SPLASH_ULPS = 6.0
FLOOR = references.ATTENTION_FLOOR
ON_TPU = jax.default_backend() == "tpu"


def case(B=1, T=128, S=128, N=2, K=2, H=128, seed=0, **kw):
    c = dict(B=B, T=T, S=S, N=N, K=K, H=H, seed=seed, is_causal=False, window=None,
             q_len=None, kv_len=None)
    c.update(kw)
    return c


@st.composite
def splash_cases(draw):
    """Shapes the kernel tiles (T, S multiples of 128, H = 128), GQA/MQA, causal, windows
    whose every query sees a key, lengths (0 included)."""
    B = draw(st.integers(1, 2))
    T, S = draw(st.sampled_from([128, 256])), draw(st.sampled_from([128, 256]))
    K = draw(st.integers(1, 2))
    window = draw(st.one_of(st.none(), st.tuples(st.integers(max(0, T - S), 160),
                                                 st.integers(0, 40))))
    optional = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    return case(B=B, T=T, S=S, N=K * draw(st.integers(1, 3)), K=K,
                is_causal=draw(st.booleans()), window=window,
                q_len=optional(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                kv_len=optional(st.lists(st.integers(0, S), min_size=B, max_size=B)),
                seed=draw(st.integers(0, 2**16)))


def inputs(c, dtype=BF, magnitude=1.0):
    ks = jax.random.split(jax.random.key(c["seed"]), 3)
    B, T, S, N, K, H = (c[n] for n in "BTSNKH")
    q = (draws.normal(ks[0], (B, T, N, H)) * magnitude).astype(dtype)
    k = (draws.normal(ks[1], (B, S, K, H)) * magnitude).astype(dtype)
    v = draws.normal(ks[2], (B, S, K, H), dtype)
    lengths = {n: None if c[n] is None else jnp.asarray(c[n], jnp.int32)
               for n in ("q_len", "kv_len")}
    return (q, k, v), lengths


def attend(c, impl="splash", caps=TPU, lengths=None):
    lengths = lengths or {}
    return lambda q, k, v: portable_rnn.dot_product_attention(
        q, k, v, is_causal=c["is_causal"], local_window_size=c["window"],
        query_seq_lengths=lengths.get("q_len"), key_value_seq_lengths=lengths.get("kv_len"),
        implementation=impl, capabilities=caps)


def close(a, b, tol=3e-2):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        np.testing.assert_allclose(x, y, atol=tol * (1 + np.abs(y).max()), rtol=tol)


# --- equivalence ------------------------------------------------------------------------------

@settings(max_examples=max(2, settings.default.max_examples // 2))
@given(splash_cases())
@example(case(B=2, T=128, S=256, N=3, K=1, q_len=[128, 7], kv_len=[0, 200], is_causal=True))
@example(case(B=1, T=256, S=128, N=4, K=2, window=(128, 3)))
@example(case(B=2, T=256, S=256, N=2, K=2, is_causal=True, window=(40, 0), kv_len=[30, 256]))
@example(case(B=2, N=4, K=2, q_len=[0, 40], seed=5828))  # dk's terms cancel: see the bounds
def test_splash_equals_float64_softmax_attention(c):
    float64_check(c, "splash")


@pytest.mark.parametrize("c", [
    case(B=2, T=128, S=256, N=3, K=1, bias=(1, 3, 128, 256), is_causal=True),
    case(B=2, T=256, S=128, N=4, K=2, bias=(2, 1, 1, 128), q_len=[256, 9], kv_len=[0, 100]),
    case(B=1, T=128, S=128, N=2, K=2, bias=(1, 2, 128, 128), kv_len=[60]),
    case(B=1, T=128, S=128, N=2, K=1, is_causal=True),
])
def test_flash_equals_float64_softmax_attention(c):
    float64_check(c, "flash")


def float64_check(c, impl):
    (q, k, v), lengths = inputs(c)
    B, T, S, N = (c[n] for n in "BTSN")
    bias = c.get("bias")
    args = (q, k, v)
    if bias is not None:
        args += (draws.normal(jax.random.key(c["seed"] + 2), bias, BF),)
    vis = references.attention_visibility(
        B, N, T, S, is_causal=c["is_causal"], window=c["window"],
        **{n: None if a is None else np.asarray(a) for n, a in lengths.items()})
    base = attend(c, impl, lengths=lengths)
    f = lambda q, k, v, *b: base(q, k, v) if not b else portable_rnn.dot_product_attention(  # noqa: E731
        q, k, v, b[0], is_causal=c["is_causal"], query_seq_lengths=lengths.get("q_len"),
        key_value_seq_lengths=lengths.get("kv_len"), implementation=impl, capabilities=TPU)
    out = jax.jit(f)(*args)
    assert out.dtype == BF
    as64 = [np.asarray(a, np.float64) for a in args]
    scale = 1 / math.sqrt(c["H"])
    ref_fn = lambda q, k, v, *b, xp=np: references.attention(  # noqa: E731
        q, k, v, b[0] if b else None, scale=scale, visibility=vis, xp=xp)
    want = ref_fn(*as64)
    assert_ulps(out, want.astype(BF), BF, SPLASH_ULPS, f"{impl} output", FLOOR)
    rows = vis.any(-1).transpose(0, 2, 1)
    assert not np.asarray(out, np.float32)[~rows].any(), "a query that sees no key gives 0"

    cot = np.asarray(draws.normal(jax.random.key(c["seed"] + 1), out.shape).astype(BF),
                     np.float32)
    argnums = tuple(range(len(args)))
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(f(*a).astype(jnp.float32) * cot),
                             argnums))(*args)
    with references.float64():
        loss = lambda *a: jnp.sum(references.round_to(  # noqa: E731
            ref_fn(*a, xp=jnp), BF, jnp) * cot.astype(np.float64))
        ref = [np.asarray(r) for r in jax.jit(jax.grad(loss, argnums))(
            *map(jax.device_put, as64))]
    largest = max(float(np.max(np.abs(r), initial=0)) for r in ref[:3])
    terms = references.attention_gradient_terms(*as64, cot=cot.astype(np.float64), scale=scale,
                                                visibility=vis)
    for g, r, m, name in zip(grads, ref, terms, ["dq", "dk", "dv", "dbias"]):
        assert g.dtype == BF, name
        references.assert_within_terms(r, m, name)
        assert_ulps(g, r.astype(BF), BF, SPLASH_ULPS, f"{impl} {name}", FLOOR,
                    references.gradient_scale(r, largest), m)


@pytest.mark.parametrize("impl,c", [
    ("splash", case(B=2, T=128, S=256, N=4, K=2, is_causal=True, kv_len=[0, 200])),
    ("splash", case(B=1, T=256, S=256, N=3, K=1, window=(40, 8), q_len=[100])),
    ("flash", case(B=2, T=256, S=128, N=2, K=1, bias=(2, 1, 1, 128), q_len=[256, 9])),
])
def test_float32_equals_float64_softmax_attention(impl, c):
    """float32 operands at precision HIGHEST (Mosaic's float32 products, exact on a TPU as on a
    CPU): outputs and every gradient against the float64 reference of the same operands, to
    float32 rounding (`references.float32_tol`: a TPU's float32 exp is a few ulps off)."""
    (q, k, v), lengths = inputs(c, jnp.float32)
    B, T, S, N = (c[n] for n in "BTSN")
    args = (q, k, v)
    if c.get("bias") is not None:
        args += (draws.normal(jax.random.key(c["seed"] + 2), c["bias"], jnp.float32),)
    vis = references.attention_visibility(
        B, N, T, S, is_causal=c["is_causal"], window=c["window"],
        **{n: None if a is None else np.asarray(a) for n, a in lengths.items()})

    def f(q, k, v, *b):
        return portable_rnn.dot_product_attention(
            q, k, v, *b, is_causal=c["is_causal"], local_window_size=c["window"],
            query_seq_lengths=lengths.get("q_len"), key_value_seq_lengths=lengths.get("kv_len"),
            precision="highest", implementation=impl, capabilities=TPU)

    scale = 1 / math.sqrt(c["H"])
    cot = draws.normal(jax.random.key(c["seed"] + 1), (B, T, N, c["H"]), jnp.float32)
    loss = lambda *a: jnp.sum(f(*a) * cot)  # noqa: E731
    out, grads = jax.jit(lambda *a: (f(*a), jax.grad(loss, tuple(range(len(a))))(*a)))(*args)
    assert out.dtype == jnp.float32
    with references.float64():
        ref_fn = lambda *a, xp=jnp: references.attention(  # noqa: E731
            a[0], a[1], a[2], a[3] if len(a) > 3 else None, scale=scale, visibility=vis, xp=xp)
        as64 = [np.asarray(a, np.float64) for a in args]
        want = ref_fn(*as64, xp=np)  # in NumPy; the gradient one compiled program
        ref = jax.jit(jax.grad(lambda *a: jnp.sum(ref_fn(*a) * np.asarray(cot, np.float64)),
                               tuple(range(len(args)))))(*map(jax.device_put, as64))
    tol = references.float32_tol(2e-5)
    for got, exp, name in zip((out, *grads), (want, *ref), ("out", "dq", "dk", "dv", "dbias")):
        exp = np.asarray(exp)
        np.testing.assert_allclose(np.asarray(got, np.float64), exp, rtol=tol,
                                   atol=tol * (1 + np.abs(exp).max()), err_msg=f"{impl} {name}")
    rows = vis.any(-1).transpose(0, 2, 1)
    assert not np.asarray(out)[~rows].any(), "a query that sees no key gives 0"


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
def test_float32_products_follow_the_precision():
    """float32 operands: the kernels' dots are traced at HIGHEST for HIGH and HIGHEST (the
    call's or JAX's global one) and at the platform's DEFAULT otherwise; the decision says
    which."""
    q = jax.ShapeDtypeStruct((1, 256, 2, 128), jnp.float32)
    for impl in ("splash", "flash"):
        for precision, setting in ((None, None), ("default", None), ("high", "highest"),
                                   (jax.lax.Precision.HIGHEST, "highest")):
            assert splash.float32_precision(precision) == setting
            d = portable_rnn.explain_attention(q, q, q, precision=precision, implementation=impl,
                                               capabilities=TPU)
            want = "at HIGHEST" if setting else "at the platform's DEFAULT"
            assert any(want in n for n in d.notes), d.notes
        with jax.default_matmul_precision("highest"):
            assert splash.float32_precision(None) == "highest"
            d = portable_rnn.explain_attention(q, q, q, implementation=impl, capabilities=TPU)
            assert any("at HIGHEST" in n for n in d.notes), d.notes
        # the kernels' own dots, forward and backward, ask for what the notes say
        x = jnp.ones(q.shape, jnp.float32)
        for precision, want in (("highest", jax.lax.Precision.HIGHEST), (None, None)):
            def loss(q, k, v, precision=precision, impl=impl):
                return jnp.sum(portable_rnn.dot_product_attention(
                    q, k, v, precision=precision, implementation=impl, capabilities=TPU) ** 2)
            dots = references.kernel_dots(jax.grad(loss, (0, 1, 2)), x, x, x)
            assert dots and all(p in ((want, want), want) for _, p in dots), (precision, dots)


@pytest.mark.parametrize("kw", [dict(), dict(is_causal=True), dict(window=(64, 16)),
                                dict(is_causal=True, window=(100, 0), K=1, N=4)])
def test_splash_equals_jax_nn(kw):
    c = case(B=2, T=256, S=256, **kw)
    (q, k, v), _ = inputs(c)
    lengths = dict(q_len=jnp.array([256, 130]), kv_len=jnp.array([256, 200]))
    got = jax.jit(attend(c, lengths=lengths))(q, k, v)
    f32 = [a.astype(jnp.float32) for a in (q, k, v)]
    with jax.default_matmul_precision("highest"):
        want = jax.nn.dot_product_attention(
            *f32, is_causal=c["is_causal"], local_window_size=c["window"],
            query_seq_lengths=lengths["q_len"], key_value_seq_lengths=lengths["kv_len"])
    rows = (np.arange(256)[None, :] < np.asarray(lengths["q_len"])[:, None])
    np.testing.assert_allclose(np.asarray(got, np.float32)[rows], np.asarray(want)[rows],
                               atol=3e-2, rtol=3e-2)
    assert not np.asarray(got, np.float32)[~rows].any()


def test_no_visible_key_gives_zero_and_zero_gradients():
    """Length 0 and queries whose window lies past the last valid key, 100x logits: 0 and
    zero gradients for them, never NaN."""
    c = case(B=2, T=256, S=256, N=2, K=1, window=(8, 0), is_causal=True)
    (q, k, v), _ = inputs(c, magnitude=10.0)
    lengths = dict(kv_len=jnp.array([0, 100]))
    f = jax.jit(attend(c, lengths=lengths))
    out = f(q, k, v)
    assert bool(jnp.all(out[0] == 0)) and bool(jnp.all(out[1, 108:] == 0))
    assert bool(jnp.all(jnp.isfinite(out.astype(jnp.float32))))
    assert bool(jnp.any(out[1, :100] != 0))
    grads = jax.grad(lambda *a: jnp.sum(f(*a).astype(jnp.float32)), (0, 1, 2))(q, k, v)
    for g in grads:
        assert bool(jnp.all(jnp.isfinite(g.astype(jnp.float32))))
    dq, dk, dv = grads
    assert bool(jnp.all(dq[0] == 0)) and bool(jnp.all(dq[1, 108:] == 0))
    assert bool(jnp.all(dk[:, 100:] == 0)) and bool(jnp.all(dv[0] == 0))


@pytest.mark.parametrize("impl", ["splash", "flash"])
@pytest.mark.parametrize("setting", ["highest", "float32"])
def test_kernels_traced_at_default_under_a_global_matmul_precision(impl, setting):
    """``jax.default_matmul_precision`` set around the call (as the suite sets it on a TPU):
    the kernels' dots, forward and backward, still ask bfloat16 operands for DEFAULT (Mosaic
    fails to compile any other), and the results are those without the setting."""
    c = case(B=1, T=128, S=128, N=2, K=1, is_causal=True)
    (q, k, v), _ = inputs(c)
    lengths = dict(kv_len=jnp.array([100]))
    f = attend(c, impl, lengths=lengths)
    loss = lambda *a: jnp.sum(f(*a).astype(jnp.float32) ** 2)  # noqa: E731
    plain = jax.jit(jax.value_and_grad(loss, (0, 1, 2)))(q, k, v)
    with jax.default_matmul_precision(setting):
        references.assert_bfloat16_kernel_dots_at_default(jax.grad(loss, (0, 1, 2)), q, k, v)
        assert jax.jit(f).lower(q, k, v).as_text()  # traced and lowered under the setting
        under = jax.jit(jax.value_and_grad(loss, (0, 1, 2)))(q, k, v)
    for a, b in zip(jax.tree.leaves(under), jax.tree.leaves(plain)):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


# --- transforms -------------------------------------------------------------------------------

C = case(B=2, T=128, S=128, N=2, K=1, is_causal=True)


def _c_inputs():
    (q, k, v), _ = inputs(C)
    return q, k, v, dict(kv_len=jnp.array([100, 128]))


@pytest.mark.parametrize("impl", ["splash", "flash"])
@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_vmap_any_axis_equals_loop(axis, impl):
    q, k, v, lengths = _c_inputs()
    qs = jnp.stack([q, -q, 0.5 * q], axis=axis)
    got = jax.jit(jax.vmap(attend(C, impl, lengths=lengths), in_axes=(axis, None, None)))(qs, k, v)
    f = jax.jit(attend(C, impl, lengths=lengths))
    for i in range(3):
        close(got[i], f(jnp.take(qs, i, axis=axis), k, v), 1e-6)


@pytest.mark.parametrize("impl", ["splash", "flash"])
def test_nested_vmap_grad_orders_checkpoint(impl):
    q, k, v, lengths = _c_inputs()
    f = attend(C, impl, lengths=lengths)
    loss = lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) ** 2)  # noqa: E731
    g = jax.grad(loss, (0, 1, 2))
    qs = jnp.stack([jnp.stack([q * (i + 1) * (j - 1.5) for j in range(2)], 1) for i in range(2)],
                   1)  # (B, 2, 2, T, N, H)
    ks = jnp.stack([k, -k], 0)
    nested = jax.jit(jax.vmap(jax.vmap(jax.vmap(g, in_axes=(1, None, None)),
                                       in_axes=(1, None, None)), in_axes=(None, 0, None)))(
        qs, ks, v)
    for a in range(2):
        for i in range(2):
            for j in range(2):
                want = jax.jit(g)(qs[:, i, j], ks[a], v)
                close([x[a, i, j] for x in nested], want, 1e-6)
    total = lambda qs, k, v: jnp.sum(jax.vmap(loss, in_axes=(1, None, None))(  # noqa: E731
        qs[:, 0], k, v))
    gv = jax.jit(jax.grad(total, (0, 1, 2)))(qs, k, v)
    close(gv[1], sum(nested[1][0, 0, j] for j in range(2)), 2e-2)
    ck = jax.jit(jax.grad(jax.checkpoint(loss), (0, 1, 2)))(q, k, v)
    close(ck, jax.jit(g)(q, k, v), 1e-6)
    dense = jax.jit(jax.grad(lambda q, k, v: jnp.sum(
        attend(C, "xla", lengths=lengths)(q, k, v).astype(jnp.float32) ** 2), (0, 1, 2)))
    close(jax.jit(g)(q, k, v), dense(q, k, v))


@pytest.mark.parametrize("impl", ["splash", "flash"])
@pytest.mark.parametrize("spec", [P("x"), P(None, None, "x")])
def test_shard_map_over_batch_and_heads(spec, impl):
    devices = jax.devices()[:2]
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    c = case(B=2, T=128, S=128, N=4, K=2, is_causal=True)
    (q, k, v), _ = inputs(c)
    f = attend(c, impl)
    sharded = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec,
                                    check_vma=False))
    close(sharded(q, k, v), jax.jit(f)(q, k, v), 1e-6)
    loss = lambda f: lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) ** 2)  # noqa: E731
    g_sharded = jax.jit(jax.grad(loss(jax.shard_map(f, mesh=mesh, in_specs=(spec,) * 3,
                                                    out_specs=spec, check_vma=False)),
                                 (0, 1, 2)))
    # a bfloat16 ulp: a shard's sum over the rows of its heads may round differently
    close(g_sharded(q, k, v), jax.jit(jax.grad(loss(f), (0, 1, 2)))(q, k, v), 1e-2)


def test_shard_map_checking_varying_axes_takes_a_portable_path():
    """With check_vma=True the kernel cannot type its outputs: asked for, the route says so;
    chosen automatically, a portable path serves the call."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    c = case(B=2, T=128, S=128, N=2, K=2, is_causal=True)
    (q, k, v), _ = inputs(c)
    with pytest.raises(ValueError, match=r"inside jax.shard_map with check_vma=True"):
        jax.shard_map(attend(c), mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"))(q, k, v)
    big = jnp.zeros((2, 2048, 2, 128), BF)

    def decide(q):
        d = portable_rnn.explain_attention(q, q, q, is_causal=True, capabilities=TPU)
        assert d.implementation in ("chunked", "xla"), d
        assert "check_vma=True" in d.rejected["splash"][0]
        return q

    jax.shard_map(decide, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(big)
    assert portable_rnn.explain_attention(big, big, big, is_causal=True,
                                          capabilities=TPU).implementation == "splash"


@pytest.mark.parametrize("impl", ["splash", "flash"])
def test_export_runs_the_exported_program(impl):
    q, k, v, lengths = _c_inputs()
    f = attend(C, impl, lengths=lengths)
    exported = jax.export.export(jax.jit(f))(q, k, v)
    restored = jax.export.deserialize(exported.serialize())
    close(restored.call(q, k, v), jax.jit(f)(q, k, v), 1e-6)


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
def test_export_for_tpu_holds_the_compiled_kernel():
    """Lowered for a TPU (on any machine), the program calls the Mosaic kernel, not the
    interpreter; the automatic choice carries it in the TPU branch only."""
    c = case(B=1, T=2048, S=2048, N=2, K=2, is_causal=True)
    q = jax.ShapeDtypeStruct((1, 2048, 2, 128), BF)
    text = jax.export.export(jax.jit(attend(c)), platforms=["tpu"])(q, q, q).mlir_module()
    assert "tpu_custom_call" in text
    auto = jax.export.export(jax.jit(attend(c, impl=None)), platforms=["cpu"])(q, q, q)
    assert "tpu_custom_call" not in auto.mlir_module()


# --- routing ----------------------------------------------------------------------------------

def _sds(B, T, N, H=128, dtype=BF, S=None, K=None):
    return (jax.ShapeDtypeStruct((B, T, N, H), dtype),
            jax.ShapeDtypeStruct((B, S or T, K or N, H), dtype),
            jax.ShapeDtypeStruct((B, S or T, K or N, H), dtype))


def _fastest(d):
    """The route `d` predicts fastest forward+backward."""
    return min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"])


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
def test_automatic_choice_on_a_tpu_follows_the_routing_model():
    d = portable_rnn.explain_attention(*_sds(4, 2048, 8), is_causal=True, capabilities=TPU)
    assert d.implementation == "splash" == _fastest(d)
    assert set(d.predicted) == {"splash", "flash", "chunked", "xla"}
    assert d.platforms["tpu"].implementation == "splash"
    assert d.platforms["cpu"].implementation in ("chunked", "xla")
    assert any(n.startswith("blocks of ") and "model fitted on TPU v5 lite" in n
               for n in d.notes)
    assert "model fitted on TPU v5 lite" in d.notes[-1]
    for name in ("flash", "chunked", "xla"):
        assert d.passed_over[name][0].startswith("predicted "), d.passed_over
    for B, T, N, dtype in ((4, 256, 8, BF), (4, 1024, 8, jnp.float32), (16, 512, 32, BF)):
        d = portable_rnn.explain_attention(*_sds(B, T, N, dtype=dtype), capabilities=TPU)
        assert d.implementation == _fastest(d), d
    # the dense path's logits grow as T x S: never the choice at long sequences
    for dtype in (BF, jnp.float32):
        d = portable_rnn.explain_attention(*_sds(1, 16384, 8, dtype=dtype), capabilities=TPU)
        assert d.implementation != "xla" and d.predicted["xla"]["fwdbwd"] > 2 * min(
            t["fwdbwd"] for t in d.predicted.values()), d.predicted


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
@pytest.mark.parametrize("B,T,N,K,causal,window", [
    (4, 2048, 8, 8, False, None), (4, 2048, 8, 8, True, None), (4, 2048, 32, 8, True, None),
    (2, 8192, 8, 8, True, None), (2, 8192, 8, 8, True, (1024, 0)),
    (2, 32768, 8, 8, True, None)])
def test_splash_stays_chosen_where_it_was_measured_fastest(B, T, N, K, causal, window):
    """The shapes where earlier benchmark runs measured the splash kernel faster than every
    other route (benchmarks/results/tpu/727a41e, 9c639e5): the routing model takes it."""
    d = portable_rnn.explain_attention(*_sds(B, T, N, K=K), is_causal=causal,
                                       local_window_size=window, capabilities=TPU)
    assert d.implementation == "splash", d


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
def test_block_sizes_tile_the_sequences():
    assert splash.fit_block(512, 2048, 2048) == 512
    assert splash.fit_block(1024, 8192 + 128, 8192) == 128
    assert splash.fit_block(512, 384, 640) == 128
    assert splash.fit_block(512, 768, 256) == 256
    for T, S in ((2048, 2048), (8192, 8192), (768, 256), (8192 + 128, 8192)):
        call = portable_rnn._src.attention.api.check_attention_args(
            *_sds(2, T, 8, S=S), None, None, None, True, None, None, None, None, None)
        for caps in (TPU, portable_rnn.Capabilities("tpu", device_kind="TPU v9 imaginary")):
            bq, bkv, why = splash.block_sizes(call, caps)
            assert T % bq == 0 and S % bkv == 0 and bq in splash.BLOCKS
            if caps is TPU and T % 256 == 0 and S % 256 == 0:
                assert bq == bkv and "predicted fastest" in why, why
            elif caps is not TPU:
                assert (bq, bkv) == (splash._fit(1024, T), splash._fit(1024, S))
                assert "does not rank them for this call on TPU v9 imaginary" in why, why
    # float32 blocks of 1024 overflow the kernel's scoped VMEM in its backward on a TPU v5e
    for T in (2048, 8192):
        call = portable_rnn._src.attention.api.check_attention_args(
            *_sds(4, T, 8, dtype=jnp.float32), None, None, None, False, None, None, None, None,
            None)
        for caps in (TPU, portable_rnn.Capabilities("tpu", device_kind="TPU v9 imaginary")):
            bq, bkv, why = splash.block_sizes(call, caps)
            assert bq <= 512 and bkv <= 512, (caps, bq, bkv, why)


@pytest.mark.cpu  # rejected before anything runs: the same on every platform
@pytest.mark.parametrize("kind,match", [
    ("float16", r"inputs are float16: Mosaic compiles no float16 arithmetic"),
    ("head", r"head dim 64: the Pallas TPU kernels need a multiple of 128"),
    ("length", r"T=100, S=128: the Pallas TPU kernels' blocks tile only sequence lengths"),
    ("bias", r"a `bias`: the splash kernel adds no bias to the logits \(the flash route does\)"),
    ("mask", r"a boolean `mask`: the Pallas TPU kernels take causality"),
    ("window", r"local_window_size=\(4, 0\) with T=256 > S \+ 4: the last queries see no key"),
    ("scale", r"a traced `scale`"),
    ("residual", r"return_residual=True"),
    ("precision", r"precision .*BF16_BF16_F32"),
    ("algorithm", r"take lax.Precision values for float32 operands, not dot algorithms"),
    ("platform", r"platform is 'cpu': JAX's Pallas TPU splash attention kernel needs a TPU"),
])
def test_every_reject_is_stated(kind, match):
    B, T, S, N, H = 1, 256, 256, 2, 128
    dtype = {"algorithm": jnp.float32, "float16": jnp.float16}.get(kind, BF)
    H = 64 if kind == "head" else H
    T = 100 if kind == "length" else T
    S = 128 if kind in ("length", "window") else S
    q, k, v = (jnp.zeros((B, n, N, H), dtype) for n in (T, S, S))
    kw = dict(implementation="splash", capabilities=TPU)
    if kind == "bias":
        kw["bias"] = jnp.zeros((1, 1, T, S), dtype)
    if kind == "mask":
        kw["mask"] = jnp.ones((1, 1, T, S), bool)
    if kind == "window":
        kw["local_window_size"] = (4, 0)
    if kind == "residual":
        kw["return_residual"] = True
    if kind in ("precision", "algorithm"):
        kw["precision"] = jax.lax.DotAlgorithmPreset.F32_F32_F32
    if kind == "platform":
        kw["capabilities"] = portable_rnn.Capabilities("cpu")
    with pytest.raises(ValueError, match=match):
        if kind in FLASH_TOO:  # the flash route shares the reason
            with pytest.raises(ValueError, match=match):
                portable_rnn.dot_product_attention(q, k, v, **dict(kw, implementation="flash"))
        if kind == "scale":
            jax.jit(lambda s: portable_rnn.dot_product_attention(q, k, v, scale=s, **kw))(0.5)
        else:
            portable_rnn.dot_product_attention(q, k, v, **kw)


FLASH_TOO = ("float16", "head", "length", "mask", "residual", "precision", "algorithm")


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
def test_flash_rejects_a_window_and_takes_a_bias():
    q = jnp.zeros((1, 256, 2, 128), BF)
    with pytest.raises(ValueError, match=r"local_window_size=\(4, 4\): the flash kernel has no "
                                         r"sliding window"):
        portable_rnn.dot_product_attention(q, q, q, local_window_size=4, implementation="flash",
                                           capabilities=TPU)
    bias = jax.ShapeDtypeStruct((1, 2, 256, 256), BF)
    sds = jax.ShapeDtypeStruct(q.shape, BF)
    d = portable_rnn.explain_attention(sds, sds, sds, bias, capabilities=TPU)
    assert "a `bias`: the splash kernel adds no bias" in d.rejected["splash"][-1]
    assert set(d.predicted) == {"flash", "chunked", "xla"}
    assert d.implementation == _fastest(d)
    forced = portable_rnn.explain_attention(sds, sds, sds, bias, implementation="flash",
                                            capabilities=TPU)
    assert any("bias broadcast" in n for n in forced.notes)


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
def test_accepted_precisions():
    q, k, v = (jnp.ones((1, 128, 1, 128), BF) for _ in range(3))
    for precision in (None, "highest", jax.lax.Precision.DEFAULT,
                      jax.lax.DotAlgorithmPreset.BF16_BF16_F32):
        d = portable_rnn.explain_attention(q, k, v, precision=precision,
                                           implementation="splash", capabilities=TPU)
        assert d.implementation == "splash"


@pytest.mark.cpu  # decisions and lowering only: the same on every platform
def test_tpu_generation_from_the_device_kind():
    gen = lambda kind, platform="tpu": portable_rnn.Capabilities(  # noqa: E731
        platform, device_kind=kind).tpu_generation
    assert gen("TPU v5 lite") == 5 and gen("TPU v4") == 4 and gen("TPU v6 lite") == 6
    assert gen("TPU7x") == 7 and gen("TPU v5p") == 5
    assert gen("NVIDIA H100", "gpu") is None and gen(None) is None and gen("mystery") is None


@pytest.mark.skipif(not ON_TPU, reason="the compiled kernel needs a TPU")
def test_on_a_tpu_the_program_holds_the_compiled_kernel():
    c = case(B=1, T=256, S=256, is_causal=True)
    (q, k, v), _ = inputs(c)
    text = jax.jit(attend(c, caps=None)).lower(q, k, v).as_text()
    assert "tpu_custom_call" in text


def test_flax_attention_fn_reaches_the_route():
    """Flax's attention module through `portable_rnn.linen.attention_fn`: without a mask the
    call reaches the splash route (a Flax causal mask is a boolean array, which it rejects)."""
    import functools

    import flax.linen as nn

    from portable_rnn import linen as plinen

    x = draws.normal(jax.random.key(0), (2, 128, 64), BF)

    def module(impl):
        return nn.MultiHeadDotProductAttention(
            num_heads=2, qkv_features=256, dtype=BF,
            attention_fn=functools.partial(plinen.attention_fn, implementation=impl))

    params = module("xla").init(jax.random.key(1), x)
    with portable_rnn.policy(capabilities=TPU):
        got = jax.jit(lambda p, x: module("splash").apply(p, x))(params, x)
        want = jax.jit(lambda p, x: module("xla").apply(p, x))(params, x)
        close(got, want)
        mask = nn.make_causal_mask(jnp.ones((2, 128)))
        with pytest.raises(ValueError, match=r"a boolean `mask`"):
            module("splash").apply(params, x, mask=mask)

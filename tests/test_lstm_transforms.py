"""portable_rnn.lstm under jit, grad, vmap (any axis of any argument), checkpoint; dtypes."""

from functools import partial

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads

import family_helpers as fam
import portable_rnn
import references
from lstm_helpers import make_inputs, run
from references import RECURRENT_ULPS, assert_ulps, numpy_lstm

B, T, I, H, L = 3, 5, 4, 3, 2
LENGTHS = np.array([5, 2, 0], np.int32)


@pytest.mark.slow  # finite differences; the hand-written VJP is also checked against autodiff
def test_check_grads_float64():
    """Finite differences in float64 (x64), ragged lengths and bidirectional, reverse mode."""
    with references.float64():
        x, h0, c0, w = (a.astype(jnp.float64) for a in make_inputs(B, T, I, H, L, True, 3))
        f = jax.jit(lambda *a: run(*a, LENGTHS, I, H, L, True))
        check_grads(f, (x, h0, c0, w), order=1, modes=["rev"], atol=1e-6, rtol=1e-6)
        # second order through the hand-written VJP
        g = lambda x, w: jnp.sum(run(x, h0, c0, w, LENGTHS, I, H, L, True)[0] ** 2)
        check_grads(g, (x, w), order=2, modes=["rev"], atol=1e-5, rtol=1e-5)


def test_float64_matches_numpy_tightly():
    with references.float64():
        x, h0, c0, w = (a.astype(jnp.float64) for a in make_inputs(B, T, I, H, L, True, 4))
        got = run(x, h0, c0, w, LENGTHS, I, H, L, True)
        assert got[0].dtype == jnp.float64
        ref = numpy_lstm(x, h0, c0, *portable_rnn.unpack_lstm_weights(w, I, H, L, True),
                         LENGTHS, L, True)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(np.asarray(a), b, atol=1e-12, rtol=1e-12)


ARG_NAMES = ("x", "h_0", "c_0", "weights", "seq_lengths")


@pytest.mark.parametrize("arg", range(5), ids=ARG_NAMES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_vmap_any_axis_equals_loop(arg, axis):
    """vmap over an extra axis inserted at `axis` of one argument equals a per-slice loop."""
    V = 2
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 5)
    args = [x, h0, c0, w, jnp.asarray(LENGTHS)]
    slices = [make_inputs(B, T, I, H, L, True, 10 + v)[arg] if arg < 4
              else jnp.asarray([[4, 1, 3], [0, 5, 2]][v], jnp.int32) for v in range(V)]
    ax = axis if axis >= 0 else slices[0].ndim + 1 + axis
    args[arg] = jnp.stack(slices, axis=ax)
    in_axes = [None] * 5
    in_axes[arg] = ax
    f = lambda *a: run(*a, I, H, L, True)
    for out_axis in (0, 1):
        got = jax.vmap(f, in_axes=tuple(in_axes), out_axes=out_axis)(*args)
        for v in range(V):
            one = list(args)
            one[arg] = slices[v]
            want = f(*one)
            for g, w_ in zip(got, want):
                np.testing.assert_allclose(np.asarray(jnp.take(g, v, axis=out_axis)),
                                           np.asarray(w_), atol=1e-6, rtol=1e-6)


def test_nested_vmap_and_grad_of_vmap():
    x, h0, c0, w = make_inputs(B, T, I, H, L, False, 6)
    xs = jnp.stack([jnp.stack([x, x * 0.5]), jnp.stack([x * -1, x * 2])])  # (2, 2, B, T, I)
    f = lambda x: jnp.sum(run(x, h0, c0, w, LENGTHS, I, H, L, False)[0] ** 2)
    got = jax.vmap(jax.vmap(jax.grad(f)))(xs)
    want = jnp.stack([jnp.stack([jax.grad(f)(xs[i, j]) for j in range(2)]) for i in range(2)])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)
    g = jax.grad(lambda xs: jnp.sum(jax.vmap(jax.vmap(f))(xs)))(xs)
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), atol=1e-5, rtol=1e-5)


def test_jit_checkpoint_and_scan_carry():
    """jit, jax.checkpoint, and h_n/c_n fed back as a lax.scan carry (dtype-stable)."""
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 7)
    f = lambda x, w: jnp.sum(run(x, h0, c0, w, LENGTHS, I, H, L, True)[0] ** 2)
    g_plain = jax.grad(f, (0, 1))(x, w)
    g_ckpt = jax.jit(jax.grad(jax.checkpoint(f), (0, 1)))(x, w)
    for a, b in zip(g_plain, g_ckpt):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-6)

    bf = lambda a: a.astype(jnp.bfloat16)

    def chunk(carry, x_chunk):
        y, h, c = portable_rnn.lstm(x_chunk, *carry, bf(w), None, I, H, L, 0.0, True)
        return (h, c), y

    xs = jnp.stack([bf(x), bf(x)])
    (h, c), ys = jax.jit(lambda xs: lax.scan(chunk, (bf(h0), c0), xs))(xs)
    assert (h.dtype, c.dtype, ys.dtype) == (jnp.bfloat16, jnp.float32, jnp.bfloat16)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("precision", [None, lax.Precision.DEFAULT, lax.Precision.HIGHEST])
def test_low_precision_dtypes_and_every_precision(dtype, precision):
    """16-bit inputs work with every precision (DEFAULT raises in jax.experimental.rnn.lstm)."""
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 8)
    x16, h16, w16 = x.astype(dtype), h0.astype(dtype), w.astype(dtype)
    low = run(x16, h16, c0, w16, LENGTHS, I, H, L, True, precision=precision)
    assert low[0].dtype == dtype and low[1].dtype == dtype and low[2].dtype == jnp.float32
    # the 16-bit computation the documentation describes, in float64 (tests/test_low_precision)
    want = fam.reference("lstm", x16, (h16, c0), w16, LENGTHS, I, H, 0, L, True, dtype=dtype)
    want = (want[0], *want[1])
    bounds = (RECURRENT_ULPS, RECURRENT_ULPS, references.state_ulps(dtype))
    for a, b, ulps in zip(low, want, bounds):
        assert_ulps(a, np.asarray(b).astype(a.dtype).astype(np.float64), dtype, ulps,
                    str(a.dtype))
    grads = jax.grad(lambda w: jnp.sum(run(x.astype(dtype), h0.astype(dtype), c0, w, LENGTHS,
                                           I, H, L, True)[0].astype(jnp.float32)))(w)
    assert grads.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(grads)))


def test_mixed_weight_dtypes_follow_x():
    """float32 weights with bfloat16 x compute in bfloat16 (the Flax mixed-precision setup).

    The matrices are rounded to bfloat16 for the matmuls; biases are added in float32, so the
    result is close to (not bit-equal with) passing bfloat16 weights.
    """
    x, h0, c0, w = make_inputs(B, T, I, H, L, False, 9)
    a = run(x.astype(jnp.bfloat16), h0, c0, w, LENGTHS, I, H, L, False)
    b = run(x.astype(jnp.bfloat16), h0, c0, w.astype(jnp.bfloat16), LENGTHS, I, H, L, False)
    assert a[0].dtype == jnp.bfloat16 and a[1].dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(a[0].astype(jnp.float32)),
                               np.asarray(b[0].astype(jnp.float32)), atol=4e-3)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32"])
def test_seq_lengths_any_integer_dtype(dtype):
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 10)
    want = run(x, h0, c0, w, LENGTHS, I, H, L, True)
    got = run(x, h0, c0, w, LENGTHS.astype(dtype), I, H, L, True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_seq_lengths_int64_under_x64():
    """lstm_ref raises for int64 lengths; we convert."""
    with references.float64():
        x, h0, c0, w = make_inputs(B, T, I, H, L, True, 10)
        lengths = jnp.asarray(LENGTHS, jnp.int64)
        got = run(x, h0, c0, w, lengths, I, H, L, True)
        want = run(x, h0, c0, w, LENGTHS, I, H, L, True)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_traced_seq_lengths_are_clipped():
    x, h0, c0, w = make_inputs(B, T, I, H, L, False, 11)
    f = jax.jit(lambda s, *a: run(*a, s, I, H, L, False))
    got = f(jnp.array([99, -4, 2]), x, h0, c0, w)
    want = f(jnp.array([T, 0, 2]), x, h0, c0, w)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_none_seq_lengths_means_full_length():
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 12)
    a = run(x, h0, c0, w, None, I, H, L, True)
    b = run(x, h0, c0, w, np.full(B, T), I, H, L, True)
    for u, v in zip(a, b):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=1e-6, rtol=1e-6)


# --- dropout ---------------------------------------------------------------------------------

def _dropout_run(w, x, h0, c0, rate, key, layers=2):
    bidir = h0.shape[0] == 2 * layers
    return portable_rnn.lstm(x, h0, c0, w, jnp.asarray(LENGTHS), I, H, layers, rate, bidir,
                             dropout_rng=key)


def test_dropout_is_between_layers_with_the_documented_mask():
    """Layer-by-layer composition with mask bernoulli(fold_in(key, layer), 1 - p, (B, T, D*H))."""
    p, key = 0.4, jax.random.key(3)
    x, h0, c0, w = make_inputs(B, T, I, H, 2, True, 13)
    y, h_n, c_n = _dropout_run(w, x, h0, c0, p, key)
    W = portable_rnn.unpack_lstm_weights(w, I, H, 2, True)
    first = portable_rnn.pack_lstm_weights(*[[g[0], g[1]] for g in W], I, H, 1, True)
    second = portable_rnn.pack_lstm_weights(*[[g[2], g[3]] for g in W], 2 * H, H, 1, True)
    y1, h1, c1 = portable_rnn.lstm(x, h0[:2], c0[:2], first, LENGTHS, I, H, 1, 0.0, True)
    keep = draws.bernoulli(jax.random.fold_in(key, 0), 1 - p, (B, T, 2 * H))
    y2, h2, c2 = portable_rnn.lstm(jnp.where(keep, y1 / (1 - p), 0), h0[2:], c0[2:], second,
                                   LENGTHS, 2 * H, H, 1, 0.0, True)
    for a, b in zip((y, h_n, c_n), (y2, jnp.concatenate([h1, h2]), jnp.concatenate([c1, c2]))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-6)


def test_dropout_reproducible_per_key_and_off_without_effect():
    x, h0, c0, w = make_inputs(B, T, I, H, 2, False, 14)
    a = _dropout_run(w, x, h0, c0, 0.5, jax.random.key(1))[0]
    b = _dropout_run(w, x, h0, c0, 0.5, jax.random.key(1))[0]
    c = _dropout_run(w, x, h0, c0, 0.5, jax.random.key(2))[0]
    plain = _dropout_run(w, x, h0, c0, 0.0, jax.random.key(1))[0]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))
    assert not np.allclose(np.asarray(a), np.asarray(plain))
    # a single layer has no "between layers": dropout changes nothing and needs no key
    one = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, 1, False)
    d = _dropout_run(one, x, h0[:1], c0[:1], 0.5, jax.random.key(1), layers=1)[0]
    e = portable_rnn.lstm(x, h0[:1], c0[:1], one, LENGTHS, I, H, 1, 0.5, False)[0]
    np.testing.assert_array_equal(np.asarray(d), np.asarray(e))


def test_dropout_one_zeroes_the_next_layers_input_with_finite_grads():
    x, h0, c0, w = make_inputs(B, T, I, H, 2, False, 15)
    zeros = jnp.zeros_like(h0)
    f = lambda w: jnp.sum(_dropout_run(w, x, zeros, zeros, 1.0, jax.random.key(0))[0] ** 2)
    g = jax.grad(f)(w)
    assert bool(jnp.all(jnp.isfinite(g)))
    # the first layer's matrices get no gradient: nothing of its output reaches the loss
    W_ih, W_hh, _, _ = portable_rnn.unpack_lstm_weights(g, I, H, 2, False)
    assert float(jnp.abs(W_ih[0]).max()) == 0.0 and float(jnp.abs(W_hh[0]).max()) == 0.0


@partial(jax.jit, static_argnums=0)
def _jitted_dropout(rate, w, x, h0, c0, key):
    return _dropout_run(w, x, h0, c0, rate, key)[0]


def test_dropout_under_jit_and_vmap_over_keys():
    x, h0, c0, w = make_inputs(B, T, I, H, 2, False, 16)
    keys = jax.random.split(jax.random.key(0), 3)
    got = jax.vmap(lambda k: _jitted_dropout(0.3, w, x, h0, c0, k))(keys)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(got[i]),
                                   np.asarray(_dropout_run(w, x, h0, c0, 0.3, keys[i])[0]),
                                   atol=1e-6, rtol=1e-6)

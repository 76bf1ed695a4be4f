"""Numerical edge cases: no NaN or Inf where the answer is finite, and gradients that match a
float64 reference (computed under x64 by step loops that share no code with portable_rnn).

LSTM: length-0 sequences (scan and the emulated cuDNN route), T = 0, saturated gates, float16 /
bfloat16 pre-activations beyond float16's range (finite when accumulated in float32, which is
what the library promises), NaN/Inf in the padding past `seq_lengths`, traced lengths far beyond
T. Attention (dense and chunked): rows that see no key (mask, lengths, causal window, an all -inf
bias), logits of order 1e4 in float16/bfloat16, NaN padding past the lengths.

Every jitted function here has one fixed shape per dtype, so each compiles once.
"""

import functools

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import rnn as jrnn

import portable_rnn
import references
from cudnn_emulation import emulated_cudnn

F64 = jnp.float64


def finite(tree) -> bool:
    return all(bool(jnp.isfinite(jnp.asarray(a, jnp.float32)).all())
               for a in jax.tree.leaves(tree))


def assert_close(got, want, tol):
    """Closeness at `tol` (a float32 result's at least the platform's floor)."""
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.shape == w.shape
        t = references.float32_tol(tol) if g.dtype == np.float32 else tol
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        np.testing.assert_allclose(g, w, rtol=t, atol=t * max(1.0, np.abs(w).max()))


# --- LSTM -------------------------------------------------------------------------------------

B, T, I, H, L = 3, 4, 3, 4, 2
LENGTHS = np.array([4, 0, 2], np.int32)


def inputs(seed=0, x_scale=1.0, w_scale=1.0, dtype=jnp.float32):
    k = jax.random.split(jax.random.key(seed), 4)
    x = draws.normal(k[0], (B, T, I)) * x_scale
    h0 = draws.normal(k[1], (2 * L, B, H))
    c0 = draws.normal(k[2], (2 * L, B, H))
    w = portable_rnn.init_lstm_weight(k[3], I, H, L, True) * w_scale
    return x.astype(dtype), h0.astype(dtype), c0.astype(dtype), w


def loss_of(y, h, c):
    """A loss that reads every output (y past the lengths included), in y's float precision."""
    acc = y.dtype if y.dtype.itemsize >= 4 else jnp.float32
    y, h, c = (a.astype(acc) for a in (y, h, c))
    return jnp.sum(jnp.sin(y)) + jnp.sum(h * 0.5) + jnp.sum(jnp.tanh(c))


@functools.cache
def lstm_grad(implementation=None, capabilities=None, precision=None):
    """jit of ((loss, (y, h_n, c_n)), grads wrt x, h_0, c_0, weights); one compile per dtype."""
    def f(x, h0, c0, w, lengths):
        out = portable_rnn.lstm(x, h0, c0, w, lengths, I, H, L, 0.0, True, precision,
                                implementation=implementation, capabilities=capabilities)
        return loss_of(*out), out
    return jax.jit(jax.value_and_grad(f, (0, 1, 2, 3), has_aux=True))


def reference_lstm(x, h0, c0, w, lengths):
    """PyTorch semantics, step by step over `lax.scan` (jnp, so it can be differentiated)."""
    W_ih, W_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(w, I, H, L, True)
    steps = jnp.arange(T, dtype=jnp.int32)
    inp, hs, cs = x, [], []
    for layer in range(L):
        outs = []
        for d in range(2):
            p = 2 * layer + d

            def cell(carry, t, p=p, inp=inp):
                h, c = carry
                z = inp[:, t] @ W_ih[p].T + h @ W_hh[p].T + b_ih[p] + b_hh[p]
                i, f, g, o = jnp.split(z, 4, axis=-1)
                c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
                valid = (t < lengths)[:, None]  # steps past a length leave the state alone
                h, c = jnp.where(valid, h_new, h), jnp.where(valid, c_new, c)
                return (h, c), jnp.where(valid, h, 0.0)

            (h, c), out = lax.scan(cell, (h0[p], c0[p]), steps[::-1] if d else steps)
            outs.append(jnp.swapaxes(out[::-1] if d else out, 0, 1))
            hs.append(h)
            cs.append(c)
        inp = jnp.concatenate(outs, axis=-1)
    return inp, jnp.stack(hs), jnp.stack(cs)


@jax.jit
def _reference_grad(x, h0, c0, w, lengths):
    def f(x, h0, c0, w):
        out = reference_lstm(x, h0, c0, w, lengths)
        return loss_of(*out), out
    return jax.value_and_grad(f, (0, 1, 2, 3), has_aux=True)(x, h0, c0, w)


def reference_grad(x, h0, c0, w, lengths):
    """`_reference_grad` in float64 on the given values (16-bit values are exact in float64)."""
    with references.float64():
        args = [jnp.asarray(np.asarray(a, np.float64)) for a in (x, h0, c0, w)]
        out = _reference_grad(*args, jnp.asarray(lengths, jnp.int32))
        return jax.tree.map(np.asarray, out)


def test_length_zero_sequences_keep_the_initial_state_and_have_reference_gradients():
    args = inputs(1)
    (value, (y, h, c)), grads = lstm_grad()(*args, LENGTHS)
    assert not np.asarray(y[1]).any() and not np.asarray(y[2, 2:]).any()
    np.testing.assert_array_equal(np.asarray(h[:, 1]), np.asarray(args[1][:, 1]))
    np.testing.assert_array_equal(np.asarray(c[:, 1]), np.asarray(args[2][:, 1]))
    assert finite((value, grads))
    (want_value, want_out), want_grads = reference_grad(*args, LENGTHS)
    assert_close((value, y, h, c), (want_value, *want_out), 1e-5)
    assert_close(grads, want_grads, 1e-4)
    # The state of a length-0 sequence is passed straight through: d loss / d h_0 = 0.5.
    np.testing.assert_allclose(np.asarray(grads[1][:, 1]), 0.5)


def test_zero_steps_return_the_initial_state_with_identity_gradients():
    x, h0, c0, w = inputs(2)
    x = x[:, :0]

    def loss(h0, c0, w):
        y, h, c = portable_rnn.lstm(x, h0, c0, w, jnp.zeros(B, jnp.int32), I, H, L, 0.0, True)
        return jnp.sum(y) + jnp.sum(h * 2.0) + jnp.sum(c * 3.0)

    (dh0, dc0, dw) = jax.grad(loss, (0, 1, 2))(h0, c0, w)
    np.testing.assert_array_equal(np.asarray(dh0), 2.0)
    np.testing.assert_array_equal(np.asarray(dc0), 3.0)
    np.testing.assert_array_equal(np.asarray(dw), 0.0)


def test_length_zero_on_the_cudnn_route_has_finite_gradients_equal_to_scan():
    args = inputs(3)
    gpu = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
    with emulated_cudnn():
        cudnn = lstm_grad("cudnn", gpu, jax.lax.Precision.HIGHEST)(*args, LENGTHS)  # no TF32
    assert finite(cudnn)
    assert_close(cudnn, lstm_grad()(*args, LENGTHS), 1e-5)
    (_, (y, h, c)), grads = cudnn
    np.testing.assert_array_equal(np.asarray(h[:, 1]), np.asarray(args[1][:, 1]))
    np.testing.assert_array_equal(np.asarray(grads[0][1]), 0.0)  # no step ran: dx = 0


def test_saturated_gates_give_finite_reference_gradients():
    """Inputs x1000: every gate saturates (tanh = +-1 exactly in float32); no NaN, and the
    gradients equal the float64 reference (which are tiny or zero)."""
    args = inputs(4, x_scale=1e3, w_scale=3.0)
    got = lstm_grad()(*args, LENGTHS)
    assert finite(got)
    assert_close(got, reference_grad(*args, LENGTHS), 1e-4)


def test_float16_preactivations_beyond_its_range_stay_finite():
    """|x @ W_ih| reaches ~1e5 > 65504 (float16's max), although x and W are representable.

    Correct means: the matmuls accumulate in float32 (documented), so the gates see the true
    pre-activations; outputs match the float64 reference on the same (rounded) inputs and
    weights, and no gradient is NaN or Inf. (bfloat16 has float32's range: no overflow there.)
    """
    dtype = jnp.float16
    x, h0, c0, w = inputs(5, x_scale=300.0, w_scale=600.0, dtype=dtype)
    w = w.astype(dtype).astype(jnp.float32)  # weights as the 16-bit path sees them
    zx = jnp.einsum("bti,gi->btg", x.astype(jnp.float32),
                    jrnn.unpack_lstm_weights(w, I, H, L, True)[0][0])
    assert float(jnp.abs(zx).max()) > 65504  # the float16 overflow really is provoked
    (value, (y, h, c)), grads = lstm_grad()(x, h0, c0, w, LENGTHS)
    assert y.dtype == dtype and finite((value, y, h, c, grads))
    (_, want), _ = reference_grad(x, h0, c0, w, LENGTHS)
    # Up to the rounding of h to 16 bits between steps (its error, times weights of ~300,
    # moves the few unsaturated gates).
    assert_close((y, h), want[:2], 5e-2)


def test_nan_and_inf_in_the_padding_never_reach_results_or_gradients():
    x, h0, c0, w = inputs(6)
    valid = (np.arange(T)[None, :] < LENGTHS[:, None])[..., None]
    garbage = jnp.where(valid, x, jnp.array([np.nan, np.inf, -np.inf])[None, None, :])
    clean = jnp.where(valid, x, 0.0)
    got = lstm_grad()(garbage, h0, c0, w, LENGTHS)
    want = lstm_grad()(clean, h0, c0, w, LENGTHS)
    assert finite(got)
    assert_close(got, want, 1e-6)
    np.testing.assert_array_equal(np.asarray(got[1][0])[~np.broadcast_to(valid, x.shape)], 0.0)


def test_traced_lengths_far_beyond_t_are_clipped_with_finite_gradients():
    args = inputs(7)
    lengths = jnp.array([10**9, -(10**9), 2], jnp.int32)
    got = lstm_grad()(*args, lengths)
    want = lstm_grad()(*args, jnp.array([T, 0, 2], jnp.int32))
    assert finite(got)
    assert_close(got, want, 1e-6)


# --- attention --------------------------------------------------------------------------------

AB, AT, AS, AN, AK, AH = 2, 5, 6, 2, 1, 8


def attention_loss(q, k, v, bias, mask, q_len, kv_len, impl, is_causal=False, window=None):
    out = portable_rnn.dot_product_attention(
        q, k, v, bias, mask, query_seq_lengths=q_len, key_value_seq_lengths=kv_len,
        is_causal=is_causal, local_window_size=window, implementation=impl)
    return jnp.sum(jnp.sin(out.astype(jnp.float32))), out


@functools.cache
def attention_grad(impl, is_causal=False, window=None):
    """One jitted (loss, out), grads function per path; every argument always given."""
    return jax.jit(jax.value_and_grad(
        functools.partial(attention_loss, impl=impl, is_causal=is_causal, window=window),
        (0, 1, 2, 3), has_aux=True))


def visible(mask, q_len, kv_len, is_causal=False, window=None):
    t, s = np.arange(AT)[:, None], np.arange(AS)[None, :]
    vis = np.broadcast_to(np.asarray(mask), (AB, AN, AT, AS)).copy()
    vis &= (t < np.asarray(q_len)[:, None, None, None]) & (s < np.asarray(kv_len)[:, None, None,
                                                                                  None])
    if is_causal:
        vis &= s <= t
    if window is not None:
        vis &= (s >= t - window[0]) & (s <= t + window[1])
    return vis


def reference_attention(q, k, v, bias, vis):
    """float64 attention over the visible keys; rows with none give 0 (and zero gradients)."""
    k, v = (jnp.repeat(a, AN // AK, axis=2) for a in (k, v))
    logits = jnp.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(AH) + bias
    vis = vis & jnp.isfinite(bias)
    p = jax.nn.softmax(jnp.where(vis, logits, -1e300), axis=-1)
    p = jnp.where(vis.any(-1, keepdims=True), p, 0.0)
    return jnp.einsum("bnts,bsnh->btnh", p, v)


@jax.jit
def _reference_attention_grad(q, k, v, bias, vis):
    def loss(q, k, v, bias):
        out = reference_attention(q, k, v, bias, vis)
        return jnp.sum(jnp.sin(out)), out
    return jax.value_and_grad(loss, (0, 1, 2, 3), has_aux=True)(q, k, v, bias)


def attention_reference(q, k, v, bias, vis):
    with references.float64():
        q, k, v, bias = (jnp.asarray(np.asarray(a, np.float64)) for a in (q, k, v, bias))
        return jax.tree.map(np.asarray, _reference_attention_grad(q, k, v, bias,
                                                                 jnp.asarray(vis)))


def attention_inputs(seed, scale=1.0, dtype=jnp.float32):
    ks = jax.random.split(jax.random.key(seed), 4)
    q = draws.normal(ks[0], (AB, AT, AN, AH)) * scale
    k = draws.normal(ks[1], (AB, AS, AK, AH)) * scale
    v = draws.normal(ks[2], (AB, AS, AK, AH))
    bias = draws.normal(ks[3], (AB, AN, AT, AS))
    return tuple(a.astype(dtype) for a in (q, k, v, bias))


FULL = dict(mask=jnp.ones((AB, AN, AT, AS), bool), q_len=jnp.full(AB, AT, jnp.int32),
            kv_len=jnp.full(AB, AS, jnp.int32))


def check_attention(impl, q, k, v, bias, mask, q_len, kv_len, tol, is_causal=False,
                    window=None):
    (value, out), grads = attention_grad(impl, is_causal, window)(q, k, v, bias, mask, q_len,
                                                                  kv_len)
    assert finite((value, out, grads)), impl
    vis = visible(mask, q_len, kv_len, is_causal, window) & np.isfinite(np.asarray(bias))
    (want_value, want_out), want_grads = attention_reference(q, k, v, bias, vis)
    rows = vis.any(-1).transpose(0, 2, 1)  # (B, T, N)
    np.testing.assert_array_equal(np.asarray(out)[~rows], 0.0)  # no visible key: exactly 0
    assert_close(out, want_out, tol)
    assert_close(grads, want_grads, tol)
    return out, grads


@pytest.mark.parametrize("impl", ["xla", "chunked"])
def test_rows_that_see_no_key_give_zero_and_reference_gradients(impl):
    q, k, v, bias = attention_inputs(0)
    mask = np.ones((AB, AN, AT, AS), bool)
    mask[0, :, 1] = False                       # a row masked out entirely
    bias = bias.at[1, 0, 3].set(-jnp.inf)       # a row whose every logit is -inf
    bias = bias.at[1, 1, 2, :2].set(-jnp.inf)   # and a partly -inf one
    q_len = jnp.array([4, AT], jnp.int32)       # padded query rows
    kv_len = jnp.array([AS, 0], jnp.int32)      # batch 1 sees no key at all ...
    check_attention(impl, q, k, v, bias, jnp.asarray(mask), q_len, kv_len, 1e-5)
    kv_len = jnp.array([AS, 3], jnp.int32)      # ... or only some
    out, grads = check_attention(impl, q, k, v, bias, jnp.asarray(mask), q_len, kv_len, 1e-5)
    assert not np.asarray(grads[0])[0, 4:].any()  # padded query rows get no gradient
    # A causal band that hides every key of the first rows (left window 0, keys start at 2).
    kv_start = np.ones((AB, AN, AT, AS), bool)
    kv_start[..., :2] = False
    check_attention(impl, q, k, v, bias, jnp.asarray(kv_start), FULL["q_len"],
                    FULL["kv_len"], 1e-5, is_causal=True, window=(0, 0))


@pytest.mark.parametrize("impl", ["xla", "chunked"])
@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_huge_logits_in_16_bit_stay_finite_and_match_float64(impl, dtype):
    """|logits| ~ 1e4 (q, k ~ 60 per element, H = 8): beyond what a 16-bit softmax survives,
    but the logits and softmax run in float32; the softmax is then (nearly) one-hot."""
    q, k, v, bias = attention_inputs(1, scale=60.0, dtype=dtype)
    bias = jnp.clip(bias.astype(jnp.float32) * 2e4, -6e4, 6e4).astype(dtype)  # near fp16's max
    logits = jnp.einsum("btnh,bsnh->bnts", q.astype(jnp.float32),
                        jnp.repeat(k.astype(jnp.float32), AN // AK, axis=2)) / np.sqrt(AH)
    assert float(jnp.abs(logits).max()) > 5e3
    (value, out), grads = attention_grad(impl)(q, k, v, bias, **FULL)
    assert out.dtype == dtype and finite((value, out, grads))
    (_, want_out), _ = attention_reference(q, k, v, bias, visible(**FULL))
    assert_close(out, want_out, 1e-2 if dtype == jnp.bfloat16 else 2e-3)


@pytest.mark.parametrize("impl", ["xla", "chunked"])
def test_nan_padding_past_the_lengths_never_reaches_results_or_gradients(impl):
    q, k, v, bias = attention_inputs(2)
    q_len, kv_len = jnp.array([3, AT], jnp.int32), jnp.array([AS, 2], jnp.int32)
    t_pad = (jnp.arange(AT)[None, :] >= q_len[:, None])[:, :, None, None]
    s_pad = (jnp.arange(AS)[None, :] >= kv_len[:, None])[:, :, None, None]
    garbage = (jnp.where(t_pad, jnp.nan, q), jnp.where(s_pad, jnp.inf, k),
               jnp.where(s_pad, jnp.nan, v))
    clean = (jnp.where(t_pad, 0.0, q), jnp.where(s_pad, 0.0, k), jnp.where(s_pad, 0.0, v))
    got = attention_grad(impl)(*garbage, bias, FULL["mask"], q_len, kv_len)
    want = attention_grad(impl)(*clean, bias, FULL["mask"], q_len, kv_len)
    assert finite(got)
    assert_close(got, want, 1e-6)

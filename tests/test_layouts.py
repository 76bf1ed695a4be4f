"""Drop-in parity in how the inputs arrive: views made inside `jit` (transposed, strided),
donated buffers, committed and uncommitted arrays (NumPy included), Python and NumPy scalars for
`scale`, lengths of any integer kind, and float16 on every path. Each call must give the
plain call's result."""

import warnings

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn

pytestmark = pytest.mark.cpu  # weight layouts: the same on every platform

B, T, I, H, L = 3, 6, 4, 5, 1
LENGTHS = np.array([6, 2, 0], np.int32)
RECURRENT = ("lstm", "gru", "simple_rnn")
ATTENTION = ("attention_xla", "attention_chunked")


def _weights(kind):
    init = {"lstm": portable_rnn.init_lstm_weight, "gru": portable_rnn.init_gru_weight,
            "simple_rnn": portable_rnn.init_simple_rnn_weight}[kind]
    return init(jax.random.key(1), I, H, L, True)


def _call(kind, x, lengths=LENGTHS, scale=0.5):
    """`kind` on its main input `x` ((B, T, I) recurrent, (B, T, N, H) attention query)."""
    if kind in RECURRENT:
        h0 = jnp.full((2 * L, B, H), 0.1, x.dtype)
        w = _weights(kind).astype(x.dtype)
        if kind == "lstm":
            return portable_rnn.lstm(x, h0, h0, w, lengths, I, H, L, 0.0, True)[0]
        return getattr(portable_rnn, kind)(x, h0, w, lengths, I, H, L, 0.0, True)[0]
    k = draws.normal(jax.random.key(2), (2, 8, 2, 4)).astype(x.dtype)
    return portable_rnn.dot_product_attention(
        x, k, k * 0.5, scale=scale, is_causal=True, key_value_seq_lengths=np.array([8, 3]),
        implementation=kind.split("_")[1])


def _input(kind, dtype=jnp.float32):
    shape = (B, T, I) if kind in RECURRENT else (2, 8, 2, 4)
    return draws.normal(jax.random.key(0), shape).astype(dtype)


def _loss(kind, **kw):
    return lambda x: jnp.sum(jnp.sin(_call(kind, x, **kw).astype(jnp.float32)))


def _close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", RECURRENT + ATTENTION)
def test_views_made_inside_jit(kind):
    """The input as a transposed, strided view of a larger array, made inside `jit`: forward
    and gradient equal the call on the same values."""
    x = _input(kind)
    big = jnp.repeat(jnp.swapaxes(x, 0, 1), 2, axis=-1)  # x = swapaxes(big)[..., ::2]

    def view(big):
        return jnp.swapaxes(big, 0, 1)[..., ::2]

    want = jax.value_and_grad(_loss(kind))(x)
    got = jax.jit(jax.value_and_grad(lambda b: _loss(kind)(view(b))))(big)
    _close(got[0], want[0])
    _close(view(got[1]), want[1])
    assert not np.asarray(jnp.swapaxes(got[1], 0, 1)[..., 1::2]).any()  # unread copies: zero


@pytest.mark.parametrize("kind", RECURRENT + ATTENTION)
def test_donated_committed_and_numpy_inputs(kind):
    x = _input(kind)
    want = _call(kind, x)
    with warnings.catch_warnings():  # a backend that cannot reuse a donated buffer says so
        warnings.filterwarnings("ignore", "Some donated buffers were not usable")
        _close(jax.jit(lambda x: _call(kind, x), donate_argnums=0)(jnp.array(x, copy=True)), want)
    _close(_call(kind, jax.device_put(x, jax.devices()[0])), want)  # committed
    _close(_call(kind, np.asarray(x)), want)  # a NumPy array
    _close(jax.jit(lambda x: _call(kind, x))(np.asarray(x)), want)


@pytest.mark.parametrize("kind", RECURRENT)
def test_lengths_as_numpy_and_narrow_ints(kind):
    """Lengths of any integer dtype, NumPy or JAX; a Python list is refused by name, as JAX's own
    functions refuse lists for array arguments."""
    x = _input(kind)
    want = _call(kind, x, lengths=jnp.asarray(LENGTHS))
    for lengths in (LENGTHS.astype(np.int64), jnp.asarray(LENGTHS, jnp.int8),
                    LENGTHS.astype(np.uint16)):
        _close(_call(kind, x, lengths=lengths), want)
        _close(jax.jit(lambda x, n: _call(kind, x, lengths=n))(x, lengths), want)
    with pytest.raises(TypeError, match="`seq_lengths` must be an array; got list"):
        _call(kind, x, lengths=LENGTHS.tolist())


@pytest.mark.parametrize("kind", ATTENTION)
def test_scale_as_python_float_numpy_and_array(kind):
    x = _input(kind)
    want = _call(kind, x, scale=0.5)
    for scale in (np.float32(0.5), np.float64(0.5), jnp.float32(0.5), jnp.array(0.5)):
        _close(_call(kind, x, scale=scale), want)
        _close(jax.jit(lambda x, s: _call(kind, x, scale=s))(x, scale), want)


@pytest.mark.parametrize("kind", RECURRENT + ATTENTION)
def test_float16_on_every_path(kind):
    """float16 forward and gradient within float16's tolerance of float32 on the same values."""
    x = _input(kind, jnp.float16)
    x32 = x.astype(jnp.float32)
    y = jax.jit(lambda x: _call(kind, x))(x)
    assert y.dtype == jnp.float16
    _close(y, _call(kind, x32), 2e-2)
    grad = jax.jit(jax.grad(_loss(kind)))(x)
    assert grad.dtype == jnp.float16 and np.isfinite(np.asarray(grad, np.float32)).all()
    _close(grad, jax.grad(_loss(kind))(x32), 3e-2)

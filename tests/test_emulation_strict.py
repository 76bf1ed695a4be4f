"""The test emulation of JAX's cuDNN primitives fails where real cuDNN or JAX would.

Every call here is the stock JAX one (`jax.experimental.rnn.lstm`,
`jax.nn.dot_product_attention(implementation="cudnn")`), not portable_rnn's, so these tests pin
down the emulation itself. Sources for each rule: the emulation's docstring.
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.cudnn import fused_attention_stablehlo as fa
from jax.experimental import rnn as jrnn

from cudnn_emulation import emulated_cudnn, emulated_cudnn_attention, round_to_tf32
from lstm_helpers import make_inputs

pytestmark = pytest.mark.cpu  # the cuDNN emulation lowers for the CPU only

B, T, I, H = 3, 4, 4, 3
FAILED = "CUDNN_STATUS_EXECUTION_FAILED"


def stock_lstm(seq, precision=None):
    return lambda x, h0, c0, w: jrnn.lstm(x, h0, c0, w, seq, I, H, 1, 0.0, False, precision)


def stock_lstm_grad(seq, precision=None):
    f = stock_lstm(seq, precision)
    return jax.grad(lambda *a: sum(jnp.sum(o ** 2) for o in f(*a)), (0, 1, 2, 3))


def lengths(*values):
    return jnp.array(values, jnp.int32)


# --- LSTM: length-0 sequences fail at run time (jax-ml/jax#17966) -------------------------------

def test_lstm_forward_fails_at_run_time_when_every_length_is_zero():
    args = make_inputs(B, T, I, H, 1, False, 0)
    with emulated_cudnn():
        np.asarray(jax.jit(stock_lstm(lengths(4, 0, 2)))(*args)[0])  # some zero: runs
        program = jax.jit(stock_lstm(lengths(0, 0, 0))).lower(*args).compile()  # compiles
        with pytest.raises(Exception, match=FAILED):
            np.asarray(program(*args)[0])
        with pytest.raises(Exception, match=FAILED):  # under grad, the forward fails first
            np.asarray(jax.jit(stock_lstm_grad(lengths(0, 0, 0)))(*args)[0])


def test_lstm_backward_fails_at_run_time_when_any_length_is_zero():
    args = make_inputs(B, T, I, H, 1, False, 1)
    with emulated_cudnn():
        grads = jax.jit(stock_lstm_grad(lengths(4, 1, 2)))(*args)
        assert all(np.isfinite(np.asarray(g)).all() for g in grads)
        program = jax.jit(stock_lstm_grad(lengths(4, 0, 2))).lower(*args).compile()
        with pytest.raises(Exception, match=FAILED):
            np.asarray(program(*args)[0])


# --- LSTM: float32 operands only (jaxlib/gpu_rnn.py, jaxlib/gpu/rnn_kernels.cc) -----------------

@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_lstm_16_bit_is_refused_at_lowering_as_jaxlib_does(dtype):
    """jaxlib's `_rnn_fwd_lowering` raises "Unknown output type" for a 16-bit `x`; JAX's own
    Python accepts it (the primitive's abstract evaluation takes any dtype)."""
    x, h0, c0, w = (a.astype(dtype) for a in make_inputs(B, T, I, H, 1, False, 5))
    f = stock_lstm(lengths(4, 2, 3))
    with emulated_cudnn():
        jax.make_jaxpr(f)(x, h0, c0, w)  # traces
        with pytest.raises(ValueError, match=f"Unknown output type {dtype}"):
            jax.jit(f).lower(x, h0, c0, w)


def test_lstm_non_float32_operands_are_refused_at_lowering():
    """jaxlib's kernels describe every buffer as CUDNN_DATA_FLOAT: a 16-bit state or weight
    next to a float32 `x` (which jaxlib lowers) would be misread; so would float64."""
    x, h0, c0, w = make_inputs(B, T, I, H, 1, False, 6)
    f = stock_lstm(lengths(4, 2, 3))
    with emulated_cudnn():
        jax.jit(f).lower(x, h0, c0, w)
        for args in ((x, h0.astype(jnp.bfloat16), c0, w), (x, h0, c0, w.astype(jnp.float16))):
            with pytest.raises(TypeError, match="CUDNN_DATA_FLOAT"):
                jax.jit(f).lower(*args)
        with jax.enable_x64(True), pytest.raises(TypeError, match="x` is float64"):
            jax.jit(f).lower(*(a.astype(jnp.float64) for a in (x, h0, c0, w)))


def test_lstm_backward_with_a_non_float32_operand_is_refused():
    """The backward's lowering aliases a float32 zero buffer to the weight gradient."""
    x, h0, c0, w = make_inputs(B, T, I, H, 1, False, 7)
    seq = lengths(4, 2, 3)
    with emulated_cudnn():
        (y, h, c), res = jax.jit(lambda *a: jrnn.lstm_fwd(*a, seq, I, H, 1, 0.0, False,
                                                          None))(x, h0, c0, w)
        bwd = jax.jit(lambda dy, res: jrnn.lstm_bwd(I, H, 1, 0.0, False, None, res,
                                                    (dy, h * 0, c * 0)))
        bwd.lower(y, res)
        with pytest.raises(TypeError, match="`dy` is bfloat16"):
            bwd.lower(y.astype(jnp.bfloat16), res)


# --- LSTM: TF32 unless precision HIGHEST -------------------------------------------------------

def test_round_to_tf32_keeps_ten_mantissa_bits():
    one = np.float32(1.0)
    x = jnp.array([1 + 2 ** -11, 1 + 2 ** -12, -(1 + 2 ** -11), 1 + 3 * 2 ** -11, np.inf,
                   np.nan, np.finfo(np.float32).max, 3.0], jnp.float32)
    want = [1 + 2 ** -10, one, -(1 + 2 ** -10), 1 + 2 ** -9, np.inf, np.nan, np.inf, 3.0]
    np.testing.assert_array_equal(np.asarray(round_to_tf32(x)), np.array(want, np.float32))


def test_tf32_lstm_differs_from_highest_by_about_tf32_rounding():
    """cuDNN's default math mode rounds matmul operands to TF32 (10-bit mantissa, relative
    2**-11); on O(1) inputs that moves outputs and gradients by more than float32 noise and by
    much less than 1e-2. precision=HIGHEST (cudnn_allow_tf32=False) is exact float32."""
    args = make_inputs(B, T, I, H, 1, False, 2)
    seq = lengths(4, 2, 3)
    with emulated_cudnn():
        for make in (stock_lstm, stock_lstm_grad):
            tf32 = jax.jit(make(seq))(*args)
            exact = jax.jit(make(seq, jax.lax.Precision.HIGHEST))(*args)
            diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(tf32, exact))
            assert 1e-6 < diff < 1e-2, (make.__name__, diff)
    weights = jrnn.unpack_lstm_weights(args[3], I, H, 1, False)
    want = jrnn.lstm_ref(*args[:3], *weights, seq, I, H, 1, 0.0, False)
    with emulated_cudnn():  # HIGHEST is lstm_ref itself
        for a, b in zip(jax.jit(stock_lstm(seq, jax.lax.Precision.HIGHEST))(*args), want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-6)


# --- attention ---------------------------------------------------------------------------------

def qkv(T=8, S=8, head_dim=16, dtype=jnp.bfloat16):
    ks = jax.random.split(jax.random.key(3), 3)
    return (draws.normal(ks[0], (2, T, 2, head_dim), dtype),
            draws.normal(ks[1], (2, S, 2, head_dim), dtype),
            draws.normal(ks[2], (2, S, 2, head_dim), dtype))


def stock_attention(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, implementation="cudnn")


def stock_attention_grad(q, k, v):
    return jax.grad(lambda *a: jnp.sum(stock_attention(*a).astype(jnp.float32) ** 2),
                    (0, 1, 2))(q, k, v)


def bind_forward(q, k, v):
    """The forward primitive itself, bypassing JAX's Python checks."""
    empty = jnp.zeros(0, q.dtype)
    return fa._dot_product_attention_fwd_p.bind(
        q, k, v, *[empty] * 7, scale=1.0, seed=0, dropout_rate=0.0,
        variadic_args=(False, False), mask_type=fa.MaskType.NO_MASK,
        layout=fa.AttentionLayout.BTNH.value, sliding_window_length=None, is_training=False)[0]


def test_attention_grad_with_odd_length_fails_without_a_bias():
    """JAX passes a placeholder bias to its check when training, so `jax.grad` of the stock
    cuDNN call refuses odd T or S even without a bias; inference runs."""
    with emulated_cudnn_attention():
        np.asarray(jax.jit(stock_attention)(*qkv(T=7)), np.float32)
        np.asarray(jax.jit(stock_attention_grad)(*qkv())[0], np.float32)
        for T, S in ((7, 8), (8, 5)):
            with pytest.raises(NotImplementedError, match="Unsupported sequence length"):
                jax.jit(stock_attention_grad)(*qkv(T=T, S=S))


def test_float32_attention_is_rejected():
    q, k, v = qkv(dtype=jnp.float32)
    with emulated_cudnn_attention():
        with pytest.raises(NotImplementedError, match="fp16/bf16"):  # JAX's own check
            stock_attention(q, k, v)
        with pytest.raises(Exception, match="float16/bfloat16"):  # the lowering, as cuDNN
            jax.jit(bind_forward).lower(q, k, v)
        jax.jit(bind_forward).lower(*qkv())  # bfloat16 lowers


@pytest.mark.parametrize("cc, head_dim, ok", [
    ((9, 0), 256, True), ((8, 0), 256, False), ((8, 0), 128, True), ((9, 0), 12, False),
    ((9, 0), 264, False)])
def test_head_dim_limits_follow_the_compute_capability(cc, head_dim, ok):
    q, k, v = qkv(head_dim=head_dim)
    with emulated_cudnn_attention(compute_capability=cc):
        if ok:
            jax.jit(stock_attention).lower(q, k, v)
            jax.jit(bind_forward).lower(q, k, v)
        else:
            with pytest.raises(NotImplementedError, match="head dim"):  # JAX's own check
                jax.jit(stock_attention).lower(q, k, v)
            with pytest.raises(Exception, match="head dim"):  # the lowering, as cuDNN
                jax.jit(bind_forward).lower(q, k, v)


def test_below_ampere_fails_at_lowering():
    with emulated_cudnn_attention(compute_capability=(7, 5)):
        with pytest.raises(Exception, match="Ampere"):
            jax.jit(stock_attention).lower(*qkv())


@pytest.mark.parametrize("kw, message", [
    (dict(cuda_runtime=13000), "no execution plans"),
    (dict(fail_compile="probe failure"), "probe failure")])
def test_cuda13_mode_fails_at_lowering(kw, message):
    q, k, v = qkv()
    with emulated_cudnn_attention():
        jax.jit(stock_attention).lower(q, k, v)  # compiled (and cached) before the block
    with emulated_cudnn_attention(**kw):
        jax.make_jaxpr(stock_attention)(q, k, v)  # traces, as on a CUDA 13 machine
        with pytest.raises(Exception, match=message):
            jax.jit(stock_attention).lower(q, k, v)
        with pytest.raises(Exception, match=message):
            jax.jit(stock_attention_grad).lower(q, k, v)
    with emulated_cudnn_attention():
        np.asarray(jax.jit(stock_attention)(q, k, v), np.float32)


def test_without_cpu_lowering_programs_trace_but_cannot_lower_for_cpu():
    """A GPU host whose default device is the CPU: JAX's cuDNN functions trace, but a program
    holding the cuDNN primitives has no CPU lowering; an earlier block's lowering comes back
    after the block."""
    q, k, v = qkv()
    x, h0, c0, w = make_inputs(B, T, I, H, 1, False, 4)
    lstm = stock_lstm(lengths(4, 2, 3))
    with emulated_cudnn(), emulated_cudnn_attention():  # registers the CPU lowerings
        jax.jit(stock_attention).lower(q, k, v)
        jax.jit(lstm).lower(x, h0, c0, w)
    with emulated_cudnn(cpu_lowering=False), emulated_cudnn_attention(cpu_lowering=False):
        assert "dot_product_attention_fwd" in str(jax.make_jaxpr(stock_attention)(q, k, v))
        assert "rnn_fwd" in str(jax.make_jaxpr(lstm)(x, h0, c0, w))
        with pytest.raises(NotImplementedError, match="dot_product_attention_fwd.*cpu"):
            jax.jit(stock_attention).lower(q, k, v)
        with pytest.raises(NotImplementedError, match="rnn_fwd.*cpu"):
            jax.jit(lstm).lower(x, h0, c0, w)
    with emulated_cudnn(), emulated_cudnn_attention():
        np.asarray(jax.jit(stock_attention)(q, k, v), np.float32)
        np.asarray(jax.jit(lstm)(x, h0, c0, w)[0])


def test_a_bias_of_another_dtype_is_refused():
    """JAX passes a float32 bias with bfloat16 q/k/v through to cuDNN, which gave NaN
    gradients (jax-ml/jax#32242); the backend config names one element type, the query's."""
    q, k, v = qkv()
    bias = jnp.zeros((1, 2, 8, 8), jnp.float32)
    with emulated_cudnn_attention(), jax.numpy_dtype_promotion("standard"):
        jax.jit(lambda *a: jax.nn.dot_product_attention(
            *a, implementation="cudnn")).lower(q, k, v, bias.astype(q.dtype))
        with pytest.raises(Exception, match="float32 bias with bfloat16 q/k/v"):
            jax.jit(lambda *a: jax.nn.dot_product_attention(
                *a, implementation="cudnn")).lower(q, k, v, bias)


def test_rows_cudnn_leaves_empty_or_pads_are_nan_and_spoil_the_gradients():
    """Unverified on a GPU, so never finite here: a query row inside its length whose keys the
    padding mask hides (a key length of 0), and rows past the query length. A row that only a
    boolean mask hides is arithmetic: the average of the values, finite."""
    q, k, v = qkv()
    q_len, kv_len = jnp.array([8, 5], jnp.int32), jnp.array([6, 0], jnp.int32)

    def f(q, k, v, mask=None):
        return jax.nn.dot_product_attention(q, k, v, mask=mask, query_seq_lengths=q_len,
                                            key_value_seq_lengths=kv_len,
                                            implementation="cudnn")

    with emulated_cudnn_attention(), jax.numpy_dtype_promotion("standard"):
        out = np.asarray(jax.jit(f)(q, k, v), np.float32)
        assert np.isfinite(out[0]).all()  # every row sees a key
        assert np.isnan(out[1]).all()  # rows 0-4 see none, rows 5-7 are padding
        grads = jax.jit(jax.grad(lambda *a: jnp.sum(
            jnp.where(jnp.isnan(f(*a)), 0, f(*a)).astype(jnp.float32)), (0, 1, 2)))(q, k, v)
        for g in grads:
            g = np.asarray(g, np.float32)
            assert np.isfinite(g[0]).all() and np.isnan(g[1]).all()
        mask = jnp.ones((1, 1, 8, 8), bool).at[:, :, 2].set(False)  # row 2 sees no key
        out = np.asarray(jax.jit(lambda *a: jax.nn.dot_product_attention(
            *a, mask=mask, implementation="cudnn"))(q, k, v), np.float32)
        np.testing.assert_allclose(out[:, 2], np.asarray(v, np.float32).mean(1), atol=2e-2)

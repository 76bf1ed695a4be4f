"""Attention paths against independent references: jax.nn (XLA), PyTorch SDPA, each other.

jax.nn gives a query row with no visible key the average over all keys; portable_rnn gives 0.
Comparisons therefore weight the outputs by the rows that see a key (computed by a NumPy loop in
`attention_helpers.visible_rows`), and check separately that the other rows are exactly 0.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portable_rnn
from attention_helpers import attention_cases, make_attention_inputs, visible_rows
from portable_rnn._attention_math import attention_chunked, attention_dense

TOL = {jnp.float32: 2e-5, jnp.bfloat16: 3e-2}


def _weights(out_shape, rows, seed):
    w = jax.random.normal(jax.random.key(seed), out_shape, jnp.float32)
    return w * jnp.asarray(rows, jnp.float32)[..., None]


def _loss(f, weights):
    return lambda *a: jnp.sum(f(*a).astype(jnp.float32) * weights)


@given(attention_cases(dtypes=(jnp.float32, jnp.bfloat16)))
def test_xla_and_chunked_equal_jax_nn(case):
    (q, k, v), kw = make_attention_inputs(case)
    rows = visible_rows(case, kw)
    w = _weights(q.shape, rows, case["seed"] + 1)
    with jax.numpy_dtype_promotion("standard"):  # jax.nn itself relies on implicit promotion
        stock = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla",
                                                             **kw)
        ref = jax.jit(stock)(q, k, v)
        ref_grads = jax.jit(jax.grad(_loss(stock, w), (0, 1, 2)))(q, k, v)
    tol = TOL[case["dtype"]]
    for impl in ("xla", "chunked"):
        f = jax.jit(lambda q, k, v, impl=impl: portable_rnn.dot_product_attention(
            q, k, v, implementation=impl, **kw))
        out = f(q, k, v)
        assert out.shape == q.shape and out.dtype == q.dtype
        got = np.asarray(out, np.float32)
        np.testing.assert_allclose(got[rows], np.asarray(ref, np.float32)[rows], atol=tol,
                                   rtol=tol, err_msg=impl)
        assert not got[~rows].any(), f"{impl}: rows without a visible key must be 0"
        grads = jax.jit(jax.grad(_loss(f, w), (0, 1, 2)))(q, k, v)
        for name, g, r in zip("qkv", grads, ref_grads):
            np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(r, np.float32),
                                       atol=tol * 10, rtol=tol * 10, err_msg=f"{impl} d{name}")


@given(attention_cases(max_len=20), st.integers(1, 7), st.integers(1, 7))
def test_chunked_blocks_equal_dense(case, block_q, block_k):
    """Many small blocks (padding, block skipping, bias gradient accumulation) equal one."""
    (q, k, v), kw = make_attention_inputs(case)
    if case["rank"] == 3:
        q, k, v = q[None], k[None], v[None]
    bias = kw.get("bias")
    args = (kw.get("mask"), kw.get("query_seq_lengths"), kw.get("key_value_seq_lengths"))
    static = dict(scale=kw["scale"] or 0.5, is_causal=kw["is_causal"],
                  window=kw["local_window_size"])

    def run(impl, **blocks):
        return lambda q, k, v, b: impl(q, k, v, b, *args, **static, **blocks)

    dense = jax.jit(run(attention_dense))
    chunked = jax.jit(run(attention_chunked, block_q=block_q, block_k=block_k))
    np.testing.assert_allclose(np.asarray(chunked(q, k, v, bias)), np.asarray(dense(q, k, v, bias)),
                               atol=2e-5, rtol=2e-5)
    w = jax.random.normal(jax.random.key(case["seed"]), q.shape)
    argnums = (0, 1, 2, 3) if bias is not None else (0, 1, 2)
    g1 = jax.jit(jax.grad(_loss(dense, w), argnums))(q, k, v, bias)
    g2 = jax.jit(jax.grad(_loss(chunked, w), argnums))(q, k, v, bias)
    for a, b in zip(g1, g2):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("impl", ["xla", "chunked"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_no_visible_key_gives_zero_and_finite_gradients(impl, dtype):
    """Fully masked rows, zero kv length, and 1e4-scale logits: 0, never NaN."""
    B, T, S, N, H = 2, 6, 5, 2, 8
    ks = jax.random.split(jax.random.key(0), 3)
    q = (jax.random.normal(ks[0], (B, T, N, H)) * 100).astype(dtype)
    k = (jax.random.normal(ks[1], (B, S, N, H)) * 100).astype(dtype)
    v = jax.random.normal(ks[2], (B, S, N, H), dtype)
    mask = jnp.ones((B, N, T, S), bool).at[0, :, 2].set(False)
    kw = dict(mask=mask, key_value_seq_lengths=jnp.array([5, 0]), implementation=impl)
    f = jax.jit(lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, **kw))
    out = f(q, k, v)
    assert bool(jnp.all(out[0, 2] == 0)) and bool(jnp.all(out[1] == 0))
    assert bool(jnp.all(jnp.isfinite(out.astype(jnp.float32))))
    grads = jax.grad(lambda *a: jnp.sum(f(*a).astype(jnp.float32)), (0, 1, 2))(q, k, v)
    for g in grads:
        assert bool(jnp.all(jnp.isfinite(g.astype(jnp.float32))))
    assert bool(jnp.all(grads[0][1] == 0)) and bool(jnp.all(grads[0][0, 2] == 0))


def _torch():
    return pytest.importorskip("torch", reason="PyTorch cross-checks need torch (CPU)")


@settings(max_examples=6)
@given(attention_cases(max_len=10))
def test_equal_torch_sdpa(case):
    """PyTorch scaled_dot_product_attention with the combined boolean mask (GQA included)."""
    torch = _torch()
    (q, k, v), kw = make_attention_inputs(case)
    rows = visible_rows(case, kw)
    if case["rank"] == 3:
        q, k, v, rows = q[None], k[None], v[None], rows[None]
    B, T, S, N, K, H = (case[c] for c in "BTSNKH")
    allowed = np.ones((B, N, T, S), bool)
    if "mask" in kw:
        allowed &= np.broadcast_to(np.asarray(kw["mask"]), allowed.shape)
    t, s = np.arange(T)[:, None], np.arange(S)[None, :]
    if case["is_causal"]:
        allowed &= s <= t
    if case["window"] is not None:
        allowed &= (s >= t - case["window"][0]) & (s <= t + case["window"][1])
    for b in range(B):
        if case["kv_len"] is not None:
            allowed[b, ..., case["kv_len"][b]:] = False
    attn_bias = np.where(allowed, 0.0, -np.inf).astype(np.float32)
    # Rows without a visible key carry zero weight in the loss; let torch attend everywhere
    # there so that nothing is NaN.
    attn_bias[~allowed.any(-1)] = 0.0
    if "bias" in kw:
        attn_bias = attn_bias + np.broadcast_to(np.asarray(kw["bias"]), attn_bias.shape)
    scale = kw["scale"] if kw["scale"] is not None else 1 / np.sqrt(H)
    tq, tk, tv = (torch.tensor(np.asarray(a)).transpose(1, 2).requires_grad_(True)
                  for a in (q, k, v))
    w = np.asarray(_weights(q.shape, rows, case["seed"]))
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=torch.tensor(attn_bias), scale=float(scale), enable_gqa=True)
    out = out.transpose(1, 2)
    (out * torch.tensor(w)).sum().backward()
    want = out.detach().numpy()
    for impl in ("xla", "chunked"):
        f = jax.jit(lambda q, k, v, impl=impl: portable_rnn.dot_product_attention(
            q, k, v, implementation=impl, **kw))
        got = np.asarray(f(q, k, v))
        np.testing.assert_allclose(got[rows], want[rows], atol=2e-5, rtol=2e-5, err_msg=impl)
        grads = jax.jit(jax.grad(_loss(f, jnp.asarray(w)), (0, 1, 2)))(q, k, v)
        for g, t_ in zip(grads, (tq, tk, tv)):
            ref = t_.grad.transpose(1, 2).numpy()
            np.testing.assert_allclose(np.asarray(g), ref, atol=5e-5, rtol=5e-5, err_msg=impl)

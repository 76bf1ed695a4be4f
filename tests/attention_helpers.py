"""Hypothesis strategies, inputs and an independent visibility reference for attention tests."""

import draws
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st


@st.composite
def attention_cases(draw, dtypes=(jnp.float32,), max_len=12, dynamic=True):
    """`dynamic=False`: no mask and no sequence lengths (visibility known at trace time)."""
    B = draw(st.integers(1, 2))
    T = draw(st.integers(1, max_len))
    S = draw(st.integers(1, max_len))
    K = draw(st.integers(1, 2))
    G = draw(st.integers(1, 2))
    H = draw(st.sampled_from([4, 8]))
    N = K * G
    case = dict(B=B, T=T, S=S, N=N, K=K, H=H, dtype=draw(st.sampled_from(dtypes)),
                rank=draw(st.sampled_from([4, 4, 3])) if B == 1 else 4,
                seed=draw(st.integers(0, 2**16)), is_causal=draw(st.booleans()))
    case["window"] = draw(st.one_of(st.none(), st.tuples(st.integers(0, 4), st.integers(0, 4))))
    dims = lambda: tuple(draw(st.sampled_from([1, n])) for n in (B, N, T, S))  # noqa: E731
    case["bias"] = draw(st.one_of(st.none(), st.builds(dims)))
    case["mask"] = case["q_len"] = case["kv_len"] = None
    if dynamic:
        case["mask"] = draw(st.one_of(st.none(), st.builds(dims)))
        case["q_len"] = draw(st.one_of(st.none(), st.lists(st.integers(0, T), min_size=B,
                                                            max_size=B)))
        case["kv_len"] = draw(st.one_of(st.none(), st.lists(st.integers(0, S), min_size=B,
                                                             max_size=B)))
    case["scale"] = draw(st.one_of(st.none(), st.floats(0.1, 1.0)))
    return case


def make_attention_inputs(case):
    """Arrays and keyword arguments for portable_rnn / jax.nn dot_product_attention."""
    B, T, S, N, K, H = (case[k] for k in "BTSNKH")
    ks = jax.random.split(jax.random.key(case["seed"]), 5)
    dt = case["dtype"]
    q = draws.normal(ks[0], (B, T, N, H), dt)
    k = draws.normal(ks[1], (B, S, K, H), dt)
    v = draws.normal(ks[2], (B, S, K, H), dt)
    kw = dict(is_causal=case["is_causal"], local_window_size=case["window"], scale=case["scale"])
    if case["bias"] is not None:
        kw["bias"] = draws.normal(ks[3], case["bias"], dt)
    if case["mask"] is not None:
        kw["mask"] = draws.bernoulli(ks[4], 0.75, case["mask"])
    if case["q_len"] is not None:
        kw["query_seq_lengths"] = jnp.asarray(case["q_len"], jnp.int32)
    if case["kv_len"] is not None:
        kw["key_value_seq_lengths"] = jnp.asarray(case["kv_len"], jnp.int32)
    if case["rank"] == 3:
        q, k, v = q[0], k[0], v[0]
    return (q, k, v), kw


def visible_rows(case, kw):
    """(B, T, N) bool: which query rows see at least one key; from a NumPy loop over pairs."""
    B, T, S, N = (case[k] for k in "BTSN")
    vis = np.ones((B, N, T, S), bool)
    if "mask" in kw:
        vis &= np.broadcast_to(np.asarray(kw["mask"]), vis.shape)
    t = np.arange(T)[:, None]
    s = np.arange(S)[None, :]
    if case["is_causal"]:
        vis &= s <= t
    if case["window"] is not None:
        left, right = case["window"]
        vis &= (s >= t - left) & (s <= t + right)
    for b in range(B):
        if case["q_len"] is not None:
            vis[b, :, case["q_len"][b]:, :] = False
        if case["kv_len"] is not None:
            vis[b, :, :, case["kv_len"][b]:] = False
    rows = vis.any(-1).transpose(0, 2, 1)  # (B, T, N)
    return rows if case["rank"] == 4 else rows[0]

"""Compilation is stable: a jitted model traces once per input signature, not once per call.

New values (a new dropout key, new sequence lengths, new data) reuse the compiled program; a new
shape traces exactly once more. Routing decisions are made at trace time, so a `policy` entered
around an already traced function does not change it (docs/dispatch.md).
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import portable_rnn
from lstm_helpers import make_inputs
from portable_rnn import linen as prnn_linen
from portable_rnn import nnx as prnn_nnx

pytestmark = pytest.mark.cpu  # tracing counts: the same on every platform

B, T, I, H, L = 4, 2, 3, 4, 2


class Counted:
    """Wraps `fn`, counting how often JAX traces it (each call of the Python function)."""

    def __init__(self, fn):
        self.fn, self.traces = fn, 0

    def __call__(self, *args, **kwargs):
        self.traces += 1
        return self.fn(*args, **kwargs)


def lengths(seed, batch=B, steps=T):
    return jnp.asarray(np.random.default_rng(seed).integers(0, steps + 1, batch), jnp.int32)


def test_lstm_traces_once_per_shape_not_per_key_or_lengths():
    def f(x, h0, c0, w, seq, key):
        return portable_rnn.lstm(x, h0, c0, w, seq, I, H, L, 0.3, False, dropout_rng=key)

    counted = Counted(f)
    jitted = jax.jit(counted)
    small = make_inputs(B, T, I, H, L, False, 0)
    for step in range(3):  # new lengths and a new dropout key each call
        y = jitted(*small, lengths(step), jax.random.key(step))[0]
    assert counted.traces == 1 and jitted._cache_size() == 1
    first = np.asarray(jitted(*small, lengths(0), jax.random.key(0))[0])
    assert not np.array_equal(first, np.asarray(y))  # the new key and lengths did take effect
    wide = make_inputs(2 * B, T, I, H, L, False, 1)
    long = make_inputs(B, 2 * T, I, H, L, False, 2)
    for _ in range(2):
        jitted(*wide, lengths(3, 2 * B), jax.random.key(3))
        jitted(*long, lengths(4, B, 2 * T), jax.random.key(4))
        jitted(*small, lengths(5), jax.random.key(5))
    assert counted.traces == 3 and jitted._cache_size() == 3


def test_attention_traces_once_per_shape():
    counted = Counted(lambda q, k, v, kv_len: portable_rnn.dot_product_attention(
        q, k, v, is_causal=True, key_value_seq_lengths=kv_len))
    jitted = jax.jit(counted)
    ks = jax.random.split(jax.random.key(0), 3)
    q, k, v = (draws.normal(kk, (2, 8, 2, 4)) for kk in ks)
    for step in range(3):
        jitted(q * step, k, v, lengths(step, 2, 8))
    jitted(q[:, :4], k, v, lengths(3, 2, 8))  # a shorter query: one more trace
    jitted(q[:, :4], k, v, lengths(4, 2, 8))
    assert counted.traces == 2 and jitted._cache_size() == 2


def test_linen_train_step_traces_once_per_shape():
    layer = prnn_linen.LSTM(H, num_layers=L, dropout=0.3)
    x = draws.normal(jax.random.key(0), (B, T, I))
    params = layer.init(jax.random.key(1), x)

    def step(params, x, seq, key):
        def loss(params):
            y = layer.apply(params, x, seq, deterministic=False, rngs={"dropout": key})
            return jnp.mean(y ** 2)
        value, grads = jax.value_and_grad(loss)(params)
        return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    counted = Counted(step)
    jitted = jax.jit(counted)
    losses = []
    for i in range(3):
        value, params = jitted(params, x, lengths(i), jax.random.key(i))
        losses.append(float(value))
    assert counted.traces == 1 and len(set(losses)) == 3
    for _ in range(2):
        jitted(params, jnp.ones((2 * B, T, I)), lengths(3, 2 * B), jax.random.key(3))
    assert counted.traces == 2 and jitted._cache_size() == 2


def test_nnx_lstm_under_nnx_jit_traces_once_per_shape():
    model = prnn_nnx.LSTM(I, H, num_layers=L, dropout=0.3, rngs=nnx.Rngs(0, dropout=1))
    counted = Counted(lambda model, x, seq: model(x, seq, deterministic=False))
    jitted = nnx.jit(counted)
    x = draws.normal(jax.random.key(0), (B, T, I))
    outs = [np.asarray(jitted(model, x, lengths(i))) for i in range(3)]
    assert counted.traces == 1
    assert not np.array_equal(outs[0], outs[1])  # the dropout stream advanced between calls
    for _ in range(2):
        jitted(model, jnp.ones((B, 2 * T, I)), lengths(3, B, 2 * T))
    assert counted.traces == 2


def compiled_path(jitted, *args) -> str:
    """Which attention path the compiled program of `jitted` contains (from op metadata)."""
    hlo = jitted.lower(*args).compile().as_text()
    paths = [p for p in ("xla", "chunked") if f"portable_rnn.attention.{p}" in hlo]
    assert len(paths) == 1, paths
    return paths[0]


def test_policy_applies_when_traced_not_when_called():
    """The decision is part of the trace. A policy entered around a traced function does not
    change it, nor does a new `jax.jit` of the same Python function (JAX caches traces per
    function); a new function, or `jax.clear_caches()`, traces again under the policy."""
    counted = Counted(lambda q: portable_rnn.dot_product_attention(q, q, q))
    f = jax.jit(counted)
    q = jnp.ones((1, 8, 1, 4))
    f(q)
    assert compiled_path(f, q) == "xla"  # automatic: dense for small T x S
    with portable_rnn.policy(attention="chunked"):
        f(q)
        assert counted.traces == 1 and compiled_path(f, q) == "xla"
        assert compiled_path(jax.jit(counted), q) == "xla" and counted.traces == 1
        fresh = Counted(counted.fn)  # a new function object traces anew
        assert compiled_path(jax.jit(fresh), q) == "chunked" and fresh.traces == 1
        jax.clear_caches()
        f(q)
        assert counted.traces == 2 and compiled_path(f, q) == "chunked"
    f(q)  # outside the policy again: still the program traced under it
    assert counted.traces == 2 and compiled_path(f, q) == "chunked"


"""Bad input to portable_rnn.dot_product_attention: errors that name the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn

B, T, S, N, K, H = 2, 4, 5, 4, 2, 8


def call(**over):
    kw = dict(query=jnp.zeros((B, T, N, H)), key=jnp.zeros((B, S, K, H)),
              value=jnp.zeros((B, S, K, H)))
    kw.update(over)
    return portable_rnn.dot_product_attention(**kw)


CASES = [
    (dict(query=jnp.zeros((T, H))), ValueError,
     r"`query` must have shape \(B, T, N, H\) or \(T, N, H\); got shape \(4, 8\)"),
    (dict(key=jnp.zeros((S, K, H))), ValueError, r"must have the same rank"),
    (dict(query=jnp.zeros((B, T, N, H), jnp.bfloat16)), TypeError,
     r"`query`, `key` and `value` must have one dtype; got bfloat16, float32, float32"),
    (dict(query=jnp.zeros((B, T, N, H), jnp.int32)), TypeError,
     r"`query` must have a floating dtype"),
    (dict(value=jnp.zeros((B, S, K, H + 1))), ValueError,
     r"`value` must have the shape of `key` \(2, 5, 2, 8\); got \(2, 5, 2, 9\)"),
    (dict(key=jnp.zeros((B + 1, S, K, H)), value=jnp.zeros((B + 1, S, K, H))), ValueError,
     r"`key` must have shape \(B, S, K, H\) with B=2 and H=8"),
    (dict(key=jnp.zeros((B, S, 3, H)), value=jnp.zeros((B, S, 3, H))), ValueError,
     r"N=4 \(`query` \(2, 4, 4, 8\)\) must be a multiple of the number of key/value heads K=3 "
     r"\(`key` \(2, 5, 3, 8\)\)"),
    (dict(mask=jnp.ones((B, 1, T, S), jnp.int32)), TypeError,
     r"`mask` must be boolean \(True = attend\); got int32"),
    (dict(bias=jnp.zeros((B, N, T, S + 1))), ValueError,
     r"`bias` must be broadcastable to \(B, N, T, S\)=\(2, 4, 4, 5\); got shape \(2, 4, 4, 6\)"),
    (dict(bias=jnp.zeros((1, 1, 1, T, S))), ValueError,
     r"`bias` must have at most 4 dimensions"),
    (dict(mask=jnp.ones((3, T, S), bool)), ValueError, r"`mask` must be broadcastable"),
    (dict(query_seq_lengths=jnp.ones((B,), jnp.float32)), TypeError,
     r"`query_seq_lengths` must have an integer dtype; got float32"),
    (dict(key_value_seq_lengths=jnp.ones((B + 1,), jnp.int32)), ValueError,
     r"`key_value_seq_lengths` must have shape \(batch,\)=\(2,\); got \(3,\)"),
    (dict(key_value_seq_lengths=np.array([6, 1])), ValueError,
     r"`key_value_seq_lengths` must lie in \[0, S=5\]; got \[6\]"),
    (dict(local_window_size=(1, -1)), ValueError,
     r"`local_window_size` must be None, an int >= 0 or a pair"),
    (dict(local_window_size="big"), ValueError, r"`local_window_size` must be None"),
    (dict(scale=jnp.ones(2)), TypeError,
     r"`scale` must be None, a Python float or a scalar array of a real dtype; got shape \(2,\)"),
    (dict(scale="a"), TypeError, r"`scale` must be None, a Python float or a scalar array; got"),
    (dict(is_causal=1), TypeError, r"`is_causal` must be a Python bool; got 1"),
    (dict(implementation="pallas"), ValueError,
     r"`implementation` must be None \(automatic\) or one of 'cudnn', 'splash', 'flash', "
     r"'chunked', 'xla'; got 'pallas'"),
    (dict(implementation="cudnn"), ValueError,
     r"implementation='cudnn' cannot serve this attention call:\n  - platform is '(cpu|tpu)'"),
]


@pytest.mark.parametrize("over, exc, match", CASES, ids=[",".join(c[0]) for c in CASES])
def test_error_messages(over, exc, match):
    with pytest.raises(exc, match=match):
        call(**over)


def test_shape_errors_at_trace_time():
    f = jax.jit(lambda q: portable_rnn.dot_product_attention(q, q, q))
    with pytest.raises(ValueError, match=r"`query` must have shape"):
        f.trace(jax.ShapeDtypeStruct((2, 3), jnp.float32))


def test_empty_sequences_give_zeros():
    out = call(query=jnp.ones((B, 0, N, H)))
    assert out.shape == (B, 0, N, H)
    out = call(key=jnp.ones((B, 0, K, H)), value=jnp.ones((B, 0, K, H)))
    assert out.shape == (B, T, N, H) and not bool(out.any())

"""A typed use of portable_rnn's public API, for the type checkers (never run).

`tests/test_stubs.py` and CI check this file with basedpyright (or pyright) and mypy: it must
give no error. The calls below are what a user writes; each line marked ``# type: ignore`` is a
mistake the checkers must report (an ignore that suppresses nothing is itself an error here).
"""

# pyright: reportUnnecessaryTypeIgnoreComment=true
# mypy: warn-unused-ignores

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import portable_rnn
from portable_rnn import Capabilities, Decision

B, T, I, H, L = 2, 5, 3, 4, 1
GPU = Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")


def functional() -> None:
    key = jax.random.key(0)
    x = jnp.ones((B, T, I), jnp.bfloat16)
    h_0 = c_0 = jnp.zeros((L, B, H))
    lengths = jnp.array([5, 2])

    w = portable_rnn.init_lstm_weight(key, I, H, L, False)
    y, h_n, c_n = portable_rnn.lstm(x, h_0, c_0, w, lengths, I, H, L, 0.0, False,
                                    implementation="scan", capabilities=GPU)
    outputs: jax.Array = y
    states: list[jax.Array] = [h_n, c_n]
    y, h_n = portable_rnn.gru(x, h_0, portable_rnn.init_gru_weight(key, I, H, L, False), None,
                              I, H, L, 0.0, False, dropout_rng=key)
    y, h_n = portable_rnn.simple_rnn(x, h_0, portable_rnn.init_simple_rnn_weight(key, I, H, L,
                                                                                 False),
                                     lengths, I, H, L, 0.0, False, nonlinearity="relu")
    y, h_n = portable_rnn.mgu(x, h_0, portable_rnn.init_mgu_weight(key, I, H, L, False),
                              lengths, I, H, L, 0.0, False, reset_gate=False)
    y, h_n, c_n = portable_rnn.lstm(x, h_0[..., :2], c_0, portable_rnn.init_lstm_weight(
        key, I, H, L, False, proj_size=2), lengths, I, H, L, 0.0, False, proj_size=2)
    print(outputs, states, y, h_n, c_n)

    S = jax.ShapeDtypeStruct
    d: Decision = portable_rnn.explain_lstm(
        S((B, T, I), jnp.float32), S((L, B, H), jnp.float32), S((L, B, H), jnp.float32),
        S((portable_rnn.get_num_params_in_lstm(I, H, L, False),), jnp.float32), None,
        I, H, L, 0.0, False, capabilities=GPU)
    name: str = d.implementation
    reasons: tuple[str, ...] = d.rejected.get("cudnn", ())
    d = portable_rnn.explain_gru(x, h_0, w, lengths, I, H, L, 0.0, False,
                                 implementation="cudnn_ffi")
    print(name, reasons, d)

    # A route the op does not have, an op's keyword it does not take, a missing argument.
    portable_rnn.lstm(x, h_0, c_0, w, lengths, I, H, L, 0.0, False,
                      implementation="chunked")  # type: ignore
    portable_rnn.gru(x, h_0, w, lengths, I, H, L, 0.0, False, proj_size=2)  # type: ignore
    portable_rnn.gru(x, h_0, w, lengths, I, H, L, 0.0)  # type: ignore


def weights() -> None:
    key = jax.random.key(0)
    w = portable_rnn.init_lstm_weight(key, I, H, 2, True, jnp.bfloat16)
    n: int = portable_rnn.get_num_params_in_lstm(I, H, 2, True)
    W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_lstm_weights(w, I, H, 2, True)
    w = portable_rnn.pack_lstm_weights(W_ih, W_hh, b_ih, b_hh, I, H, 2, True)
    state_dict: dict[str, np.ndarray] = portable_rnn.lstm_weights_to_torch(w, I, H, 2, True)
    w = portable_rnn.lstm_weights_from_torch(state_dict, dtype=jnp.float32)
    w = portable_rnn.gru_weights_from_flax(portable_rnn.gru_weights_to_flax(w, I, H, 1, False))
    keras_weights = portable_rnn.simple_rnn_weights_to_keras(w, I, H, 1, False)
    w = portable_rnn.simple_rnn_weights_from_keras(keras_weights[0])
    print(n, w.shape)


def attention() -> None:
    q = jnp.ones((B, T, 2, 8))
    out = portable_rnn.dot_product_attention(q, q, q, is_causal=True, implementation="chunked")
    d = portable_rnn.explain_attention(jax.ShapeDtypeStruct(q.shape, q.dtype), q, q,
                                       local_window_size=(2, 0), capabilities=GPU)
    portable_rnn.dot_product_attention(q, q, q, implementation="scan")  # type: ignore
    print(out, d.implementation)


def routing() -> None:
    caps: Capabilities = portable_rnn.capabilities()
    with portable_rnn.policy(lstm="scan", attention="xla", gru="cudnn", simple_rnn="scan",
                             on_fallback="warn", lstm_low_precision="upcast",
                             capabilities=caps, checkify_lengths=True) as in_effect:
        print(in_effect)
    with portable_rnn.policy(on_fallback="loud"):  # type: ignore
        pass
    with portable_rnn.policy(lstm_routes="scan"):  # type: ignore
        pass
    try:
        pass
    except portable_rnn.FallbackError as e:
        print(e)


def linen_layers() -> None:
    x = jnp.ones((B, T, I))
    layer = portable_rnn.linen.LSTM(hidden_size=8, num_layers=2, bidirectional=True,
                                    implementation="scan", proj_size=4)
    variables = layer.init(jax.random.key(0), x)
    y = layer.apply(variables, x, jnp.array([5, 3]))
    gru = portable_rnn.linen.GRU(8, dropout=0.1)
    rnn = portable_rnn.linen.SimpleRNN(8, nonlinearity="relu")
    params = portable_rnn.linen.LSTM.variables_from_torch({}, prefix="rnn.")
    attention = nn.MultiHeadDotProductAttention(num_heads=2,
                                                attention_fn=portable_rnn.linen.attention_fn)
    portable_rnn.linen.GRU(8, implementation="chunked")  # type: ignore
    portable_rnn.linen.GRU(8, proj_size=2)  # type: ignore
    print(y, gru, rnn, params, attention)


def nnx_layers() -> None:
    x = jnp.ones((B, T, I))
    model = portable_rnn.nnx.LSTM(I, 8, num_layers=2, proj_size=4, rngs=nnx.Rngs(0))
    y, carry = model(x, jnp.array([5, 3]), return_carry=True)
    model = portable_rnn.nnx.LSTM.from_torch({}, rngs=nnx.Rngs(0))
    gru = portable_rnn.nnx.GRU(I, 8, implementation="cudnn", rngs=nnx.Rngs(0))
    size: int = gru.hidden_size
    model.eval()
    portable_rnn.nnx.GRU(I, 8, proj_size=2, rngs=nnx.Rngs(0))  # type: ignore
    portable_rnn.nnx.GRU(I, 8)  # type: ignore
    print(y, carry, model, gru, size)


def equinox_layers() -> None:
    import equinox as eqx

    from portable_rnn import equinox as peqx

    x = jnp.ones((B, T, I))
    model = peqx.LSTM(I, 8, 2, bidirectional=True, return_state=True, proj_size=4,
                      key=jax.random.key(0))
    y = model(x, jnp.array([5, 3]), key=jax.random.key(1))
    mgu = portable_rnn.equinox.MGU(I, 8, reset_gate=False, key=jax.random.key(0))
    cells = peqx.GRU(I, 8, key=jax.random.key(0)).to_eqx_cells()
    size: int = model.hidden_size
    inference_model = eqx.nn.inference_mode(model)
    portable_rnn.equinox.GRU(I, 8, proj_size=2, key=jax.random.key(0))  # type: ignore
    print(y, mgu, cells, size, inference_model)


def keras_layers() -> None:
    layer = portable_rnn.keras.LSTM(8, return_sequences=True)
    both = portable_rnn.keras.Bidirectional(portable_rnn.keras.GRU(8))
    decision: Decision | None = layer.decision
    print(both.decision, decision, portable_rnn.keras.SimpleRNN(4))

"""Shared hypothesis strategies and input builders for the LSTM tests."""

import draws
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

import portable_rnn


@st.composite
def lstm_cases(draw, min_length=0, max_layers=3, ragged=True):
    """Half the draws small (T <= 6, H <= 5), half long and wide (T 64-96, H 32-40)."""
    large = draw(st.booleans())
    B = draw(st.integers(1, 3))
    T = draw(st.integers(64, 96) if large else st.integers(max(1, min_length), 6))
    I = draw(st.integers(1, 16 if large else 5))
    H = draw(st.integers(32, 40) if large else st.integers(1, 5))
    L = draw(st.integers(1, max_layers))
    bidir = draw(st.booleans())
    if ragged:
        lengths = draw(st.lists(st.integers(min_length, T), min_size=B, max_size=B))
    else:
        lengths = [T] * B
    seed = draw(st.integers(0, 2**16))
    return B, T, I, H, L, bidir, np.array(lengths, np.int32), seed


def make_inputs(B, T, I, H, L, bidir, seed, dtype=jnp.float32):
    D = 2 if bidir else 1
    k = jax.random.split(jax.random.key(seed), 4)
    x = draws.normal(k[0], (B, T, I), dtype)
    h0 = draws.normal(k[1], (L * D, B, H), dtype)
    c0 = draws.normal(k[2], (L * D, B, H), dtype)
    w = draws.init_weight(k[3], I, H, L, bidir, "lstm")  # portable_rnn.init_lstm_weight's bits
    return x, h0, c0, w


def run(x, h0, c0, w, lengths, I, H, L, bidir, **kw):
    return portable_rnn.lstm(x, h0, c0, w, lengths, I, H, L, 0.0, bidir, **kw)


def torch_lstm(w, I, H, L, bidir, x, h0, c0, lengths, dtype="float32"):
    """PyTorch nn.LSTM(batch_first=True) in `dtype` with our weights, ragged via packed
    sequences; returns float32 NumPy (y, h_n, c_n). Needs torch."""
    import torch

    tdtype = getattr(torch, dtype)
    mod = torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=bidir).to(tdtype)
    sd = portable_rnn.lstm_weights_to_torch(w, I, H, L, bidir)
    mod.load_state_dict({k: torch.from_numpy(np.array(v)).to(tdtype) for k, v in sd.items()})
    t = lambda a: torch.from_numpy(np.array(a, np.float32)).to(tdtype)  # noqa: E731
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        t(x), torch.from_numpy(np.array(lengths, np.int64)), batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        out, (h, c) = mod(packed, (t(h0), t(c0)))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                  total_length=x.shape[1])
    return [a.float().numpy() for a in (y, h, c)]

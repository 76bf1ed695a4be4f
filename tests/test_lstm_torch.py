"""bfloat16 accuracy against PyTorch's own bfloat16 nn.LSTM (skipped without torch).

The float32 equivalence with nn.LSTM is in `test_equivalence_matrix.py`.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn
from lstm_helpers import make_inputs, run

torch = pytest.importorskip("torch", reason="PyTorch cross-checks need torch (CPU)")


def _torch_lstm(w, I, H, L, bidir, dtype=torch.float32):
    mod = torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=bidir).to(dtype)
    sd = portable_rnn.lstm_weights_to_torch(w, I, H, L, bidir)
    mod.load_state_dict({k: torch.from_numpy(np.array(v)).to(dtype) for k, v in sd.items()})
    return mod


def _torch_run(mod, x, h0, c0, lengths, dtype=torch.float32):
    t = lambda a: torch.from_numpy(np.array(a, np.float32)).to(dtype)  # noqa: E731
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        t(x), torch.from_numpy(np.array(lengths, np.int64)), batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        out, (h, c) = mod(packed, (t(h0), t(c0)))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                  total_length=x.shape[1])
    return [a.float().numpy() for a in (y, h, c)]


def test_bf16_error_no_worse_than_torch_bf16():
    """bf16 error against float32, compared with PyTorch's own bf16 LSTM on the same weights."""
    B, T, I, H, L = 8, 32, 16, 32, 2
    worse = []
    for seed in range(3):
        x, h0, c0, w = make_inputs(B, T, I, H, L, False, seed)
        lengths = np.full(B, T)
        exact = run(x, h0, c0, w, lengths, I, H, L, False)[0]
        bf = lambda a: a.astype(jnp.bfloat16)  # noqa: E731
        ours = run(bf(x), bf(h0), bf(c0), bf(w), lengths, I, H, L, False)[0]
        theirs = _torch_run(_torch_lstm(w, I, H, L, False, torch.bfloat16), x, h0, c0, lengths,
                            torch.bfloat16)[0]
        err_ours = float(jnp.sqrt(jnp.mean((ours.astype(jnp.float32) - exact) ** 2)))
        err_torch = float(np.sqrt(np.mean((theirs - np.asarray(exact)) ** 2)))
        assert 0 < err_ours < 0.05
        worse.append(err_ours > err_torch)
    assert not any(worse), worse



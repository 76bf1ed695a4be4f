"""bfloat16 accuracy against PyTorch's own bfloat16 nn.LSTM (skipped without torch).

The float32 equivalence with nn.LSTM is in `test_equivalence_matrix.py`.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from lstm_helpers import make_inputs, run, torch_lstm

pytest.importorskip("torch", reason="PyTorch cross-checks need torch (CPU)")


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
        theirs = torch_lstm(w, I, H, L, False, x, h0, c0, lengths, "bfloat16")[0]
        err_ours = float(jnp.sqrt(jnp.mean((ours.astype(jnp.float32) - exact) ** 2)))
        err_torch = float(np.sqrt(np.mean((theirs - np.asarray(exact)) ** 2)))
        assert 0 < err_ours < 0.05
        worse.append(err_ours > err_torch)
    assert not any(worse), worse



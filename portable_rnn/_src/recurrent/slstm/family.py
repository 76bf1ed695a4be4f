"""The sLSTM's facts: the scalar-memory LSTM of xLSTM (Beck et al., 2024), with exponential
input and forget gates, a normalizer state and a stabilizer state, as FlashRNN's ``"slstm"``
function computes it (NX-AI's ``flashrnn`` package; gates i, f, z, o; states h, c, n, m)."""

from __future__ import annotations

from ..cell import HEADS, HEADS_DOC, Family

FAMILY = Family(
    name="slstm", gates=4, gate_names="i, f, z, o", states=("h_0", "c_0", "n_0", "m_0"),
    article="an", torch_module=None, keras_layer=None, keras_order=(0, 1, 2, 3),
    keras_bias_rows=1, flax_cells=None, flax_cell=None, flax_dense=(), flax_biased=frozenset(),
    layer_options={HEADS: 1}, call_options=(HEADS,), option_docs={HEADS: HEADS_DOC},
    cudnn_name=None, wide_state="memory state (c, n, m)",
    cudnn_mode=None, title="SLSTM",
    state_docs=("hidden state", "memory state", "normalizer state",
                "stabilizer state (a log scale)"),
    long_name="an sLSTM (xLSTM's scalar LSTM with exponential gating)",
    formula=("Gates i, f, z, o; states h (the output), c (the memory), n (its normalizer) "
             "and m (the stabilizer, a log scale), as FlashRNN's sLSTM (xLSTM, Beck et al. "
             "2024), from the pre-activations ``a = W_ih x + b_ih + W_hh h + b_hh``: the "
             "stabilizer ``m' = max(a_i, log(sigmoid(a_f)) + m)`` (``m' = a_i`` where "
             "``n == 0``, per unit: a sequence's first step from zero states), "
             "``i = exp(a_i - m')``, "
             "``f = exp(log(sigmoid(a_f)) + m - m')``, ``c' = f * c + i * tanh(a_z)``, "
             "``n' = max(f * n + i, 1)``, ``h' = sigmoid(a_o) * c' / n'``. Zero initial states "
             "are FlashRNN's default. Weights convert from and to FlashRNN's ``(W, R, b)`` with "
             "``portable_rnn._src.recurrent.slstm.flashrnn``."))

"""The simple (Elman) RNN's facts: PyTorch's ``nn.RNN`` (one gate block; tanh or relu)."""

from __future__ import annotations

from ..cell import Family

FAMILY = Family(
    name="simple_rnn", gates=1, gate_names="a single block", states=("h_0",), article="a",
    torch_module="nn.RNN", keras_layer="SimpleRNN", keras_order=(0,), keras_bias_rows=1,
    flax_cells="SimpleCell", flax_cell="nn.SimpleCell", flax_dense=(("i", "h"),),
    flax_biased=frozenset({"i"}), layer_options={"nonlinearity": "tanh"},
    call_options=("nonlinearity",), cudnn_name="RNN", wide_state="hidden state",
    cudnn_mode=("nonlinearity", {"relu": 0, "tanh": 1}))

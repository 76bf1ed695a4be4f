"""The LSTM's facts: PyTorch's ``nn.LSTM`` (gates i, f, g, o; an optional projection)."""

from __future__ import annotations

from ..cell import Family

FAMILY = Family(
    name="lstm", gates=4, gate_names="i, f, g, o", states=("h_0", "c_0"), article="an",
    torch_module="nn.LSTM", keras_layer="LSTM", keras_order=(0, 1, 2, 3), keras_bias_rows=1,
    flax_cells="LSTMCell/OptimizedLSTMCell", flax_cell="nn.OptimizedLSTMCell",
    flax_dense=(("ii", "hi"), ("if", "hf"), ("ig", "hg"), ("io", "ho")),
    flax_biased=frozenset({"hi", "hf", "hg", "ho"}),
    layer_options={"proj_size": 0, "projection_init": None}, call_options=("proj_size",),
    cudnn_name="LSTM", wide_state="cell state", projection=True,
    cudnn_mode=2, policy_options={"lstm_low_precision": ("scan", "upcast")})

"""The GRU's facts: PyTorch's and cuDNN's ``nn.GRU`` (gates r, z, n; r applied after
``W_hn h + b_hn``)."""

from __future__ import annotations

from ..cell import Family

FAMILY = Family(
    name="gru", gates=3, gate_names="r, z, n", states=("h_0",), article="a",
    torch_module="nn.GRU", keras_layer="GRU", keras_order=(1, 0, 2), keras_bias_rows=2,
    flax_cells="GRUCell", flax_cell="nn.GRUCell",
    flax_dense=(("ir", "hr"), ("iz", "hz"), ("in", "hn")),
    flax_biased=frozenset({"ir", "iz", "in", "hn"}),
    layer_options={}, call_options=(), cudnn_name="GRU", wide_state="hidden state",
    cudnn_mode=3, inner_bias_gate=2,
    keras_state_mask="in the update-gate blend too (z * masked h)")

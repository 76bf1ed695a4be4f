"""The GRU's facts: PyTorch's and cuDNN's ``nn.GRU`` (gates r, z, n; r applied after
``W_hn h + b_hn``)."""

from __future__ import annotations

from ..cell import HEADS, HEADS_DOC, Family

FAMILY = Family(
    name="gru", gates=3, gate_names="r, z, n", states=("h_0",), article="a",
    torch_module="nn.GRU", keras_layer="GRU", keras_order=(1, 0, 2), keras_bias_rows=2,
    flax_cells="GRUCell", flax_cell="nn.GRUCell",
    flax_dense=(("ir", "hr"), ("iz", "hz"), ("in", "hn")),
    flax_biased=frozenset({"ir", "iz", "in", "hn"}),
    layer_options={HEADS: 1}, call_options=(HEADS,), option_docs={HEADS: HEADS_DOC},
    cudnn_name="GRU", wide_state="hidden state",
    cudnn_mode=3, inner_bias_gate=2,
    keras_state_mask="in the update-gate blend too (z * masked h)",
    title="GRU", eqx_cell="GRUCell", keras_config={"reset_after": True},
    keras_activations={"activation": ("tanh",), "recurrent_activation": ("sigmoid",)},
    formula=("Gates r, z, n; the reset gate multiplies ``W_hn h + b_hn`` (also cuDNN's GRU and "
             "Keras' ``reset_after=True``): ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, "
             "``h' = (1 - z) * n + z * h``."),
    flax_note=("Flax's GRUCell computes PyTorch's equations, gate names r, z, n alike, except "
               "for where the biases sit: its ``hr`` and ``hz`` Dense have no bias (``ir``, "
               "``iz``, ``in`` and ``hn`` have one), so ``b_ih = [b_ir, b_iz, b_in]`` and "
               "``b_hh = [0, 0, b_hn]`` when reading, and ``b_hr``, ``b_hz`` are summed into "
               "the ``ir`` and ``iz`` biases when writing (rounded once, in the weights' "
               "dtype): every GRU of this layout is representable. The default ``gate_fn`` "
               "(sigmoid) and ``activation_fn`` (tanh) are assumed: the parameters do not "
               "record them."),
    keras_note=("Keras' gates are z, r, h (ours r, z, n: the first two blocks swap); bias row "
                "0 is ``b_ih``, row 1 ``b_hh``. With ``reset_after=True`` (Keras' default) the "
                "equations are PyTorch's. A GRU with ``reset_after=False`` (bias (3H,)) "
                "computes ``tanh(x W_h + (r * h) U_h + b_h)`` instead and is rejected; without "
                "bias (``use_bias=False``) the two cannot be told apart by their weights, so "
                "make sure such a layer has ``reset_after=True``."))

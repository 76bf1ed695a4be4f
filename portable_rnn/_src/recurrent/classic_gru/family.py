"""The classic GRU's facts: Keras' ``GRU(reset_after=False)`` (Cho et al. 2014; the Keras 2
default): gates z, r, h, the reset gate applied to ``h`` before the candidate's recurrent
product, one bias."""

from __future__ import annotations

from ..cell import HEADS, Family

FAMILY = Family(
    name="classic_gru", gates=3, gate_names="z, r, h", states=("h_0",), article="a",
    torch_module=None, keras_layer="GRU", keras_order=(0, 1, 2), keras_bias_rows=1,
    flax_cells=None, flax_cell=None, flax_dense=(), flax_biased=frozenset(),
    layer_options={HEADS: 1}, call_options=(HEADS,),
    option_docs={HEADS: ("int", "must be 1: the classic GRU's step computes its own recurrent "
                            "products and has no heads.")}, cudnn_name="GRU (reset_after=False)",
    wide_state="hidden state",
    # Keras 3 versions without the cell's ``dropout_mask_count`` multiply the state by the
    # recurrent mask before the whole step, as for its reset_after=True GRU
    keras_state_mask="in the update-gate blend too (z * masked h)",
    title="ClassicGRU", long_name="a classic GRU (reset gate before the recurrent product)",
    keras_config={"reset_after": False},
    keras_activations={"activation": ("tanh",), "recurrent_activation": ("sigmoid",)},
    formula=("Gates z, r, h (Keras' ``GRU(reset_after=False)``, Cho et al. 2014): "
             "``z = sigmoid(W_iz x + W_hz h + b_z)``, ``r = sigmoid(W_ir x + W_hr h + b_r)``, "
             "``hh = tanh(W_ih x + W_hh (r * h) + b_h)``, ``h' = z * h + (1 - z) * hh``, with "
             "``b = b_ih + b_hh``. The reset gate scales ``h`` before the candidate's recurrent "
             "product (PyTorch's and cuDNN's GRU, `gru`, scale the product instead)."),
    keras_note=("Keras' gates are z, r, h, as ours; its one bias (3H,) becomes ``b_ih`` "
                "(``b_hh`` is zero), and ``b_ih + b_hh`` when writing. A Keras GRU with "
                "``reset_after=True`` (bias (2, 3H)) computes PyTorch's equations: convert "
                "it with `gru_weights_from_keras`."))

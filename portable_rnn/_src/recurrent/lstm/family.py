"""The LSTM's facts: PyTorch's ``nn.LSTM`` (gates i, f, g, o; an optional projection)."""

from __future__ import annotations

from ..cell import HEADS, HEADS_DOC, Family

FAMILY = Family(
    name="lstm", gates=4, gate_names="i, f, g, o", states=("h_0", "c_0"), article="an",
    torch_module="nn.LSTM", keras_layer="LSTM", keras_order=(0, 1, 2, 3), keras_bias_rows=1,
    flax_cells="LSTMCell/OptimizedLSTMCell", flax_cell="nn.OptimizedLSTMCell",
    flax_dense=(("ii", "hi"), ("if", "hf"), ("ig", "hg"), ("io", "ho")),
    flax_biased=frozenset({"hi", "hf", "hg", "ho"}),
    layer_options={"proj_size": 0, "projection_init": None, HEADS: 1},
    call_options=("proj_size", HEADS),
    cudnn_name="LSTM", wide_state="cell state", projection=True,
    cudnn_mode=2, policy_options={"lstm_low_precision": ("scan", "upcast")},
    title="LSTM", eqx_cell="LSTMCell", flax_carry=(1, 0),
    keras_activations={"activation": ("tanh",), "recurrent_activation": ("sigmoid",)},
    option_docs={
        "proj_size": ("int", "``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` "
                      "(P, H) per layer and direction, as ``torch.nn.LSTM(proj_size=P)``: "
                      "outputs have D*P features, ``h`` is (L*D, ..., P) and ``W_hh`` (4H, P); "
                      "the cuDNN call has no projection, so such calls run the scan path. "
                      "Default 0: no projection."),
        "projection_init": ("Callable | None", "initialiser of each ``W_hr``; default the "
                            "same uniform one as the other weights."),
        HEADS: HEADS_DOC},
    formula=("Gates i, f, g, o: ``c' = f * c + i * g``, ``h' = o * tanh(c')``; positionally "
             "identical to `jax.experimental.rnn.lstm`. ``proj_size=P > 0`` projects each hidden "
             "state with ``W_hr`` (P, H), as PyTorch's ``nn.LSTM(proj_size=P)``: ``h_0``/``h_n`` "
             "are (L*D, B, P), ``y`` is (B, T, D*P) and the weights include ``W_hr``; the cuDNN "
             "call has no projection, so such calls run the scan path."),
    flax_note=("Flax's LSTM cells have one bias per gate, on the hidden Dense (``hi``, ``hf``, "
               "``hg``, ``ho``): it becomes ``b_hh`` when reading (``b_ih`` is zero), and each "
               "gate's ``b_ih + b_hh`` when writing. A projection (``proj_size``) has no Flax "
               "counterpart."),
    keras_note=("Keras' gates are i, f, c, o (ours i, f, g, o); its one bias becomes ``b_ih`` "
                "(``b_hh`` is zero) and ``b_ih + b_hh`` when writing. The default activations "
                "(tanh, and sigmoid for the gates) are assumed. A projection (``proj_size``) "
                "has no Keras counterpart."))

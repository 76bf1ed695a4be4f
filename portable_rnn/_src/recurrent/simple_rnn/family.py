"""The simple (Elman) RNN's facts: PyTorch's ``nn.RNN`` (one gate block; tanh or relu)."""

from __future__ import annotations

from ..cell import HEADS, HEADS_DOC, Family

FAMILY = Family(
    name="simple_rnn", gates=1, gate_names="a single block", states=("h_0",), article="a",
    torch_module="nn.RNN", keras_layer="SimpleRNN", keras_order=(0,), keras_bias_rows=1,
    flax_cells="SimpleCell", flax_cell="nn.SimpleCell", flax_dense=(("i", "h"),),
    flax_biased=frozenset({"i"}), layer_options={"nonlinearity": "tanh", HEADS: 1},
    call_options=("nonlinearity", HEADS), cudnn_name="RNN", wide_state="hidden state",
    cudnn_mode=("nonlinearity", {"relu": 0, "tanh": 1}),
    title="SimpleRNN", long_name="an Elman RNN",
    keras_activations={"activation": ("tanh", "relu")},
    option_docs={"nonlinearity": ("str", "``\"tanh\"`` (default) or ``\"relu\"``, as PyTorch's "
                                         "``nn.RNN``. A PyTorch state_dict does not store it: "
                                         "set it to the ``nn.RNN``'s."),
        HEADS: HEADS_DOC},
    formula=("``h' = act(W_ih x + b_ih + W_hh h + b_hh)``, with ``act`` given by ``nonlinearity`` "
             "(``\"tanh\"`` or ``\"relu\"``)."),
    flax_note=("Flax's SimpleCell computes ``h' = activation_fn(W_i x + b_i + W_h h)``: its one "
               "bias, on the input Dense ``i``, becomes ``b_ih`` (``b_hh`` is zero), and "
               "``b_ih + b_hh`` when writing. ``activation_fn`` (tanh by default; pass the same "
               "as ``nonlinearity``) and ``residual=True`` are not recorded in the parameters."),
    keras_note=("Keras computes ``h' = activation(x W + b + h U)``; the bias becomes ``b_ih`` "
                "(``b_hh`` is zero), and ``b_ih + b_hh`` when writing. The activation (pass the "
                "same as ``nonlinearity``) is not part of the weights."))

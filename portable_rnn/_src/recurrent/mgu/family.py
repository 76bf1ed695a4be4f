"""The MGU's facts: Flax's ``nn.MGUCell``, the Minimal Gated Unit (Zhou et al., 2016; gates f,
n; the forget gate also resets ``W_hn h + b_hn``, unless ``reset_gate=False``)."""

from __future__ import annotations

from ..cell import HEADS, HEADS_DOC, Family

FAMILY = Family(
    name="mgu", gates=2, gate_names="f, n", states=("h_0",), article="an",
    torch_module=None, keras_layer=None, keras_order=(0, 1), keras_bias_rows=1,
    flax_cells="MGUCell", flax_cell="nn.MGUCell",
    flax_dense=(("if", "hf"), ("in", "hn")),
    flax_biased=frozenset({"if", "in", "hn"}),
    layer_options={"reset_gate": True, HEADS: 1}, call_options=("reset_gate", HEADS),
    cudnn_name=None, wide_state="hidden state", cudnn_mode=None, inner_bias_gate=1,
    title="MGU", long_name="a minimal gated unit (MGU)", eqx_cell=None,
    option_docs={"reset_gate": ("bool", "``True`` (default): the forget gate also multiplies "
                                        "``W_hn h + b_hn``, as Flax's ``nn.MGUCell``; "
                                        "``False``: ``n = tanh(W_in x + b_in + W_hn h + b_hn)``, "
                                        "as ``nn.MGUCell(reset_gate=False)``. The weights do "
                                        "not record it: set it to the Flax cell's."),
        HEADS: HEADS_DOC},
    formula=("Gates f, n, as Flax's ``nn.MGUCell``: ``f = sigmoid(W_if x + b_if + W_hf h + "
             "b_hf)``, ``n = tanh(W_in x + b_in + f * (W_hn h + b_hn))`` (with "
             "``reset_gate=False``: ``W_hn h + b_hn`` unscaled), ``h' = (1 - f) * n + f * h``."),
    flax_note=("Flax's MGUCell has a bias on ``if``, ``in`` and ``hn`` (its ``hf`` has none): "
               "``b_ih = [b_if, b_in]`` and ``b_hh = [0, b_hn]`` when reading, and ``b_hf`` is "
               "summed into the ``if`` bias when writing (rounded once, in the weights' "
               "dtype). These trees are those of ``nn.MGUCell(reset_gate=True)``, Flax's "
               "default; a ``reset_gate=False`` cell has no ``hn`` bias: give it a zero one "
               "(``{'bias': jnp.zeros(H)}``) to read it, and drop ``hn``'s bias after writing "
               "once it is zero (else fold it into ``in``'s first, as ``b_in + b_hn``). The "
               "default ``gate_fn`` (sigmoid) and ``activation_fn`` (tanh) are assumed: the "
               "parameters do not record them."))

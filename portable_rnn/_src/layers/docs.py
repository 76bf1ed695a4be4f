"""The recurrent layers' docstrings, written from each family's facts: the layer modules make
one class per registered family (`linen`, `nnx`, `equinox`, `keras`) and document it here."""

from __future__ import annotations

import textwrap

from ..recurrent.cell import Family

_DTYPE = """      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16."""
_INITS = """      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one."""
_SIZES = """      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated)."""
_IMPLEMENTATION = """      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there."""


def entries(fam: Family, names, typed: bool) -> str:
    """Google-style entries for the family's options `names` (``name (type): text``)."""
    out = []
    for name in names:
        kind, text = fam.option_docs.get(name, ("", "see the family's function."))
        first = f"{name} ({kind}): " if typed and kind else f"{name}: "
        out.append(textwrap.fill(first + text, 96, initial_indent="      ",
                                 subsequent_indent="        "))
    return "\n".join(out)


def _keyword_args(fam: Family, names) -> str:
    return f"\n\n    Keyword Args:\n{entries(fam, names, True)}" if names else ""


def _what(fam: Family) -> str:
    torch = f" (PyTorch ``{fam.torch_module}``)" if fam.torch_module else ""
    return f"multi-layer (bidirectional) {fam.display.split(' ', 1)[1]}{torch}"


def _carry(fam: Family) -> str:
    return "(h, c)" if len(fam.states) == 2 else "h" if len(fam.states) == 1 else \
        "(" + ", ".join(s.removesuffix("_0") for s in fam.states) + ")"


def linen_doc(fam: Family) -> str:
    G, cls = fam.gates, fam.class_name
    options = entries(fam, fam.layer_options, False)
    return f"""A {_what(fam)} over `portable_rnn.{fam.name}`.

    Parameters live per layer and direction, in PyTorch's layout (gates {fam.gate_names}):

        params["layer_1"]["reverse"]["W_hh"]   # ({G}H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat weight vector of `portable_rnn.{fam.name}` inside the call. The
    carry is ``{_carry(fam)}``.

    Attributes:
{_SIZES}
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype (with ``dtype=None`` the inputs'):
        bfloat16 inputs give bfloat16 outputs even with float32 params (Flax's own cells
        promote them to float32); integer and boolean inputs are cast to ``param_dtype`` first.
      param_dtype: parameter dtype.
{_IMPLEMENTATION}
{_INITS}{chr(10) + options if options else ''}

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.{cls}(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      ({G * 8}, 8)
      >>> y, carry = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 16), {[(4, 4, 8)] * len(fam.states)})
    """


def nnx_doc(fam: Family) -> str:
    cls = fam.class_name
    return f"""The NNX twin of `portable_rnn.linen.{cls}`: same call, same parameter tree.

    A {_what(fam)} over `portable_rnn.{fam.name}`. ``model.layer_1["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel ({fam.gates}H, H); the state's paths (``nnx.state(model,
    nnx.Param)``) equal the Linen params' paths. The carry is ``{_carry(fam)}``.

    Args:
      in_features: I, the size of the inputs' last axis.
{_SIZES}
      dropout: dropout rate between layers (not after the last), when not deterministic.
{_DTYPE}
      param_dtype: parameter dtype (default float32).
{_IMPLEMENTATION}
{_INITS}
      deterministic: keyword-only; the calls' default: True means no dropout. Default False,
        as ``nnx.Dropout``: ``model.eval()`` sets it to True, ``model.train()`` to False, and a
        call's ``deterministic=`` overrides it.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights; with
        ``dropout > 0`` and ``num_layers > 1`` the model keeps a fork of it and draws the
        dropout masks from its ``dropout`` stream.{_keyword_args(fam, fam.layer_options)}

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or ``rngs`` of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.{cls}(3, 8, num_layers=2, dropout=0.1, rngs=nnx.Rngs(0))
      >>> model.eval()  # no dropout from here on
      >>> y, carry = model(jnp.ones((4, 5, 3)), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), {[(2, 4, 8)] * len(fam.states)})
    """


def equinox_doc(fam: Family, options) -> str:
    cls = fam.class_name
    cells = (f" `from_eqx_cells` and `to_eqx_cells` convert from and to stacks of Equinox's "
             f"``eqx.nn.{fam.eqx_cell}``, which computes the same function."
             if fam.eqx_cell else " Equinox has no such cell to convert from.")
    if fam.eqx_cell and fam.inner_bias_gate is not None:
        gate = fam.gate_names.split(", ")[fam.inner_bias_gate]
        cells += (f" Its cell keeps fewer biases: ``bias`` on the input side, which holds "
                  f"``b_ih`` plus the recurrent biases that sum into it, and ``bias_n``, the "
                  f"recurrent bias of gate {gate}, apart. `from_eqx_cells` sets ``b_hh`` to "
                  f"``bias_n`` in gate {gate} alone and `to_eqx_cells` folds the other recurrent "
                  "biases into ``bias``: the function survives both ways, the split of the "
                  "summed biases does not.")
    return f"""A {_what(fam)} over `portable_rnn.{fam.name}`, as an ``eqx.Module``.

    The parameters are the field ``params``, per layer and direction in PyTorch's layout
    (gates {fam.gate_names}; two biases): ``model.params["layer_1"]["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel, ({fam.gates}H, H). Every other field is static but
    ``inference``. Replace, freeze or mask parameters as with any Equinox module
    (``eqx.tree_at``, ``eqx.partition``); they are initialised as PyTorch's, ``U(-1/sqrt(H),
    1/sqrt(H))``. The state is ``{_carry(fam)}``.{cells}

    Args:
      input_size: I, the size of the inputs' last axis.
{_SIZES}
      dropout: dropout rate between layers (not after the last), a static float; it runs
        when the call is not in inference mode, with the call's ``key``.
{_DTYPE}
      param_dtype: parameter dtype (default float32).
{_IMPLEMENTATION}
      return_state: if True, a call returns ``(outputs, state)``; else the outputs alone.
      inference: the calls' default: True means no dropout. Default False, as
        ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` sets it, and a call's
        ``inference=`` overrides it.
      key: keyword-only; the PRNG key that initialises the parameters.{_keyword_args(fam, options)}

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or key of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> from portable_rnn import equinox as preqx
      >>> model = preqx.{cls}(3, 8, 2, bidirectional=True, dropout=0.1, return_state=True,
      ... {' ' * (len(cls) + 15)}key=jax.random.key(0))
      >>> x = jnp.ones((4, 5, 3))                      # (B, T, I), batched natively
      >>> y, state = model(x, jnp.array([5, 3, 0, 1]), key=jax.random.key(1))
      >>> y.shape, [s.shape for s in jax.tree.leaves(state)]
      ((4, 5, 16), {[(4, 4, 8)] * len(fam.states)})
      >>> model = eqx.nn.inference_mode(model)         # no dropout, so no key
      >>> model(x[0])[0].shape                         # one sequence (T, I)
      (5, 16)
    """


def keras_doc(layer: str, families) -> str:
    names = ", ".join(f"`portable_rnn.{f.name}`" for f in families)
    claims = "; ".join(
        f"{', '.join(f'``{k}={v!r}``' for k, v in f.keras_config.items())} is "
        f"`portable_rnn.{f.name}`" for f in families if f.keras_config)
    variants = (f" Which function runs follows the layer's configuration: {claims}; a "
                "configuration no family claims runs the stock loop." if claims else "")
    activations = "; ".join(
        f"{f.name}: " + ", ".join(f"``{a}`` {' or '.join(v)}" for a, v in
                                  f.keras_activations.items()) for f in families)
    return f"""``keras.layers.{layer}``, computed by {names} on the JAX backend.

    The constructor, weights (``get_weights``/``set_weights``), config and saved ``.keras``
    files are those of ``keras.layers.{layer}``. On the JAX backend one portable_rnn call runs
    the whole sequence (the fused scan path, or a fused route where it serves the call and
    ``use_cudnn`` allows it).{variants} Masks of any pattern (a stable sort puts each row's
    valid steps first, and they run as ``seq_lengths``), ``go_backwards``, ``stateful``,
    ``return_sequences``/``return_state``, ``dropout`` and ``recurrent_dropout`` (Keras' masks,
    one per sequence or one per gate, the same at every step), ``use_bias=False`` and
    mixed-precision policies (16-bit compute with float32 accumulation and a float32 state) are
    supported; ``unroll`` is accepted and ignored. Other activations than those computed
    ({activations}) run the stock Keras loop; ``layer.decision`` says which ran and why.
    """


def cell_carry(fam: Family) -> str:
    """The step cell's carry, in its order (`Family.flax_carry`)."""
    names = [s.removesuffix("_0") for s in fam.states]
    order = fam.flax_carry or range(len(names))
    return names[0] if len(names) == 1 else "(" + ", ".join(names[i] for i in order) + ")"


def _cell_body(fam: Family) -> str:
    """The step cell's description: a summary line, then a paragraph (indented for a class
    docstring, the first line not)."""
    cls = fam.class_name
    flax = (" (Flax's order, as ``nn.LSTMCell``; the layer's carry is ``(h, c)``)"
            if fam.flax_carry else "")
    text = (f"Its parameters ``W_ih`` ({fam.gates}H, I), ``W_hh`` ({fam.gates}H, H), ``b_ih`` and "
            f"``b_hh`` are one direction of the layer's (``params[\"layer_0\"][\"forward\"]`` "
            f"of {fam.article} `{cls}` is a cell's params), and a step is the layer's call on "
            f"one step, on the route it takes. The carry is ``{cell_carry(fam)}``{flax}, each "
            "(*batch, size).")
    return (f"One step of `{cls}` (one layer, one direction) with the carry in and out.\n\n"
            f"    {fam.display[0].upper() + fam.display[1:]}, for Flax's loops (``nn.RNN``, "
            f"``nn.scan``, ``nn.Bidirectional``) and for streaming. " + text)


def _fill(text: str) -> str:
    """Each paragraph of `text` wrapped to 96 columns at the docstring's indent (4)."""
    head, _, rest = text.partition("\n\n    ")
    return head + "\n\n" + textwrap.fill(rest, 96, initial_indent="    ",
                                           subsequent_indent="    ")


def cell_doc(fam: Family) -> str:
    cls = fam.class_name
    options = entries(fam, fam.layer_options, False)
    return f"""{_fill(_cell_body(fam))}

    Attributes:
      features: H, the hidden size.
{_DTYPE}
      param_dtype: parameter dtype.
{_IMPLEMENTATION}
{_INITS.replace("each ``W_ih``", "``W_ih``").replace("each ``W_hh``", "``W_hh``")}
      carry_init: initialiser of the carry's states (`initialize_carry`); default zeros.{
        chr(10) + options if options else ''}

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import flax.linen as nn
      >>> from portable_rnn import linen
      >>> rnn = nn.RNN(linen.{cls}Cell(features=8), return_carry=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = rnn.init(jax.random.key(0), x)
      >>> carry, y = rnn.apply(variables, x)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), {[(4, 8)] * len(fam.states)})
    """


def nnx_cell_doc(fam: Family) -> str:
    cls = fam.class_name
    return f"""The NNX twin of `portable_rnn.linen.{cls}Cell`: same step, same parameters.

    {_fill(_cell_body(fam))}

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_features: H, the hidden size.
{_DTYPE}
      param_dtype: parameter dtype (default float32).
{_IMPLEMENTATION}
{_INITS.replace("each ``W_ih``", "``W_ih``").replace("each ``W_hh``", "``W_hh``")}
      carry_init: keyword-only, initialiser of the carry's states (`initialize_carry`); default
        zeros.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights, and
        `initialize_carry` draws from its ``carry`` stream where it is not given one.{
        _keyword_args(fam, fam.layer_options)}

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> cell = prnn.{cls}Cell(3, 8, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((4, 3))
      >>> carry = cell.initialize_carry(x.shape)
      >>> carry, y = cell(carry, x)
      >>> y.shape
      (4, 8)
    """

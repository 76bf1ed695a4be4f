# Written by `python -m portable_rnn._src.tools.stubs` from the live objects; do not edit.
# ruff: noqa: E501
"""Equinox layers: one per registered recurrent family (`LSTM`, `GRU` ...), each an
``eqx.Module`` over one call of the family's function (`portable_rnn.lstm`, `gru` ...).

``equinox.nn`` has single-step cells (``LSTMCell``, ``GRUCell``) that a model loops with
``lax.scan``: one direction, one layer, no lengths. These layers run every layer and direction
of a stacked, optionally bidirectional network in one call (the fused scan path with its
hand-written backward pass, or cuDNN where it serves the call), with ragged ``seq_lengths``,
dropout between layers, an initial state and the final state.

They are pytrees of their parameters and hold no framework state: ``eqx.filter_jit``,
``eqx.filter_grad``, ``eqx.tree_at``, ``eqx.nn.inference_mode`` and
``eqx.tree_serialise_leaves`` work on them as on any Equinox module. Inputs are batch-first
with any number of leading batch dims, none included: ``x`` (T, I) is one sequence and
``jax.vmap`` over such calls works too.

Importing this module imports Equinox (the ``equinox`` extra); ``import portable_rnn`` does not.
"""

from collections.abc import Mapping
from typing import Any, Literal

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

class _Recurrent(eqx.Module):
    """What every family's layer shares: fields, construction, the call, converters.

    A subclass (`_layer` makes one per registered family) sets ``_FAMILY`` and declares its own
    static fields (the family's ``layer_options`` but the initialisers), which arrive at
    ``__init__`` as keyword options.
    """

    params: dict[str, dict[str, dict[str, Array]]]
    input_size: int
    hidden_size: int
    num_layers: int
    bidirectional: bool
    dropout: float
    dtype: Any
    param_dtype: Any
    precision: Any
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None
    return_state: bool
    inference: bool

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        return_state: bool = False,
        inference: bool = False,
        *,
        key: PRNGKeyArray,
        **options,
    ) -> None: ...

    def __call__(
        self,
        x: Array,
        seq_lengths: Array | None = None,
        state=None,
        *,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ):
        """Runs every layer and direction over the sequences.

        Shapes: ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers, ``D``
        directions, ``S`` the output size per direction (``proj_size`` for a projected LSTM,
        else ``H``); ``...`` any leading batch dims, none included.

        Args:
          x: (..., T, I), batch-first.
          seq_lengths: (...,) valid lengths (any integer dtype, 0 allowed), or None for all T.
          state: the initial state: LSTM ``(h, c)`` with h (L*D, ..., S) and c (L*D, ..., H);
            SLSTM ``(h, c, n, m)``, each (L*D, ..., H); the other families' ``h`` (L*D, ...,
            H). Zeros by default: the LSTM's and SLSTM's h in the computation dtype and their
            other states, like the one-state families' h, in float32 for a 16-bit computation
            dtype (else in the computation dtype).
          key: keyword-only; a PRNG key for the dropout between layers, needed when it runs
            (``dropout > 0``, ``num_layers > 1``, not inference) and ignored otherwise.
          inference: keyword-only; True: no dropout; None (default): the layer's
            ``inference`` field (which ``eqx.nn.inference_mode`` sets), as
            ``eqx.nn.Dropout``.

        Returns:
          The outputs (..., T, D*S) in the computation dtype (``dtype``, or with ``dtype=None``
          the inputs'), zero past each length; with ``return_state=True``, ``(outputs,
          state)``: the final state in the form and dtypes of ``state``, taken at each
          sequence's last valid step (the initial state for a length of 0).

        Raises:
          ValueError, TypeError: for inputs of the wrong shape, dtype or value, or dropout
            without a ``key``; the message names the argument, what was expected and what was
            given.
        """

    @classmethod
    def from_torch(
        cls,
        state_dict: Mapping[str, Any],
        *,
        prefix: str = "",
        key: PRNGKeyArray | None = None,
        **kwargs,
    ):
        """A layer with the sizes and weights of a state_dict of the family's PyTorch module
        (``nn.LSTM`` for `LSTM`, ``proj_size`` included; pass the options a state_dict does not
        store, such as a ``nn.RNN``'s ``nonlinearity``; tensors or arrays; `prefix` selects a
        submodule's keys).
        `kwargs` are further constructor arguments; `key` is unused but by the constructor's
        initialisation, which the loaded weights replace.
        """

    def to_torch_state_dict(self, *, prefix: str = "") -> dict:
        """A state_dict of the family's PyTorch module (NumPy arrays) of these weights, in
        PyTorch's key order.
        """

class ClassicGRU(_Recurrent):
    """A multi-layer (bidirectional) classic GRU (reset gate before the recurrent product) over `portable_rnn.classic_gru`, as an ``eqx.Module``.

    The parameters are the field ``params``, per layer and direction in PyTorch's layout
    (gates z, r, h; two biases): ``model.params["layer_1"]["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel, (3H, H). Every other field is static but
    ``inference``. Replace, freeze or mask parameters as with any Equinox module
    (``eqx.tree_at``, ``eqx.partition``); they are initialised as PyTorch's, ``U(-1/sqrt(H),
    1/sqrt(H))``. The state is ``h``. Equinox has no such cell to convert from.

    Args:
      input_size: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), a static float; it runs
        when the call is not in inference mode, with the call's ``key``.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      return_state: if True, a call returns ``(outputs, state)``; else the outputs alone.
      inference: the calls' default: True means no dropout. Default False, as
        ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` sets it, and a call's
        ``inference=`` overrides it.
      key: keyword-only; the PRNG key that initialises the parameters.

    Keyword Args:
      num_heads (int): must be 1: the classic GRU's step computes its own recurrent products and
        has no heads.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or key of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> from portable_rnn import equinox as preqx
      >>> model = preqx.ClassicGRU(3, 8, 2, bidirectional=True, dropout=0.1, return_state=True,
      ...                          key=jax.random.key(0))
      >>> x = jnp.ones((4, 5, 3))                      # (B, T, I), batched natively
      >>> y, state = model(x, jnp.array([5, 3, 0, 1]), key=jax.random.key(1))
      >>> y.shape, [s.shape for s in jax.tree.leaves(state)]
      ((4, 5, 16), [(4, 4, 8)])
      >>> model = eqx.nn.inference_mode(model)         # no dropout, so no key
      >>> model(x[0])[0].shape                         # one sequence (T, I)
      (5, 16)
    """

    num_heads: int

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        return_state: bool = False,
        inference: bool = False,
        *,
        key: PRNGKeyArray,
        num_heads: int = 1,
    ) -> None: ...

class _CellStack(_Recurrent):
    """Conversion from and to stacks of Equinox's single-step cells (the family's
    `Family.eqx_cell`).
    """

    @classmethod
    def from_eqx_cells(cls, cells, *, key: PRNGKeyArray | None = None, **kwargs):
        """A layer computing what a stack of Equinox cells computes when looped over time.

        Args:
          cells: one cell (one layer, one direction), or a sequence with one entry per layer,
            each a cell or a pair ``(forward, reverse)`` of cells (bidirectional: every layer
            a pair; the reverse cell reads the sequence backwards, and each layer past the
            first reads the concatenated outputs of both). Cells without biases
            (``use_bias=False``) give zero biases.
          key: unused but by the constructor's initialisation, which the cells' weights
            replace.
          **kwargs: further constructor arguments (``dropout``, ``dtype``, ...).

        Returns:
          The layer, its parameters in ``param_dtype`` (float32 unless given).

        Raises:
          TypeError, ValueError: for cells of another type, or of sizes that do not stack.
        """

    def to_eqx_cells(self) -> list:
        """The stack of Equinox cells that computes what this layer computes (no lengths, no
        dropout: a cell has neither), in the form `from_eqx_cells` reads: one entry per layer,
        a cell or, bidirectional, a ``(forward, reverse)`` pair. Each cell has biases and this
        layer's ``param_dtype``. With heads (``num_heads > 1``), each cell's ``weight_hh`` is
        the dense block-diagonal matrix the heads compute (`from_eqx_cells` reads it back as a
        layer without heads, computing the same function).

        Raises:
          ValueError: for a projected LSTM (``proj_size > 0``): Equinox's cell has no
            projection.
        """

class GRU(_CellStack):
    """A multi-layer (bidirectional) GRU (PyTorch ``nn.GRU``) over `portable_rnn.gru`, as an ``eqx.Module``.

    The parameters are the field ``params``, per layer and direction in PyTorch's layout
    (gates r, z, n; two biases): ``model.params["layer_1"]["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel, (3H, H). Every other field is static but
    ``inference``. Replace, freeze or mask parameters as with any Equinox module
    (``eqx.tree_at``, ``eqx.partition``); they are initialised as PyTorch's, ``U(-1/sqrt(H),
    1/sqrt(H))``. The state is ``h``. `from_eqx_cells` and `to_eqx_cells` convert from and to stacks of Equinox's ``eqx.nn.GRUCell``, which computes the same function. Its cell keeps fewer biases: ``bias`` on the input side, which holds ``b_ih`` plus the recurrent biases that sum into it, and ``bias_n``, the recurrent bias of gate n, apart. `from_eqx_cells` sets ``b_hh`` to ``bias_n`` in gate n alone and `to_eqx_cells` folds the other recurrent biases into ``bias``: the function survives both ways, the split of the summed biases does not.

    Args:
      input_size: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), a static float; it runs
        when the call is not in inference mode, with the call's ``key``.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      return_state: if True, a call returns ``(outputs, state)``; else the outputs alone.
      inference: the calls' default: True means no dropout. Default False, as
        ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` sets it, and a call's
        ``inference=`` overrides it.
      key: keyword-only; the PRNG key that initialises the parameters.

    Keyword Args:
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or key of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> from portable_rnn import equinox as preqx
      >>> model = preqx.GRU(3, 8, 2, bidirectional=True, dropout=0.1, return_state=True,
      ...                   key=jax.random.key(0))
      >>> x = jnp.ones((4, 5, 3))                      # (B, T, I), batched natively
      >>> y, state = model(x, jnp.array([5, 3, 0, 1]), key=jax.random.key(1))
      >>> y.shape, [s.shape for s in jax.tree.leaves(state)]
      ((4, 5, 16), [(4, 4, 8)])
      >>> model = eqx.nn.inference_mode(model)         # no dropout, so no key
      >>> model(x[0])[0].shape                         # one sequence (T, I)
      (5, 16)
    """

    num_heads: int

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        return_state: bool = False,
        inference: bool = False,
        *,
        key: PRNGKeyArray,
        num_heads: int = 1,
    ) -> None: ...

class LSTM(_CellStack):
    """A multi-layer (bidirectional) LSTM (PyTorch ``nn.LSTM``) over `portable_rnn.lstm`, as an ``eqx.Module``.

    The parameters are the field ``params``, per layer and direction in PyTorch's layout
    (gates i, f, g, o; two biases): ``model.params["layer_1"]["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel, (4H, H). Every other field is static but
    ``inference``. Replace, freeze or mask parameters as with any Equinox module
    (``eqx.tree_at``, ``eqx.partition``); they are initialised as PyTorch's, ``U(-1/sqrt(H),
    1/sqrt(H))``. The state is ``(h, c)``. `from_eqx_cells` and `to_eqx_cells` convert from and to stacks of Equinox's ``eqx.nn.LSTMCell``, which computes the same function.

    Args:
      input_size: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), a static float; it runs
        when the call is not in inference mode, with the call's ``key``.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      return_state: if True, a call returns ``(outputs, state)``; else the outputs alone.
      inference: the calls' default: True means no dropout. Default False, as
        ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` sets it, and a call's
        ``inference=`` overrides it.
      key: keyword-only; the PRNG key that initialises the parameters.

    Keyword Args:
      proj_size (int): ``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` (P, H)
        per layer and direction, as ``torch.nn.LSTM(proj_size=P)``: outputs have D*P features,
        ``h`` is (L*D, ..., P) and ``W_hh`` (4H, P); the cuDNN call has no projection, so such
        calls run the scan path. Default 0: no projection.
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or key of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> from portable_rnn import equinox as preqx
      >>> model = preqx.LSTM(3, 8, 2, bidirectional=True, dropout=0.1, return_state=True,
      ...                    key=jax.random.key(0))
      >>> x = jnp.ones((4, 5, 3))                      # (B, T, I), batched natively
      >>> y, state = model(x, jnp.array([5, 3, 0, 1]), key=jax.random.key(1))
      >>> y.shape, [s.shape for s in jax.tree.leaves(state)]
      ((4, 5, 16), [(4, 4, 8), (4, 4, 8)])
      >>> model = eqx.nn.inference_mode(model)         # no dropout, so no key
      >>> model(x[0])[0].shape                         # one sequence (T, I)
      (5, 16)
    """

    proj_size: int
    num_heads: int

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        return_state: bool = False,
        inference: bool = False,
        *,
        key: PRNGKeyArray,
        proj_size: int = 0,
        num_heads: int = 1,
    ) -> None: ...

class MGU(_Recurrent):
    """A multi-layer (bidirectional) minimal gated unit (MGU) over `portable_rnn.mgu`, as an ``eqx.Module``.

    The parameters are the field ``params``, per layer and direction in PyTorch's layout
    (gates f, n; two biases): ``model.params["layer_1"]["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel, (2H, H). Every other field is static but
    ``inference``. Replace, freeze or mask parameters as with any Equinox module
    (``eqx.tree_at``, ``eqx.partition``); they are initialised as PyTorch's, ``U(-1/sqrt(H),
    1/sqrt(H))``. The state is ``h``. Equinox has no such cell to convert from.

    Args:
      input_size: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), a static float; it runs
        when the call is not in inference mode, with the call's ``key``.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      return_state: if True, a call returns ``(outputs, state)``; else the outputs alone.
      inference: the calls' default: True means no dropout. Default False, as
        ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` sets it, and a call's
        ``inference=`` overrides it.
      key: keyword-only; the PRNG key that initialises the parameters.

    Keyword Args:
      reset_gate (bool): ``True`` (default): the forget gate also multiplies ``W_hn h + b_hn``,
        as Flax's ``nn.MGUCell``; ``False``: ``n = tanh(W_in x + b_in + W_hn h + b_hn)``, as
        ``nn.MGUCell(reset_gate=False)``. The weights do not record it: set it to the Flax
        cell's.
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or key of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> from portable_rnn import equinox as preqx
      >>> model = preqx.MGU(3, 8, 2, bidirectional=True, dropout=0.1, return_state=True,
      ...                   key=jax.random.key(0))
      >>> x = jnp.ones((4, 5, 3))                      # (B, T, I), batched natively
      >>> y, state = model(x, jnp.array([5, 3, 0, 1]), key=jax.random.key(1))
      >>> y.shape, [s.shape for s in jax.tree.leaves(state)]
      ((4, 5, 16), [(4, 4, 8)])
      >>> model = eqx.nn.inference_mode(model)         # no dropout, so no key
      >>> model(x[0])[0].shape                         # one sequence (T, I)
      (5, 16)
    """

    reset_gate: bool
    num_heads: int

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        return_state: bool = False,
        inference: bool = False,
        *,
        key: PRNGKeyArray,
        reset_gate: bool = True,
        num_heads: int = 1,
    ) -> None: ...

class SLSTM(_Recurrent):
    """A multi-layer (bidirectional) sLSTM (xLSTM's scalar LSTM with exponential gating) over `portable_rnn.slstm`, as an ``eqx.Module``.

    The parameters are the field ``params``, per layer and direction in PyTorch's layout
    (gates i, f, z, o; two biases): ``model.params["layer_1"]["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel, (4H, H). Every other field is static but
    ``inference``. Replace, freeze or mask parameters as with any Equinox module
    (``eqx.tree_at``, ``eqx.partition``); they are initialised as PyTorch's, ``U(-1/sqrt(H),
    1/sqrt(H))``. The state is ``(h, c, n, m)``. Equinox has no such cell to convert from.

    Args:
      input_size: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), a static float; it runs
        when the call is not in inference mode, with the call's ``key``.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      return_state: if True, a call returns ``(outputs, state)``; else the outputs alone.
      inference: the calls' default: True means no dropout. Default False, as
        ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` sets it, and a call's
        ``inference=`` overrides it.
      key: keyword-only; the PRNG key that initialises the parameters.

    Keyword Args:
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or key of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> from portable_rnn import equinox as preqx
      >>> model = preqx.SLSTM(3, 8, 2, bidirectional=True, dropout=0.1, return_state=True,
      ...                     key=jax.random.key(0))
      >>> x = jnp.ones((4, 5, 3))                      # (B, T, I), batched natively
      >>> y, state = model(x, jnp.array([5, 3, 0, 1]), key=jax.random.key(1))
      >>> y.shape, [s.shape for s in jax.tree.leaves(state)]
      ((4, 5, 16), [(4, 4, 8), (4, 4, 8), (4, 4, 8), (4, 4, 8)])
      >>> model = eqx.nn.inference_mode(model)         # no dropout, so no key
      >>> model(x[0])[0].shape                         # one sequence (T, I)
      (5, 16)
    """

    num_heads: int

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        return_state: bool = False,
        inference: bool = False,
        *,
        key: PRNGKeyArray,
        num_heads: int = 1,
    ) -> None: ...

class SimpleRNN(_Recurrent):
    """A multi-layer (bidirectional) Elman RNN (PyTorch ``nn.RNN``) over `portable_rnn.simple_rnn`, as an ``eqx.Module``.

    The parameters are the field ``params``, per layer and direction in PyTorch's layout
    (gates a single block; two biases): ``model.params["layer_1"]["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel, (1H, H). Every other field is static but
    ``inference``. Replace, freeze or mask parameters as with any Equinox module
    (``eqx.tree_at``, ``eqx.partition``); they are initialised as PyTorch's, ``U(-1/sqrt(H),
    1/sqrt(H))``. The state is ``h``. Equinox has no such cell to convert from.

    Args:
      input_size: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), a static float; it runs
        when the call is not in inference mode, with the call's ``key``.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      return_state: if True, a call returns ``(outputs, state)``; else the outputs alone.
      inference: the calls' default: True means no dropout. Default False, as
        ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` sets it, and a call's
        ``inference=`` overrides it.
      key: keyword-only; the PRNG key that initialises the parameters.

    Keyword Args:
      nonlinearity (str): ``"tanh"`` (default) or ``"relu"``, as PyTorch's ``nn.RNN``. A PyTorch
        state_dict does not store it: set it to the ``nn.RNN``'s.
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or key of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> from portable_rnn import equinox as preqx
      >>> model = preqx.SimpleRNN(3, 8, 2, bidirectional=True, dropout=0.1, return_state=True,
      ...                         key=jax.random.key(0))
      >>> x = jnp.ones((4, 5, 3))                      # (B, T, I), batched natively
      >>> y, state = model(x, jnp.array([5, 3, 0, 1]), key=jax.random.key(1))
      >>> y.shape, [s.shape for s in jax.tree.leaves(state)]
      ((4, 5, 16), [(4, 4, 8)])
      >>> model = eqx.nn.inference_mode(model)         # no dropout, so no key
      >>> model(x[0])[0].shape                         # one sequence (T, I)
      (5, 16)
    """

    nonlinearity: str
    num_heads: int

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        return_state: bool = False,
        inference: bool = False,
        *,
        key: PRNGKeyArray,
        nonlinearity: str = "tanh",
        num_heads: int = 1,
    ) -> None: ...

__all__ = ["ClassicGRU", "GRU", "LSTM", "MGU", "SLSTM", "SimpleRNN"]

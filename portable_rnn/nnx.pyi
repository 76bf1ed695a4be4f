# Written by `python -m portable_rnn._src.tools.stubs` from the live objects; do not edit.
# ruff: noqa: E501
"""Flax NNX layers: one per registered recurrent family (`LSTM`, `GRU` ..., as the
`portable_rnn` functions), and `attention_fn` (for `nnx.MultiHeadAttention`).
"""

from collections.abc import Callable, Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax
from jax.typing import ArrayLike, DTypeLike

def attention_fn(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    bias: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: jax.Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: DTypeLike | None = None,
    precision: lax.PrecisionLike | None = None,
    module=None,
    force_fp32_for_softmax: bool = False,
    is_causal: bool = False,
    einsum_dot_general=None,
    qk_attn_weights_einsum=None,
    attn_weights_value_einsum=None,
    *,
    implementation: Literal["cudnn", "splash", "flash", "chunked", "xla"] | None = None,
    query_segment_ids: ArrayLike | None = None,
    key_value_segment_ids: ArrayLike | None = None,
    segment_ids: ArrayLike | None = None,
    logits_soft_cap: float | None = None,
    causal_alignment: Literal['top_left', 'bottom_right'] = "top_left",
    **unused,
) -> jax.Array:
    """`portable_rnn.dot_product_attention` with the signature of Flax's ``attention_fn``.

    Pass it as ``attention_fn=`` to ``flax.linen.MultiHeadDotProductAttention`` or
    ``flax.nnx.MultiHeadAttention``. It takes every keyword those modules pass. Inputs are
    (*batch, T, N, H) with any number of batch dims; `mask` and `bias` broadcast to
    (*batch, N, T, S). Attention dropout (Flax's mask shapes and RNG use, so results match Flax's
    own attention for the same key) runs on the dense path: the routing decides it, and every
    other route rejects such a call, saying why.
    Use ``functools.partial(attention_fn, implementation="chunked")`` to choose a path, and
    likewise to pass what Flax's modules do not: `query_segment_ids` (*batch, T) and
    `key_value_segment_ids` (*batch, S), or `segment_ids` (*batch, T) for self-attention (packed
    sequences: a query sees only keys of its own segment), `logits_soft_cap` and
    `causal_alignment`, as `portable_rnn.dot_product_attention` takes them (the sown weights
    follow them too).

    Differences from Flax's default ``dot_product_attention`` (docs/layers.md lists them too):

    - a query with no visible key gives 0 (Flax: the average of all values);
    - softmax always runs in float32 for 16-bit inputs (`force_fp32_for_softmax` is always on
      for the output), and the logits are scaled after the product, not the query before it;
    - with a `module` (``sow_weights=True``) the weights are sown as Flax sows them
      (``intermediates``/``attention_weights``, (*batch, N, T, S), Flax's dtype and
      `force_fp32_for_softmax`, before dropout), from a separate O(T*S) pass of Flax's math, as
      in Flax; the output still comes from the routed path (the chunked, cuDNN and splash
      routes never hold the weights). A query with no visible key sows Flax's uniform row.
      Without a `module` no such pass runs;
    - `precision` applies to both products, forward and backward, as Flax's einsums take it;
      cuDNN serves the call only where it computes what the precision asks;
    - the einsum hooks `einsum_dot_general`, `qk_attn_weights_einsum` and
      `attn_weights_value_einsum` (e.g. quantized einsums) raise: the fused paths have no
      einsum to replace;
    - `dtype` None: the inputs' common dtype, as Flax's ``promote_dtype``; complex inputs run
      on the dense path with the complex softmax, as Flax's, and are differentiable (Flax's
      own complex attention is not on jax 0.12).
    """

class _Recurrent(nnx.Module):
    """What every family's layer shares: construction, the call and the loaders.

    A subclass (`_layer` makes one per registered family) sets ``_FAMILY``; its own keyword
    options (the family's ``layer_options``) arrive as ``**options``, are checked by name, and
    become attributes.
    """

    in_features: int
    hidden_size: int
    num_layers: int
    bidirectional: bool
    dropout: float
    dtype: Any
    param_dtype: Any
    precision: Any
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None
    deterministic: bool
    rngs: Any

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        *,
        deterministic: bool = False,
        rngs: nnx.Rngs,
        **options,
    ) -> None: ...

    def set_view(self, deterministic: bool | None = None):
        """Used by ``nnx.view(model, deterministic=...)``, as for ``nnx.Dropout``.

        Args:
          deterministic: if True, no dropout between layers.
        """

    def params_tree(self):
        """The parameters as plain arrays, in the tree the Linen layer uses."""

    def load_params(self, tree):
        """Sets the parameters from a tree (e.g. Linen ``variables["params"]``); returns self."""

    def to_torch_state_dict(self, *, prefix: str = ""):
        """A state_dict of the family's PyTorch module (NumPy arrays) of this model's
        weights.
        """

    def __call__(
        self,
        inputs: ArrayLike,
        seq_lengths: ArrayLike | None = None,
        initial_carry=None,
        *,
        deterministic: bool | None = None,
        return_carry: bool = False,
    ):
        """Runs the layer, as the Linen layer's call.

        Shapes: ``T`` time, ``I`` input size (``in_features``), ``H`` hidden size, ``L``
        layers, ``D`` directions, ``S`` the output size per direction (``proj_size`` for a
        projected LSTM, else ``H``).

        Args:
          inputs: (..., T, I): any leading batch dims.
          seq_lengths: (...,) valid lengths (any integer dtype), or None for all T.
          initial_carry: as the Linen layer's: ``h``, or the family's tuple of states (the
            LSTM's ``(h, c)``, the SLSTM's ``(h, c, n, m)``); zeros by default, the wide states
            in float32 for a 16-bit computation dtype.
          deterministic: True: no dropout; False: dropout between layers, drawn from the
            ``dropout`` stream of the `nnx.Rngs` given at construction; None (default): the
            model's ``deterministic`` attribute (``model.eval()`` sets it to True,
            ``model.train()`` to False).
          return_carry: also return the final carry, in the form and dtypes of
            ``initial_carry``.

        Returns:
          Outputs (..., T, D*S) in the computation dtype (``dtype``, or with ``dtype=None`` the
          inputs'), zero past each length; with ``return_carry``, ``(outputs, carry)``.

        Raises:
          ValueError, TypeError: for inputs of the wrong shape, dtype or value; the message
            names the argument, what was expected and what was given.
        """

    @classmethod
    def from_torch(
        cls,
        state_dict: Mapping[str, Any],
        *,
        prefix: str = "",
        rngs: nnx.Rngs | None = None,
        **kwargs,
    ):
        """A model with the weights and sizes of a state_dict of the family's PyTorch module
        (``nn.LSTM`` for `LSTM`, ``proj_size`` included; pass the options a state_dict does
        not store, such as a ``nn.RNN``'s ``nonlinearity``); `kwargs` are further constructor
        arguments.
        """

    @classmethod
    def from_flax(
        cls,
        flax_params: Any,
        *,
        shared_cell: bool | None = None,
        rngs: nnx.Rngs | None = None,
        **kwargs,
    ):
        """A model with the weights and sizes of Flax ``nn.RNN`` params of the matching cell
        (one layer, an ``nn.Bidirectional`` tree, or a sequence of layers). An
        ``nn.Bidirectional`` whose two RNNs share one cell is stored once, under
        ``'forward_rnn'``: read as shared by default; ``shared_cell=True`` or ``False`` states
        which it must be.
        """

class ClassicGRU(_Recurrent):
    """The NNX twin of `portable_rnn.linen.ClassicGRU`: same call, same parameter tree.

    A multi-layer (bidirectional) classic GRU (reset gate before the recurrent product) over `portable_rnn.classic_gru`. ``model.layer_1["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel (3H, H); the state's paths (``nnx.state(model,
    nnx.Param)``) equal the Linen params' paths. The carry is ``h``.

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), when not deterministic.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      deterministic: keyword-only; the calls' default: True means no dropout. Default False,
        as ``nnx.Dropout``: ``model.eval()`` sets it to True, ``model.train()`` to False, and a
        call's ``deterministic=`` overrides it.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights; with
        ``dropout > 0`` and ``num_layers > 1`` the model keeps a fork of it and draws the
        dropout masks from its ``dropout`` stream.

    Keyword Args:
      num_heads (int): must be 1: the classic GRU's step computes its own recurrent products and
        has no heads.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or ``rngs`` of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.ClassicGRU(3, 8, num_layers=2, dropout=0.1, rngs=nnx.Rngs(0))
      >>> model.eval()  # no dropout from here on
      >>> y, carry = model(jnp.ones((4, 5, 3)), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(2, 4, 8)])
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        *,
        deterministic: bool = False,
        rngs: nnx.Rngs,
        num_heads: int = 1,
    ) -> None: ...

class GRU(_Recurrent):
    """The NNX twin of `portable_rnn.linen.GRU`: same call, same parameter tree.

    A multi-layer (bidirectional) GRU (PyTorch ``nn.GRU``) over `portable_rnn.gru`. ``model.layer_1["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel (3H, H); the state's paths (``nnx.state(model,
    nnx.Param)``) equal the Linen params' paths. The carry is ``h``.

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), when not deterministic.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      deterministic: keyword-only; the calls' default: True means no dropout. Default False,
        as ``nnx.Dropout``: ``model.eval()`` sets it to True, ``model.train()`` to False, and a
        call's ``deterministic=`` overrides it.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights; with
        ``dropout > 0`` and ``num_layers > 1`` the model keeps a fork of it and draws the
        dropout masks from its ``dropout`` stream.

    Keyword Args:
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or ``rngs`` of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.GRU(3, 8, num_layers=2, dropout=0.1, rngs=nnx.Rngs(0))
      >>> model.eval()  # no dropout from here on
      >>> y, carry = model(jnp.ones((4, 5, 3)), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(2, 4, 8)])
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        *,
        deterministic: bool = False,
        rngs: nnx.Rngs,
        num_heads: int = 1,
    ) -> None: ...

class LSTM(_Recurrent):
    """The NNX twin of `portable_rnn.linen.LSTM`: same call, same parameter tree.

    A multi-layer (bidirectional) LSTM (PyTorch ``nn.LSTM``) over `portable_rnn.lstm`. ``model.layer_1["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel (4H, H); the state's paths (``nnx.state(model,
    nnx.Param)``) equal the Linen params' paths. The carry is ``(h, c)``.

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), when not deterministic.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      deterministic: keyword-only; the calls' default: True means no dropout. Default False,
        as ``nnx.Dropout``: ``model.eval()`` sets it to True, ``model.train()`` to False, and a
        call's ``deterministic=`` overrides it.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights; with
        ``dropout > 0`` and ``num_layers > 1`` the model keeps a fork of it and draws the
        dropout masks from its ``dropout`` stream.

    Keyword Args:
      proj_size (int): ``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` (P, H)
        per layer and direction, as ``torch.nn.LSTM(proj_size=P)``: outputs have D*P features,
        ``h`` is (L*D, ..., P) and ``W_hh`` (4H, P); the cuDNN call has no projection, so such
        calls run the scan path. Default 0: no projection.
      projection_init (Callable | None): initialiser of each ``W_hr``; default the same uniform
        one as the other weights.
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or ``rngs`` of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.LSTM(3, 8, num_layers=2, dropout=0.1, rngs=nnx.Rngs(0))
      >>> model.eval()  # no dropout from here on
      >>> y, carry = model(jnp.ones((4, 5, 3)), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(2, 4, 8), (2, 4, 8)])
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        *,
        deterministic: bool = False,
        rngs: nnx.Rngs,
        proj_size: int = 0,
        projection_init: Callable | None = None,
        num_heads: int = 1,
    ) -> None: ...

class MGU(_Recurrent):
    """The NNX twin of `portable_rnn.linen.MGU`: same call, same parameter tree.

    A multi-layer (bidirectional) minimal gated unit (MGU) over `portable_rnn.mgu`. ``model.layer_1["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel (2H, H); the state's paths (``nnx.state(model,
    nnx.Param)``) equal the Linen params' paths. The carry is ``h``.

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), when not deterministic.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      deterministic: keyword-only; the calls' default: True means no dropout. Default False,
        as ``nnx.Dropout``: ``model.eval()`` sets it to True, ``model.train()`` to False, and a
        call's ``deterministic=`` overrides it.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights; with
        ``dropout > 0`` and ``num_layers > 1`` the model keeps a fork of it and draws the
        dropout masks from its ``dropout`` stream.

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
      ValueError, TypeError: for a size, rate, dtype, option or ``rngs`` of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.MGU(3, 8, num_layers=2, dropout=0.1, rngs=nnx.Rngs(0))
      >>> model.eval()  # no dropout from here on
      >>> y, carry = model(jnp.ones((4, 5, 3)), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(2, 4, 8)])
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        *,
        deterministic: bool = False,
        rngs: nnx.Rngs,
        reset_gate: bool = True,
        num_heads: int = 1,
    ) -> None: ...

class SLSTM(_Recurrent):
    """The NNX twin of `portable_rnn.linen.SLSTM`: same call, same parameter tree.

    A multi-layer (bidirectional) sLSTM (xLSTM's scalar LSTM with exponential gating) over `portable_rnn.slstm`. ``model.layer_1["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel (4H, H); the state's paths (``nnx.state(model,
    nnx.Param)``) equal the Linen params' paths. The carry is ``(h, c, n, m)``.

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), when not deterministic.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      deterministic: keyword-only; the calls' default: True means no dropout. Default False,
        as ``nnx.Dropout``: ``model.eval()`` sets it to True, ``model.train()`` to False, and a
        call's ``deterministic=`` overrides it.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights; with
        ``dropout > 0`` and ``num_layers > 1`` the model keeps a fork of it and draws the
        dropout masks from its ``dropout`` stream.

    Keyword Args:
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Raises:
      ValueError, TypeError: for a size, rate, dtype, option or ``rngs`` of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.SLSTM(3, 8, num_layers=2, dropout=0.1, rngs=nnx.Rngs(0))
      >>> model.eval()  # no dropout from here on
      >>> y, carry = model(jnp.ones((4, 5, 3)), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(2, 4, 8), (2, 4, 8), (2, 4, 8), (2, 4, 8)])
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        *,
        deterministic: bool = False,
        rngs: nnx.Rngs,
        num_heads: int = 1,
    ) -> None: ...

class SimpleRNN(_Recurrent):
    """The NNX twin of `portable_rnn.linen.SimpleRNN`: same call, same parameter tree.

    A multi-layer (bidirectional) Elman RNN (PyTorch ``nn.RNN``) over `portable_rnn.simple_rnn`. ``model.layer_1["reverse"]["W_hh"]`` is layer
    1's reverse recurrent kernel (1H, H); the state's paths (``nnx.state(model,
    nnx.Param)``) equal the Linen params' paths. The carry is ``h``.

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), when not deterministic.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      deterministic: keyword-only; the calls' default: True means no dropout. Default False,
        as ``nnx.Dropout``: ``model.eval()`` sets it to True, ``model.train()`` to False, and a
        call's ``deterministic=`` overrides it.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights; with
        ``dropout > 0`` and ``num_layers > 1`` the model keeps a fork of it and draws the
        dropout masks from its ``dropout`` stream.

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
      ValueError, TypeError: for a size, rate, dtype, option or ``rngs`` of the wrong type or
        value; the message names the argument, what was expected and what was given.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> model = prnn.SimpleRNN(3, 8, num_layers=2, dropout=0.1, rngs=nnx.Rngs(0))
      >>> model.eval()  # no dropout from here on
      >>> y, carry = model(jnp.ones((4, 5, 3)), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(2, 4, 8)])
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        *,
        deterministic: bool = False,
        rngs: nnx.Rngs,
        nonlinearity: str = "tanh",
        num_heads: int = 1,
    ) -> None: ...

class _Cell(nnx.Module):
    """What every family's step cell shares (the NNX twin of `portable_rnn.linen`'s): one step
    of the family's one-layer model, the carry in and out, for ``nnx.RNN``, ``nnx.scan`` and
    streaming (`_cells` makes one per registered family, ``<Layer>Cell``).
    """

    in_features: int
    features: int
    dtype: Any
    param_dtype: Any
    precision: Any
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None
    carry_init: Callable | None
    rngs: nnx.Rngs

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        carry_init: Callable | None = None,
        rngs: nnx.Rngs,
        **options,
    ) -> None: ...

    @property
    def hidden_features(self) -> int: ...

    def __call__(self, carry, inputs: ArrayLike):
        """One step: ``(carry, output)`` from the states (`initialize_carry`'s, each (*batch,
        size)) and `inputs` (*batch, I); the output (*batch, S) is the new ``h``.
        """

    def initialize_carry(
        self,
        input_shape,
        rngs: nnx.Rngs | None = None,
        carry_init: Callable | None = None,
    ):
        """The initial carry for inputs of shape `input_shape` (*batch, I), by `carry_init`
        (else the cell's, else zeros; drawing from the ``carry`` stream of `rngs`, else of the
        cell's), in the dtypes of the layer's default carry.
        """

    @property
    def num_feature_axes(self) -> int: ...

class ClassicGRUCell(_Cell):
    """The NNX twin of `portable_rnn.linen.ClassicGRUCell`: same step, same parameters.

    One step of `ClassicGRU` (one layer, one direction) with the carry in and out.

    A classic GRU (reset gate before the recurrent product), for Flax's loops (``nn.RNN``,
    ``nn.scan``, ``nn.Bidirectional``) and for streaming. Its parameters ``W_ih`` (3H, I),
    ``W_hh`` (3H, H), ``b_ih`` and ``b_hh`` are one direction of the layer's
    (``params["layer_0"]["forward"]`` of a `ClassicGRU` is a cell's params), and a step is the
    layer's call on one step, on the route it takes. The carry is ``h``, each (*batch, size).

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: keyword-only, initialiser of the carry's states (`initialize_carry`); default
        zeros.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights, and
        `initialize_carry` draws from its ``carry`` stream where it is not given one.

    Keyword Args:
      num_heads (int): must be 1: the classic GRU's step computes its own recurrent products and
        has no heads.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> cell = prnn.ClassicGRUCell(3, 8, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((4, 3))
      >>> carry = cell.initialize_carry(x.shape)
      >>> carry, y = cell(carry, x)
      >>> y.shape
      (4, 8)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        carry_init: Callable | None = None,
        rngs: nnx.Rngs,
        num_heads: int = 1,
    ) -> None: ...

class GRUCell(_Cell):
    """The NNX twin of `portable_rnn.linen.GRUCell`: same step, same parameters.

    One step of `GRU` (one layer, one direction) with the carry in and out.

    A GRU, for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``) and for streaming.
    Its parameters ``W_ih`` (3H, I), ``W_hh`` (3H, H), ``b_ih`` and ``b_hh`` are one direction
    of the layer's (``params["layer_0"]["forward"]`` of a `GRU` is a cell's params), and a step
    is the layer's call on one step, on the route it takes. The carry is ``h``, each (*batch,
    size).

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: keyword-only, initialiser of the carry's states (`initialize_carry`); default
        zeros.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights, and
        `initialize_carry` draws from its ``carry`` stream where it is not given one.

    Keyword Args:
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> cell = prnn.GRUCell(3, 8, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((4, 3))
      >>> carry = cell.initialize_carry(x.shape)
      >>> carry, y = cell(carry, x)
      >>> y.shape
      (4, 8)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        carry_init: Callable | None = None,
        rngs: nnx.Rngs,
        num_heads: int = 1,
    ) -> None: ...

class LSTMCell(_Cell):
    """The NNX twin of `portable_rnn.linen.LSTMCell`: same step, same parameters.

    One step of `LSTM` (one layer, one direction) with the carry in and out.

    An LSTM, for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``) and for streaming.
    Its parameters ``W_ih`` (4H, I), ``W_hh`` (4H, H), ``b_ih`` and ``b_hh`` are one direction
    of the layer's (``params["layer_0"]["forward"]`` of an `LSTM` is a cell's params), and a
    step is the layer's call on one step, on the route it takes. The carry is ``(c, h)`` (Flax's
    order, as ``nn.LSTMCell``; the layer's carry is ``(h, c)``), each (*batch, size).

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: keyword-only, initialiser of the carry's states (`initialize_carry`); default
        zeros.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights, and
        `initialize_carry` draws from its ``carry`` stream where it is not given one.

    Keyword Args:
      proj_size (int): ``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` (P, H)
        per layer and direction, as ``torch.nn.LSTM(proj_size=P)``: outputs have D*P features,
        ``h`` is (L*D, ..., P) and ``W_hh`` (4H, P); the cuDNN call has no projection, so such
        calls run the scan path. Default 0: no projection.
      projection_init (Callable | None): initialiser of each ``W_hr``; default the same uniform
        one as the other weights.
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> cell = prnn.LSTMCell(3, 8, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((4, 3))
      >>> carry = cell.initialize_carry(x.shape)
      >>> carry, y = cell(carry, x)
      >>> y.shape
      (4, 8)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        carry_init: Callable | None = None,
        rngs: nnx.Rngs,
        proj_size: int = 0,
        projection_init: Callable | None = None,
        num_heads: int = 1,
    ) -> None: ...

class MGUCell(_Cell):
    """The NNX twin of `portable_rnn.linen.MGUCell`: same step, same parameters.

    One step of `MGU` (one layer, one direction) with the carry in and out.

    A minimal gated unit (MGU), for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``)
    and for streaming. Its parameters ``W_ih`` (2H, I), ``W_hh`` (2H, H), ``b_ih`` and ``b_hh``
    are one direction of the layer's (``params["layer_0"]["forward"]`` of an `MGU` is a cell's
    params), and a step is the layer's call on one step, on the route it takes. The carry is
    ``h``, each (*batch, size).

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: keyword-only, initialiser of the carry's states (`initialize_carry`); default
        zeros.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights, and
        `initialize_carry` draws from its ``carry`` stream where it is not given one.

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

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> cell = prnn.MGUCell(3, 8, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((4, 3))
      >>> carry = cell.initialize_carry(x.shape)
      >>> carry, y = cell(carry, x)
      >>> y.shape
      (4, 8)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        carry_init: Callable | None = None,
        rngs: nnx.Rngs,
        reset_gate: bool = True,
        num_heads: int = 1,
    ) -> None: ...

class SLSTMCell(_Cell):
    """The NNX twin of `portable_rnn.linen.SLSTMCell`: same step, same parameters.

    One step of `SLSTM` (one layer, one direction) with the carry in and out.

    An sLSTM (xLSTM's scalar LSTM with exponential gating), for Flax's loops (``nn.RNN``,
    ``nn.scan``, ``nn.Bidirectional``) and for streaming. Its parameters ``W_ih`` (4H, I),
    ``W_hh`` (4H, H), ``b_ih`` and ``b_hh`` are one direction of the layer's
    (``params["layer_0"]["forward"]`` of an `SLSTM` is a cell's params), and a step is the
    layer's call on one step, on the route it takes. The carry is ``(h, c, n, m)``, each
    (*batch, size).

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: keyword-only, initialiser of the carry's states (`initialize_carry`); default
        zeros.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights, and
        `initialize_carry` draws from its ``carry`` stream where it is not given one.

    Keyword Args:
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> cell = prnn.SLSTMCell(3, 8, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((4, 3))
      >>> carry = cell.initialize_carry(x.shape)
      >>> carry, y = cell(carry, x)
      >>> y.shape
      (4, 8)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        carry_init: Callable | None = None,
        rngs: nnx.Rngs,
        num_heads: int = 1,
    ) -> None: ...

class SimpleRNNCell(_Cell):
    """The NNX twin of `portable_rnn.linen.SimpleRNNCell`: same step, same parameters.

    One step of `SimpleRNN` (one layer, one direction) with the carry in and out.

    An Elman RNN, for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``) and for
    streaming. Its parameters ``W_ih`` (1H, I), ``W_hh`` (1H, H), ``b_ih`` and ``b_hh`` are one
    direction of the layer's (``params["layer_0"]["forward"]`` of a `SimpleRNN` is a cell's
    params), and a step is the layer's call on one step, on the route it takes. The carry is
    ``h``, each (*batch, size).

    Args:
      in_features: I, the size of the inputs' last axis.
      hidden_features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype (default float32).
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: keyword-only, initialiser of the carry's states (`initialize_carry`); default
        zeros.
      rngs: keyword-only, an `nnx.Rngs`: its ``params`` stream initialises the weights, and
        `initialize_carry` draws from its ``carry`` stream where it is not given one.

    Keyword Args:
      nonlinearity (str): ``"tanh"`` (default) or ``"relu"``, as PyTorch's ``nn.RNN``. A PyTorch
        state_dict does not store it: set it to the ``nn.RNN``'s.
      num_heads (int): ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a
        block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part
        of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from portable_rnn import nnx as prnn
      >>> cell = prnn.SimpleRNNCell(3, 8, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((4, 3))
      >>> carry = cell.initialize_carry(x.shape)
      >>> carry, y = cell(carry, x)
      >>> y.shape
      (4, 8)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
        kernel_init: Callable | None = None,
        recurrent_kernel_init: Callable | None = None,
        bias_init: Callable | None = None,
        carry_init: Callable | None = None,
        rngs: nnx.Rngs,
        nonlinearity: str = "tanh",
        num_heads: int = 1,
    ) -> None: ...

__all__ = [
    "attention_fn",
    "ClassicGRU",
    "GRU",
    "LSTM",
    "MGU",
    "SLSTM",
    "SimpleRNN",
    "ClassicGRUCell",
    "GRUCell",
    "LSTMCell",
    "MGUCell",
    "SLSTMCell",
    "SimpleRNNCell",
]

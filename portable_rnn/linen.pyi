# Written by `python -m portable_rnn._src.tools.stubs` from the live objects; do not edit.
# ruff: noqa: E501
"""Flax Linen layers: one per registered recurrent family (`LSTM`, `GRU` ..., as the
`portable_rnn` functions), and `attention_fn` (for `nn.MultiHeadDotProductAttention`).
"""

from collections.abc import Callable, Mapping
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
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

class _Recurrent(nn.Module):
    """What every family's layer shares: attributes, the call and the loaders.

    A subclass (`_layer` makes one per registered family) sets ``_FAMILY`` and declares the
    family's ``layer_options`` as its own attributes.
    """

    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None
    kernel_init: Callable | None = None
    recurrent_kernel_init: Callable | None = None
    bias_init: Callable | None = None

    def __call__(
        self,
        inputs: ArrayLike,
        seq_lengths: ArrayLike | None = None,
        initial_carry=None,
        *,
        deterministic: bool = True,
        return_carry: bool = False,
    ):
        """Runs the layer.

        Shapes: ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers, ``D``
        directions, ``S`` the output size per direction (``proj_size`` for a projected LSTM,
        else ``H``).

        Args:
          inputs: (..., T, I): any leading batch dims.
          seq_lengths: (...,) valid lengths (any integer dtype), or None for all T.
          initial_carry: the family's initial states: one array ``h`` (L*D, ..., S), or a
            tuple of them in the family's order (the LSTM's ``(h, c)``, c (L*D, ..., H); the
            SLSTM's ``(h, c, n, m)``). Zeros by default: the states the family keeps wide
            (`Family.wide_state`: the LSTM's c, the SLSTM's c, n, m, the GRU's h) in float32
            for a 16-bit computation dtype, any other in the computation dtype.
          deterministic: no dropout when True.
          return_carry: also return the final carry, in the form of ``initial_carry``.

        Returns:
          Outputs (..., T, D*S) in the computation dtype (``dtype``, or with ``dtype=None``
          the inputs'), zero past each length; with ``return_carry``, also the carry, in the
          dtypes of ``initial_carry``.

        Raises:
          ValueError, TypeError: for attributes or inputs of the wrong shape, dtype or value;
            the message names the argument, what was expected and what was given.
        """

    @classmethod
    def variables_from_torch(
        cls,
        state_dict: Mapping[str, Any],
        *,
        prefix: str = "",
        param_dtype: DTypeLike = jnp.float32,
    ):
        """``{"params": ...}`` for this layer from a state_dict of the family's PyTorch module
        (``nn.LSTM`` for `LSTM`, ...; tensors or arrays).
        """

    @classmethod
    def variables_to_torch(cls, variables, *, prefix: str = ""):
        """A PyTorch state_dict (NumPy arrays) from this layer's variables."""

    @classmethod
    def variables_from_flax(
        cls,
        flax_params: Any,
        *,
        shared_cell: bool | None = None,
        param_dtype: DTypeLike = jnp.float32,
    ):
        """``{"params": ...}`` from Flax ``nn.RNN`` params of the matching cell (one layer, an
        ``nn.Bidirectional`` tree, or a sequence of layers). An ``nn.Bidirectional`` whose two
        RNNs share one cell is stored once, under ``'forward_rnn'``: read as shared by default;
        ``shared_cell=True`` or ``False`` states which it must be.
        """

    @classmethod
    def variables_from_flat(
        cls,
        weights: ArrayLike,
        input_size: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool,
        **options,
    ):
        """``{"params": ...}`` from the flat weight vector of the functional call; `options`:
        the call options that shape the weights (``proj_size`` for a projected LSTM).
        """

class ClassicGRU(_Recurrent):
    """A multi-layer (bidirectional) classic GRU (reset gate before the recurrent product) over `portable_rnn.classic_gru`.

    Parameters live per layer and direction, in PyTorch's layout (gates z, r, h):

        params["layer_1"]["reverse"]["W_hh"]   # (3H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat weight vector of `portable_rnn.classic_gru` inside the call. The
    carry is ``h``.

    Attributes:
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype (with ``dtype=None`` the inputs'):
        bfloat16 inputs give bfloat16 outputs even with float32 params (Flax's own cells
        promote them to float32); integer and boolean inputs are cast to ``param_dtype`` first.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      num_heads: must be 1: the classic GRU's step computes its own recurrent products and has
        no heads.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.ClassicGRU(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (24, 8)
      >>> y, carry = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 16), [(4, 4, 8)])
    """

    num_heads: int = 1

class GRU(_Recurrent):
    """A multi-layer (bidirectional) GRU (PyTorch ``nn.GRU``) over `portable_rnn.gru`.

    Parameters live per layer and direction, in PyTorch's layout (gates r, z, n):

        params["layer_1"]["reverse"]["W_hh"]   # (3H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat weight vector of `portable_rnn.gru` inside the call. The
    carry is ``h``.

    Attributes:
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype (with ``dtype=None`` the inputs'):
        bfloat16 inputs give bfloat16 outputs even with float32 params (Flax's own cells
        promote them to float32); integer and boolean inputs are cast to ``param_dtype`` first.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.GRU(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (24, 8)
      >>> y, carry = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 16), [(4, 4, 8)])
    """

    num_heads: int = 1

class LSTM(_Recurrent):
    """A multi-layer (bidirectional) LSTM (PyTorch ``nn.LSTM``) over `portable_rnn.lstm`.

    Parameters live per layer and direction, in PyTorch's layout (gates i, f, g, o):

        params["layer_1"]["reverse"]["W_hh"]   # (4H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat weight vector of `portable_rnn.lstm` inside the call. The
    carry is ``(h, c)``.

    Attributes:
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype (with ``dtype=None`` the inputs'):
        bfloat16 inputs give bfloat16 outputs even with float32 params (Flax's own cells
        promote them to float32); integer and boolean inputs are cast to ``param_dtype`` first.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      proj_size: ``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` (P, H) per
        layer and direction, as ``torch.nn.LSTM(proj_size=P)``: outputs have D*P features, ``h``
        is (L*D, ..., P) and ``W_hh`` (4H, P); the cuDNN call has no projection, so such calls
        run the scan path. Default 0: no projection.
      projection_init: initialiser of each ``W_hr``; default the same uniform one as the other
        weights.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.LSTM(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (32, 8)
      >>> y, carry = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 16), [(4, 4, 8), (4, 4, 8)])
    """

    proj_size: int = 0
    projection_init: Callable | None = None
    num_heads: int = 1

class MGU(_Recurrent):
    """A multi-layer (bidirectional) minimal gated unit (MGU) over `portable_rnn.mgu`.

    Parameters live per layer and direction, in PyTorch's layout (gates f, n):

        params["layer_1"]["reverse"]["W_hh"]   # (2H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat weight vector of `portable_rnn.mgu` inside the call. The
    carry is ``h``.

    Attributes:
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype (with ``dtype=None`` the inputs'):
        bfloat16 inputs give bfloat16 outputs even with float32 params (Flax's own cells
        promote them to float32); integer and boolean inputs are cast to ``param_dtype`` first.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      reset_gate: ``True`` (default): the forget gate also multiplies ``W_hn h + b_hn``, as
        Flax's ``nn.MGUCell``; ``False``: ``n = tanh(W_in x + b_in + W_hn h + b_hn)``, as
        ``nn.MGUCell(reset_gate=False)``. The weights do not record it: set it to the Flax
        cell's.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.MGU(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (16, 8)
      >>> y, carry = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 16), [(4, 4, 8)])
    """

    reset_gate: bool = True
    num_heads: int = 1

class SLSTM(_Recurrent):
    """A multi-layer (bidirectional) sLSTM (xLSTM's scalar LSTM with exponential gating) over `portable_rnn.slstm`.

    Parameters live per layer and direction, in PyTorch's layout (gates i, f, z, o):

        params["layer_1"]["reverse"]["W_hh"]   # (4H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat weight vector of `portable_rnn.slstm` inside the call. The
    carry is ``(h, c, n, m)``.

    Attributes:
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype (with ``dtype=None`` the inputs'):
        bfloat16 inputs give bfloat16 outputs even with float32 params (Flax's own cells
        promote them to float32); integer and boolean inputs are cast to ``param_dtype`` first.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.SLSTM(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (32, 8)
      >>> y, carry = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 16), [(4, 4, 8), (4, 4, 8), (4, 4, 8), (4, 4, 8)])
    """

    num_heads: int = 1

class SimpleRNN(_Recurrent):
    """A multi-layer (bidirectional) Elman RNN (PyTorch ``nn.RNN``) over `portable_rnn.simple_rnn`.

    Parameters live per layer and direction, in PyTorch's layout (gates a single block):

        params["layer_1"]["reverse"]["W_hh"]   # (1H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat weight vector of `portable_rnn.simple_rnn` inside the call. The
    carry is ``h``.

    Attributes:
      hidden_size: H.
      num_layers: L, stacked layers.
      bidirectional: also run each layer in reverse (D = 2; the directions' outputs are
        concatenated).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype (with ``dtype=None`` the inputs'):
        bfloat16 inputs give bfloat16 outputs even with float32 params (Flax's own cells
        promote them to float32); integer and boolean inputs are cast to ``param_dtype`` first.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      nonlinearity: ``"tanh"`` (default) or ``"relu"``, as PyTorch's ``nn.RNN``. A PyTorch
        state_dict does not store it: set it to the ``nn.RNN``'s.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.SimpleRNN(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (8, 8)
      >>> y, carry = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 16), [(4, 4, 8)])
    """

    nonlinearity: str = "tanh"
    num_heads: int = 1

class _Cell(nn.RNNCellBase):
    """What every family's step cell shares: one step of the family's one-layer layer, the
    carry in and out, for Flax's ``nn.RNN``, ``nn.scan`` and ``nn.Bidirectional`` and for
    streaming (`_cells` makes one per registered family, ``<Layer>Cell``).

    Its parameters are one direction of the layer's (``W_ih``, ``W_hh``, ``b_ih``, ``b_hh``
    and, for a projected LSTM, ``W_hr``): a layer's ``params["layer_0"]["forward"]`` is a
    cell's ``params``, and the cell's step is the layer's call on one step. Its carry is the
    family's states, each (*batch, size), in Flax's order where Flax has the cell (the LSTM's
    ``(c, h)``, as ``nn.LSTMCell``), else the layer's (the SLSTM's ``(h, c, n, m)``).
    """

    features: int
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None
    kernel_init: Callable | None = None
    recurrent_kernel_init: Callable | None = None
    bias_init: Callable | None = None
    carry_init: Callable = ...

    def __call__(self, carry, inputs: ArrayLike):
        """One step.

        Args:
          carry: the states (`initialize_carry`'s), each (*batch, size).
          inputs: (*batch, I).

        Returns:
          ``(carry, output)``: the new states, and the output (*batch, S) (the new ``h``).
        """

class ClassicGRUCell(_Cell):
    """One step of `ClassicGRU` (one layer, one direction) with the carry in and out.

    A classic GRU (reset gate before the recurrent product), for Flax's loops (``nn.RNN``,
    ``nn.scan``, ``nn.Bidirectional``) and for streaming. Its parameters ``W_ih`` (3H, I),
    ``W_hh`` (3H, H), ``b_ih`` and ``b_hh`` are one direction of the layer's
    (``params["layer_0"]["forward"]`` of a `ClassicGRU` is a cell's params), and a step is the
    layer's call on one step, on the route it takes. The carry is ``h``, each (*batch, size).

    Attributes:
      features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: initialiser of the carry's states (`initialize_carry`); default zeros.
      num_heads: must be 1: the classic GRU's step computes its own recurrent products and has
        no heads.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import flax.linen as nn
      >>> from portable_rnn import linen
      >>> rnn = nn.RNN(linen.ClassicGRUCell(features=8), return_carry=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = rnn.init(jax.random.key(0), x)
      >>> carry, y = rnn.apply(variables, x)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(4, 8)])
    """

    num_heads: int = 1

class GRUCell(_Cell):
    """One step of `GRU` (one layer, one direction) with the carry in and out.

    A GRU, for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``) and for streaming.
    Its parameters ``W_ih`` (3H, I), ``W_hh`` (3H, H), ``b_ih`` and ``b_hh`` are one direction
    of the layer's (``params["layer_0"]["forward"]`` of a `GRU` is a cell's params), and a step
    is the layer's call on one step, on the route it takes. The carry is ``h``, each (*batch,
    size).

    Attributes:
      features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: initialiser of the carry's states (`initialize_carry`); default zeros.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import flax.linen as nn
      >>> from portable_rnn import linen
      >>> rnn = nn.RNN(linen.GRUCell(features=8), return_carry=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = rnn.init(jax.random.key(0), x)
      >>> carry, y = rnn.apply(variables, x)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(4, 8)])
    """

    num_heads: int = 1

class LSTMCell(_Cell):
    """One step of `LSTM` (one layer, one direction) with the carry in and out.

    An LSTM, for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``) and for streaming.
    Its parameters ``W_ih`` (4H, I), ``W_hh`` (4H, H), ``b_ih`` and ``b_hh`` are one direction
    of the layer's (``params["layer_0"]["forward"]`` of an `LSTM` is a cell's params), and a
    step is the layer's call on one step, on the route it takes. The carry is ``(c, h)`` (Flax's
    order, as ``nn.LSTMCell``; the layer's carry is ``(h, c)``), each (*batch, size).

    Attributes:
      features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: initialiser of the carry's states (`initialize_carry`); default zeros.
      proj_size: ``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` (P, H) per
        layer and direction, as ``torch.nn.LSTM(proj_size=P)``: outputs have D*P features, ``h``
        is (L*D, ..., P) and ``W_hh`` (4H, P); the cuDNN call has no projection, so such calls
        run the scan path. Default 0: no projection.
      projection_init: initialiser of each ``W_hr``; default the same uniform one as the other
        weights.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import flax.linen as nn
      >>> from portable_rnn import linen
      >>> rnn = nn.RNN(linen.LSTMCell(features=8), return_carry=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = rnn.init(jax.random.key(0), x)
      >>> carry, y = rnn.apply(variables, x)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(4, 8), (4, 8)])
    """

    proj_size: int = 0
    projection_init: Callable | None = None
    num_heads: int = 1

class MGUCell(_Cell):
    """One step of `MGU` (one layer, one direction) with the carry in and out.

    A minimal gated unit (MGU), for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``)
    and for streaming. Its parameters ``W_ih`` (2H, I), ``W_hh`` (2H, H), ``b_ih`` and ``b_hh``
    are one direction of the layer's (``params["layer_0"]["forward"]`` of an `MGU` is a cell's
    params), and a step is the layer's call on one step, on the route it takes. The carry is
    ``h``, each (*batch, size).

    Attributes:
      features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: initialiser of the carry's states (`initialize_carry`); default zeros.
      reset_gate: ``True`` (default): the forget gate also multiplies ``W_hn h + b_hn``, as
        Flax's ``nn.MGUCell``; ``False``: ``n = tanh(W_in x + b_in + W_hn h + b_hn)``, as
        ``nn.MGUCell(reset_gate=False)``. The weights do not record it: set it to the Flax
        cell's.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import flax.linen as nn
      >>> from portable_rnn import linen
      >>> rnn = nn.RNN(linen.MGUCell(features=8), return_carry=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = rnn.init(jax.random.key(0), x)
      >>> carry, y = rnn.apply(variables, x)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(4, 8)])
    """

    reset_gate: bool = True
    num_heads: int = 1

class SLSTMCell(_Cell):
    """One step of `SLSTM` (one layer, one direction) with the carry in and out.

    An sLSTM (xLSTM's scalar LSTM with exponential gating), for Flax's loops (``nn.RNN``,
    ``nn.scan``, ``nn.Bidirectional``) and for streaming. Its parameters ``W_ih`` (4H, I),
    ``W_hh`` (4H, H), ``b_ih`` and ``b_hh`` are one direction of the layer's
    (``params["layer_0"]["forward"]`` of an `SLSTM` is a cell's params), and a step is the
    layer's call on one step, on the route it takes. The carry is ``(h, c, n, m)``, each
    (*batch, size).

    Attributes:
      features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: initialiser of the carry's states (`initialize_carry`); default zeros.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import flax.linen as nn
      >>> from portable_rnn import linen
      >>> rnn = nn.RNN(linen.SLSTMCell(features=8), return_carry=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = rnn.init(jax.random.key(0), x)
      >>> carry, y = rnn.apply(variables, x)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(4, 8), (4, 8), (4, 8), (4, 8)])
    """

    num_heads: int = 1

class SimpleRNNCell(_Cell):
    """One step of `SimpleRNN` (one layer, one direction) with the carry in and out.

    An Elman RNN, for Flax's loops (``nn.RNN``, ``nn.scan``, ``nn.Bidirectional``) and for
    streaming. Its parameters ``W_ih`` (1H, I), ``W_hh`` (1H, H), ``b_ih`` and ``b_hh`` are one
    direction of the layer's (``params["layer_0"]["forward"]`` of a `SimpleRNN` is a cell's
    params), and a step is the layer's call on one step, on the route it takes. The carry is
    ``h``, each (*batch, size).

    Attributes:
      features: H, the hidden size.
      dtype: computation dtype. None (default) computes in the inputs' dtype and returns
        outputs of that dtype (bfloat16 inputs give bfloat16 outputs, even with float32
        parameters); integer and boolean inputs are cast to ``param_dtype`` first.
        ``jnp.bfloat16`` with float32 parameters computes in bfloat16 with float32 accumulation
        and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name the family's function takes as
        ``implementation``, with its meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      carry_init: initialiser of the carry's states (`initialize_carry`); default zeros.
      nonlinearity: ``"tanh"`` (default) or ``"relu"``, as PyTorch's ``nn.RNN``. A PyTorch
        state_dict does not store it: set it to the ``nn.RNN``'s.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import flax.linen as nn
      >>> from portable_rnn import linen
      >>> rnn = nn.RNN(linen.SimpleRNNCell(features=8), return_carry=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = rnn.init(jax.random.key(0), x)
      >>> carry, y = rnn.apply(variables, x)
      >>> y.shape, [h.shape for h in jax.tree.leaves(carry)]
      ((4, 5, 8), [(4, 8)])
    """

    nonlinearity: str = "tanh"
    num_heads: int = 1

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

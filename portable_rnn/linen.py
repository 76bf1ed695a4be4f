"""Flax Linen layers: `LSTM`, `GRU`, `SimpleRNN` and `attention_fn` (for
`nn.MultiHeadDotProductAttention`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from ._src.layers import params as _params
from ._src.layers.flax_attention import flax_attention_fn as attention_fn

__all__ = ["GRU", "LSTM", "SimpleRNN", "attention_fn"]


class _Recurrent(nn.Module):
    """What `LSTM`, `GRU` and `SimpleRNN` share: attributes, the call and the loaders.

    A subclass sets ``_FAMILY`` (``"lstm"``, ``"gru"``, ``"simple_rnn"``) and, for its own
    attributes, ``_options``.
    """

    _FAMILY = "lstm"

    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    implementation: str | None = None
    kernel_init: Callable | None = None
    recurrent_kernel_init: Callable | None = None
    bias_init: Callable | None = None

    def _options(self) -> dict[str, Any]:
        """The family's own attributes (the family's ``layer_options``)."""
        return {}

    def _config(self) -> _params.Config:
        options = {k: v for k, v in self._options().items() if not k.endswith("_init")}
        return _params.Config(
            self._FAMILY, self.hidden_size, self.num_layers, self.bidirectional, self.dropout,
            self.dtype, self.param_dtype, self.precision, self.implementation, **options)

    @nn.compact
    def __call__(self, inputs, seq_lengths=None, initial_carry=None, *, deterministic=True,
                 return_carry=False):
        """Runs the layer.

        Shapes: ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers, ``D``
        directions, ``S`` the output size per direction (``proj_size`` for a projected LSTM,
        else ``H``).

        Args:
          inputs: (..., T, I): any leading batch dims.
          seq_lengths: (...,) valid lengths (any integer dtype), or None for all T.
          initial_carry: LSTM ``(h, c)`` with h (L*D, ..., S) and c (L*D, ..., H); GRU and
            SimpleRNN ``h`` (L*D, ..., H). Zeros by default: the LSTM's h in the computation
            dtype and c in float32, the GRU's and SimpleRNN's h in float32 for a 16-bit
            computation dtype.
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
        cfg = self._config()
        _params.check_config(cfg)
        existing = None  # the parameters, when they exist already: checked before use
        if self.has_variable("params", "layer_0"):
            existing = nn.meta.unbox(self.variables["params"])
        inputs = _params.check_inputs(inputs, _params.input_size_of(existing),
                                          self.dtype, self.param_dtype)
        if existing is not None:
            _params.check_tree(existing, inputs.shape[-1], cfg)
        inits = _params.initializers(self.kernel_init, self.recurrent_kernel_init,
                                         self.bias_init, self._options().get("projection_init"))
        params = {}
        for layer in range(self.num_layers):
            params[f"layer_{layer}"] = self.param(
                f"layer_{layer}", _params.init_layer, layer, inputs.shape[-1], cfg, inits)
        rng = None
        if self.dropout > 0 and self.num_layers > 1 and not deterministic:
            rng = self.make_rng("dropout")
        return _params.apply(params, inputs, seq_lengths, initial_carry, cfg,
                                 dropout_rng=rng, return_carry=return_carry)

    @classmethod
    def variables_from_torch(cls, state_dict, *, prefix: str = "", param_dtype=jnp.float32):
        """``{"params": ...}`` for this layer from a PyTorch ``nn.LSTM`` (`LSTM`), ``nn.GRU``
        (`GRU`) or ``nn.RNN`` (`SimpleRNN`) state_dict (tensors or arrays)."""
        return {"params": _params.from_torch(state_dict, prefix, cls._FAMILY,
                                                 param_dtype)[0]}

    @staticmethod
    def variables_to_torch(variables, *, prefix: str = ""):
        """A PyTorch state_dict (NumPy arrays) from this layer's variables."""
        return _params.to_torch(variables["params"], prefix)

    @classmethod
    def variables_from_flax(cls, flax_params, *, shared_cell: bool | None = None,
                            param_dtype=jnp.float32):
        """``{"params": ...}`` from Flax ``nn.RNN`` params of the matching cell (one layer, an
        ``nn.Bidirectional`` tree, or a sequence of layers). An ``nn.Bidirectional`` whose two
        RNNs share one cell is stored once, under ``'forward_rnn'``: read as shared by default;
        ``shared_cell=True`` or ``False`` states which it must be."""
        return {"params": _params.from_flax(flax_params, cls._FAMILY, param_dtype,
                                                shared_cell)[0]}

    @classmethod
    def variables_from_flat(cls, weights, input_size: int, hidden_size: int, num_layers: int,
                            bidirectional: bool):
        """``{"params": ...}`` from the flat weight vector of the functional call."""
        return {"params": _params.from_flat(weights, input_size, hidden_size, num_layers,
                                                bidirectional, cls._FAMILY)}


class LSTM(_Recurrent):
    """A multi-layer (bidirectional) LSTM over `portable_rnn.lstm`: cuDNN or scan, automatically.

    Parameters live per layer and direction, in PyTorch's layout (gates i, f, g, o):

        params["layer_1"]["reverse"]["W_hh"]   # (4H, H): layer 1, reverse, recurrent kernel

    and are packed into the flat cuDNN vector inside the call.

    Attributes:
      hidden_size: H.
      num_layers: stacked layers.
      bidirectional: also run each layer in reverse (outputs concatenated: 2H features).
      dropout: dropout rate between layers (not after the last), from the ``"dropout"`` RNG
        stream when ``deterministic=False``.
      dtype: computation dtype, and the outputs' dtype. None (default) computes in the
        inputs' dtype and returns outputs of that dtype: bfloat16 inputs give bfloat16 outputs
        even with float32 params (Flax's own cells promote them to float32); integer and
        boolean inputs are cast to ``param_dtype`` first. ``jnp.bfloat16`` with float32 params
        computes in bfloat16 with float32 accumulation and returns bfloat16.
      param_dtype: parameter dtype.
      precision: matmul precision, as in `jax.lax.dot_general`.
      implementation: None (automatic) or a name `portable_rnn.lstm` (`portable_rnn.gru`,
        `portable_rnn.simple_rnn` for those layers) takes as ``implementation``, with its
        meaning there.
      kernel_init: initialiser ``init(key, shape, dtype)`` of each ``W_ih``; default
        ``U(-1/sqrt(H), 1/sqrt(H))``, as PyTorch and `jax.experimental.rnn`.
      recurrent_kernel_init: initialiser of each ``W_hh``; default the same uniform one.
      bias_init: initialiser of ``b_ih`` and ``b_hh``; default the same uniform one.
      proj_size: ``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` (P, H) per
        layer and direction, as ``torch.nn.LSTM(proj_size=P)``: outputs have D*P features,
        ``h`` is (L*D, ..., P) and ``W_hh`` (4H, P). Such calls run the scan path.
      projection_init: initialiser for ``W_hr`` (default as the other weights).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.LSTM(hidden_size=8, num_layers=2, bidirectional=True)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_1"]["reverse"]["W_hh"].shape
      (32, 8)
      >>> y, (h, c) = layer.apply(variables, x, jnp.array([5, 3, 0, 1]), return_carry=True)
      >>> y.shape, h.shape
      ((4, 5, 16), (4, 4, 8))
      >>> projected = linen.LSTM(hidden_size=8, proj_size=2)
      >>> v = projected.init(jax.random.key(0), x)
      >>> v["params"]["layer_0"]["forward"]["W_hr"].shape, projected.apply(v, x).shape
      ((2, 8), (4, 5, 2))
    """

    _FAMILY = "lstm"

    proj_size: int = 0
    projection_init: Callable | None = None

    def _options(self):
        return dict(proj_size=self.proj_size, projection_init=self.projection_init)

    @classmethod
    def variables_from_flat(cls, weights, input_size: int, hidden_size: int, num_layers: int,
                            bidirectional: bool, *, proj_size: int = 0):
        """``{"params": ...}`` from the flat cuDNN weight vector of `portable_rnn.lstm`."""
        return {"params": _params.from_flat(weights, input_size, hidden_size, num_layers,
                                                bidirectional, "lstm", proj_size)}


class GRU(_Recurrent):
    """A multi-layer (bidirectional) GRU over `portable_rnn.gru` (PyTorch ``nn.GRU`` semantics).

    The attributes, the call, the parameter tree (gates r, z, n: ``W_ih`` (3H, I), ``W_hh``
    (3H, H)) and the loaders are those of `LSTM` without the projection; the carry is one array
    ``h`` (L*D, ..., H). The outputs' dtype is as for `LSTM`: ``dtype``, or with ``dtype=None``
    the inputs' (``param_dtype`` for integer or boolean inputs). With a 16-bit computation dtype
    the default initial carry, and so the returned one, is float32: the state the loop carries,
    so passing it on continues a sequence unrounded.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.GRU(hidden_size=8, num_layers=2)
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> variables["params"]["layer_0"]["forward"]["W_ih"].shape
      (24, 3)
      >>> y, h = layer.apply(variables, x, return_carry=True)
      >>> y.shape, h.shape
      ((4, 5, 8), (2, 4, 8))
    """

    _FAMILY = "gru"


class SimpleRNN(_Recurrent):
    """A multi-layer (bidirectional) Elman RNN over `portable_rnn.simple_rnn` (PyTorch ``nn.RNN``).

    As `GRU` (one block: ``W_ih`` (H, I), ``W_hh`` (H, H); the carry is ``h``; the outputs'
    dtype is ``dtype``, or with ``dtype=None`` the inputs'), with

    Attributes:
      nonlinearity: ``"tanh"`` (default) or ``"relu"``. A PyTorch state_dict does not store it:
        set it to the ``nn.RNN``'s.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from portable_rnn import linen
      >>> layer = linen.SimpleRNN(hidden_size=8, bidirectional=True, nonlinearity="relu")
      >>> x = jnp.ones((4, 5, 3))
      >>> variables = layer.init(jax.random.key(0), x)
      >>> y, h = layer.apply(variables, x, return_carry=True)
      >>> y.shape, h.shape, bool((y >= 0).all())
      ((4, 5, 16), (2, 4, 8), True)
    """

    _FAMILY = "simple_rnn"

    nonlinearity: str = "tanh"

    def _options(self):
        return dict(nonlinearity=self.nonlinearity)

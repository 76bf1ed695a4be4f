"""`portable_rnn.gru` and `explain_gru`; the GRU's routes: ``cudnn`` (JAX has no cuDNN GRU: the
route says so), portable_rnn's own cuDNN call (``cudnn_ffi``), the scan driver."""

from __future__ import annotations

import jax
from jax import lax

from ...core import dispatch
from ...core.capabilities import Capabilities
from ...core.checks import own_rank_promotion
from ...core.dispatch import Decision
from .. import api, pallas_tpu
from ..cudnn_ffi import route as cudnn_ffi
from .cell import GRUCell
from .family import FAMILY

Array = jax.Array

dispatch.register("gru", api.no_cudnn(FAMILY), cudnn_ffi.ROUTE, pallas_tpu.ROUTE,
                  api.SCAN)


@own_rank_promotion
def gru(x: Array, h_0: Array, weights: Array, seq_lengths: Array | None, input_size: int,
        hidden_size: int, num_layers: int, dropout: float, bidirectional: bool,
        precision: lax.PrecisionLike = None, *, dropout_rng: Array | None = None,
        implementation: str | None = None, capabilities: Capabilities | None = None,
        recurrent_dropout_mask: Array | None = None) -> tuple[Array, Array]:
    """A multi-layer (bidirectional) GRU with PyTorch ``nn.GRU(batch_first=True)`` semantics.

    Gates r, z, n; the reset gate multiplies ``W_hn h + b_hn`` (also cuDNN's GRU and Keras'
    ``reset_after=True``): ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``,
    ``h' = (1 - z) * n + z * h``.
    {args}
    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> y, h = portable_rnn.gru(x, h0, w, jnp.array([5, 2]), I, H, L, 0.0, False)
      >>> y.shape, h.shape, bool((y[1, 2:] == 0).all())
      ((2, 5, 4), (1, 2, 4), True)
    """
    return api.run(FAMILY, GRUCell(), x, [("h_0", h_0, hidden_size)], weights, seq_lengths,
                   input_size, hidden_size, num_layers, dropout, bidirectional, precision,
                   dropout_rng, implementation, capabilities, recurrent_dropout_mask)


def explain_gru(x, h_0, weights, seq_lengths, input_size: int, hidden_size: int,
                num_layers: int, dropout: float, bidirectional: bool,
                precision: lax.PrecisionLike = None, *, dropout_rng=None,
                implementation: str | None = None, capabilities: Capabilities | None = None,
                recurrent_dropout_mask=None) -> Decision:
    """The routing decision `gru` would make for these arguments (arrays or
    `jax.ShapeDtypeStruct`s), with reasons; runs nothing and raises what `gru` would raise."""
    return api.decide(FAMILY, GRUCell(), x, [("h_0", h_0, hidden_size)], weights, seq_lengths,
                      input_size, hidden_size, num_layers, dropout, bidirectional, precision,
                      dropout_rng, implementation, capabilities,
                      recurrent_dropout_mask=recurrent_dropout_mask)[0]


gru.__doc__ = gru.__doc__.replace("{args}", api.ARGS_DOC.format(
    num="get_num_params_in_gru", unpack="unpack_gru_weights",
    gates="(L*D, 3, B, H): one mask per gate, in the order r, z, n, for that gate's block of\n"
          "        ``W_hh h`` (Keras 3's GRU with ``recurrent_dropout``). "))

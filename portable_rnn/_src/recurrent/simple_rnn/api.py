"""`portable_rnn.simple_rnn` and `explain_simple_rnn`; the simple RNN's routes: ``cudnn`` (JAX
has no cuDNN RNN: the route says so), portable_rnn's own cuDNN call (``cudnn_ffi``), the scan
driver."""

from __future__ import annotations

import jax
from jax import lax

from ...core import dispatch
from ...core.capabilities import Capabilities
from ...core.checks import own_rank_promotion
from ...core.dispatch import Decision
from .. import api, pallas_tpu
from ..cudnn_ffi import route as cudnn_ffi
from .cell import NONLINEARITIES, SimpleRNNCell
from .family import FAMILY

Array = jax.Array

dispatch.register("simple_rnn", api.no_cudnn(FAMILY), cudnn_ffi.ROUTE, pallas_tpu.ROUTE,
                  api.SCAN)


@own_rank_promotion
def simple_rnn(x: Array, h_0: Array, weights: Array, seq_lengths: Array | None, input_size: int,
               hidden_size: int, num_layers: int, dropout: float, bidirectional: bool,
               precision: lax.PrecisionLike = None, *, nonlinearity: str = "tanh",
               dropout_rng: Array | None = None, implementation: str | None = None,
               capabilities: Capabilities | None = None,
               recurrent_dropout_mask: Array | None = None) -> tuple[Array, Array]:
    """A multi-layer (bidirectional) Elman RNN with PyTorch ``nn.RNN(batch_first=True)`` semantics.

    ``h' = act(W_ih x + b_ih + W_hh h + b_hh)``, with ``act`` given by ``nonlinearity``
    (``"tanh"`` or ``"relu"``).
    {args}
    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 2, True)
      >>> y, h = portable_rnn.simple_rnn(jnp.ones((2, 5, 3)), jnp.zeros((4, 2, 4)), w, None, 3, 4,
      ...                                2, 0.0, True, nonlinearity="relu")
      >>> y.shape, h.shape
      ((2, 5, 8), (4, 2, 4))
    """
    check_nonlinearity(nonlinearity)
    return api.run(FAMILY, SimpleRNNCell(nonlinearity), x, [("h_0", h_0, hidden_size)], weights,
                   seq_lengths, input_size, hidden_size, num_layers, dropout, bidirectional,
                   precision, dropout_rng, implementation, capabilities, recurrent_dropout_mask)


def check_nonlinearity(nonlinearity):
    if nonlinearity not in NONLINEARITIES:
        raise ValueError("`nonlinearity` must be one of 'tanh', 'relu' (as PyTorch nn.RNN); got "
                         f"{nonlinearity!r}.")


def explain_simple_rnn(x, h_0, weights, seq_lengths, input_size: int, hidden_size: int,
                       num_layers: int, dropout: float, bidirectional: bool,
                       precision: lax.PrecisionLike = None, *, nonlinearity: str = "tanh",
                       dropout_rng=None, implementation: str | None = None,
                       capabilities: Capabilities | None = None,
                       recurrent_dropout_mask=None) -> Decision:
    """The routing decision `simple_rnn` would make for these arguments, with reasons; runs
    nothing and raises what `simple_rnn` would raise."""
    check_nonlinearity(nonlinearity)
    return api.decide(FAMILY, SimpleRNNCell(nonlinearity), x, [("h_0", h_0, hidden_size)],
                      weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
                      bidirectional, precision, dropout_rng, implementation, capabilities,
                      recurrent_dropout_mask=recurrent_dropout_mask)[0]


simple_rnn.__doc__ = simple_rnn.__doc__.replace("{args}", api.ARGS_DOC.format(
    num="get_num_params_in_simple_rnn", unpack="unpack_simple_rnn_weights", gates=""))

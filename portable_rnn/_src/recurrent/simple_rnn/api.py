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

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and the initial state are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ...
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_simple_rnn(I, H, L, bidirectional)``; layout in
        `unpack_simple_rnn_weights`.
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T]. Values of `x`
        past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`.
      dropout_rng: PRNG key for the dropout masks (the LSTM's mask rule: the same key gives the
        same masks).
      implementation: None (automatic) or one of, in order of preference: ``"cudnn"`` (always
        raises: JAX exposes no cuDNN kernel for this cell), ``"cudnn_ffi"`` (portable_rnn's own
        cuDNN call, built on first use), ``"pallas"`` (portable_rnn's Pallas TPU kernel) or
        ``"scan"`` (pure JAX, every backend). The automatic choice takes a fused route only
        where its benchmark shows it faster than the scan path. A route asked for that cannot
        serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step); the rest of the step (the GRU's ``z * h``), the carried
        state and ``h_n`` use the unmasked ``h``. Pass the keep-mask already scaled,
        e.g. ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.

    Returns:
      ``(y, h_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length; ``h_n``
      (L*D, B, H), the state at each sequence's last valid step (``h_0`` for length 0), in
      ``h_0``'s dtype. For 16-bit inputs, matmuls accumulate in float32 and the hidden state is
      carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 2, True)
      >>> y, h = portable_rnn.simple_rnn(jnp.ones((2, 5, 3)), jnp.zeros((4, 2, 4)), w, None, 3, 4,
      ...                                2, 0.0, True, nonlinearity="relu")
      >>> y.shape, h.shape
      ((2, 5, 8), (4, 2, 4))
    """
    check_nonlinearity(nonlinearity)
    x, h_0, weights, recurrent_dropout_mask = api.as_arrays(
        x=x, h_0=h_0, weights=weights, recurrent_dropout_mask=recurrent_dropout_mask)
    options = api.check_options(
        FAMILY, SimpleRNNCell(nonlinearity), input_size=input_size, hidden_size=hidden_size,
        num_layers=num_layers, dropout=dropout, bidirectional=bidirectional, precision=precision,
        implementation=implementation)
    call = api.check_args(
        options, x, [("h_0", h_0, hidden_size)], weights, seq_lengths, dropout_rng,
        recurrent_dropout_mask)
    return api.run(call, capabilities, x, (h_0,), weights, seq_lengths, dropout_rng,
                   recurrent_dropout_mask)


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
    options = api.check_options(
        FAMILY, SimpleRNNCell(nonlinearity), input_size=input_size, hidden_size=hidden_size,
        num_layers=num_layers, dropout=dropout, bidirectional=bidirectional, precision=precision,
        implementation=implementation)
    call = api.check_args(
        options, x, [("h_0", h_0, hidden_size)], weights, seq_lengths, dropout_rng,
        recurrent_dropout_mask)
    return api.decide(call, capabilities)

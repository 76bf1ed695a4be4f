"""`portable_rnn.lstm` and `explain_lstm`; the LSTM's routes, in order of preference: JAX's cuDNN
call (`cudnn`), portable_rnn's own (`cudnn_ffi`), the Pallas TPU kernel (`pallas`), then the
scan driver."""

from __future__ import annotations

import jax
from jax import lax

from ...core import checks, dispatch
from ...core.capabilities import Capabilities
from ...core.checks import own_rank_promotion
from ...core.dispatch import Decision
from .. import api, pallas_tpu
from ..cudnn_ffi import route as cudnn_ffi
from . import cudnn
from .cell import LSTMCell
from .family import FAMILY

Array = jax.Array

dispatch.register("lstm", cudnn.ROUTE, cudnn_ffi.ROUTE, pallas_tpu.ROUTE,
                  api.SCAN)


def _states(h_0, c_0, sizes):
    """The initial states and their sizes, as `api.check_args` takes them."""
    return [("h_0", h_0, sizes[0]), ("c_0", c_0, sizes[1])]


def _sizes(hidden_size, proj_size):
    """The last axes of h_0 and c_0; checks `proj_size` first."""
    proj = checks.static_int("proj_size", proj_size, low=0)
    hidden = hidden_size if isinstance(hidden_size, int) else None
    return proj or hidden, hidden


def explain_lstm(x, h_0, c_0, weights, seq_lengths, input_size: int, hidden_size: int,
                 num_layers: int, dropout: float, bidirectional: bool,
                 precision: lax.PrecisionLike = None, *, dropout_rng=None,
                 implementation: str | None = None, capabilities: Capabilities | None = None,
                 proj_size: int = 0, recurrent_dropout_mask=None) -> Decision:
    """The routing decision `lstm` would make for these arguments, with reasons; runs nothing.

    Takes the arguments of `lstm`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `lstm`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> S = jax.ShapeDtypeStruct
      >>> gpu = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
      >>> n = portable_rnn.get_num_params_in_lstm(32, 64, 1, False)
      >>> d = portable_rnn.explain_lstm(
      ...     S((8, 10, 32), jnp.bfloat16), S((1, 8, 64), jnp.bfloat16),
      ...     S((1, 8, 64), jnp.bfloat16), S((n,), jnp.float32), None, 32, 64, 1, 0.0, False,
      ...     capabilities=gpu)
      >>> d.implementation
      'scan'
      >>> print(d.rejected["cudnn"][0])  # doctest: +ELLIPSIS
      `x` is bfloat16: the cuDNN LSTM supports float32 only (jax.experimental.rnn.lstm raises)...
    """
    sizes = _sizes(hidden_size, proj_size)
    options = api.check_options(
        FAMILY, LSTMCell(int(proj_size)), input_size=input_size, hidden_size=hidden_size,
        num_layers=num_layers, dropout=dropout, bidirectional=bidirectional, precision=precision,
        implementation=implementation, proj_size=proj_size)
    call = api.check_args(
        options, x, _states(h_0, c_0, sizes), weights, seq_lengths, dropout_rng,
        recurrent_dropout_mask)
    return api.decide(call, capabilities)


@own_rank_promotion
def lstm(x: Array, h_0: Array, c_0: Array, weights: Array, seq_lengths: Array | None,
         input_size: int, hidden_size: int, num_layers: int, dropout: float,
         bidirectional: bool, precision: lax.PrecisionLike = None, *,
         dropout_rng: Array | None = None, implementation: str | None = None,
         capabilities: Capabilities | None = None, proj_size: int = 0,
         recurrent_dropout_mask: Array | None = None) -> tuple[Array, Array, Array]:
    """A multi-layer (bidirectional) LSTM, positionally identical to `jax.experimental.rnn.lstm`.

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Semantics equal PyTorch ``nn.LSTM(batch_first=True)``: gates i, f, g, o; the reverse
    direction reads each sequence backwards from its last valid step (padding stays at the end).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ...
      c_0: initial cell state, (L*D, B, H).
      weights: the flat cuDNN weight vector of `jax.experimental.rnn`, (P,) with
        ``P = get_num_params_in_lstm(I, H, L, bidirectional)``.
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse.
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every path.
      implementation: None (automatic; see `explain_lstm` and `policy`) or one of, in order of
        preference: ``"cudnn"`` (JAX's cuDNN LSTM call), ``"cudnn_ffi"`` (portable_rnn's own
        cuDNN call, built on first use), ``"pallas"`` (portable_rnn's Pallas TPU kernel) or
        ``"scan"`` (pure JAX, every backend). The automatic choice takes a fused route only
        where its benchmark shows it faster than the scan path. A route asked for that cannot
        serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).
      proj_size: ``P > 0`` projects each hidden state with ``W_hr`` (P, H), as PyTorch's
        ``nn.LSTM(proj_size=P)``: ``h_0``/``h_n`` are (L*D, B, P), ``y`` is (B, T, D*P), layers
        past the first read D*P features, and the weights include ``W_hr`` (see
        `unpack_lstm_weights`). The cuDNN call has no projection: such calls run the scan path.
        0 (the default) is the plain LSTM.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H) (P with ``proj_size``): every step of layer
        ``l``, direction ``d`` computes its recurrent product ``W_hh h`` from ``h *
        recurrent_dropout_mask[l*D + d]`` (the same mask at every step; the carried state and
        ``h_n`` stay unmasked). (L*D, 4, B, H): one mask per gate, in the order i, f, g, o (Keras
        3's LSTM with ``recurrent_dropout``). Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``. The cuDNN call has no such mask: these
        calls run the scan path.

    Returns:
      ``(y, h_n, c_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length; ``h_n`` and
      ``c_n`` (L*D, B, H), the states at each sequence's last valid step (``h_0``/``c_0`` for
      length 0), in ``h_0``'s and ``c_0``'s dtypes, so they can be fed back as a carry. For 16-bit
      inputs, pre-activations accumulate in float32 and the cell state is kept in float32; pass
      ``c_0`` in float32 to receive the cell state unrounded.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h0 = c0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> y, h, c = portable_rnn.lstm(x, h0, c0, w, jnp.array([5, 2]), I, H, L, 0.0, False)
      >>> y.shape, y.dtype, bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), True)
    """
    sizes = _sizes(hidden_size, proj_size)
    x, h_0, c_0, weights, recurrent_dropout_mask = api.as_arrays(
        x=x, h_0=h_0, c_0=c_0, weights=weights, recurrent_dropout_mask=recurrent_dropout_mask)
    options = api.check_options(
        FAMILY, LSTMCell(int(proj_size)), input_size=input_size, hidden_size=hidden_size,
        num_layers=num_layers, dropout=dropout, bidirectional=bidirectional, precision=precision,
        implementation=implementation, proj_size=proj_size)
    call = api.check_args(
        options, x, _states(h_0, c_0, sizes), weights, seq_lengths, dropout_rng,
        recurrent_dropout_mask)
    y, h_n, c_n = api.run(call, capabilities, x, (h_0, c_0), weights, seq_lengths, dropout_rng,
                          recurrent_dropout_mask)
    return y, h_n, c_n

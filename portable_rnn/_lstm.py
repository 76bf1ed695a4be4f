"""`portable_rnn.lstm`: the public LSTM entry point (argument checks, then the chosen path)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _checks, _compat, _cudnn_lstm, _dispatch
from ._capabilities import Capabilities
from ._dispatch import Decision
from ._lstm_scan import lstm_scan
from ._weights import get_num_params_in_lstm

Array = jax.Array

IMPLEMENTATIONS = ("cudnn", "scan")  # in order of preference


def check_lstm_args(x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers,
                    dropout, bidirectional, precision, dropout_rng, implementation):
    """Validates every argument of `lstm` at trace time; returns (dropout, seq_lengths)."""
    input_size = _checks.static_int("input_size", input_size)
    hidden_size = _checks.static_int("hidden_size", hidden_size)
    num_layers = _checks.static_int("num_layers", num_layers)
    bidirectional = _checks.static_bool("bidirectional", bidirectional)
    dropout = _checks.rate("dropout", dropout)
    _checks.precision(precision)
    _checks.implementation(implementation, IMPLEMENTATIONS)

    x_shape, x_dtype = _checks.shape_dtype("x", x)
    if len(x_shape) != 3:
        raise ValueError(f"`x` must have shape (batch, time, input_size) (rank 3); got shape "
                         f"{x_shape} (rank {len(x_shape)}).")
    _checks.floating("x", x_dtype)
    batch, steps, features = x_shape
    if features != input_size:
        raise ValueError(f"`x` must have input_size={input_size} features in its last axis; "
                         f"got shape {x_shape}.")
    num_directions = 2 if bidirectional else 1
    state = (num_layers * num_directions, batch, hidden_size)
    for name, a in (("h_0", h_0), ("c_0", c_0)):
        shape, dtype = _checks.shape_dtype(name, a)
        _checks.expect_shape(name, shape, state,
                             "(num_layers * num_directions, batch, hidden_size)")
        _checks.floating(name, dtype)
    w_shape, w_dtype = _checks.shape_dtype("weights", weights)
    n = get_num_params_in_lstm(input_size, hidden_size, num_layers, bidirectional)
    _checks.expect_shape("weights", w_shape, (n,), "(get_num_params_in_lstm(...),)")
    _checks.floating("weights", w_dtype)
    if dropout_rng is not None:
        _checks.prng_key("dropout_rng", dropout_rng)
    if dropout > 0 and num_layers > 1 and dropout_rng is None:
        raise ValueError(
            f"`dropout`={dropout} needs a random key: pass `dropout_rng=jax.random.key(...)` "
            "when training, or `dropout=0.0` for inference.")
    return dropout, _checks.seq_lengths(seq_lengths, batch, steps)


def _scan_matmul_dtype(dtype, caps: Capabilities):
    """On CPUs, 16-bit matmul operands go to the backend as float32 (same products, faster)."""
    return np.dtype(np.float32) if caps.platform == "cpu" and dtype.itemsize == 2 else None


def _scan_notes(dtypes, seq_dtype, dropout, has_rng, num_layers, caps) -> tuple[str, ...]:
    out = []
    low = sorted({str(d) for d in dtypes.values() if d.itemsize == 2})
    if low:
        out.append(f"{'/'.join(low)}: matmuls accumulate in float32, cell state in float32")
    if _scan_matmul_dtype(dtypes["x"], caps) is not None:
        out.append("CPU: 16-bit matmul operands multiplied as float32 (exact products)")
    if seq_dtype is not None and seq_dtype != np.int32:
        out.append(f"seq_lengths {seq_dtype} cast to int32")
    if dropout > 0 and has_rng and num_layers > 1:
        out.append(f"dropout {dropout} between layers from dropout_rng")
    return tuple(out)


def _decide(x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
            bidirectional, precision, dropout_rng, implementation, capabilities):
    """Checks the arguments and picks the path; returns (decision, dropout, int32 lengths)."""
    dropout, lengths = check_lstm_args(
        x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
        bidirectional, precision, dropout_rng, implementation)
    caps = _dispatch.resolve_capabilities(capabilities)
    pol = _dispatch.current_policy()
    dtypes = {name: _checks.shape_dtype(name, a)[1]
              for name, a in (("x", x), ("h_0", h_0), ("c_0", c_0), ("weights", weights))}
    batch, steps = _checks.shape_dtype("x", x)[0][:2]
    seq_dtype = None if seq_lengths is None else _checks.shape_dtype("seq_lengths",
                                                                     seq_lengths)[1]
    has_rng = dropout_rng is not None

    def route(caps: Capabilities, cudnn_unavailable: str | None = None,
              implementation: str | None = implementation) -> Decision:
        rejects = {
            "cudnn": (lambda: (cudnn_unavailable,)) if cudnn_unavailable else (
                lambda: _cudnn_lstm.rejects(caps, dtypes, precision, batch, steps,
                                            pol.lstm_low_precision)),
            "scan": lambda: (),
        }
        notes = {
            "cudnn": lambda: _cudnn_lstm.notes(dtypes, precision, seq_dtype, dropout, has_rng,
                                               num_layers),
            "scan": lambda: _scan_notes(dtypes, seq_dtype, dropout, has_rng, num_layers, caps),
        }
        return _dispatch.decide("lstm", IMPLEMENTATIONS, rejects, notes, implementation,
                                pol.lstm, caps)

    decision = route(caps)
    if implementation is None and decision.implementation == "cudnn":
        decision = _dispatch.per_platform(decision, _compat.cudnn_lstm_platforms(),
                                          lambda c, why: route(c, why, None))
    return decision, dropout, lengths


def explain_lstm(x, h_0, c_0, weights, seq_lengths, input_size: int, hidden_size: int,
                 num_layers: int, dropout: float, bidirectional: bool,
                 precision: lax.PrecisionLike = None, *, dropout_rng=None,
                 implementation: str | None = None,
                 capabilities: Capabilities | None = None) -> Decision:
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
    return _decide(x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers,
                   dropout, bidirectional, precision, dropout_rng, implementation,
                   capabilities)[0]


def lstm(x: Array, h_0: Array, c_0: Array, weights: Array, seq_lengths: Array | None,
         input_size: int, hidden_size: int, num_layers: int, dropout: float,
         bidirectional: bool, precision: lax.PrecisionLike = None, *,
         dropout_rng: Array | None = None, implementation: str | None = None,
         capabilities: Capabilities | None = None) -> tuple[Array, Array, Array]:
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
      implementation: None (automatic: cuDNN when it can serve the call, else scan; see
        `explain_lstm` and `policy`), ``"cudnn"`` (raises, with every reason, if it cannot) or
        ``"scan"`` (pure JAX, every backend).
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).

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
    x, h_0, c_0, weights = (_checks.array(name, a) for name, a in
                            (("x", x), ("h_0", h_0), ("c_0", c_0), ("weights", weights)))
    decision, dropout, seq_lengths = _decide(
        x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
        bidirectional, precision, dropout_rng, implementation, capabilities)
    _dispatch.report_fallback(decision)
    if seq_lengths is not None:  # padding never reaches a result or gradient, even NaN padding
        valid = jnp.arange(x.shape[1], dtype=jnp.int32)[None, :] < seq_lengths[:, None]
        x = jnp.where(valid[..., None], x, jnp.zeros((), x.dtype))
    statics = (int(input_size), int(hidden_size), int(num_layers), dropout, bool(bidirectional),
               precision)
    if decision.implementation == "cudnn" and implementation is not None:
        _cudnn_lstm.check_traceable()

    def branch(d: Decision):
        def run(x, h_0, c_0, weights, seq_lengths, dropout_rng):
            match d.implementation:
                case "scan":
                    with jax.named_scope("portable_rnn.lstm.scan"):
                        return lstm_scan(x, h_0, c_0, weights, seq_lengths, *statics, dropout_rng,
                                         matmul_dtype=_scan_matmul_dtype(x.dtype,
                                                                         d.capabilities))
                case "cudnn":
                    with jax.named_scope("portable_rnn.lstm.cudnn"):
                        return _cudnn_lstm.lstm_cudnn(x, h_0, c_0, weights, seq_lengths,
                                                      *statics, dropout_rng)
            raise AssertionError(d)  # unreachable: decide() returns one of IMPLEMENTATIONS
        return run

    return _dispatch.run(decision, branch, x, h_0, c_0, weights, seq_lengths, dropout_rng)

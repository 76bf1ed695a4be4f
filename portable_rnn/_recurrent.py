"""What the recurrent family shares at its entry points: argument checks, notes and routing.

`portable_rnn.lstm` (`_lstm`), `portable_rnn.gru` and `portable_rnn.simple_rnn` (here) check their
arguments the same way and route through one table per family: the paths in order of preference,
each with its reasons to reject a call. Adding a path (say a fused GRU kernel) means one more entry
in `ROUTES` and one more case in `_run_path`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _checks, _dispatch, _weights
from ._capabilities import Capabilities, cudnn_platform_rejects
from ._cell_gru import GRUCell
from ._cell_simple_rnn import NONLINEARITIES, SimpleRNNCell
from ._checks import own_rank_promotion
from ._dispatch import Decision
from ._rnn_scan import rnn_scan

Array = jax.Array

NO_CUDNN = {
    "gru": "JAX exposes no cuDNN GRU: jaxlib's cuDNN RNN custom call (jax.experimental.rnn) is "
           "LSTM-only",
    "simple_rnn": "JAX exposes no cuDNN RNN: jaxlib's cuDNN RNN custom call "
                  "(jax.experimental.rnn) is LSTM-only",
}
IMPLEMENTATIONS = ("cudnn", "scan")  # every family, in order of preference


def check_args(family, x, states, weights, seq_lengths, input_size, hidden_size, num_layers,
               dropout, bidirectional, precision, dropout_rng, implementation, proj_size=0,
               recurrent_dropout_mask=None):
    """Validates every argument at trace time; returns (dropout, int32 seq_lengths or None).

    `states` is a sequence of ``(name, array, size)``: the initial states and their last axis
    (the first one is the output state, which ``recurrent_dropout_mask`` matches).
    """
    input_size = _checks.static_int("input_size", input_size)
    hidden_size = _checks.static_int("hidden_size", hidden_size)
    num_layers = _checks.static_int("num_layers", num_layers)
    proj_size = _checks.static_int("proj_size", proj_size, low=0)
    if proj_size >= hidden_size:
        raise ValueError(f"`proj_size` must be smaller than `hidden_size`={hidden_size} (as in "
                         f"PyTorch); got {proj_size}.")
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
    if recurrent_dropout_mask is not None:
        _check_recurrent_mask(family, recurrent_dropout_mask, states[0][2], num_layers,
                              num_directions, batch, proj_size)
    for name, a, size in states:
        shape, dtype = _checks.shape_dtype(name, a)
        legend = "proj_size" if size == proj_size and proj_size else "hidden_size"
        _checks.state_shape(name, shape, (num_layers * num_directions, batch, size),
                            f"(num_layers * num_directions, batch, {legend})", x_name="x",
                            batch=(batch,), steps=steps, size_name=legend)
        _checks.floating(name, dtype)
    w_shape, w_dtype = _checks.shape_dtype("weights", weights)
    n = _weights.num_params(input_size, hidden_size, num_layers, bidirectional, family,
                            proj_size)
    _checks.expect_shape("weights", w_shape, (n,), f"(get_num_params_in_{family}(...),)")
    _checks.floating("weights", w_dtype)
    if dropout_rng is not None:
        _checks.prng_key("dropout_rng", dropout_rng)
    if dropout > 0 and num_layers > 1 and dropout_rng is None:
        raise ValueError(
            f"`dropout`={dropout} needs a random key: pass `dropout_rng=jax.random.key(...)` "
            "when training, or `dropout=0.0` for inference.")
    return dropout, _checks.seq_lengths(seq_lengths, batch, steps)


def _check_recurrent_mask(family, mask, size, num_layers, num_directions, batch, proj_size):
    shape, dtype = _checks.shape_dtype("recurrent_dropout_mask", mask)
    legend = "proj_size" if proj_size else "hidden_size"
    gates = _weights.GATES[family]
    one = (num_layers * num_directions, batch, size)
    per_gate = (num_layers * num_directions, gates, batch, size)
    if tuple(shape) not in ((one, per_gate) if gates > 1 else (one,)):
        expected = f"(num_layers * num_directions, batch, {legend})={one}"
        if gates > 1:
            expected += (f", or (num_layers * num_directions, gates, batch, {legend})="
                         f"{per_gate} for one mask per gate")
        raise ValueError(f"`recurrent_dropout_mask` must have shape {expected}; got "
                         f"{tuple(shape)}.")
    _checks.floating("recurrent_dropout_mask", dtype)


def recurrent_mask(mask):
    """`recurrent_dropout_mask` for the driver: (L*D, K, B, S), K = 1 or one per gate."""
    return mask[:, None] if mask is not None and mask.ndim == 3 else mask


def scan_matmul_dtype(dtype, caps: Capabilities):
    """On CPUs, 16-bit matmul operands go to the backend as float32 (same products, faster)."""
    return np.dtype(np.float32) if caps.platform == "cpu" and dtype.itemsize == 2 else None


def scan_options(cell, x, caps: Capabilities) -> dict:
    """The scan driver's platform-dependent static options (`rnn_scan` keywords): on CPUs the
    16-bit matmul dtype above, and the input projection per step inside the loop where the cell
    measured it faster."""
    return {"matmul_dtype": scan_matmul_dtype(x.dtype, caps),
            "project_in_loop": (caps.platform == "cpu"
                                and cell.project_in_loop(x.shape[0], x.dtype))}


RECURRENT_DROPOUT_NOTE = ("recurrent_dropout_mask: the recurrent product reads h * mask (the "
                          "carry keeps h)")


def scan_notes(dtypes, seq_dtype, dropout, has_rng, num_layers, caps,
               state="cell state", recurrent_dropout=False) -> tuple[str, ...]:
    out = [RECURRENT_DROPOUT_NOTE] if recurrent_dropout else []
    low = sorted({str(d) for d in dtypes.values() if d.itemsize == 2})
    if low:
        out.append(f"{'/'.join(low)}: matmuls accumulate in float32, {state} in float32")
    if scan_matmul_dtype(dtypes["x"], caps) is not None:
        out.append("CPU: 16-bit matmul operands multiplied as float32 (exact products)")
    if seq_dtype is not None and seq_dtype != np.int32:
        out.append(f"seq_lengths {seq_dtype} cast to int32")
    if dropout > 0 and has_rng and num_layers > 1:
        out.append(f"dropout {dropout} between layers from dropout_rng")
    return tuple(out)


def mask_padding(x, seq_lengths):
    """`x` with zeros past each length: padding never reaches a result or gradient (even NaN)."""
    if seq_lengths is None:
        return x
    valid = jnp.arange(x.shape[1], dtype=jnp.int32)[None, :] < seq_lengths[:, None]
    return jnp.where(valid[..., None], x, jnp.zeros((), x.dtype))


# --- GRU and simple RNN -----------------------------------------------------------------------

def _decide(family, x, h_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
            bidirectional, precision, dropout_rng, implementation, capabilities,
            recurrent_dropout_mask):
    dropout, lengths = check_args(
        family, x, [("h_0", h_0, hidden_size)], weights, seq_lengths, input_size, hidden_size,
        num_layers, dropout, bidirectional, precision, dropout_rng, implementation,
        recurrent_dropout_mask=recurrent_dropout_mask)
    caps = _dispatch.resolve_capabilities(capabilities)
    dtypes = {name: _checks.shape_dtype(name, a)[1]
              for name, a in (("x", x), ("h_0", h_0), ("weights", weights))}
    seq_dtype = None if seq_lengths is None else _checks.shape_dtype("seq_lengths",
                                                                     seq_lengths)[1]
    has_rng = dropout_rng is not None
    what = "GRU" if family == "gru" else "RNN"
    rejects = {
        "cudnn": lambda: tuple(cudnn_platform_rejects(caps, what)) + (NO_CUDNN[family],),
        "scan": lambda: (),
    }
    notes = {
        "cudnn": lambda: (),
        "scan": lambda: scan_notes(dtypes, seq_dtype, dropout, has_rng, num_layers, caps,
                                   state="hidden state",
                                   recurrent_dropout=recurrent_dropout_mask is not None),
    }
    decision = _dispatch.decide(family, IMPLEMENTATIONS, rejects, notes, implementation, None,
                                caps)
    return decision, dropout, lengths


def _run(cell, x, h_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
         bidirectional, precision, dropout_rng, implementation, capabilities,
         recurrent_dropout_mask):
    x, h_0, weights = (_checks.array(name, a) for name, a in
                       (("x", x), ("h_0", h_0), ("weights", weights)))
    if recurrent_dropout_mask is not None:
        recurrent_dropout_mask = _checks.array("recurrent_dropout_mask", recurrent_dropout_mask)
    decision, dropout, seq_lengths = _decide(
        cell.family, x, h_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
        bidirectional, precision, dropout_rng, implementation, capabilities,
        recurrent_dropout_mask)
    _dispatch.report_fallback(decision)
    x = mask_padding(x, seq_lengths)
    with jax.named_scope(f"portable_rnn.{cell.family}.scan"):
        y, (h_n,) = rnn_scan(cell, x, (h_0,), weights, seq_lengths, int(input_size),
                             int(hidden_size), int(num_layers), dropout, bool(bidirectional),
                             precision, dropout_rng,
                             recurrent_mask=recurrent_mask(recurrent_dropout_mask),
                             **scan_options(cell, x, decision.capabilities))
    return y, h_n


_ARGS_DOC = """
    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and the initial state are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ...
      weights: the flat weight vector, (P,) with ``P = {num}(I, H, L, bidirectional)``; layout
        in `{unpack}`.
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
      implementation: None (automatic) or ``"scan"`` (pure JAX, every backend). ``"cudnn"``
        raises: JAX exposes no cuDNN kernel for this cell.
      capabilities: a `Capabilities` to decide for instead of the probed machine.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step); the rest of the step (the GRU's ``z * h``), the carried
        state and ``h_n`` use the unmasked ``h``. {gates}Pass the keep-mask already scaled,
        e.g. ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.

    Returns:
      ``(y, h_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length; ``h_n``
      (L*D, B, H), the state at each sequence's last valid step (``h_0`` for length 0), in
      ``h_0``'s dtype. For 16-bit inputs, matmuls accumulate in float32 and the hidden state is
      carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value.
"""


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
    return _run(GRUCell(), x, h_0, weights, seq_lengths, input_size, hidden_size, num_layers,
                dropout, bidirectional, precision, dropout_rng, implementation, capabilities,
                recurrent_dropout_mask)


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
    _check_nonlinearity(nonlinearity)
    return _run(SimpleRNNCell(nonlinearity), x, h_0, weights, seq_lengths, input_size,
                hidden_size, num_layers, dropout, bidirectional, precision, dropout_rng,
                implementation, capabilities, recurrent_dropout_mask)


def _check_nonlinearity(nonlinearity):
    if nonlinearity not in NONLINEARITIES:
        raise ValueError("`nonlinearity` must be one of 'tanh', 'relu' (as PyTorch nn.RNN); got "
                         f"{nonlinearity!r}.")


def explain_gru(x, h_0, weights, seq_lengths, input_size: int, hidden_size: int,
                num_layers: int, dropout: float, bidirectional: bool,
                precision: lax.PrecisionLike = None, *, dropout_rng=None,
                implementation: str | None = None, capabilities: Capabilities | None = None,
                recurrent_dropout_mask=None) -> Decision:
    """The routing decision `gru` would make for these arguments (arrays or
    `jax.ShapeDtypeStruct`s), with reasons; runs nothing and raises what `gru` would raise."""
    return _decide("gru", x, h_0, weights, seq_lengths, input_size, hidden_size, num_layers,
                   dropout, bidirectional, precision, dropout_rng, implementation,
                   capabilities, recurrent_dropout_mask)[0]


def explain_simple_rnn(x, h_0, weights, seq_lengths, input_size: int, hidden_size: int,
                       num_layers: int, dropout: float, bidirectional: bool,
                       precision: lax.PrecisionLike = None, *, nonlinearity: str = "tanh",
                       dropout_rng=None, implementation: str | None = None,
                       capabilities: Capabilities | None = None,
                       recurrent_dropout_mask=None) -> Decision:
    """The routing decision `simple_rnn` would make for these arguments, with reasons; runs
    nothing and raises what `simple_rnn` would raise."""
    _check_nonlinearity(nonlinearity)
    return _decide("simple_rnn", x, h_0, weights, seq_lengths, input_size, hidden_size,
                   num_layers, dropout, bidirectional, precision, dropout_rng, implementation,
                   capabilities, recurrent_dropout_mask)[0]


gru.__doc__ = gru.__doc__.replace("{args}", _ARGS_DOC.format(
    num="get_num_params_in_gru", unpack="unpack_gru_weights",
    gates="(L*D, 3, B, H): one mask per gate, in the order r, z, n, for that gate's block of\n"
          "        ``W_hh h`` (Keras 3's GRU with ``recurrent_dropout``). "))
simple_rnn.__doc__ = simple_rnn.__doc__.replace("{args}", _ARGS_DOC.format(
    num="get_num_params_in_simple_rnn", unpack="unpack_simple_rnn_weights", gates=""))

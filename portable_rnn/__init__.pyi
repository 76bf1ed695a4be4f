# Written by `python -m portable_rnn._src.tools.stubs` from the live objects; do not edit.
# ruff: noqa: E501
"""portable_rnn: JAX recurrent networks (LSTM, GRU, RNN) and attention that run everywhere,
fast where they can.
"""

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from portable_rnn import equinox as equinox
from portable_rnn import keras as keras
from portable_rnn import linen as linen
from portable_rnn import nnx as nnx
from portable_rnn._src.core.capabilities import Capabilities as Capabilities
from portable_rnn._src.core.dispatch import Decision as Decision
from portable_rnn._src.core.dispatch import FallbackError as FallbackError
from portable_rnn._src.core.dispatch import FallbackWarning as FallbackWarning
from portable_rnn._src.core.dispatch import Policy

__version__: str

def capabilities() -> Capabilities:
    """Probes the machine once: its GPU (or default device), and jaxlib's CUDA/cuDNN versions.

    The answer comes from the devices, never from whether an import succeeds
    (`jax.experimental.rnn` imports fine on a CPU and fails only when traced). A GPU counts even
    when the CPU is the default backend: which platform runs a call is settled per lowering (a
    call routed to cuDNN carries a portable branch for the other platforms).
    """

def classic_gru(
    x: ArrayLike,
    h_0: ArrayLike,
    weights: ArrayLike,
    seq_lengths: ArrayLike | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | None = None,
    remat_every: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """A multi-layer (bidirectional) classic GRU (reset gate before the recurrent product).

    Gates z, r, h (Keras' ``GRU(reset_after=False)``, Cho et al. 2014): ``z = sigmoid(W_iz x +
    W_hz h + b_z)``, ``r = sigmoid(W_ir x + W_hr h + b_r)``, ``hh = tanh(W_ih x + W_hh (r * h) +
    b_h)``, ``h' = z * h + (1 - z) * hh``, with ``b = b_ih + b_hh``. The reset gate scales ``h``
    before the candidate's recurrent product (PyTorch's and cuDNN's GRU, `gru`, scale the
    product instead).

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ....
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_classic_gru(I, H, L, bidirectional)``; layout in `unpack_classic_gru_weights`
        (PyTorch's and cuDNN's: all matrices of every pseudo-layer, then all biases).
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every
        path.
      implementation: None (automatic; see `explain_classic_gru` and `policy`) or one of, in
        order of preference: ``"cudnn"`` (always raises: JAX exposes no cuDNN kernel for this
        cell), ``"cudnn_ffi"`` (always raises: cuDNN has no such cell), ``"pallas"``
        (portable_rnn's Pallas TPU kernel) or ``"scan"`` (pure JAX, every backend). The
        automatic choice takes a fused route only where its benchmark shows it faster than the
        scan path. A route asked for that cannot serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).
      num_heads: must be 1: the classic GRU's step computes its own recurrent products and has
        no heads.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step; the rest of the step, the carried state and the final
        state use the unmasked ``h``). (L*D, 3, B, H): one mask per gate, in the order z, r, h, for that gate's block of ``W_hh h`` (Keras 3's GRU with ``recurrent_dropout``). Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.
      remat_every: segment checkpointing of a gradient, every ``remat_every`` steps (an int >=
        1): the forward keeps each layer's states only at the start of each segment and the
        backward runs each segment's forward again before its backward, so that a gradient keeps
        T / remat_every states and one segment's residuals instead of every step's, for the time
        of one more forward. None (automatic): segments of about sqrt(T) steps where the
        residuals of every step would take more than the policy's share of one device's memory
        (``policy(recurrent_memory_fraction=...)``, a quarter by default), else none;
        ``policy(remat_every=...)`` sets it for the calls that do not pass it (a layer's).
        `explain_classic_gru` says which and why. The steps are the same: the outputs, final
        states and initial states' gradients come out as without segments (up to how XLA
        compiles a segment's products); the gradients of ``x`` and the weights are products and
        sums per segment, the same terms summed in another order.

    Returns:
      ``(y, h_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length;
      ``h_n`` (L*D, B, H), the states at each sequence's last
      valid step (the initial states for length 0), in the initial states' dtypes, so they can
      be fed back as a carry. For 16-bit inputs, matmuls accumulate in float32 and the
      hidden state is carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_classic_gru_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h_0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> lengths = jnp.array([5, 2])
      >>> y, *final = portable_rnn.classic_gru(x, h_0, w, lengths, I, H, L, 0.0, False)
      >>> y.shape, y.dtype, [s.shape for s in final], bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), [(1, 2, 4)], True)
    """

def classic_gru_weights_from_keras(
    keras_weights: Sequence[Any],
    *,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat ClassicGRU weights from the weights of Keras 3 ``keras.layers.GRU(reset_after=False)`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, 3H), recurrent_kernel (H, 3H), bias (3H,)]``, the kernels ``W_ih.T`` and
    ``W_hh.T`` with the gate blocks in the order of our z, r, h. Keras' gates are z, r, h, as
    ours; its one bias (3H,) becomes ``b_ih`` (``b_hh`` is zero), and ``b_ih + b_hh`` when
    writing. A Keras GRU with ``reset_after=True`` (bias (2, 3H)) computes PyTorch's equations:
    convert it with `gru_weights_from_keras`.

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_classic_gru_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected).

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 3 * H)), np.ones((H, 3 * H)), np.zeros(3 * H)]
      >>> portable_rnn.classic_gru_weights_from_keras(layer + layer).shape == (  # a Bidirectional's
      ...     portable_rnn.get_num_params_in_classic_gru(I, H, 1, True),)
      True
    """

def classic_gru_weights_to_keras(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    use_bias: bool = True,
) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.GRU(reset_after=False)`` layers from flat ClassicGRU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets ``[kernel (I or D*H, 3H), recurrent_kernel (H, 3H), bias
    (3H,)]``, gates in Keras' order; see `classic_gru_weights_from_keras`.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.GRU`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_classic_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.classic_gru_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 12), (4, 12), (12,)]
    """

def dot_product_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    *,
    scale: float | jax.Array | None = None,
    is_causal: bool = False,
    causal_alignment: Literal['top_left', 'bottom_right'] = "top_left",
    query_seq_lengths: jax.Array | None = None,
    key_value_seq_lengths: jax.Array | None = None,
    query_segment_ids: jax.Array | None = None,
    key_value_segment_ids: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
    local_window_size: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    return_residual: bool = False,
    precision: lax.PrecisionLike | None = None,
    implementation: Literal["cudnn", "splash", "flash", "chunked", "xla"] | None = None,
    capabilities: Capabilities | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Scaled dot-product attention, a drop-in for `jax.nn.dot_product_attention`.

    Shapes: ``B`` batch, ``T`` query length, ``S`` key length, ``N`` query heads, ``K`` key/value
    heads (N a multiple of K: GQA, MQA), ``H`` head dim.

    ``softmax(cap(query @ key^T * scale) + bias) @ value`` per head, ``cap`` the logits soft cap
    (or none), over the keys each query may see: `mask` True, not in the future when `is_causal`
    (``s <= t``), inside `local_window_size` ``(left, right)`` (``t - left <= s <= t + right``),
    within both sequence lengths, and in the query's own segment (segment ids equal). With
    ``causal_alignment="bottom_right"``, causality and the window read query t at key
    ``t + S - T``. A query that sees no key at all gets 0 (and zero gradients), never NaN and
    never the average of masked keys. Softmax runs in float32 for 16-bit inputs; the output has
    `query`'s dtype. Complex inputs run on the dense path with the complex softmax, as Flax's
    attention does.

    Args:
      query: (B, T, N, H) or (T, N, H).
      key: (B, S, K, H) or (S, K, H).
      value: the shape of `key`.
      bias: additive logits bias, broadcastable to (B, N, T, S) (up to 4-D).
      mask: boolean, True where attention is allowed, broadcastable to (B, N, T, S).
      scale: logits scale, a Python float or a scalar array (traced, e.g. a learned
        temperature: differentiable; not on cuDNN); default ``1 / sqrt(H)``.
      is_causal: mask keys after each query (aligned as `causal_alignment` says).
      causal_alignment: where query t sits among the keys, for causality and the window:
        ``"top_left"`` (key t, as `jax.nn`) or ``"bottom_right"`` (key ``t + S - T``: the last
        query at the last key, decoding with a key/value cache; PyTorch's
        ``causal_lower_right``, flash-attn's). The same when T == S.
      query_seq_lengths: (B,) valid query lengths, any integer dtype; rows past them are 0.
      key_value_seq_lengths: (B,) valid key lengths, any integer dtype.
      query_segment_ids: (B, T) integer ids (int32; (T,) for unbatched inputs), with
        `key_value_segment_ids`: a query sees only keys whose id equals its own (packed
        sequences). Any values: equal ids, one segment; no id is special.
      key_value_segment_ids: (B, S) integer ids of the keys.
      segment_ids: (B, T) ids of both the queries and the keys (self-attention, T == S);
        instead of the two above.
      local_window_size: ``w`` or ``(left, right)``: each query sees keys in
        ``[t - left, t + right]``.
      logits_soft_cap: None or a float ``cap > 0``: the scaled logits become
        ``cap * tanh(logits / cap)`` (Gemma 2's, the splash kernel's
        ``attn_logits_soft_cap``), before `bias` is added and before masking. Not on cuDNN or
        flash.
      return_residual: also return, as `jax.nn.dot_product_attention` does, the log-sum-exp of
        each query's (scaled, biased) logits over its visible keys, (B, T, N) or (T, N), in
        `query`'s dtype, with its gradient (``d lse / d logits`` is the softmax; `jax.nn`'s XLA
        path stops it, giving zero). A query that sees no key gets
        ``-0.7 * finfo(dtype).max`` (finite). Not on cuDNN; not for complex inputs.
      precision: of both products (``query @ key^T`` and ``weights @ value``, forward and
        backward), as in `jax.lax.dot_general`: None (JAX's default), a `jax.lax.Precision`
        or its name, a pair of them, or a dot algorithm. cuDNN serves a call only where it
        computes what was asked (16-bit operands: every `Precision`, and the
        ``BF16_BF16_F32`` / ``F16_F16_F32`` algorithm); the decision says which precision ran.
      implementation: None (automatic) or one of, in order of preference: ``"cudnn"``,
        ``"splash"`` or ``"flash"`` (JAX's Pallas TPU kernels), ``"chunked"``
        (memory-efficient, any backend) or ``"xla"`` (dense, any backend). The automatic
        choice takes cuDNN when it can serve the call, on a TPU the splash kernel where its
        benchmark shows it faster, else the chunked path for large T x S, else the dense one.
        A route asked for that cannot serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine.

    Returns:
      The attention output, shaped like `query`; with `return_residual`, ``(output, lse)``.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, or
        an explicit `implementation` that cannot serve the call.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> q = jnp.ones((2, 8, 4, 16), jnp.bfloat16)
      >>> kv = jnp.ones((2, 8, 2, 16), jnp.bfloat16)  # GQA: 2 key/value heads for 4 query heads
      >>> out = portable_rnn.dot_product_attention(q, kv, kv, is_causal=True,
      ...                                          key_value_seq_lengths=jnp.array([8, 0]))
      >>> out.shape, out.dtype, float(jnp.abs(out[1]).max())  # no visible key: 0
      ((2, 8, 4, 16), dtype(bfloat16), 0.0)
    """

def explain_attention(
    query: ArrayLike | jax.ShapeDtypeStruct,
    key: ArrayLike | jax.ShapeDtypeStruct,
    value: ArrayLike | jax.ShapeDtypeStruct,
    bias: ArrayLike | jax.ShapeDtypeStruct | None = None,
    mask: ArrayLike | jax.ShapeDtypeStruct | None = None,
    *,
    scale: float | ArrayLike | None = None,
    is_causal: bool = False,
    causal_alignment: Literal['top_left', 'bottom_right'] = "top_left",
    query_seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None = None,
    key_value_seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None = None,
    query_segment_ids: ArrayLike | jax.ShapeDtypeStruct | None = None,
    key_value_segment_ids: ArrayLike | jax.ShapeDtypeStruct | None = None,
    segment_ids: ArrayLike | jax.ShapeDtypeStruct | None = None,
    local_window_size: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    return_residual: bool = False,
    precision: lax.PrecisionLike | None = None,
    implementation: Literal["cudnn", "splash", "flash", "chunked", "xla"] | None = None,
    capabilities: Capabilities | None = None,
) -> Decision:
    """The routing decision `dot_product_attention` would make, with reasons; runs nothing.

    Takes the same arguments (arrays or `jax.ShapeDtypeStruct`s) and raises what
    `dot_product_attention` would raise for them, except a policy's ``on_fallback="error"``.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> q = jax.ShapeDtypeStruct((2, 4096, 8, 64), jnp.float32)
      >>> cpu = portable_rnn.Capabilities("cpu")
      >>> portable_rnn.explain_attention(q, q, q, capabilities=cpu).implementation
      'chunked'
    """

def explain_classic_gru(
    x: ArrayLike | jax.ShapeDtypeStruct,
    h_0: ArrayLike | jax.ShapeDtypeStruct,
    weights: ArrayLike | jax.ShapeDtypeStruct,
    seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | jax.ShapeDtypeStruct | None = None,
    remat_every: int | None = None,
) -> Decision:
    """The routing decision `classic_gru` would make for these arguments, with reasons.

    Runs nothing.

    Takes the arguments of `classic_gru`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `classic_gru`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> S = jax.ShapeDtypeStruct
      >>> cpu = portable_rnn.Capabilities("cpu", None, None, "cpu")
      >>> n = portable_rnn.get_num_params_in_classic_gru(32, 64, 1, False)
      >>> d = portable_rnn.explain_classic_gru(
      ...     S((8, 10, 32), jnp.float32), *[S((1, 8, 64), jnp.float32)] * 1,
      ...     S((n,), jnp.float32), None, 32, 64, 1, 0.0, False, capabilities=cpu)
      >>> d.implementation, d.rejected["pallas"][0].split(":")[0]
      ('scan', "platform is 'cpu'")
    """

def explain_gru(
    x: ArrayLike | jax.ShapeDtypeStruct,
    h_0: ArrayLike | jax.ShapeDtypeStruct,
    weights: ArrayLike | jax.ShapeDtypeStruct,
    seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | jax.ShapeDtypeStruct | None = None,
    remat_every: int | None = None,
) -> Decision:
    """The routing decision `gru` would make for these arguments, with reasons.

    Runs nothing.

    Takes the arguments of `gru`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `gru`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> S = jax.ShapeDtypeStruct
      >>> cpu = portable_rnn.Capabilities("cpu", None, None, "cpu")
      >>> n = portable_rnn.get_num_params_in_gru(32, 64, 1, False)
      >>> d = portable_rnn.explain_gru(
      ...     S((8, 10, 32), jnp.float32), *[S((1, 8, 64), jnp.float32)] * 1,
      ...     S((n,), jnp.float32), None, 32, 64, 1, 0.0, False, capabilities=cpu)
      >>> d.implementation, d.rejected["pallas"][0].split(":")[0]
      ('scan', "platform is 'cpu'")
    """

def explain_lstm(
    x: ArrayLike | jax.ShapeDtypeStruct,
    h_0: ArrayLike | jax.ShapeDtypeStruct,
    c_0: ArrayLike | jax.ShapeDtypeStruct,
    weights: ArrayLike | jax.ShapeDtypeStruct,
    seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    proj_size: int = 0,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | jax.ShapeDtypeStruct | None = None,
    remat_every: int | None = None,
) -> Decision:
    """The routing decision `lstm` would make for these arguments, with reasons.

    Runs nothing.

    Takes the arguments of `lstm`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `lstm`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> S = jax.ShapeDtypeStruct
      >>> cpu = portable_rnn.Capabilities("cpu", None, None, "cpu")
      >>> n = portable_rnn.get_num_params_in_lstm(32, 64, 1, False)
      >>> d = portable_rnn.explain_lstm(
      ...     S((8, 10, 32), jnp.float32), *[S((1, 8, 64), jnp.float32)] * 2,
      ...     S((n,), jnp.float32), None, 32, 64, 1, 0.0, False, capabilities=cpu)
      >>> d.implementation, d.rejected["pallas"][0].split(":")[0]
      ('scan', "platform is 'cpu'")
    """

def explain_mgu(
    x: ArrayLike | jax.ShapeDtypeStruct,
    h_0: ArrayLike | jax.ShapeDtypeStruct,
    weights: ArrayLike | jax.ShapeDtypeStruct,
    seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    reset_gate: bool = True,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | jax.ShapeDtypeStruct | None = None,
    remat_every: int | None = None,
) -> Decision:
    """The routing decision `mgu` would make for these arguments, with reasons.

    Runs nothing.

    Takes the arguments of `mgu`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `mgu`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> S = jax.ShapeDtypeStruct
      >>> cpu = portable_rnn.Capabilities("cpu", None, None, "cpu")
      >>> n = portable_rnn.get_num_params_in_mgu(32, 64, 1, False)
      >>> d = portable_rnn.explain_mgu(
      ...     S((8, 10, 32), jnp.float32), *[S((1, 8, 64), jnp.float32)] * 1,
      ...     S((n,), jnp.float32), None, 32, 64, 1, 0.0, False, capabilities=cpu)
      >>> d.implementation, d.rejected["pallas"][0].split(":")[0]
      ('scan', "platform is 'cpu'")
    """

def explain_simple_rnn(
    x: ArrayLike | jax.ShapeDtypeStruct,
    h_0: ArrayLike | jax.ShapeDtypeStruct,
    weights: ArrayLike | jax.ShapeDtypeStruct,
    seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    nonlinearity: str = "tanh",
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | jax.ShapeDtypeStruct | None = None,
    remat_every: int | None = None,
) -> Decision:
    """The routing decision `simple_rnn` would make for these arguments, with reasons.

    Runs nothing.

    Takes the arguments of `simple_rnn`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `simple_rnn`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> S = jax.ShapeDtypeStruct
      >>> cpu = portable_rnn.Capabilities("cpu", None, None, "cpu")
      >>> n = portable_rnn.get_num_params_in_simple_rnn(32, 64, 1, False)
      >>> d = portable_rnn.explain_simple_rnn(
      ...     S((8, 10, 32), jnp.float32), *[S((1, 8, 64), jnp.float32)] * 1,
      ...     S((n,), jnp.float32), None, 32, 64, 1, 0.0, False, capabilities=cpu)
      >>> d.implementation, d.rejected["pallas"][0].split(":")[0]
      ('scan', "platform is 'cpu'")
    """

def explain_slstm(
    x: ArrayLike | jax.ShapeDtypeStruct,
    h_0: ArrayLike | jax.ShapeDtypeStruct,
    c_0: ArrayLike | jax.ShapeDtypeStruct,
    n_0: ArrayLike | jax.ShapeDtypeStruct,
    m_0: ArrayLike | jax.ShapeDtypeStruct,
    weights: ArrayLike | jax.ShapeDtypeStruct,
    seq_lengths: ArrayLike | jax.ShapeDtypeStruct | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | jax.ShapeDtypeStruct | None = None,
    remat_every: int | None = None,
) -> Decision:
    """The routing decision `slstm` would make for these arguments, with reasons.

    Runs nothing.

    Takes the arguments of `slstm`, as arrays or `jax.ShapeDtypeStruct`s, and raises what `slstm`
    would raise for them. The policy's `on_fallback` is not applied (nothing warns or raises
    because of a fallback).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> S = jax.ShapeDtypeStruct
      >>> cpu = portable_rnn.Capabilities("cpu", None, None, "cpu")
      >>> n = portable_rnn.get_num_params_in_slstm(32, 64, 1, False)
      >>> d = portable_rnn.explain_slstm(
      ...     S((8, 10, 32), jnp.float32), *[S((1, 8, 64), jnp.float32)] * 4,
      ...     S((n,), jnp.float32), None, 32, 64, 1, 0.0, False, capabilities=cpu)
      >>> d.implementation, d.rejected["pallas"][0].split(":")[0]
      ('scan', "platform is 'cpu'")
    """

def get_num_params_in_classic_gru(
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> int:
    """Length of the flat weight vector of a classic GRU (reset gate before the recurrent product) (gates z, r, h; the
    cuDNN/PyTorch layout of `unpack_classic_gru_weights`).

    Examples:
      >>> import portable_rnn
      >>> portable_rnn.get_num_params_in_classic_gru(3, 4, 1, False)  # 3H * (I + H + 2)
      108
    """

def get_num_params_in_gru(
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> int:
    """Length of the flat weight vector of a GRU (gates r, z, n; the
    cuDNN/PyTorch layout of `unpack_gru_weights`).

    Examples:
      >>> import portable_rnn
      >>> portable_rnn.get_num_params_in_gru(3, 4, 1, False)  # 3H * (I + H + 2)
      108
    """

def get_num_params_in_lstm(
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    proj_size: int = 0,
    *,
    num_heads: int = 1,
) -> int:
    """Length of the flat weight vector of an LSTM (gates i, f, g, o; the
    cuDNN/PyTorch layout of `unpack_lstm_weights`).

    Examples:
      >>> import portable_rnn
      >>> portable_rnn.get_num_params_in_lstm(3, 4, 1, False)  # 4H * (I + H + 2)
      144
    """

def get_num_params_in_mgu(
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> int:
    """Length of the flat weight vector of a minimal gated unit (MGU) (gates f, n; the
    cuDNN/PyTorch layout of `unpack_mgu_weights`).

    Examples:
      >>> import portable_rnn
      >>> portable_rnn.get_num_params_in_mgu(3, 4, 1, False)  # 2H * (I + H + 2)
      72
    """

def get_num_params_in_simple_rnn(
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> int:
    """Length of the flat weight vector of an Elman RNN (gates a single block; the
    cuDNN/PyTorch layout of `unpack_simple_rnn_weights`).

    Examples:
      >>> import portable_rnn
      >>> portable_rnn.get_num_params_in_simple_rnn(3, 4, 1, False)  # 1H * (I + H + 2)
      36
    """

def get_num_params_in_slstm(
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> int:
    """Length of the flat weight vector of an sLSTM (xLSTM's scalar LSTM with exponential gating) (gates i, f, z, o; the
    cuDNN/PyTorch layout of `unpack_slstm_weights`).

    Examples:
      >>> import portable_rnn
      >>> portable_rnn.get_num_params_in_slstm(3, 4, 1, False)  # 4H * (I + H + 2)
      144
    """

def gru(
    x: ArrayLike,
    h_0: ArrayLike,
    weights: ArrayLike,
    seq_lengths: ArrayLike | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | None = None,
    remat_every: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """A multi-layer (bidirectional) GRU with PyTorch ``nn.GRU(batch_first=True)`` semantics.

    Gates r, z, n; the reset gate multiplies ``W_hn h + b_hn`` (also cuDNN's GRU and Keras'
    ``reset_after=True``): ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n
    + z * h``.

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ....
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_gru(I, H, L, bidirectional)``; layout in `unpack_gru_weights`
        (PyTorch's and cuDNN's: all matrices of every pseudo-layer, then all biases).
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every
        path.
      implementation: None (automatic; see `explain_gru` and `policy`) or one of, in order of
        preference: ``"cudnn"`` (always raises: JAX exposes no cuDNN kernel for this cell),
        ``"cudnn_ffi"`` (portable_rnn's own cuDNN call, built on first use), ``"pallas"``
        (portable_rnn's Pallas TPU kernel) or ``"scan"`` (pure JAX, every backend). The
        automatic choice takes a fused route only where its benchmark shows it faster than the
        scan path. A route asked for that cannot serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step; the rest of the step, the carried state and the final
        state use the unmasked ``h``). (L*D, 3, B, H): one mask per gate, in the order r, z, n, for that gate's block of ``W_hh h`` (Keras 3's GRU with ``recurrent_dropout``). Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.
      remat_every: segment checkpointing of a gradient, every ``remat_every`` steps (an int >=
        1): the forward keeps each layer's states only at the start of each segment and the
        backward runs each segment's forward again before its backward, so that a gradient keeps
        T / remat_every states and one segment's residuals instead of every step's, for the time
        of one more forward. None (automatic): segments of about sqrt(T) steps where the
        residuals of every step would take more than the policy's share of one device's memory
        (``policy(recurrent_memory_fraction=...)``, a quarter by default), else none;
        ``policy(remat_every=...)`` sets it for the calls that do not pass it (a layer's).
        `explain_gru` says which and why. The steps are the same: the outputs, final states and
        initial states' gradients come out as without segments (up to how XLA compiles a
        segment's products); the gradients of ``x`` and the weights are products and sums per
        segment, the same terms summed in another order.

    Returns:
      ``(y, h_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length;
      ``h_n`` (L*D, B, H), the states at each sequence's last
      valid step (the initial states for length 0), in the initial states' dtypes, so they can
      be fed back as a carry. For 16-bit inputs, matmuls accumulate in float32 and the
      hidden state is carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h_0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> lengths = jnp.array([5, 2])
      >>> y, *final = portable_rnn.gru(x, h_0, w, lengths, I, H, L, 0.0, False)
      >>> y.shape, y.dtype, [s.shape for s in final], bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), [(1, 2, 4)], True)
    """

def gru_weights_from_flax(
    params: Any,
    *,
    shared_cell: bool | None = None,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat GRU weights from Flax ``nn.RNN(nn.GRUCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. The cell's
    Dense layers per gate (r, z, n): ``ir``/``hr``, ``iz``/``hz``, ``in``/``hn``. Flax's GRUCell
    computes PyTorch's equations, gate names r, z, n alike, except for where the biases sit: its
    ``hr`` and ``hz`` Dense have no bias (``ir``, ``iz``, ``in`` and ``hn`` have one), so ``b_ih
    = [b_ir, b_iz, b_in]`` and ``b_hh = [0, 0, b_hn]`` when reading, and ``b_hr``, ``b_hz`` are
    summed into the ``ir`` and ``iz`` biases when writing (rounded once, in the weights' dtype):
    every GRU of this layout is representable. The default ``gate_fn`` (sigmoid) and
    ``activation_fn`` (tanh) are assumed: the parameters do not record them.

    Args:
      params: one layer's tree (``{'params': {'cell': ...}}``, ``{'cell': ...}`` or the
        cell dict itself), an ``nn.Bidirectional`` tree (``{'forward_rnn': ...,
        'backward_rnn': ...}``, optionally under ``'params'``), or a sequence of those for
        stacked layers, first layer first. Sizes, layer and direction counts are read from the
        kernels.
      shared_cell: whether an ``nn.Bidirectional``'s two RNNs share one cell (the same
        ``nn.RNN`` or cell object). Flax stores such a tree once, under ``'forward_rnn'``, and
        always writes ``'backward_rnn'`` otherwise, so None (the default) reads a tree without
        ``'backward_rnn'`` as shared: both directions get the same weights. True or False
        states it, and a tree that says otherwise is an error.
      dtype: casts the result; default: the parameters' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_gru_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold GRUCell parameters (the error names the missing
        Dense layers, and the cell it looks like), a kernel or bias has the wrong shape, or
        layers disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> rnn = nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.GRUCell(4)))
      >>> params = rnn.init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> w = portable_rnn.gru_weights_from_flax(params)
      >>> w.shape == (portable_rnn.get_num_params_in_gru(3, 4, 1, True),)
      True
    """

def gru_weights_from_keras(
    keras_weights: Sequence[Any],
    *,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat GRU weights from the weights of Keras 3 ``keras.layers.GRU(reset_after=True)`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, 3H), recurrent_kernel (H, 3H), bias (2, 3H)]``, the kernels ``W_ih.T`` and
    ``W_hh.T`` with the gate blocks in the order of our z, r, n. Keras' gates are z, r, h (ours
    r, z, n: the first two blocks swap); bias row 0 is ``b_ih``, row 1 ``b_hh``. With
    ``reset_after=True`` (Keras' default) the equations are PyTorch's. A GRU with
    ``reset_after=False`` (bias (3H,)) computes ``tanh(x W_h + (r * h) U_h + b_h)`` instead and
    is rejected; without bias (``use_bias=False``) the two cannot be told apart by their
    weights, so make sure such a layer has ``reset_after=True``.

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_gru_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected).

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 3 * H)), np.ones((H, 3 * H)), np.zeros((2, 3 * H))]
      >>> portable_rnn.gru_weights_from_keras(layer + layer).shape == (  # a Bidirectional's
      ...     portable_rnn.get_num_params_in_gru(I, H, 1, True),)
      True
    """

def gru_weights_from_torch(
    state_dict: Mapping[str, Any],
    *,
    prefix: str = "",
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat weights from a PyTorch ``nn.GRU`` state_dict (tensors or arrays).

    torch is not needed.

    Sizes, layer count and direction count are
    read from the keys and shapes. ``prefix`` selects one module inside a bigger model's
    state_dict (e.g. ``"encoder.rnn."``). Without biases (``bias=False``) zeros are used.
    ``dtype`` casts the result (default: the state_dict's dtype).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, True)
      >>> sd = portable_rnn.gru_weights_to_torch(w, 3, 4, 1, True, prefix="rnn.")
      >>> bool((portable_rnn.gru_weights_from_torch(sd, prefix="rnn.") == w).all())
      True
    """

def gru_weights_to_flax(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.GRUCell)`` parameters from flat GRU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. See `gru_weights_from_flax` for where the biases go.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}``
      (two RNNs, not shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN(nn.GRUCell)`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays
      in the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 2, False)
      >>> x = jnp.ones((1, 5, 3))
      >>> for tree in portable_rnn.gru_weights_to_flax(w, 3, 4, 2, False):
      ...     x = nn.RNN(nn.GRUCell(4)).apply(tree, x)
      >>> x.shape
      (1, 5, 4)
    """

def gru_weights_to_keras(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    use_bias: bool = True,
) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.GRU(reset_after=True)`` layers from flat GRU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets ``[kernel (I or D*H, 3H), recurrent_kernel (H, 3H), bias
    (2, 3H)]``, gates in Keras' order; see `gru_weights_from_keras`.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.GRU`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.gru_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 12), (4, 12), (2, 12)]
    """

def gru_weights_to_torch(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    prefix: str = "",
) -> dict[str, np.ndarray]:
    """A PyTorch ``nn.GRU`` state_dict (NumPy arrays) from the flat weights.

    Load it with ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> sorted(portable_rnn.gru_weights_to_torch(w, 3, 4, 1, False))
      ['bias_hh_l0', 'bias_ih_l0', 'weight_hh_l0', 'weight_ih_l0']
    """

def init_classic_gru_weight(
    rng: jax.Array,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    dtype: DTypeLike = jnp.float32,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Flat ClassicGRU weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's
    recurrent modules (and, for the LSTM
    without projection, bit-identical to ``jax.experimental.rnn.init_lstm_weight`` for the same
    key and the default ``dtype``).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_classic_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> w.shape, w.dtype, bool(jnp.abs(w).max() <= 0.5)
      ((108,), dtype('float32'), True)
    """

def init_gru_weight(
    rng: jax.Array,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    dtype: DTypeLike = jnp.float32,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Flat GRU weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's
    ``nn.GRU`` (and, for the LSTM
    without projection, bit-identical to ``jax.experimental.rnn.init_lstm_weight`` for the same
    key and the default ``dtype``).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 1, False)
      >>> w.shape, w.dtype, bool(jnp.abs(w).max() <= 0.5)
      ((108,), dtype('float32'), True)
    """

def init_lstm_weight(
    rng: jax.Array,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    dtype: DTypeLike = jnp.float32,
    *,
    proj_size: int = 0,
    num_heads: int = 1,
) -> jax.Array:
    """Flat LSTM weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's
    ``nn.LSTM`` (and, for the LSTM
    without projection, bit-identical to ``jax.experimental.rnn.init_lstm_weight`` for the same
    key and the default ``dtype``).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 1, False)
      >>> w.shape, w.dtype, bool(jnp.abs(w).max() <= 0.5)
      ((144,), dtype('float32'), True)
    """

def init_mgu_weight(
    rng: jax.Array,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    dtype: DTypeLike = jnp.float32,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Flat MGU weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's
    recurrent modules (and, for the LSTM
    without projection, bit-identical to ``jax.experimental.rnn.init_lstm_weight`` for the same
    key and the default ``dtype``).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_mgu_weight(jax.random.key(0), 3, 4, 1, False)
      >>> w.shape, w.dtype, bool(jnp.abs(w).max() <= 0.5)
      ((72,), dtype('float32'), True)
    """

def init_simple_rnn_weight(
    rng: jax.Array,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    dtype: DTypeLike = jnp.float32,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Flat SimpleRNN weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's
    ``nn.RNN`` (and, for the LSTM
    without projection, bit-identical to ``jax.experimental.rnn.init_lstm_weight`` for the same
    key and the default ``dtype``).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, False)
      >>> w.shape, w.dtype, bool(jnp.abs(w).max() <= 0.5)
      ((36,), dtype('float32'), True)
    """

def init_slstm_weight(
    rng: jax.Array,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    dtype: DTypeLike = jnp.float32,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Flat SLSTM weights drawn from U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's
    recurrent modules (and, for the LSTM
    without projection, bit-identical to ``jax.experimental.rnn.init_lstm_weight`` for the same
    key and the default ``dtype``).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_slstm_weight(jax.random.key(0), 3, 4, 1, False)
      >>> w.shape, w.dtype, bool(jnp.abs(w).max() <= 0.5)
      ((144,), dtype('float32'), True)
    """

def lstm(
    x: ArrayLike,
    h_0: ArrayLike,
    c_0: ArrayLike,
    weights: ArrayLike,
    seq_lengths: ArrayLike | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    proj_size: int = 0,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | None = None,
    remat_every: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A multi-layer (bidirectional) LSTM with PyTorch ``nn.LSTM(batch_first=True)`` semantics.

    Gates i, f, g, o: ``c' = f * c + i * g``, ``h' = o * tanh(c')``; positionally identical to
    `jax.experimental.rnn.lstm`. ``proj_size=P > 0`` projects each hidden state with ``W_hr``
    (P, H), as PyTorch's ``nn.LSTM(proj_size=P)``: ``h_0``/``h_n`` are (L*D, B, P), ``y`` is (B,
    T, D*P) and the weights include ``W_hr``; the cuDNN call has no projection, so such calls
    run the scan path.

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ....
      c_0: initial cell state, (L*D, B, H).
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_lstm(I, H, L, bidirectional)``; layout in `unpack_lstm_weights`
        (PyTorch's and cuDNN's: all matrices of every pseudo-layer, then all biases).
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every
        path.
      implementation: None (automatic; see `explain_lstm` and `policy`) or one of, in order of
        preference: ``"cudnn"`` (JAX's cuDNN LSTM call), ``"cudnn_ffi"`` (portable_rnn's own
        cuDNN call, built on first use), ``"pallas"`` (portable_rnn's Pallas TPU kernel) or
        ``"scan"`` (pure JAX, every backend). The automatic choice takes a fused route only
        where its benchmark shows it faster than the scan path. A route asked for that cannot
        serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).
      proj_size: ``P > 0`` (``P < H``) projects each hidden state with a ``W_hr`` (P, H) per
        layer and direction, as ``torch.nn.LSTM(proj_size=P)``: outputs have D*P features, ``h``
        is (L*D, ..., P) and ``W_hh`` (4H, P); the cuDNN call has no projection, so such calls
        run the scan path. Default 0: no projection.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step; the rest of the step, the carried state and the final
        state use the unmasked ``h``). (L*D, 4, B, H): one mask per gate, in the order i, f, g, o, for that gate's block of ``W_hh h`` (Keras 3's LSTM with ``recurrent_dropout``). Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.
      remat_every: segment checkpointing of a gradient, every ``remat_every`` steps (an int >=
        1): the forward keeps each layer's states only at the start of each segment and the
        backward runs each segment's forward again before its backward, so that a gradient keeps
        T / remat_every states and one segment's residuals instead of every step's, for the time
        of one more forward. None (automatic): segments of about sqrt(T) steps where the
        residuals of every step would take more than the policy's share of one device's memory
        (``policy(recurrent_memory_fraction=...)``, a quarter by default), else none;
        ``policy(remat_every=...)`` sets it for the calls that do not pass it (a layer's).
        `explain_lstm` says which and why. The steps are the same: the outputs, final states and
        initial states' gradients come out as without segments (up to how XLA compiles a
        segment's products); the gradients of ``x`` and the weights are products and sums per
        segment, the same terms summed in another order.

    Returns:
      ``(y, h_n, c_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length;
      ``h_n``, ``c_n`` (L*D, B, H), the states at each sequence's last
      valid step (the initial states for length 0), in the initial states' dtypes, so they can
      be fed back as a carry. For 16-bit inputs, matmuls accumulate in float32 and the
      cell state is carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h_0 = c_0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> lengths = jnp.array([5, 2])
      >>> y, *final = portable_rnn.lstm(x, h_0, c_0, w, lengths, I, H, L, 0.0, False)
      >>> y.shape, y.dtype, [s.shape for s in final], bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), [(1, 2, 4), (1, 2, 4)], True)
    """

def lstm_weights_from_flax(
    params: Any,
    *,
    shared_cell: bool | None = None,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat LSTM weights from Flax ``nn.RNN(nn.LSTMCell | nn.OptimizedLSTMCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. The cell's
    Dense layers per gate (i, f, g, o): ``ii``/``hi``, ``if``/``hf``, ``ig``/``hg``,
    ``io``/``ho``. Flax's LSTM cells have one bias per gate, on the hidden Dense (``hi``,
    ``hf``, ``hg``, ``ho``): it becomes ``b_hh`` when reading (``b_ih`` is zero), and each
    gate's ``b_ih + b_hh`` when writing. A projection (``proj_size``) has no Flax counterpart.

    Args:
      params: one layer's tree (``{'params': {'cell': ...}}``, ``{'cell': ...}`` or the
        cell dict itself), an ``nn.Bidirectional`` tree (``{'forward_rnn': ...,
        'backward_rnn': ...}``, optionally under ``'params'``), or a sequence of those for
        stacked layers, first layer first. Sizes, layer and direction counts are read from the
        kernels.
      shared_cell: whether an ``nn.Bidirectional``'s two RNNs share one cell (the same
        ``nn.RNN`` or cell object). Flax stores such a tree once, under ``'forward_rnn'``, and
        always writes ``'backward_rnn'`` otherwise, so None (the default) reads a tree without
        ``'backward_rnn'`` as shared: both directions get the same weights. True or False
        states it, and a tree that says otherwise is an error.
      dtype: casts the result; default: the parameters' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_lstm_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold LSTMCell/OptimizedLSTMCell parameters (the error names the missing
        Dense layers, and the cell it looks like), a kernel or bias has the wrong shape, or
        layers disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> rnn = nn.Bidirectional(nn.RNN(nn.OptimizedLSTMCell(4)), nn.RNN(nn.OptimizedLSTMCell(4)))
      >>> params = rnn.init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> w = portable_rnn.lstm_weights_from_flax(params)
      >>> w.shape == (portable_rnn.get_num_params_in_lstm(3, 4, 1, True),)
      True
    """

def lstm_weights_from_keras(
    keras_weights: Sequence[Any],
    *,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat LSTM weights from the weights of Keras 3 ``keras.layers.LSTM()`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, 4H), recurrent_kernel (H, 4H), bias (4H,)]``, the kernels ``W_ih.T`` and
    ``W_hh.T`` with the gate blocks in the order of our i, f, g, o. Keras' gates are i, f, c, o
    (ours i, f, g, o); its one bias becomes ``b_ih`` (``b_hh`` is zero) and ``b_ih + b_hh`` when
    writing. The default activations (tanh, and sigmoid for the gates) are assumed. A projection
    (``proj_size``) has no Keras counterpart.

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_lstm_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected).

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 4 * H)), np.ones((H, 4 * H)), np.zeros(4 * H)]
      >>> portable_rnn.lstm_weights_from_keras(layer + layer).shape == (  # a Bidirectional's
      ...     portable_rnn.get_num_params_in_lstm(I, H, 1, True),)
      True
    """

def lstm_weights_from_torch(
    state_dict: Mapping[str, Any],
    *,
    prefix: str = "",
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat weights from a PyTorch ``nn.LSTM`` state_dict (tensors or arrays).

    torch is not needed.

    Sizes, layer count and direction count and ``proj_size`` are
    read from the keys and shapes. ``prefix`` selects one module inside a bigger model's
    state_dict (e.g. ``"encoder.rnn."``). Without biases (``bias=False``) zeros are used.
    ``dtype`` casts the result (default: the state_dict's dtype).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 1, True)
      >>> sd = portable_rnn.lstm_weights_to_torch(w, 3, 4, 1, True, prefix="rnn.")
      >>> bool((portable_rnn.lstm_weights_from_torch(sd, prefix="rnn.") == w).all())
      True
    """

def lstm_weights_to_flax(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    proj_size: int = 0,
) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.LSTMCell | nn.OptimizedLSTMCell)`` parameters from flat LSTM weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. See `lstm_weights_from_flax` for where the biases go.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      proj_size: must be 0: a projection (PyTorch's ``proj_size``) has no Flax counterpart.

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}``
      (two RNNs, not shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN(nn.OptimizedLSTMCell)`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays
      in the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 2, False)
      >>> x = jnp.ones((1, 5, 3))
      >>> for tree in portable_rnn.lstm_weights_to_flax(w, 3, 4, 2, False):
      ...     x = nn.RNN(nn.OptimizedLSTMCell(4)).apply(tree, x)
      >>> x.shape
      (1, 5, 4)
    """

def lstm_weights_to_keras(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    proj_size: int = 0,
    use_bias: bool = True,
) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.LSTM()`` layers from flat LSTM weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets ``[kernel (I or D*H, 4H), recurrent_kernel (H, 4H), bias
    (4H,)]``, gates in Keras' order; see `lstm_weights_from_keras`.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      proj_size: must be 0: a projection (PyTorch's ``proj_size``) has no Keras counterpart.
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.LSTM`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.lstm_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 16), (4, 16), (16,)]
    """

def lstm_weights_to_torch(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    prefix: str = "",
    proj_size: int = 0,
) -> dict[str, np.ndarray]:
    """A PyTorch ``nn.LSTM`` state_dict (NumPy arrays) from the flat weights.

    Load it with ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 1, False)
      >>> sorted(portable_rnn.lstm_weights_to_torch(w, 3, 4, 1, False))
      ['bias_hh_l0', 'bias_ih_l0', 'weight_hh_l0', 'weight_ih_l0']
    """

def mgu(
    x: ArrayLike,
    h_0: ArrayLike,
    weights: ArrayLike,
    seq_lengths: ArrayLike | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    reset_gate: bool = True,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | None = None,
    remat_every: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """A multi-layer (bidirectional) minimal gated unit (MGU).

    Gates f, n, as Flax's ``nn.MGUCell``: ``f = sigmoid(W_if x + b_if + W_hf h + b_hf)``, ``n =
    tanh(W_in x + b_in + f * (W_hn h + b_hn))`` (with ``reset_gate=False``: ``W_hn h + b_hn``
    unscaled), ``h' = (1 - f) * n + f * h``.

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ....
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_mgu(I, H, L, bidirectional)``; layout in `unpack_mgu_weights`
        (PyTorch's and cuDNN's: all matrices of every pseudo-layer, then all biases).
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every
        path.
      implementation: None (automatic; see `explain_mgu` and `policy`) or one of, in order of
        preference: ``"cudnn"`` (always raises: cuDNN has no such cell), ``"cudnn_ffi"`` (always
        raises: cuDNN has no such cell), ``"pallas"`` (portable_rnn's Pallas TPU kernel) or
        ``"scan"`` (pure JAX, every backend). The automatic choice takes a fused route only
        where its benchmark shows it faster than the scan path. A route asked for that cannot
        serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).
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
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step; the rest of the step, the carried state and the final
        state use the unmasked ``h``). Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.
      remat_every: segment checkpointing of a gradient, every ``remat_every`` steps (an int >=
        1): the forward keeps each layer's states only at the start of each segment and the
        backward runs each segment's forward again before its backward, so that a gradient keeps
        T / remat_every states and one segment's residuals instead of every step's, for the time
        of one more forward. None (automatic): segments of about sqrt(T) steps where the
        residuals of every step would take more than the policy's share of one device's memory
        (``policy(recurrent_memory_fraction=...)``, a quarter by default), else none;
        ``policy(remat_every=...)`` sets it for the calls that do not pass it (a layer's).
        `explain_mgu` says which and why. The steps are the same: the outputs, final states and
        initial states' gradients come out as without segments (up to how XLA compiles a
        segment's products); the gradients of ``x`` and the weights are products and sums per
        segment, the same terms summed in another order.

    Returns:
      ``(y, h_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length;
      ``h_n`` (L*D, B, H), the states at each sequence's last
      valid step (the initial states for length 0), in the initial states' dtypes, so they can
      be fed back as a carry. For 16-bit inputs, matmuls accumulate in float32 and the
      hidden state is carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_mgu_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h_0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> lengths = jnp.array([5, 2])
      >>> y, *final = portable_rnn.mgu(x, h_0, w, lengths, I, H, L, 0.0, False)
      >>> y.shape, y.dtype, [s.shape for s in final], bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), [(1, 2, 4)], True)
    """

def mgu_weights_from_flax(
    params: Any,
    *,
    shared_cell: bool | None = None,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat MGU weights from Flax ``nn.RNN(nn.MGUCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. The cell's
    Dense layers per gate (f, n): ``if``/``hf``, ``in``/``hn``. Flax's MGUCell has a bias on
    ``if``, ``in`` and ``hn`` (its ``hf`` has none): ``b_ih = [b_if, b_in]`` and ``b_hh = [0,
    b_hn]`` when reading, and ``b_hf`` is summed into the ``if`` bias when writing (rounded
    once, in the weights' dtype). These trees are those of ``nn.MGUCell(reset_gate=True)``,
    Flax's default; a ``reset_gate=False`` cell has no ``hn`` bias: give it a zero one
    (``{'bias': jnp.zeros(H)}``) to read it, and drop ``hn``'s bias after writing once it is
    zero (else fold it into ``in``'s first, as ``b_in + b_hn``). The default ``gate_fn``
    (sigmoid) and ``activation_fn`` (tanh) are assumed: the parameters do not record them.

    Args:
      params: one layer's tree (``{'params': {'cell': ...}}``, ``{'cell': ...}`` or the
        cell dict itself), an ``nn.Bidirectional`` tree (``{'forward_rnn': ...,
        'backward_rnn': ...}``, optionally under ``'params'``), or a sequence of those for
        stacked layers, first layer first. Sizes, layer and direction counts are read from the
        kernels.
      shared_cell: whether an ``nn.Bidirectional``'s two RNNs share one cell (the same
        ``nn.RNN`` or cell object). Flax stores such a tree once, under ``'forward_rnn'``, and
        always writes ``'backward_rnn'`` otherwise, so None (the default) reads a tree without
        ``'backward_rnn'`` as shared: both directions get the same weights. True or False
        states it, and a tree that says otherwise is an error.
      dtype: casts the result; default: the parameters' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_mgu_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold MGUCell parameters (the error names the missing
        Dense layers, and the cell it looks like), a kernel or bias has the wrong shape, or
        layers disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> rnn = nn.Bidirectional(nn.RNN(nn.MGUCell(4)), nn.RNN(nn.MGUCell(4)))
      >>> params = rnn.init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> w = portable_rnn.mgu_weights_from_flax(params)
      >>> w.shape == (portable_rnn.get_num_params_in_mgu(3, 4, 1, True),)
      True
    """

def mgu_weights_to_flax(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.MGUCell)`` parameters from flat MGU weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. See `mgu_weights_from_flax` for where the biases go.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}``
      (two RNNs, not shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN(nn.MGUCell)`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays
      in the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_mgu_weight(jax.random.key(0), 3, 4, 2, False)
      >>> x = jnp.ones((1, 5, 3))
      >>> for tree in portable_rnn.mgu_weights_to_flax(w, 3, 4, 2, False):
      ...     x = nn.RNN(nn.MGUCell(4)).apply(tree, x)
      >>> x.shape
      (1, 5, 4)
    """

def pack_classic_gru_weights(
    W_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    W_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    b_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    b_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Inverse of `unpack_classic_gru_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_classic_gru_weight(jax.random.key(0), 3, 4, 2, True)
      >>> groups = portable_rnn.unpack_classic_gru_weights(w, 3, 4, 2, True)
      >>> bool((portable_rnn.pack_classic_gru_weights(*groups, 3, 4, 2, True) == w).all())
      True
    """

def pack_gru_weights(
    W_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    W_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    b_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    b_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Inverse of `unpack_gru_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 2, True)
      >>> groups = portable_rnn.unpack_gru_weights(w, 3, 4, 2, True)
      >>> bool((portable_rnn.pack_gru_weights(*groups, 3, 4, 2, True) == w).all())
      True
    """

def pack_lstm_weights(
    W_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    W_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    b_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    b_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    W_hr: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None = None,
    proj_size: int = 0,
    num_heads: int = 1,
) -> jax.Array:
    """Inverse of `unpack_lstm_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros). ``W_hr`` is required with ``proj_size``.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 2, True)
      >>> groups = portable_rnn.unpack_lstm_weights(w, 3, 4, 2, True)
      >>> bool((portable_rnn.pack_lstm_weights(*groups, 3, 4, 2, True) == w).all())
      True
    """

def pack_mgu_weights(
    W_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    W_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    b_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    b_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Inverse of `unpack_mgu_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_mgu_weight(jax.random.key(0), 3, 4, 2, True)
      >>> groups = portable_rnn.unpack_mgu_weights(w, 3, 4, 2, True)
      >>> bool((portable_rnn.pack_mgu_weights(*groups, 3, 4, 2, True) == w).all())
      True
    """

def pack_simple_rnn_weights(
    W_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    W_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    b_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    b_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Inverse of `unpack_simple_rnn_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 2, True)
      >>> groups = portable_rnn.unpack_simple_rnn_weights(w, 3, 4, 2, True)
      >>> bool((portable_rnn.pack_simple_rnn_weights(*groups, 3, 4, 2, True) == w).all())
      True
    """

def pack_slstm_weights(
    W_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    W_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike],
    b_ih: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    b_hh: Mapping[int, ArrayLike] | Sequence[ArrayLike] | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> jax.Array:
    """Inverse of `unpack_slstm_weights`: per-pseudo-layer arrays to the flat vector.

    Each argument is a dict keyed by pseudo-layer or a sequence in pseudo-layer order.
    ``b_ih``/``b_hh`` may be ``None`` (no bias: zeros).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_slstm_weight(jax.random.key(0), 3, 4, 2, True)
      >>> groups = portable_rnn.unpack_slstm_weights(w, 3, 4, 2, True)
      >>> bool((portable_rnn.pack_slstm_weights(*groups, 3, 4, 2, True) == w).all())
      True
    """

def policy(
    lstm: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    attention: Literal["cudnn", "splash", "flash", "chunked", "xla"] | None = None,
    *,
    on_fallback: Literal["silent", "warn", "error"] | None = None,
    capabilities: Capabilities | None = None,
    checkify_lengths: bool | None = None,
    remat_every: int | None = None,
    recurrent_memory_fraction: float | None = None,
    gru: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    simple_rnn: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    classic_gru: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    mgu: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    slstm: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    lstm_low_precision: Literal["scan", "upcast"] | None = None,
) -> contextlib.AbstractContextManager[Policy]:
    """Sets routing preferences for calls traced inside the ``with`` block.

    Decisions are made when a function is traced: a policy changed around an already compiled
    function does not affect it until it is traced again.

    Args:
      lstm: preferred LSTM implementation, a name `portable_rnn.lstm` takes as
        ``implementation``; None keeps the enclosing setting (automatic by default). A
        preference falls back when it cannot serve a call; an explicit ``implementation=``
        argument raises instead.
      attention: preferred attention implementation, a name `portable_rnn.dot_product_attention`
        takes as ``implementation``.
      on_fallback: what happens when the preferred path is rejected: ``"silent"``, ``"warn"``
        (a `FallbackWarning` with the reasons, once per distinct decision) or ``"error"``
        (a `FallbackError`).
      capabilities: a `Capabilities` to use instead of probing the machine.
      checkify_lengths: True adds a `checkify.debug_check` for traced sequence lengths outside
        ``[0, T]``, reported under ``checkify.checkify(f, errors=checkify.user_checks)`` with the
        argument's name (traced lengths are clipped either way). Off by default: the check
        carries checkify's effect, which `jax.export`'s ``serialize()`` rejects.
      remat_every: segment checkpointing of the recurrent ops' gradients, every so many steps,
        for the calls that do not pass ``remat_every`` themselves (the layers', for one): the
        forward keeps each layer's state at the start of every segment and the backward runs
        each segment's forward again. None keeps the enclosing setting (automatic by default:
        only where the stash of every step would not fit, see below).
      recurrent_memory_fraction: the share of one device's memory (a float > 0; default 0.25)
        that a recurrent gradient's stash of every step may take before the automatic choice
        checkpoints segments (``remat_every=None``); ``float("inf")`` never does.
      **settings: by op name, every other op's preferred implementation, likewise (``gru=``:
        a name `portable_rnn.gru` takes as ``implementation``; ``simple_rnn=``); and the ops'
        registered options: ``lstm_low_precision``, for bfloat16/float16 LSTM calls (and
        ``precision=DEFAULT``) on a GPU: ``"scan"`` (default) computes in that precision on the
        pure-JAX path; ``"upcast"`` casts to float32 to use cuDNN and casts the results back.

    Returns:
      A context manager whose ``with`` block runs under the policy; it yields the `Policy` in
      effect inside the block. Unknown names raise here, before the block is entered.
    """

def simple_rnn(
    x: ArrayLike,
    h_0: ArrayLike,
    weights: ArrayLike,
    seq_lengths: ArrayLike | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    nonlinearity: str = "tanh",
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | None = None,
    remat_every: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """A multi-layer (bidirectional) Elman RNN with PyTorch ``nn.RNN(batch_first=True)`` semantics.

    ``h' = act(W_ih x + b_ih + W_hh h + b_hh)``, with ``act`` given by ``nonlinearity``
    (``"tanh"`` or ``"relu"``).

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ....
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_simple_rnn(I, H, L, bidirectional)``; layout in `unpack_simple_rnn_weights`
        (PyTorch's and cuDNN's: all matrices of every pseudo-layer, then all biases).
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every
        path.
      implementation: None (automatic; see `explain_simple_rnn` and `policy`) or one of, in
        order of preference: ``"cudnn"`` (always raises: JAX exposes no cuDNN kernel for this
        cell), ``"cudnn_ffi"`` (portable_rnn's own cuDNN call, built on first use), ``"pallas"``
        (portable_rnn's Pallas TPU kernel) or ``"scan"`` (pure JAX, every backend). The
        automatic choice takes a fused route only where its benchmark shows it faster than the
        scan path. A route asked for that cannot serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).
      nonlinearity: ``"tanh"`` (default) or ``"relu"``, as PyTorch's ``nn.RNN``. A PyTorch
        state_dict does not store it: set it to the ``nn.RNN``'s.
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step; the rest of the step, the carried state and the final
        state use the unmasked ``h``). Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.
      remat_every: segment checkpointing of a gradient, every ``remat_every`` steps (an int >=
        1): the forward keeps each layer's states only at the start of each segment and the
        backward runs each segment's forward again before its backward, so that a gradient keeps
        T / remat_every states and one segment's residuals instead of every step's, for the time
        of one more forward. None (automatic): segments of about sqrt(T) steps where the
        residuals of every step would take more than the policy's share of one device's memory
        (``policy(recurrent_memory_fraction=...)``, a quarter by default), else none;
        ``policy(remat_every=...)`` sets it for the calls that do not pass it (a layer's).
        `explain_simple_rnn` says which and why. The steps are the same: the outputs, final
        states and initial states' gradients come out as without segments (up to how XLA
        compiles a segment's products); the gradients of ``x`` and the weights are products and
        sums per segment, the same terms summed in another order.

    Returns:
      ``(y, h_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length;
      ``h_n`` (L*D, B, H), the states at each sequence's last
      valid step (the initial states for length 0), in the initial states' dtypes, so they can
      be fed back as a carry. For 16-bit inputs, matmuls accumulate in float32 and the
      hidden state is carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h_0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> lengths = jnp.array([5, 2])
      >>> y, *final = portable_rnn.simple_rnn(x, h_0, w, lengths, I, H, L, 0.0, False)
      >>> y.shape, y.dtype, [s.shape for s in final], bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), [(1, 2, 4)], True)
    """

def simple_rnn_weights_from_flax(
    params: Any,
    *,
    shared_cell: bool | None = None,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat SimpleRNN weights from Flax ``nn.RNN(nn.SimpleCell)`` parameters.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. The cell's
    Dense layers per gate (a single block): ``i``/``h``. Flax's SimpleCell computes ``h' =
    activation_fn(W_i x + b_i + W_h h)``: its one bias, on the input Dense ``i``, becomes
    ``b_ih`` (``b_hh`` is zero), and ``b_ih + b_hh`` when writing. ``activation_fn`` (tanh by
    default; pass the same as ``nonlinearity``) and ``residual=True`` are not recorded in the
    parameters.

    Args:
      params: one layer's tree (``{'params': {'cell': ...}}``, ``{'cell': ...}`` or the
        cell dict itself), an ``nn.Bidirectional`` tree (``{'forward_rnn': ...,
        'backward_rnn': ...}``, optionally under ``'params'``), or a sequence of those for
        stacked layers, first layer first. Sizes, layer and direction counts are read from the
        kernels.
      shared_cell: whether an ``nn.Bidirectional``'s two RNNs share one cell (the same
        ``nn.RNN`` or cell object). Flax stores such a tree once, under ``'forward_rnn'``, and
        always writes ``'backward_rnn'`` otherwise, so None (the default) reads a tree without
        ``'backward_rnn'`` as shared: both directions get the same weights. True or False
        states it, and a tree that says otherwise is an error.
      dtype: casts the result; default: the parameters' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_simple_rnn_weights`.

    Raises:
      TypeError: ``params`` is not a dict or a sequence of dicts.
      ValueError: a tree does not hold SimpleCell parameters (the error names the missing
        Dense layers, and the cell it looks like), a kernel or bias has the wrong shape, or
        layers disagree in sizes or directions.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> rnn = nn.Bidirectional(nn.RNN(nn.SimpleCell(4)), nn.RNN(nn.SimpleCell(4)))
      >>> params = rnn.init(jax.random.key(0), jnp.ones((1, 5, 3)))
      >>> w = portable_rnn.simple_rnn_weights_from_flax(params)
      >>> w.shape == (portable_rnn.get_num_params_in_simple_rnn(3, 4, 1, True),)
      True
    """

def simple_rnn_weights_from_keras(
    keras_weights: Sequence[Any],
    *,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat SimpleRNN weights from the weights of Keras 3 ``keras.layers.SimpleRNN()`` layers.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Keras lists
    ``[kernel (I, 1H), recurrent_kernel (H, 1H), bias (1H,)]``, the kernels ``W_ih.T`` and
    ``W_hh.T`` with the gate blocks in the order of our a single block. Keras computes ``h' =
    activation(x W + b + h U)``; the bias becomes ``b_ih`` (``b_hh`` is zero), and ``b_ih +
    b_hh`` when writing. The activation (pass the same as ``nonlinearity``) is not part of the
    weights.

    Args:
      keras_weights: one layer's ``layer.get_weights()`` (``layer.weights`` works too), a
        ``keras.layers.Bidirectional``'s (the forward layer's arrays, then the backward
        layer's), or a sequence of those for stacked layers, first layer first. Without bias
        (``use_bias=False``) the biases are zero. Sizes, layer and direction counts are read
        from the shapes.
      dtype: casts the result; default: the weights' dtype.

    Returns:
      The flat weight vector, (P,), in the layout of `unpack_simple_rnn_weights`.

    Raises:
      TypeError: ``keras_weights`` is not a list of arrays or a list of such lists.
      ValueError: a layer's list does not have 2, 3, 4 or 6 arrays, or a kernel or bias has the
        wrong shape (the error names the layer and what was expected).

    Examples:
      >>> import numpy as np, portable_rnn
      >>> I, H = 3, 4
      >>> layer = [np.ones((I, 1 * H)), np.ones((H, 1 * H)), np.zeros(1 * H)]
      >>> portable_rnn.simple_rnn_weights_from_keras(layer + layer).shape == (  # a Bidirectional's
      ...     portable_rnn.get_num_params_in_simple_rnn(I, H, 1, True),)
      True
    """

def simple_rnn_weights_from_torch(
    state_dict: Mapping[str, Any],
    *,
    prefix: str = "",
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Flat weights from a PyTorch ``nn.RNN`` state_dict (tensors or arrays).

    torch is not needed.

    Sizes, layer count and direction count are
    read from the keys and shapes. ``prefix`` selects one module inside a bigger model's
    state_dict (e.g. ``"encoder.rnn."``). Without biases (``bias=False``) zeros are used.
    ``dtype`` casts the result (default: the state_dict's dtype).

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, True)
      >>> sd = portable_rnn.simple_rnn_weights_to_torch(w, 3, 4, 1, True, prefix="rnn.")
      >>> bool((portable_rnn.simple_rnn_weights_from_torch(sd, prefix="rnn.") == w).all())
      True
    """

def simple_rnn_weights_to_flax(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
) -> list[dict[str, Any]]:
    """Flax ``nn.RNN(nn.SimpleCell)`` parameters from flat SimpleRNN weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. See `simple_rnn_weights_from_flax` for where the biases go.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).

    Returns:
      One Flax variable dict per layer: ``{'params': {'cell': ...}}``, or when bidirectional
      ``{'params': {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}}}``
      (two RNNs, not shared), for ``module.apply(tree, x)`` with ``module`` ``nn.RNN(nn.SimpleCell)`` or
      ``nn.Bidirectional`` of two; kernels (I or D*H, H) and (H, H), biases (H,), JAX arrays
      in the weights' dtype.

    Raises:
      ValueError: a size is not a positive integer, or ``weights`` does not have their length.

    Examples:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 2, False)
      >>> x = jnp.ones((1, 5, 3))
      >>> for tree in portable_rnn.simple_rnn_weights_to_flax(w, 3, 4, 2, False):
      ...     x = nn.RNN(nn.SimpleCell(4)).apply(tree, x)
      >>> x.shape
      (1, 5, 4)
    """

def simple_rnn_weights_to_keras(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    use_bias: bool = True,
) -> list[list[np.ndarray]]:
    """Weights for Keras 3 ``keras.layers.SimpleRNN()`` layers from flat SimpleRNN weights.

    Shapes: ``I`` input size, ``H`` hidden size, ``L`` layers, ``D`` directions. Each layer gets ``[kernel (I or D*H, 1H), recurrent_kernel (H, 1H), bias
    (1H,)]``, gates in Keras' order; see `simple_rnn_weights_from_keras`.

    Args:
      weights: the flat weight vector, (P,).
      input_size: I.
      hidden_size: H.
      num_layers: L.
      bidirectional: whether each layer also runs in reverse (D = 2).
      use_bias: whether the Keras layers have a bias (Keras' default ``use_bias=True``).

    Returns:
      One list of NumPy arrays per layer, for ``layer.set_weights(...)`` of a
      ``keras.layers.SimpleRNN`` (or of a ``keras.layers.Bidirectional`` of two when
      bidirectional: the forward layer's arrays, then the backward layer's).

    Raises:
      ValueError: a size is not a positive integer, ``weights`` does not have their length, or
        ``use_bias=False`` and a bias is not zero.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, False)
      >>> [a.shape for a in portable_rnn.simple_rnn_weights_to_keras(w, 3, 4, 1, False)[0]]
      [(3, 4), (4, 4), (4,)]
    """

def simple_rnn_weights_to_torch(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    prefix: str = "",
) -> dict[str, np.ndarray]:
    """A PyTorch ``nn.RNN`` state_dict (NumPy arrays) from the flat weights.

    Load it with ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 1, False)
      >>> sorted(portable_rnn.simple_rnn_weights_to_torch(w, 3, 4, 1, False))
      ['bias_hh_l0', 'bias_ih_l0', 'weight_hh_l0', 'weight_ih_l0']
    """

def slstm(
    x: ArrayLike,
    h_0: ArrayLike,
    c_0: ArrayLike,
    n_0: ArrayLike,
    m_0: ArrayLike,
    weights: ArrayLike,
    seq_lengths: ArrayLike | None,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: lax.PrecisionLike | None = None,
    *,
    dropout_rng: jax.Array | None = None,
    implementation: Literal["cudnn", "cudnn_ffi", "pallas", "scan"] | None = None,
    capabilities: Capabilities | None = None,
    num_heads: int = 1,
    recurrent_dropout_mask: ArrayLike | None = None,
    remat_every: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """A multi-layer (bidirectional) sLSTM (xLSTM's scalar LSTM with exponential gating).

    Gates i, f, z, o; states h (the output), c (the memory), n (its normalizer) and m (the
    stabilizer, a log scale), as FlashRNN's sLSTM (xLSTM, Beck et al. 2024), from the pre-
    activations ``a = W_ih x + b_ih + W_hh h + b_hh``: the stabilizer ``m' = max(a_i,
    log(sigmoid(a_f)) + m)`` (``m' = a_i`` where ``n == 0``, per unit: a sequence's first step
    from zero states), ``i = exp(a_i - m')``, ``f = exp(log(sigmoid(a_f)) + m - m')``, ``c' = f
    * c + i * tanh(a_z)``, ``n' = max(f * n + i, 1)``, ``h' = sigmoid(a_o) * c' / n'``. Zero
    initial states are FlashRNN's default. Weights convert from and to FlashRNN's ``(W, R, b)``
    with ``portable_rnn._src.recurrent.slstm.flashrnn``.

    Shapes: ``B`` batch, ``T`` time, ``I`` input size, ``H`` hidden size, ``L`` layers,
    ``D`` directions (2 if bidirectional, else 1).

    Args:
      x: inputs, (B, T, I), float32, bfloat16, float16 (float64 under x64). Sets the compute
        dtype: weights and initial states are cast to it for the matmuls.
      h_0: initial hidden state, (L*D, B, H), ordered layer 0 forward, layer 0 reverse, layer 1
        forward, ....
      c_0: initial memory state, (L*D, B, H).
      n_0: initial normalizer state, (L*D, B, H).
      m_0: initial stabilizer state (a log scale), (L*D, B, H).
      weights: the flat weight vector, (P,) with
        ``P = get_num_params_in_slstm(I, H, L, bidirectional)``; layout in `unpack_slstm_weights`
        (PyTorch's and cuDNN's: all matrices of every pseudo-layer, then all biases).
      seq_lengths: valid length of each sequence, (B,), any integer dtype, or None for "all T".
        Concrete values must lie in [0, T]; traced values are clipped to [0, T] (and reported
        under `jax.experimental.checkify`). Values of `x` past a length never affect a result.
      input_size: I.
      hidden_size: H.
      num_layers: L.
      dropout: dropout rate applied to the outputs of every layer but the last, only when
        ``dropout_rng`` is given. ``dropout > 0`` with ``L > 1`` and no key is an error.
      bidirectional: whether each layer also runs in reverse (the reverse direction reads each
        sequence backwards from its last valid step).
      precision: matmul precision, as in `jax.lax.dot_general`; every value works
        (``Precision.DEFAULT`` included).
      dropout_rng: PRNG key for the dropout masks; the same key gives the same masks on every
        path.
      implementation: None (automatic; see `explain_slstm` and `policy`) or one of, in order of
        preference: ``"cudnn"`` (always raises: cuDNN has no such cell), ``"cudnn_ffi"`` (always
        raises: cuDNN has no such cell), ``"pallas"`` (portable_rnn's Pallas TPU kernel) or
        ``"scan"`` (pure JAX, every backend). The automatic choice takes a fused route only
        where its benchmark shows it faster than the scan path. A route asked for that cannot
        serve the call raises, with every reason.
      capabilities: a `Capabilities` to decide for instead of the probed machine (tests use it
        to pretend to be a GPU).
      num_heads: ``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a block-
        diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their own part of
        ``h``, stored (NH, G*DH, DH) per layer and direction (the layout note of the family's
        ``unpack_*_weights``). 1 (default): the dense layer. The scan path multiplies per head
        (a batched product), the Pallas TPU kernel head by head with the heads' blocks resident;
        cuDNN runs one head.
      recurrent_dropout_mask: recurrent ("variational") dropout, as Keras'
        ``recurrent_dropout``, or None. (L*D, B, H): every step of layer ``l``, direction ``d``
        computes its recurrent product ``W_hh h`` from ``h * recurrent_dropout_mask[l*D + d]``
        (the same mask at every step; the rest of the step, the carried state and the final
        state use the unmasked ``h``). Pass the keep-mask already scaled, e.g.
        ``bernoulli(key, 1 - rate, shape) / (1 - rate)``.
      remat_every: segment checkpointing of a gradient, every ``remat_every`` steps (an int >=
        1): the forward keeps each layer's states only at the start of each segment and the
        backward runs each segment's forward again before its backward, so that a gradient keeps
        T / remat_every states and one segment's residuals instead of every step's, for the time
        of one more forward. None (automatic): segments of about sqrt(T) steps where the
        residuals of every step would take more than the policy's share of one device's memory
        (``policy(recurrent_memory_fraction=...)``, a quarter by default), else none;
        ``policy(remat_every=...)`` sets it for the calls that do not pass it (a layer's).
        `explain_slstm` says which and why. The steps are the same: the outputs, final states
        and initial states' gradients come out as without segments (up to how XLA compiles a
        segment's products); the gradients of ``x`` and the weights are products and sums per
        segment, the same terms summed in another order.

    Returns:
      ``(y, h_n, c_n, n_n, m_n)``: ``y`` (B, T, D*H) in ``x``'s dtype, zero past each length;
      ``h_n``, ``c_n``, ``n_n``, ``m_n`` (L*D, B, H), the states at each sequence's last
      valid step (the initial states for length 0), in the initial states' dtypes, so they can
      be fed back as a carry. For 16-bit inputs, matmuls accumulate in float32 and the
      memory state (c, n, m) is carried in float32 between steps.

    Raises:
      ValueError, TypeError: at trace time, for arguments of the wrong shape, dtype or value, and
        for an explicit ``implementation`` that cannot serve the call.
      FallbackError: under ``policy(on_fallback="error")`` when the preferred path is rejected.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> B, T, I, H, L = 2, 5, 3, 4, 1
      >>> w = portable_rnn.init_slstm_weight(jax.random.key(0), I, H, L, False)
      >>> x = jnp.ones((B, T, I), jnp.bfloat16)
      >>> h_0 = c_0 = n_0 = m_0 = jnp.zeros((L, B, H), jnp.bfloat16)
      >>> lengths = jnp.array([5, 2])
      >>> y, *final = portable_rnn.slstm(x, h_0, c_0, n_0, m_0, w, lengths, I, H, L, 0.0, False)
      >>> y.shape, y.dtype, [s.shape for s in final], bool((y[1, 2:] == 0).all())
      ((2, 5, 4), dtype(bfloat16), [(1, 2, 4), (1, 2, 4), (1, 2, 4), (1, 2, 4)], True)
    """

def unpack_classic_gru_weights(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> tuple[dict[int, jax.Array], ...]:
    """Splits the flat vector into ``(W_ih, W_hh, b_ih, b_hh)``, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (3H, in), ``W_hh[p]`` (3H, H), ``b_ih[p]`` and ``b_hh[p]`` (3H,), gates
    z, r, h; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else
    ``p = layer``; the flat order is all matrices, then all biases.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_classic_gru_weight(jax.random.key(0), 3, 4, 2, True)
      >>> W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_classic_gru_weights(w, 3, 4, 2, True)
      >>> W_ih[0].shape, W_ih[2].shape, W_hh[3].shape, b_hh[1].shape
      ((12, 3), (12, 8), (12, 4), (12,))
    """

def unpack_gru_weights(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> tuple[dict[int, jax.Array], ...]:
    """Splits the flat vector into ``(W_ih, W_hh, b_ih, b_hh)``, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (3H, in), ``W_hh[p]`` (3H, H), ``b_ih[p]`` and ``b_hh[p]`` (3H,), gates
    r, z, n; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else
    ``p = layer``; the flat order is all matrices, then all biases.

    With ``num_heads=NH > 1`` (a block-diagonal recurrence, FlashRNN's heads of ``DH = H / NH``
    units) ``W_hh[p]`` is (NH, 3*DH, DH): head ``k``'s matrix, gate blocks of DH rows in the
    order above, reading units ``k*DH`` to ``(k+1)*DH - 1`` of ``h``; gate ``g`` of unit ``k*DH
    + j`` adds ``W_hh[p][k, g*DH + j] @ h[k*DH:(k+1)*DH]``. ``W_ih`` and the biases are as
    without heads. NH = 1 is the dense layout.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_gru_weight(jax.random.key(0), 3, 4, 2, True)
      >>> W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_gru_weights(w, 3, 4, 2, True)
      >>> W_ih[0].shape, W_ih[2].shape, W_hh[3].shape, b_hh[1].shape
      ((12, 3), (12, 8), (12, 4), (12,))
    """

def unpack_lstm_weights(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    proj_size: int = 0,
    num_heads: int = 1,
) -> tuple[dict[int, jax.Array], ...]:
    """Splits the flat vector into ``(W_ih, W_hh, b_ih, b_hh)`` (and ``W_hr`` with ``proj_size``), each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (4H, in), ``W_hh[p]`` (4H, H), ``b_ih[p]`` and ``b_hh[p]`` (4H,), gates
    i, f, g, o; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else
    ``p = layer``; the flat order is all matrices, then all biases. With ``proj_size=P > 0`` (PyTorch's projections) ``W_hh[p]`` is (4H, P) and ``W_hr[p]`` (P, H), stored after each pseudo-layer's ``W_hh``.

    With ``num_heads=NH > 1`` (a block-diagonal recurrence, FlashRNN's heads of ``DH = H / NH``
    units) ``W_hh[p]`` is (NH, 4*DH, DH): head ``k``'s matrix, gate blocks of DH rows in the
    order above, reading units ``k*DH`` to ``(k+1)*DH - 1`` of ``h``; gate ``g`` of unit ``k*DH
    + j`` adds ``W_hh[p][k, g*DH + j] @ h[k*DH:(k+1)*DH]``. ``W_ih`` and the biases are as
    without heads. NH = 1 is the dense layout.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 4, 2, True)
      >>> W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_lstm_weights(w, 3, 4, 2, True)
      >>> W_ih[0].shape, W_ih[2].shape, W_hh[3].shape, b_hh[1].shape
      ((16, 3), (16, 8), (16, 4), (16,))
    """

def unpack_mgu_weights(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> tuple[dict[int, jax.Array], ...]:
    """Splits the flat vector into ``(W_ih, W_hh, b_ih, b_hh)``, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (2H, in), ``W_hh[p]`` (2H, H), ``b_ih[p]`` and ``b_hh[p]`` (2H,), gates
    f, n; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else
    ``p = layer``; the flat order is all matrices, then all biases.

    With ``num_heads=NH > 1`` (a block-diagonal recurrence, FlashRNN's heads of ``DH = H / NH``
    units) ``W_hh[p]`` is (NH, 2*DH, DH): head ``k``'s matrix, gate blocks of DH rows in the
    order above, reading units ``k*DH`` to ``(k+1)*DH - 1`` of ``h``; gate ``g`` of unit ``k*DH
    + j`` adds ``W_hh[p][k, g*DH + j] @ h[k*DH:(k+1)*DH]``. ``W_ih`` and the biases are as
    without heads. NH = 1 is the dense layout.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_mgu_weight(jax.random.key(0), 3, 4, 2, True)
      >>> W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_mgu_weights(w, 3, 4, 2, True)
      >>> W_ih[0].shape, W_ih[2].shape, W_hh[3].shape, b_hh[1].shape
      ((8, 3), (8, 8), (8, 4), (8,))
    """

def unpack_simple_rnn_weights(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> tuple[dict[int, jax.Array], ...]:
    """Splits the flat vector into ``(W_ih, W_hh, b_ih, b_hh)``, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (1H, in), ``W_hh[p]`` (1H, H), ``b_ih[p]`` and ``b_hh[p]`` (1H,), gates
    a single block; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else
    ``p = layer``; the flat order is all matrices, then all biases.

    With ``num_heads=NH > 1`` (a block-diagonal recurrence, FlashRNN's heads of ``DH = H / NH``
    units) ``W_hh[p]`` is (NH, 1*DH, DH): head ``k``'s matrix, gate blocks of DH rows in the
    order above, reading units ``k*DH`` to ``(k+1)*DH - 1`` of ``h``; gate ``g`` of unit ``k*DH
    + j`` adds ``W_hh[p][k, g*DH + j] @ h[k*DH:(k+1)*DH]``. ``W_ih`` and the biases are as
    without heads. NH = 1 is the dense layout.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_simple_rnn_weight(jax.random.key(0), 3, 4, 2, True)
      >>> W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_simple_rnn_weights(w, 3, 4, 2, True)
      >>> W_ih[0].shape, W_ih[2].shape, W_hh[3].shape, b_hh[1].shape
      ((4, 3), (4, 8), (4, 4), (4,))
    """

def unpack_slstm_weights(
    weights: ArrayLike,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bidirectional: bool,
    *,
    num_heads: int = 1,
) -> tuple[dict[int, jax.Array], ...]:
    """Splits the flat vector into ``(W_ih, W_hh, b_ih, b_hh)``, each a dict keyed by pseudo-layer.

    ``W_ih[p]`` is (4H, in), ``W_hh[p]`` (4H, H), ``b_ih[p]`` and ``b_hh[p]`` (4H,), gates
    i, f, z, o; pseudo-layer ``p = 2 * layer + direction`` when bidirectional, else
    ``p = layer``; the flat order is all matrices, then all biases.

    With ``num_heads=NH > 1`` (a block-diagonal recurrence, FlashRNN's heads of ``DH = H / NH``
    units) ``W_hh[p]`` is (NH, 4*DH, DH): head ``k``'s matrix, gate blocks of DH rows in the
    order above, reading units ``k*DH`` to ``(k+1)*DH - 1`` of ``h``; gate ``g`` of unit ``k*DH
    + j`` adds ``W_hh[p][k, g*DH + j] @ h[k*DH:(k+1)*DH]``. ``W_ih`` and the biases are as
    without heads. NH = 1 is the dense layout.

    Examples:
      >>> import jax, jax.numpy as jnp, portable_rnn
      >>> w = portable_rnn.init_slstm_weight(jax.random.key(0), 3, 4, 2, True)
      >>> W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_slstm_weights(w, 3, 4, 2, True)
      >>> W_ih[0].shape, W_ih[2].shape, W_hh[3].shape, b_hh[1].shape
      ((16, 3), (16, 8), (16, 4), (16,))
    """

__all__ = [
    "Capabilities",
    "Decision",
    "FallbackError",
    "FallbackWarning",
    "capabilities",
    "classic_gru",
    "classic_gru_weights_from_keras",
    "classic_gru_weights_to_keras",
    "dot_product_attention",
    "explain_attention",
    "explain_classic_gru",
    "explain_gru",
    "explain_lstm",
    "explain_mgu",
    "explain_simple_rnn",
    "explain_slstm",
    "get_num_params_in_classic_gru",
    "get_num_params_in_gru",
    "get_num_params_in_lstm",
    "get_num_params_in_mgu",
    "get_num_params_in_simple_rnn",
    "get_num_params_in_slstm",
    "gru",
    "gru_weights_from_flax",
    "gru_weights_from_keras",
    "gru_weights_from_torch",
    "gru_weights_to_flax",
    "gru_weights_to_keras",
    "gru_weights_to_torch",
    "init_classic_gru_weight",
    "init_gru_weight",
    "init_lstm_weight",
    "init_mgu_weight",
    "init_simple_rnn_weight",
    "init_slstm_weight",
    "lstm",
    "lstm_weights_from_flax",
    "lstm_weights_from_keras",
    "lstm_weights_from_torch",
    "lstm_weights_to_flax",
    "lstm_weights_to_keras",
    "lstm_weights_to_torch",
    "mgu",
    "mgu_weights_from_flax",
    "mgu_weights_to_flax",
    "pack_classic_gru_weights",
    "pack_gru_weights",
    "pack_lstm_weights",
    "pack_mgu_weights",
    "pack_simple_rnn_weights",
    "pack_slstm_weights",
    "policy",
    "simple_rnn",
    "simple_rnn_weights_from_flax",
    "simple_rnn_weights_from_keras",
    "simple_rnn_weights_from_torch",
    "simple_rnn_weights_to_flax",
    "simple_rnn_weights_to_keras",
    "simple_rnn_weights_to_torch",
    "slstm",
    "unpack_classic_gru_weights",
    "unpack_gru_weights",
    "unpack_lstm_weights",
    "unpack_mgu_weights",
    "unpack_simple_rnn_weights",
    "unpack_slstm_weights",
]

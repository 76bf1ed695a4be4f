"""The ``cudnn`` route: `jax.experimental.rnn`'s cuDNN primitives behind a wrapper that vmaps.
jaxlib's cuDNN RNN call computes the LSTM only (`JAX_CELL`): for every other family the route
rejects each call, and says why (`family_rejects`).

JAX's cuDNN LSTM primitives have no batching rule, so `jax.vmap` over them raises. Catching that
error is not a fix (it cannot see errors raised inside ``vmap(jit(f))``, ``vmap(grad(f))`` or at
compile time), so the call is restructured instead, by the helper every fused recurrent route
shares (`fused.op`):

- a `jax.custom_vjp` outside, whose forward and backward are each a
  `jax.custom_batching.custom_vmap` function (`custom_vmap` alone supports no reverse mode);
- the forward rule folds the vmapped axis (already moved to the front) into the batch axis, since
  an LSTM is independent per batch row: one cuDNN call serves the whole vmap. It calls the same
  function again, so nested vmaps fold level by level;
- weights that differ per vmapped instance cannot share one call, and one cuDNN call per
  instance (`lax.map` over the instances) is the pattern XLA:GPU miscompiles in the backward
  (a zero weight gradient; see `_op`) and that no GPU run has shown right in the
  forward. Such calls run the scan path's forward, vmapped (`PER_INSTANCE_WEIGHTS`);
  `tests/test_gpu.py` holds the check that must pass on a GPU before the cuDNN call may serve
  them;
- the backward rule must return a weight gradient *per instance* (``vmap(grad(f))`` asks for
  exactly that; ``grad(vmap(f))`` sums them), which a folded call cannot separate, and cuDNN
  cannot be called per instance (XLA:GPU returns a zero weight gradient from such calls; see
  `_op`). It therefore runs the scan path's VJP, vmapped. Outside vmap, the backward reuses
  the forward's cuDNN reserve space and costs one call.

cuDNN fails at run time (CUDNN_STATUS_EXECUTION_FAILED) on sequences of length 0: in the forward
when every length is 0, in the backward when any is. A run-time failure cannot be routed around,
so cuDNN never sees a 0: such sequences run one step, and their results are replaced by the
documented ones (the initial state, zero outputs; no gradient reaches the step they ran).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...core import compat, dispatch
from ...core.capabilities import Capabilities, cudnn_platform_rejects
from ...core.checks import own_rank_promotion, precision_name
from ...core.compat import cudnn_lstm_bwd, cudnn_lstm_fwd
from ...core.sharding import vary_like
from .. import fused, layout
from ..api import checkpointing_rejects, heads_rejects
from ..driver import ScanConfig, layer_by_layer, rnn_scan

JAX_CELL = "LSTM"  # the one cuDNN cell (`Family.cudnn_name`) jaxlib's cuDNN RNN call computes


def family_rejects(family, caps: Capabilities) -> tuple[str, ...]:
    """Why JAX's cuDNN call cannot compute `family` at all (empty for the LSTM): cuDNN has no
    such cell (then only that: no machine could run it), or JAX exposes none."""
    if family.cudnn_name is None:
        return (f"cuDNN has no {family.name} cell (no cudnnRNNMode_t computes it): there is no "
                "cuDNN kernel to call",)
    if family.cudnn_name != JAX_CELL:
        return (*cudnn_platform_rejects(caps, family.cudnn_name),
                f"JAX exposes no cuDNN {family.cudnn_name}: jaxlib's cuDNN RNN custom call "
                "(jax.experimental.rnn) is LSTM-only")
    return ()


def rejects(caps: Capabilities, dtypes: dict[str, np.dtype], precision, batch: int, steps: int,
            low_precision: str, proj_size: int = 0,
            recurrent_dropout: bool = False) -> tuple[str, ...]:
    """Why the cuDNN LSTM cannot serve a call (an empty tuple when it can)."""
    reasons = cudnn_platform_rejects(caps, "LSTM")
    if proj_size:
        reasons.append(f"proj_size={proj_size}: jaxlib's cuDNN LSTM call has no projection "
                       "(jax.experimental.rnn takes no proj_size)")
    if recurrent_dropout:
        reasons.append("recurrent_dropout_mask: cuDNN's RNN has no recurrent dropout (its "
                       "dropout acts between layers only)")
    for name, dtype in dtypes.items():
        if dtype == np.float32:
            continue
        if dtype.itemsize == 2 and low_precision == "upcast":
            continue
        if dtype.itemsize == 2:
            reasons.append(f"`{name}` is {dtype}: the cuDNN LSTM supports float32 only "
                           "(jax.experimental.rnn.lstm raises); policy(lstm_low_precision="
                           "'upcast') runs it in float32 instead")
        else:
            reasons.append(f"`{name}` is {dtype}: the cuDNN LSTM supports float32 only")
    name = precision_name(precision)
    if name == "DEFAULT" and low_precision != "upcast":
        reasons.append(f"precision={precision!r} (effective DEFAULT) asks for bfloat16 matmuls, "
                       "which the cuDNN LSTM cannot do (jax.experimental.rnn.lstm raises)")
    elif name == "algorithm":
        reasons.append(f"precision={precision!r}: dot algorithms are not understood by the cuDNN "
                       "LSTM (it would silently allow TF32)")
    if steps == 0:
        reasons.append("T=0: there are no time steps to run")
    if batch == 0:
        reasons.append("batch=0: there are no sequences to run")
    return tuple(reasons)


def claims(dtypes: dict[str, np.dtype], precision, low_precision: str) -> bool:
    """Whether policy(lstm_low_precision='upcast') asks for cuDNN in float32 for the call
    (16-bit inputs or precision DEFAULT): the automatic choice then takes cuDNN where it serves
    the call. Otherwise the routing model (`core.routing`) ranks cuDNN against the scan path,
    or, on a GPU without a measured grid, the recurrent group's stated rule takes the scan path
    (`recurrent.cost.rule`)."""
    low = (any(d.itemsize == 2 for d in dtypes.values())
           or precision_name(precision) == "DEFAULT")
    return low and low_precision == "upcast"


# Under jax.vmap, weights that differ per instance (vmap over `weights`) take the scan path: the
# decision is made per instance, inside the vmap, where this cannot be seen, so every cuDNN
# decision says it.
PER_INSTANCE_WEIGHTS = ("under jax.vmap, weights that differ per instance run the scan path (one "
                        "cuDNN call per instance under lax.map is unproven on a GPU; its backward "
                        "gave zero weight gradients)")


def notes(dtypes: dict[str, np.dtype], precision, seq_dtype, dropout: float, has_rng: bool,
          num_layers: int) -> tuple[str, ...]:
    """How the cuDNN route serves a call it accepted."""
    out = []
    low = sorted({str(d) for d in dtypes.values() if d != np.float32})
    if low:
        out.append(f"{'/'.join(low)} cast to float32 for cuDNN and back "
                   "(policy lstm_low_precision='upcast')")
    allow_tf32 = precision_name(precision) != "HIGHEST"
    out.append("TF32 matmuls allowed (precision HIGHEST disables them)" if allow_tf32
               else "exact float32 matmuls (precision HIGHEST)")
    if seq_dtype is None:
        out.append("seq_lengths None: every sequence runs T steps")
    elif seq_dtype != np.int32:
        out.append(f"seq_lengths {seq_dtype} cast to int32")
    if dropout > 0 and has_rng and num_layers > 1:
        out.append(f"dropout {dropout}: {num_layers} single-layer cuDNN calls with portable_rnn's "
                   "masks between them (cuDNN's own dropout cannot use your key)")
    out.append(PER_INSTANCE_WEIGHTS)
    return tuple(out)


def check_traceable() -> None:
    """Raises when this jaxlib cannot build the cuDNN LSTM call (an explicit request only)."""
    if not compat.cudnn_lstm_traceable():
        raise ValueError("implementation='cudnn' cannot be traced here: this jaxlib has no CUDA "
                         "plugin (jax.experimental.rnn cannot size cuDNN's buffers). Install "
                         "jax[cuda12] or jax[cuda13], or pass implementation=None.")


# --- the batched call -------------------------------------------------------------------------

BATCH_AXES = (0, 1, 1, None, 0)  # x, h0, c0, w, seq: the batch axis of each (w: shared)
OUT_AXES = (0, 1, 1)  # y, h, c


@functools.cache
def _op(cell, input_size, hidden_size, num_layers, bidirectional, precision):
    """The cuDNN LSTM of one static configuration as an op that vmaps and differentiates
    (`fused.op`): folded under vmap, the scan path where weights differ per instance, and the
    scan path's VJP for every vmapped backward (`PER_INSTANCE_WEIGHTS`)."""
    static = (input_size, hidden_size, num_layers, 0.0, bidirectional, precision)

    def scan(x, h0, c0, w, seq):
        """The scan path's LSTM, for what cuDNN cannot serve under vmap (`PER_INSTANCE_WEIGHTS`)."""
        config = ScanConfig(cell, input_size, hidden_size, num_layers, bidirectional,
                            precision=precision)
        y, (h, c) = rnn_scan(config, x, (h0, c0), w, seq)
        return y, h, c

    def train(x, h0, c0, w, seq):
        (y, h, c), res = cudnn_lstm_fwd(x, h0, c0, w, seq, *static)
        # Inside shard_map, rnn_fwd types `y` and the reserve space as the same on every shard
        # (its abstract evaluation drops the manual axes); they vary as `x` does.
        y, reserve = vary_like(x, y, res[-1])
        return (y, h, c), reserve

    def infer(*args):
        return train(*args)[0]

    @own_rank_promotion
    def backward(reserve, args, outs, couts):
        # Outside vmap, the backward reuses the forward's reserve space: one cuDNN call. Under
        # vmap (`fused.op`) it runs the scan path's VJP: cuDNN cannot run per instance
        # (XLA:GPU fuses the instances' slices into the cuDNN backward call, its dynamic-slice
        # fusion, and returns the call's zero-filled weight gradient, as for
        # jax.experimental.rnn.lstm under lax.map; right with
        # --xla_gpu_enable_dynamic_slice_fusion=false).
        x, h0, c0, w, seq = args
        return cudnn_lstm_bwd(*static, (x, h0, c0, w, seq, outs[0], reserve), tuple(couts))[:4]

    return fused.op(infer, train, backward, scan, BATCH_AXES, OUT_AXES, num_diff=4)


def _cudnn_call(cell, x, h0, c0, w, seq, *static):
    """One cuDNN LSTM call; shards its batch over explicit mesh axes as `x`'s type says.

    XLA cannot partition the cuDNN RNN custom call (it has no partitioning rule, and its reserve
    space is sized for the whole batch), and `rnn_fwd` types `y` as replicated. A batch sharded
    over explicit mesh axes therefore runs one call per shard (`fused.over_batch`); whatever else
    is sharded (time, features, weights) is gathered first, as cuDNN needs it whole. Under auto
    sharding the input's sharding is unknown while tracing: XLA replicates the call (see
    docs/sharding-export.md).
    """
    return fused.over_batch(_op(cell, *static), (x, h0, c0, w, seq), BATCH_AXES, OUT_AXES)


@functools.partial(jax.jit, static_argnames=("input_size", "hidden_size", "num_layers", "dropout",
                                             "bidirectional", "precision", "cell", "family"))
def lstm_cudnn(x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
               bidirectional, precision=None, dropout_rng=None, *, cell, family):
    """The LSTM on cuDNN, on checked arguments the routing accepted (16-bit inputs are upcast);
    `cell` and `family` are the call's (the LSTM's), for its layout and the scan path's VJP."""
    batch, steps, _ = x.shape
    f32 = jnp.float32
    out_dtypes = (x.dtype, h_0.dtype, c_0.dtype)
    x, h_0, c_0, weights = (a.astype(f32) for a in (x, h_0, c_0, weights))
    seq = (jnp.full((batch,), steps, jnp.int32) if seq_lengths is None
           else jnp.clip(seq_lengths, 0, steps).astype(jnp.int32))
    run_seq = jnp.maximum(seq, 1)  # cuDNN fails on length 0; those results are replaced below
    tf32 = precision_name(precision) != "HIGHEST"
    prec = lax.Precision.HIGH if tf32 else lax.Precision.HIGHEST
    if dropout_rng is not None and dropout > 0 and num_layers > 1:
        num_dirs = 2 if bidirectional else 1

        def one_layer(layer, y, h, c):
            w = layout.layer_weights(weights, layer, input_size, hidden_size, num_layers,
                                     bidirectional, family)
            in_size = input_size if layer == 0 else num_dirs * hidden_size
            return _cudnn_call(cell, y, h, c, w, run_seq, in_size, hidden_size, 1, bidirectional,
                               prec)

        y, h_n, c_n = layer_by_layer(one_layer, x, h_0, c_0, num_layers, num_dirs, dropout_rng,
                                     dropout)
    else:
        y, h_n, c_n = _cudnn_call(cell, x, h_0, c_0, weights, run_seq, input_size, hidden_size,
                                  num_layers, bidirectional, prec)
    empty = (seq == 0)[None, :, None]
    h_n, c_n = jnp.where(empty, h_0, h_n), jnp.where(empty, c_0, c_n)
    valid = (jnp.arange(steps, dtype=jnp.int32)[None, :] < seq[:, None])[..., None]
    y = jnp.where(valid, y, jnp.zeros((), f32))
    return tuple(a.astype(d) for a, d in zip((y, h_n, c_n), out_dtypes))


# --- the route --------------------------------------------------------------------------------

def _run(d, call, x, states, weights, seq_lengths, dropout_rng, rmask):
    check_traceable()  # asked for on a jaxlib without CUDA (an automatic choice: see platforms)
    with jax.named_scope(f"portable_rnn.{call.family.name}.cudnn"):
        y, h_n, c_n = lstm_cudnn(x, *states, weights, seq_lengths, *call.statics, dropout_rng,
                                 cell=call.cell, family=call.family)
    return y, (h_n, c_n)


def summary(family) -> str:
    """What the route is for `family`, for its op's docstring."""
    if family.cudnn_name is None:
        return "always raises: cuDNN has no such cell"
    if family.cudnn_name != JAX_CELL:
        return "always raises: JAX exposes no cuDNN kernel for this cell"
    return f"JAX's cuDNN {family.cudnn_name} call"


def _rejects(call, caps: Capabilities) -> tuple[str, ...]:
    return family_rejects(call.family, caps) or heads_rejects(
        call, "jaxlib's cuDNN RNN call") + rejects(
        caps, call.dtypes, call.precision, call.batch, call.steps, call.low_precision,
        call.proj_size, call.recurrent_dropout) or checkpointing_rejects(
        call, caps, "jaxlib's cuDNN RNN call")


ROUTE = dispatch.Route(
    "cudnn", rejects=_rejects,
    notes=lambda call, caps: notes(call.dtypes, call.precision, call.seq_dtype, call.dropout,
                                   call.has_rng, call.num_layers),
    claims=lambda call, caps: claims(call.dtypes, call.precision, call.low_precision),
    run=_run, platforms=compat.cudnn_lstm_platforms, summary=summary)

"""The ``pallas`` route: portable_rnn's Pallas TPU recurrent kernel (`kernel`) for every
family, through the scan driver (layers, directions, dropout between layers, ragged lengths).

Status: its math, plumbing and transforms are tested on a CPU in Pallas interpret mode
(`interpret`); on a TPU the kernel compiles with Mosaic. The automatic choice on a TPU takes it
where the routing model (`core.routing`) predicts it faster than the scan path;
``implementation="pallas"`` or ``policy(<family>="pallas")`` asks for it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import numpy as np
from jax import lax

from ....core import dispatch, routing
from ....core.capabilities import Capabilities
from ....core.checks import precision_name
from ... import layout
from ...api import checkpointing
from ...cell import accumulation_dtype, hand_written_backward
from ...driver import rnn_scan
from . import kernel

NAME = "pallas"
KERNEL = "Pallas TPU kernel"
DTYPES = (np.dtype(np.float32), np.dtype(jax.numpy.bfloat16))

_INTERPRET: contextvars.ContextVar[bool] = contextvars.ContextVar("portable_rnn_pallas_interpret",
                                                                  default=False)
_RECOMPUTE: contextvars.ContextVar[bool] = contextvars.ContextVar("portable_rnn_pallas_recompute",
                                                                  default=False)


@contextlib.contextmanager
def _set(var: contextvars.ContextVar, value) -> Iterator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def interpret() -> contextlib.AbstractContextManager[None]:
    """Calls traced inside the block may take the Pallas route on any platform, the kernels
    running in Pallas interpret mode (slow: for tests on a CPU)."""
    return _set(_INTERPRET, True)


def interpreting() -> bool:
    return _INTERPRET.get()


def recompute_backward() -> contextlib.AbstractContextManager[None]:
    """Calls traced inside the block recompute the backward's gate factors (`kernel.
    Options.recompute`: one XLA GEMM over all steps before the backward kernel) instead of
    saving them in the forward kernel, which then writes only the states per step."""
    return _set(_RECOMPUTE, True)


_LOOP: contextvars.ContextVar[tuple[int | None, bool | None]] = contextvars.ContextVar(
    "portable_rnn_pallas_loop", default=(None, None))


def loop_form(unroll: int | None = None,
              carry_values: bool | None = None) -> contextlib.AbstractContextManager[None]:
    """Calls traced inside the block run the kernels' time loop `unroll` steps per iteration,
    the state carried as loop values (`carry_values`) or in VMEM scratch; None leaves the
    choice to the kernel (`kernel.loop_form`, by size). For benchmarks of the forms."""
    return _set(_LOOP, (unroll, carry_values))


def _options() -> kernel.Options:
    unroll, values = _LOOP.get()
    return kernel.Options(interpret=interpreting(), recompute=_RECOMPUTE.get(),
                                unroll=unroll, carry_values=values)


def _hidden(call) -> int:
    """The hidden size the kernel runs (`kernel.padded_hidden`)."""
    return kernel.padded_hidden(call.hidden_size, call.family.gates, call.num_heads)


def _size(call) -> int:
    """The recurrent input size S the kernel runs (H padded, or P with a projection)."""
    return call.proj_size or _hidden(call)


def _weight_itemsize(call) -> int:
    """The bytes of an item of W_hh as the cell prepares it (the classic GRU holds 16-bit
    kernels in float32)."""
    x = np.dtype(call.dtypes["x"])
    shapes = layout.param_shapes(call.input_size, call.hidden_size, 1, False, call.family,
                                 call.proj_size)[0]
    w = {n: jax.ShapeDtypeStruct(s, x) for n, s in shapes.items()}
    prepared = jax.eval_shape(lambda w: call.cell.prepare(w, x, accumulation_dtype(x), x), w)
    return np.dtype(prepared[1].dtype).itemsize


def rejects(call, caps: Capabilities) -> tuple[str, ...]:
    """Why the Pallas TPU kernel cannot serve a call (an empty tuple when it can)."""
    reasons = []
    if caps.platform != "tpu" and not interpreting():
        reasons.append(f"platform is {caps.platform!r}: the {KERNEL} needs a TPU (tests run it "
                       "on a CPU in Pallas interpret mode)")
    for name, dtype in call.dtypes.items():
        if np.dtype(dtype) == np.float16:
            reasons.append(f"`{name}` is float16: Mosaic compiles no conversion to float16 in a "
                           "TPU kernel (a TPU has no float16 arithmetic); the scan path serves it")
        elif np.dtype(dtype) not in DTYPES:
            reasons.append(f"`{name}` is {dtype}: the {KERNEL} runs float32 and bfloat16 (a "
                           "TPU has no float64)")
    if precision_name(call.precision) == "algorithm":
        reasons.append(f"precision={call.precision!r}: the {KERNEL} takes lax.Precision values "
                       "only, not dot algorithms")
    x = np.dtype(call.dtypes["x"])
    if x in DTYPES:
        reasons += kernel.weight_reasons(_size(call), call.family.gates, _hidden(call),
                                         _weight_itemsize(call), call.num_heads)
    if call.varying:
        reasons.append("inside jax.shard_map with check_vma=True (operands varying over "
                       f"{sorted(call.varying)}): Pallas interpret mode drops the varying axes "
                       "from its loop carries, and the compiled kernel's typing of them is "
                       "untested; pass check_vma=False")
    if call.steps == 0:
        reasons.append("T=0: there are no time steps to run")
    if call.batch == 0:
        reasons.append("batch=0: there are no sequences to run")
    return tuple(reasons)


def skips(call, caps: Capabilities) -> tuple[str, ...]:
    """Why the automatic choice passes over the kernel although it could serve the call."""
    if not hand_written_backward(call.cell):
        return (f"the {type(call.cell).__name__} cell has no hand-written backward step "
                f"(step_bwd): the {KERNEL}'s backward differentiates its step, which no "
                "benchmark grid has timed, so the automatic choice takes the scan path; "
                "implementation='pallas' asks for the kernel",)
    reasons = []
    m = routing.unmeasured_family(call.family.name, caps)
    if m is not None:
        reasons.append(f"the routing model ({m.describe()}) was fitted on the {KERNEL} running "
                       f"{', '.join(sorted(m.families))}, not the {call.family.name}: the "
                       "automatic choice takes the scan path; implementation='pallas' asks for "
                       "the kernel")
    unmeasured, m = (routing.unmeasured_heads(call.family.name, caps) if call.num_heads > 1
                     else (False, None))
    if unmeasured:
        untimed = (f"the routing model ({m.describe()}) has timed no call with heads"
                   if m is not None else
                   f"no grid of {caps.device_kind or caps.platform} has timed calls with heads")
        reasons.append(f"num_heads={call.num_heads}: {untimed} "
                       "(benchmarks/routing_grid.py --heads draws them): the automatic choice "
                       "keeps the scan path for them; implementation='pallas' asks for the "
                       "kernel")
    return tuple(reasons)


def notes(call, caps: Capabilities) -> tuple[str, ...]:
    """How the kernel serves a call it accepted."""
    out = []
    x = np.dtype(call.dtypes["x"])
    size, hidden = _size(call), _hidden(call)
    width = call.family.gates * hidden
    states = [size] + [hidden] * (len(call.family.states) - 1)
    p = kernel.forward_form(
        _options(), call.batch, call.steps, width, states,
        size * width // call.num_heads * _weight_itemsize(call), accumulation_dtype(x).itemsize,
        train=True)
    heads, unit = call.num_heads, call.hidden_size // call.num_heads
    if heads > 1:
        out.append(f"{heads} heads of {unit} units: W_hh resident as {heads} blocks of "
                   f"{hidden // heads} x {call.family.gates * hidden // heads}, and each step "
                   "multiplies head by head (a static loop of 2-D products, each head's gate "
                   "blocks placed in the gate-major layout), forward and backward; the weight "
                   "gradient is one batched XLA GEMM over the heads")
        if hidden != call.hidden_size:
            out.append(f"each head's {unit} units padded to {hidden // heads} (a multiple of "
                       f"{kernel.LANES}: the products slice the state and place the "
                       f"{call.family.gates} gate blocks per head along the lanes): W_ih, "
                       "W_hh, the biases and the initial states zero-padded per head inside "
                       "each gate block, the padded units staying zero; outputs, final states "
                       "and gradients sliced back")
    elif hidden != call.hidden_size:
        out.append(f"hidden {call.hidden_size} padded to {hidden} (a multiple of "
                   f"{kernel.LANES}: the step splits the {call.family.gates} gate blocks "
                   "along the lanes): W_ih, W_hh, the biases and the initial states zero-padded "
                   "per gate block, the padded units staying zero; outputs, final states and "
                   "gradients sliced back")
    out.append(f"{KERNEL}: W_hh resident in VMEM, the state in "
               f"{'registers (loop values)' if p.carry_values else 'VMEM scratch'}; time blocks "
               f"of {p.time_block} steps, batch tiles of {p.batch_tile}, "
               f"{p.unroll} step{'s' if p.unroll > 1 else ''} per loop iteration (training "
               "forward); the input projection and the weight gradients are XLA GEMMs")
    if not hand_written_backward(call.cell):
        out.append(f"the {type(call.cell).__name__} cell has no hand-written backward step: "
                   "the backward kernel differentiates its step (jax.vjp) at the saved state "
                   "before each step, recomputing the step's products; the weight gradients "
                   "are XLA GEMMs of the step differentiated over all steps")
    elif _RECOMPUTE.get():
        out.append("the backward's gate factors recomputed by XLA from the saved states (one "
                   "GEMM over all steps; routes.pallas.route.recompute_backward())")
    else:
        out.append("the backward kernel reads the gate factors the forward saved (no "
                   "recomputation)")
    if x.itemsize == 2:
        out.append(f"{x}: matmuls accumulate in float32, {call.family.wide_state} in float32")
    if x == np.float32 and precision_name(call.precision) == "HIGH":
        out.append("precision HIGH: float32 products at HIGHEST (Mosaic lowers DEFAULT and "
                   "HIGHEST only)")
    if x == jax.numpy.bfloat16 and precision_name(call.precision) not in (None, "DEFAULT"):
        out.append(f"precision {precision_name(call.precision)}: bfloat16 operands multiplied "
                   "at DEFAULT, whose products are the same (exact, accumulated in float32); "
                   "Mosaic contracts bfloat16 at no other precision")
    if call.seq_dtype is not None and call.seq_dtype != np.int32:
        out.append(f"seq_lengths {call.seq_dtype} cast to int32")
    if call.dropout > 0 and call.has_rng and call.num_layers > 1:
        out.append(f"dropout {call.dropout} between layers from dropout_rng")
    if call.recurrent_dropout:
        out.append("recurrent_dropout_mask: the recurrent product reads h * mask, one product "
                   "per mask")
    out.append("under jax.vmap, the forward folds the vmapped axis into the batch (one kernel "
               "call); weights that differ per instance, and every vmapped backward, run the scan "
               "path")
    remat = checkpointing(call, caps).note
    if remat:
        out.append(f"{remat}; per segment, the forward kernel again from its checkpoint, then "
                   "the backward kernel")
    if interpreting():
        out.append("Pallas interpret mode (portable_rnn's routes.pallas.route.interpret())")
    return tuple(out)


def _precision(precision, dtype) -> lax.Precision:
    """The products of every matmul, spelled out (kernels trace their backward outside the
    caller's ``jax.default_matmul_precision``): DEFAULT for bfloat16 operands, whose products
    are exact at every precision and which Mosaic contracts at no other; for float32, the
    precision `precision_name` reads (a dot algorithm is rejected above), HIGH as HIGHEST
    (Mosaic lowers DEFAULT and HIGHEST only, in some JAX versions)."""
    name = precision_name(precision)
    if dtype == jax.numpy.bfloat16 or name is None:
        return lax.Precision.DEFAULT
    return lax.Precision.HIGHEST if name == "HIGH" else lax.Precision[name]


def _run(d, call, x, states, weights, seq_lengths, dropout_rng, rmask):
    layer = kernel.Layer(_options())
    every = checkpointing(call, d.capabilities).every
    config = call.scan_config(precision=_precision(call.precision, x.dtype), layer_impl=layer,
                              **({} if every is None else {"remat_every": every}))
    with jax.named_scope(f"portable_rnn.{call.family.name}.pallas"):
        return rnn_scan(config, x, states, weights, seq_lengths, dropout_rng, rmask)


def _platforms() -> tuple[str, ...]:
    return ("tpu",)


ROUTE = dispatch.Route(NAME, rejects=rejects, notes=notes, run=_run, skips=skips,
                       platforms=_platforms, kernel=KERNEL,
                       summary=lambda family: "portable_rnn's Pallas TPU kernel")

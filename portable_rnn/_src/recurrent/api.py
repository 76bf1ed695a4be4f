"""What every recurrent op shares at its entry point: argument checks, the facts of a call
(`Call`), and the op that runs whichever route the dispatcher chose. Every family's op checks
its arguments the same way and registers the routes of `routes.ROUTES`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import checks, dispatch
from ..core.capabilities import Capabilities, device_memory
from ..core.compat import varying_axes
from ..core.profile import profile
from . import layout
from .cell import Family, accumulation_dtype
from .driver import ScanConfig, segment_length, stash_bytes

Array = jax.Array


def as_arrays(**arrays) -> tuple:
    """An op's array arguments as JAX arrays (`checks.array`: NumPy arrays and nested lists
    too), in the order given; a None ``recurrent_dropout_mask`` stays None."""
    return tuple(None if a is None and name == "recurrent_dropout_mask" else
                 checks.array(name, a) for name, a in arrays.items())


@dataclasses.dataclass(frozen=True)
class Options:
    """A recurrent op's static arguments, checked (`check_options`)."""

    family: Family
    cell: Any  # the family's cell for this call (its options bound)
    input_size: int
    hidden_size: int
    num_layers: int
    dropout: float
    bidirectional: bool
    precision: Any
    implementation: str | None
    proj_size: int = 0
    remat_every: int | None = None  # asked for by the call (the policy's in a `Call`)
    num_heads: int = 1  # NH: a block-diagonal W_hh of NH heads (`layout`); 1: dense


@dataclasses.dataclass(frozen=True, kw_only=True)
class Call(Options):
    """The checked facts of one recurrent call, which every route decides and runs from: its
    checked `Options` and what the arrays and the policy tell."""

    dtypes: dict[str, np.dtype]  # of x, the initial states and the weights
    batch: int
    steps: int
    seq_dtype: np.dtype | None  # the given lengths' dtype, None without lengths
    has_rng: bool
    recurrent_dropout: bool
    low_precision: str  # the policy's lstm_low_precision
    preferred: str | None  # the policy's preferred route for this op
    varying: frozenset = frozenset()  # the manual mesh axes the operands vary over (shard_map)
    remat_from_policy: bool = False  # remat_every came from `policy`, not the call
    memory_fraction: float = dispatch.MEMORY_FRACTION  # the policy's recurrent_memory_fraction

    @property
    def requested(self) -> str | None:
        """The `implementation` asked for, None when automatic."""
        return self.implementation

    @property
    def statics(self) -> tuple:
        """(input_size, hidden_size, num_layers, dropout, bidirectional, precision)."""
        return (self.input_size, self.hidden_size, self.num_layers, self.dropout,
                self.bidirectional, self.precision)

    def scan_config(self, **options) -> ScanConfig:
        """The scan driver's configuration for this call: its network and `options`, the
        driver's (`ScanConfig`; `scan_options` gives the platform's)."""
        fields = dict(cell=self.cell, input_size=self.input_size,
                      hidden_size=self.hidden_size, num_layers=self.num_layers,
                      bidirectional=self.bidirectional, dropout=self.dropout,
                      precision=self.precision, proj_size=self.proj_size,
                      num_heads=self.num_heads)
        return ScanConfig(**{**fields, **options})


def check_options(family: Family, cell, *, input_size, hidden_size, num_layers, dropout,
                  bidirectional, precision, implementation, proj_size=0,
                  remat_every=None, num_heads=1) -> Options:
    """Validates an op's static arguments (each error names the argument)."""
    input_size, hidden_size, num_layers, bidirectional, proj_size = layout.check_sizes(
        input_size, hidden_size, num_layers, bidirectional, proj_size)
    num_heads = layout.check_heads(hidden_size, num_heads, proj_size)
    dropout = checks.rate("dropout", dropout)
    checks.precision(precision)
    checks.implementation(implementation, dispatch.implementations(family.name))
    if remat_every is not None:
        remat_every = checks.static_int("remat_every", remat_every, low=1)
    return Options(family, cell, input_size, hidden_size, num_layers, dropout, bidirectional,
                   precision, implementation, proj_size, remat_every, num_heads)


def check_args(options: Options, x, states, weights, seq_lengths, dropout_rng,
               recurrent_dropout_mask) -> Call:
    """Validates the arrays of a call with checked `options` at trace time; returns the `Call`
    (the checked static facts: no array), which `decide` and `run` take.

    `states` is a sequence of ``(name, array, size)``: the initial states and their last axis
    (the first one is the output state, which ``recurrent_dropout_mask`` matches). The arrays
    may be `jax.ShapeDtypeStruct`s.
    """
    family, input_size, hidden_size = options.family, options.input_size, options.hidden_size
    num_layers, proj_size, dropout = options.num_layers, options.proj_size, options.dropout
    bidirectional = options.bidirectional
    x_shape, x_dtype = checks.shape_dtype("x", x)
    if len(x_shape) != 3:
        raise ValueError(f"`x` must have shape (batch, time, input_size) (rank 3); got shape "
                         f"{x_shape} (rank {len(x_shape)}).")
    checks.floating("x", x_dtype)
    batch, steps, features = x_shape
    if features != input_size:
        raise ValueError(f"`x` must have input_size={input_size} features in its last axis; "
                         f"got shape {x_shape}.")
    num_directions = 2 if bidirectional else 1
    if recurrent_dropout_mask is not None:
        _check_recurrent_mask(family, recurrent_dropout_mask, states[0][2], num_layers,
                              num_directions, batch, proj_size)
    for name, a, size in states:
        shape, dtype = checks.shape_dtype(name, a)
        legend = "proj_size" if size == proj_size and proj_size else "hidden_size"
        checks.state_shape(name, shape, (num_layers * num_directions, batch, size),
                            f"(num_layers * num_directions, batch, {legend})", x_name="x",
                            batch=(batch,), steps=steps, size_name=legend)
        checks.floating(name, dtype)
    w_shape, w_dtype = checks.shape_dtype("weights", weights)
    n = layout.num_params(input_size, hidden_size, num_layers, bidirectional, family, proj_size,
                          options.num_heads)
    checks.expect_shape("weights", w_shape, (n,), f"(get_num_params_in_{family.name}(...),)")
    checks.floating("weights", w_dtype)
    if dropout_rng is not None:
        checks.prng_key("dropout_rng", dropout_rng)
    if dropout > 0 and num_layers > 1 and dropout_rng is None:
        raise ValueError(
            f"`dropout`={dropout} needs a random key: pass `dropout_rng=jax.random.key(...)` "
            "when training, or `dropout=0.0` for inference.")
    checks.check_seq_lengths(seq_lengths, batch, steps)
    policy = dispatch.current_policy()
    named = [("x", x), *((name, a) for name, a, _ in states), ("weights", weights)]
    remat_from_policy = options.remat_every is None and policy.remat_every is not None
    return Call(
        **{f.name: getattr(options, f.name) for f in dataclasses.fields(Options)
           if f.name != "remat_every"},
        remat_every=policy.remat_every if remat_from_policy else options.remat_every,
        remat_from_policy=remat_from_policy, memory_fraction=policy.recurrent_memory_fraction,
        dtypes={n: checks.shape_dtype(n, a)[1] for n, a in named},
        batch=batch, steps=steps,
        seq_dtype=None if seq_lengths is None else checks.shape_dtype("seq_lengths",
                                                                      seq_lengths)[1],
        has_rng=dropout_rng is not None, recurrent_dropout=recurrent_dropout_mask is not None,
        low_precision=policy.lstm_low_precision, preferred=getattr(policy, family.name, None),
        varying=frozenset().union(*(varying_axes(a) for _, a in named
                                    if isinstance(a, jax.Array))))


def _check_recurrent_mask(family, mask, size, num_layers, num_directions, batch, proj_size):
    shape, dtype = checks.shape_dtype("recurrent_dropout_mask", mask)
    legend = "proj_size" if proj_size else "hidden_size"
    gates = family.gates
    one = (num_layers * num_directions, batch, size)
    per_gate = (num_layers * num_directions, gates, batch, size)
    if tuple(shape) not in ((one, per_gate) if gates > 1 else (one,)):
        expected = f"(num_layers * num_directions, batch, {legend})={one}"
        if gates > 1:
            expected += (f", or (num_layers * num_directions, gates, batch, {legend})="
                         f"{per_gate} for one mask per gate")
        raise ValueError(f"`recurrent_dropout_mask` must have shape {expected}; got "
                         f"{tuple(shape)}.")
    checks.floating("recurrent_dropout_mask", dtype)


@dataclasses.dataclass(frozen=True)
class Checkpointing:
    """Segment checkpointing of a call's gradient (`checkpointing`): ``every`` the segment
    length (None: none), ``note`` what the decision says about it (None: nothing), ``stash``
    the estimated bytes of the residuals of every step without it (0 where not estimated)."""

    every: int | None
    note: str | None = None
    stash: int = 0


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"


def stash(call: Call, caps: Capabilities) -> tuple[int, int, int]:
    """The estimated residuals of a call's gradient without segment checkpointing, on the scan
    path (`driver.stash_bytes`; the Pallas kernel's are of the same arrays): (the bytes of
    every step of every layer, the bytes one step of the largest layer keeps, the bytes of one
    checkpoint: every layer's states once)."""
    dtype = np.dtype(call.dtypes["x"])
    stack = (np.dtype(np.float32) if profile(caps).wide_stacks and dtype.itemsize == 2
             else None)
    dirs = 2 if call.bidirectional else 1
    size = call.proj_size or call.hidden_size
    inputs = [call.input_size] + [dirs * size] * (call.num_layers - 1)
    per_step = [stash_bytes(call.cell, i, call.hidden_size, call.proj_size, dirs, dtype, stack,
                            call.num_heads) for i in sorted(set(inputs))]
    by_input = dict(zip(sorted(set(inputs)), per_step))
    steps = sum(by_input[i] for i in inputs) * call.batch
    widths = (size,) + (call.hidden_size,) * (len(call.family.states) - 1)
    state = sum(n * np.dtype(d).itemsize for n, d in zip(
        widths, call.cell.state_dtypes(dtype, accumulation_dtype(dtype))))
    return (steps * call.steps, max(per_step) * call.batch,
            state * dirs * call.num_layers * call.batch)


def _stash_bound(call: Call) -> int:
    """A bound on `stash` from the sizes alone: 64 values of the widest per-step array in 8
    bytes each, per step, sequence, layer and direction (a cell's step keeps about ten of
    them)."""
    dirs = 2 if call.bidirectional else 1
    widest = max(call.family.gates * call.hidden_size, call.input_size,
                 dirs * (call.proj_size or call.hidden_size))
    return call.steps * call.batch * call.num_layers * dirs * 64 * widest * 8


# The share of the memory budget one segment's residuals may take: segments as long as that
# allows, where longer than sqrt(T), since each segment costs a fixed time (on a TPU v5e about
# 90 us: its kernel calls and GEMMs), and the residuals of a segment stay small beside what the
# step keeps anyway (its input, output and the output's gradient).
SEGMENT_SHARE = 1 / 32


def automatic_segment_length(steps: int, step_bytes: int, budget: float) -> int:
    """The automatic segment length for `steps` steps whose residuals take `step_bytes` a step
    (the largest layer's, every batch row and direction), under a memory `budget`: the longest
    segments whose residuals take at most `SEGMENT_SHARE` of it, and at least about sqrt(T)
    steps (`driver.segment_length`)."""
    return segment_length(steps, int(SEGMENT_SHARE * budget) // max(step_bytes, 1))


def checkpointing(call: Call, caps: Capabilities) -> Checkpointing:
    """Whether and how often a call's gradient checkpoints segments: every ``remat_every`` steps
    where the call (or the policy) asks for it; automatically (``remat_every=None``) in
    segments as long as `SEGMENT_SHARE` of the budget allows, and at least about sqrt(T) steps
    (`driver.segment_length`), where the estimated residuals of every step
    (`stash`) would take more than the policy's ``recurrent_memory_fraction`` of one device's
    memory (`device_memory`), else not at all. The note says which segment length and why."""
    if call.steps == 0 or call.batch == 0:
        return Checkpointing(None)
    memory, source = device_memory(caps)
    budget = call.memory_fraction * memory
    if call.remat_every is None and _stash_bound(call) <= budget:
        return Checkpointing(None)  # clearly fits: not estimated
    full, step, states = stash(call, caps)
    if call.remat_every is None:
        if full <= budget:
            return Checkpointing(None, stash=full)
        every = automatic_segment_length(call.steps, step, budget)
        why = (f"automatic: the residuals of every step would take about "
               f"{_bytes(full)}, more than {call.memory_fraction:g} of "
               f"{_bytes(memory)} ({source}), the share policy(recurrent_memory_fraction=...) "
               f"allows; the longest segments whose residuals take at most "
               f"1/{round(1 / SEGMENT_SHARE)} of that share, and at least about sqrt(T) steps; "
               "remat_every= sets the length")
    else:
        every = min(call.remat_every, call.steps)
        asked = (f"policy(remat_every={call.remat_every})" if call.remat_from_policy
                 else f"remat_every={call.remat_every}")
        why = f"{asked}; the residuals of every step would take about {_bytes(full)}"
    segments = -(-call.steps // every)
    layers = "each layer's" if call.num_layers > 1 else "the"
    how = ("one segment: each layer's forward runs again in its backward" if segments == 1 else
           f"the forward keeps {layers} states at the start of each of {segments} segments "
           f"({_bytes(segments * states)}) and the backward runs each segment's forward again, "
           f"keeping one segment's residuals at a time ({_bytes(every * step)})")
    return Checkpointing(every, f"segment checkpointing every {every} steps ({why}): {how}",
                         full)


def checkpointing_rejects(call: Call, caps: Capabilities, kernel: str) -> tuple[str, ...]:
    """Why a route whose `kernel` keeps its own residuals of every step (cuDNN's reserve space)
    cannot serve a call that checkpoints segments (`checkpointing`)."""
    plan = checkpointing(call, caps)
    if plan.every is None:
        return ()
    if call.remat_every is not None:
        return (f"remat_every={call.remat_every}: {kernel} keeps its residuals of every step and "
                "cannot checkpoint segments; the scan path does",)
    return (f"the residuals of every step would take about {_bytes(plan.stash)}, more "
            f"than the policy's {call.memory_fraction:g} of one device's memory: segment "
            f"checkpointing is needed, which {kernel} cannot do (it keeps every step's); the "
            "scan path checkpoints",)


def heads_rejects(call: Call, kernel: str) -> tuple[str, ...]:
    """Why a route whose `kernel` multiplies by a dense ``W_hh`` cannot serve a call with
    heads (a block-diagonal one, `layout`)."""
    if call.num_heads == 1:
        return ()
    return (f"num_heads={call.num_heads}: {kernel} multiplies by a dense W_hh and has no "
            "block-diagonal (multi-head) recurrence; the scan path multiplies per head",)


def recurrent_mask(mask):
    """`recurrent_dropout_mask` for the driver: (L*D, K, B, S), K = 1 or one per gate."""
    return mask[:, None] if mask is not None and mask.ndim == 3 else mask


def mask_padding(x, seq_lengths):
    """`x` with zeros past each length: padding never reaches a result or gradient (even NaN)."""
    if seq_lengths is None:
        return x
    valid = jnp.arange(x.shape[1], dtype=jnp.int32)[None, :] < seq_lengths[:, None]
    return jnp.where(valid[..., None], x, jnp.zeros((), x.dtype))


def decide(call: Call, capabilities: Capabilities | None) -> dispatch.Decision:
    """The route for a checked call (`check_args`) on `capabilities` (None: this machine)."""
    caps = dispatch.resolve_capabilities(capabilities)
    return dispatch.choose(call.family.name, call, caps, call.requested, call.preferred)


def run(call: Call, capabilities: Capabilities | None, x, states, weights, seq_lengths,
        dropout_rng, recurrent_dropout_mask):
    """The op: routes a checked call (`check_args`) and runs it on its arrays (`as_arrays`);
    returns ``(y, *final states)``. `states`: the initial states' arrays."""
    seq_lengths = checks.int32_lengths(seq_lengths, call.steps,
                                       check=dispatch.current_policy().checkify_lengths)
    decision = decide(call, capabilities)
    dispatch.report_fallback(decision)
    x = mask_padding(x, seq_lengths)
    y, finals = dispatch.run(decision, call, x, tuple(states), weights, seq_lengths,
                             dropout_rng, recurrent_mask(recurrent_dropout_mask))
    return (y, *finals)

"""The Pallas TPU recurrent kernel: one time-loop template that runs each family's fused step
(the cell protocol of `cell`), forward and backward, one layer and direction per call.

Design (the scan driver's, with the two loops as Pallas kernels):

- the input projection is one XLA GEMM over all steps before the kernel, ``(T, B, I) x (I, G*H)``
  in the accumulation dtype, as the scan path's; the kernel streams it in time blocks;
- one `pallas_call` per layer and direction over a grid ``(batch tiles, time blocks)``,
  ``dimension_semantics=("parallel", "arbitrary")``: ``W_hh`` (and the cell's other parameters)
  are blocks with a constant index map, so they stay in VMEM for the whole sequence; the state
  (float32 for 16-bit inputs) is kept in VMEM scratch across time blocks; a `lax.fori_loop`
  runs the block's steps, each one recurrent matmul and the cell's step, carrying a small state
  as loop values and unrolled where a step is small (`loop_form`);
- ragged lengths: step ``t`` of a row is valid where ``lo <= t < hi`` (the forward direction
  ``[0, length)``; the reverse one, over the time-reversed input as in the scan driver,
  ``[T - length, T)``); an invalid step keeps the state, so the reverse direction starts from
  the initial state at each sequence's last valid step and a length 0 returns the initial
  state. Time is padded to a whole number of blocks with invalid steps;
- the backward kernel runs the time blocks in reverse, carrying the state's gradient (``dh``,
  ``dc``), and emits the gates' gradients ``dz`` per step (the cell's ``step_bwd``); every weight
  and input gradient is then a large XLA GEMM, as the scan path's VJP does. The forward saves
  what the cell's backward step reads (its ``saved``: the LSTM's gate factors, the GRU's
  gates), or, with `Options.recompute`, only the states, from which XLA recomputes them before
  the backward kernel (one GEMM over all steps);
- a cell without the protocol's backward part (the classic GRU, whose step computes its own
  recurrent products, `cell.own_products`: the kernel hands it ``zh(v, first, last)`` over the
  resident ``W_hh``): the forward saves the states, the backward kernel differentiates the
  cell's step (`jax.vjp`, traced outside the kernel) at each saved state, carrying only the
  state's gradient, and XLA differentiates the step vectorised over all steps for the weight
  gradients (`_differentiated_dir`, `_step_gradients`);
- heads (a block-diagonal ``W_hh``, per direction (NH, DH, G*DH) as the driver's): the heads'
  blocks are resident, and each step's product is a static loop over the heads of 2-D
  products, (B, DH) x (DH, G*DH), placed in the gate-major layout the cell's step reads
  (`_head_products`); the backward kernel's product with the transposed blocks likewise
  (`_head_products_dh`); the weight gradient is the driver's per-head GEMM;
- a gated cell's hidden size is zero-padded to a multiple of 128 lanes per gate block, with
  heads each head's DH inside each gate block (`padded_hidden`, `_padded`), the padded units
  staying zero, and the results sliced back;
- 16-bit values cross the kernel boundary as float32 (exact), and are rounded back outside;
- the step is traced once outside the kernel and evaluated inside it (`traced_with_constants`):
  a Pallas kernel may not capture array constants (the LSTM's NumPy gate vectors), so they
  become kernel inputs.

`Layer` is a drop-in for the driver's `driver.rnn_layer` (``driver.rnn_scan(..., layer_impl=...)``),
made an op that vmaps, differentiates and shards by `fused.op` and `fused.over_batch`. On a CPU
the kernels run in Pallas interpret mode (`Options.interpret`), the tests' way to run them.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ....core import compat
from ....core.checks import own_rank_promotion
from ....core.sharding import vary_together
from ... import fused
from ...cell import STEPS_BATCH, accumulation_dtype, hand_written_backward, own_products
from ...driver import (
    TRAIN_UNROLL,
    UNROLL,
    RecurrentProducts,
    _finals,
    _masked_product_dw,
    _outputs,
    masked_product,
    operand,
    recurrent_product,
    recurrent_product_dw,
    rnn_layer,
    rounded_operand,
    state_size,
    transposed,
)

MIB = 1 << 20
VMEM_LIMIT = 100 * MIB  # the scoped VMEM limit the kernels ask Mosaic for (a v5e core has 128)
WEIGHT_SHARE = 0.5  # W_hh (double-buffered) may take at most this share of VMEM_LIMIT
TIME_BLOCKS = (32, 16, 8, 4, 2, 1)  # time-block sizes tried, largest first
LANES = 128
# steps per iteration of the time loop where a step's recurrent product has at most so many
# items, smallest bound first (one step per iteration above the last)
LOOP_UNROLLS = ((32 << 10, 16), (128 << 10, 4))
VALUES_BYTES = 128 << 10  # a state of at most this size is carried as loop values, not in VMEM


def padded_hidden(hidden_size: int, gates: int, heads: int = 1) -> int:
    """The hidden size the kernels run: a gated cell's step splits and concatenates its gate
    blocks along the lanes at multiples of H, which Mosaic lowers for H a multiple of `LANES`
    only, so H is padded up to one (`_padded`); a single-gate cell runs H as it is. With
    heads, the products slice the state and concatenate the gate blocks per head, at
    multiples of DH = H / NH: each head's DH is padded so (NH times the padded DH)."""
    dh = hidden_size // heads
    if gates > 1 and dh % LANES:
        dh = -(-dh // LANES) * LANES
    return heads * dh


def weight_bytes(size: int, gates: int, hidden_size: int, itemsize: int, heads: int = 1) -> int:
    """VMEM taken by one direction's W_hh (S, G*H), or with heads (NH, DH, G*DH),
    double-buffered as Pallas does."""
    return 2 * size * gates * hidden_size // heads * itemsize


def weight_reasons(size: int, gates: int, hidden_size: int, itemsize: int,
                   heads: int = 1) -> list[str]:
    """Why W_hh cannot stay in VMEM (an empty list when it can)."""
    need = weight_bytes(size, gates, hidden_size, itemsize, heads)
    if need > WEIGHT_SHARE * VMEM_LIMIT:
        unit = hidden_size // heads
        shape = (f"{size} x {gates * hidden_size}" if heads == 1 else
                 f"{heads} heads of {unit} x {gates * unit}")
        return [f"W_hh ({shape}, {itemsize}-byte items) needs "
                f"{need / MIB:.1f} MiB of VMEM double-buffered; the Pallas TPU kernel keeps it "
                f"resident and allows {WEIGHT_SHARE * VMEM_LIMIT / MIB:.0f} MiB of its "
                f"{VMEM_LIMIT / MIB:.0f} MiB scoped VMEM for it; serving it needs W_hh "
                "left in HBM and streamed every step in tiles over its output columns (the "
                "same hidden units of every gate block, so that each tile's gate math is "
                "whole) by double-buffered DMA inside the time loop, the new state assembled "
                "from the tiles before the next step's product, and the backward's W_hh^T "
                "streamed likewise over its rows: not implemented"]
    return []


@dataclasses.dataclass(frozen=True)
class Plan:
    batch_tile: int
    time_block: int
    unroll: int = 1  # the time loop's steps per iteration (`loop_form`)
    carry_values: bool = False  # the state carried as loop values, else in VMEM scratch


def plan(batch: int, steps: int, row_bytes: int, resident_bytes: int, carry_bytes: int,
         time_block: int | None = None, batch_tile: int | None = None) -> Plan:
    """The batch tile and time block: the whole batch and the largest time block whose
    double-buffered streams (`row_bytes` per step and batch row), resident blocks and carries
    fit `VMEM_LIMIT`; smaller batch tiles (multiples of 8 dividing B) where none does."""
    tiles = [batch_tile] if batch_tile else [batch] + [
        b for b in range(batch - batch % 8, 7, -8) if b < batch and batch % b == 0]
    blocks = [time_block] if time_block else [b for b in TIME_BLOCKS if b <= max(steps, 1)]
    for bt in tiles:
        for tb in blocks:
            if 2 * resident_bytes + 2 * tb * bt * row_bytes + bt * carry_bytes <= VMEM_LIMIT:
                return Plan(bt, tb)
    return Plan(tiles[-1], blocks[-1])


def loop_form(opts: Options, batch_tile: int, width: int, state_width: int) -> tuple[int, bool]:
    """The time loop's unroll and whether it carries the state as loop values (else in VMEM
    scratch), for a batch tile, the recurrent product's width G*H and the state's total width:
    `opts`' where set, else `LOOP_UNROLLS`' steps per iteration for the step's size (large
    steps run one per iteration: unrolling them multiplies the kernel's compile time) and the
    state as values where it is small (``benchmarks.tpu_recurrent_kernel --loop-forms`` times
    the forms)."""
    items = batch_tile * width
    unroll = opts.unroll if opts.unroll is not None else next(
        (u for bound, u in LOOP_UNROLLS if items <= bound), 1)
    values = opts.carry_values if opts.carry_values is not None else (
        batch_tile * state_width * 4 <= VALUES_BYTES)
    return unroll, values


# --- the time-loop template -------------------------------------------------------------------

def _as_2d(a):
    return a.reshape((1,) * (2 - a.ndim) + a.shape) if a.ndim < 2 else a


def _time_loop(step, streams, rows, resident, carry0, out_dtypes, carry_dtypes, *, plan_,
               reverse):
    """The kernel that runs ``step`` over time, for `_run_loop`'s `pallas_call`.

    streams: (T, B, n) arrays, T a multiple of the time block; rows: arrays with the batch on
    axis -2 ((B, n) or (K, B, n)), read whole per batch tile; resident: arrays every tile reads
    whole (weights, parameters, constants); carry0: (B, n) initial carries. ``step(t, rows,
    resident, stream values at t, carries) -> (carries, outputs at t)``, on values in their
    own dtypes. Returns the kernel, its grid, its input block specs, the output block-spec
    makers, the operands as the kernel takes them, and the Pallas modules.
    """
    pl, pltpu = compat.pallas()
    stream_dtypes = [a.dtype for a in streams]
    row_dtypes = [a.dtype for a in rows]
    streams, rows, carry0 = ([_wide(a) for a in group] for group in (streams, rows, carry0))
    steps, batch = streams[0].shape[:2]
    bt, tb = plan_.batch_tile, plan_.time_block
    unroll, carry_values = plan_.unroll, plan_.carry_values
    nb, nt = batch // bt, steps // tb
    shapes = [a.shape for a in resident]
    resident = [_as_2d(a) for a in resident]
    n_in = (len(streams), len(rows), len(resident), len(carry0))

    def t_index(j):
        return nt - 1 - j if reverse else j

    def stream_spec(a):
        return pl.BlockSpec((tb, bt) + a.shape[2:], lambda b, j: (t_index(j), b, 0))

    def row_spec(a):
        lead = a.ndim - 2
        return pl.BlockSpec(a.shape[:lead] + (bt, a.shape[-1]),
                            lambda b, j, lead=lead: (0,) * lead + (b, 0))

    def full_spec(a):
        return pl.BlockSpec(a.shape, lambda b, j, nd=a.ndim: (0,) * nd)

    def kernel(*refs):
        ins, refs = refs[:sum(n_in)], refs[sum(n_in):]
        s_refs, ins = ins[:n_in[0]], ins[n_in[0]:]
        r_refs, ins = ins[:n_in[1]], ins[n_in[1]:]
        w_refs, c0_refs = ins[:n_in[2]], ins[n_in[2]:]
        o_refs, refs = refs[:len(out_dtypes)], refs[len(out_dtypes):]
        f_refs, scratch = refs[:len(carry0)], refs[len(carry0):]
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _init():
            for sc, c0 in zip(scratch, c0_refs):
                sc[...] = c0[...].astype(sc.dtype)

        base = t_index(j) * tb

        def load():
            return [sc[...] for sc in scratch]

        def store(values):
            for sc, v in zip(scratch, values):
                sc[...] = v

        def body(i, held):  # held: the state as loop values, or () where scratch holds it
            s = tb - 1 - i if reverse else i
            state = held if carry_values else load()
            new, outs = step(base + s, [r[...].astype(d) for r, d in zip(r_refs, row_dtypes)],
                             [w[...].reshape(shape) for w, shape in zip(w_refs, shapes)],
                             [r[s].astype(d) for r, d in zip(s_refs, stream_dtypes)],
                             [v.astype(d) for v, d in zip(state, carry_dtypes)])
            new = [v.astype(sc.dtype) for sc, v in zip(scratch, new)]
            for o, v in zip(o_refs, outs):
                o[s] = v.astype(o.dtype)
            if carry_values:
                return new
            store(new)
            return held

        held = lax.fori_loop(0, tb, body, load() if carry_values else (), unroll=unroll)
        if carry_values:
            store(held)

        @pl.when(j == nt - 1)
        def _final():
            for f, sc in zip(f_refs, scratch):
                f[...] = sc[...].astype(f.dtype)

    return kernel, (nb, nt), (
        [stream_spec(a) for a in streams] + [row_spec(a) for a in rows]
        + [full_spec(a) for a in resident] + [row_spec(a) for a in carry0]), (
        stream_spec, row_spec), (streams, rows, resident, carry0), pltpu, pl


def _run_loop(step, streams, rows, resident, carry0, out_widths, out_dtypes, carry_dtypes,
              scratch_dtype, *, plan_, reverse, interpret):
    """`_time_loop`'s kernel called: returns (output streams, final carries)."""
    kernel, grid, in_specs, (stream_spec, row_spec), operands, pltpu, pl = _time_loop(
        step, streams, rows, resident, carry0, out_dtypes, carry_dtypes, plan_=plan_,
        reverse=reverse)
    steps, batch = streams[0].shape[:2]
    like = streams[0]
    outs = [compat.kernel_out_shape((steps, batch, w), _wide_dtype(d), like)
            for w, d in zip(out_widths, out_dtypes)]
    finals = [compat.kernel_out_shape(c.shape, _wide_dtype(d), like)
              for c, d in zip(carry0, carry_dtypes)]
    scratch = [pltpu.VMEM((plan_.batch_tile, c.shape[-1]), scratch_dtype) for c in carry0]
    call = pl.pallas_call(
        kernel, grid=grid, in_specs=in_specs,
        out_specs=[stream_spec(o) for o in outs] + [row_spec(f) for f in finals],
        out_shape=outs + finals, scratch_shapes=scratch, interpret=interpret,
        compiler_params=None if interpret else compat.tpu_compiler_params(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT))
    result = call(*vary_together(*[a for group in operands for a in group]))
    result = [r.astype(d) for r, d in zip(result, list(out_dtypes) + list(carry_dtypes))]
    return result[:len(outs)], result[len(outs):]


def _wide_dtype(dtype):
    """float32 for 16-bit floats: what the kernels stream and store per step. A 16-bit slice
    of a few rows stored at a dynamic step would need Mosaic's packed (16, 128) tiling; the
    widened values are exact, and rounded back outside the kernel."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.kind == "f" and dtype.itemsize < 4 else dtype


def _wide(a):
    return a.astype(_wide_dtype(a.dtype))


def _traced(fn, *examples):
    """`fn` traced on `examples` with its constants hoisted (`compat.traced_with_constants`):
    ``(call, consts)`` where ``call(consts, *args)`` returns `fn`'s pytree result."""
    evaluate, consts, tree = compat.traced_with_constants(fn, *examples)
    return (lambda consts, *args: jax.tree.unflatten(tree, evaluate(consts, *args))), consts


def _aval(a):
    return jax.ShapeDtypeStruct(a.shape, a.dtype)


def _tile(a, bt, axis=0):
    """The aval of one batch tile of `a` (batch on `axis`)."""
    shape = list(a.shape)
    shape[axis] = bt
    return jax.ShapeDtypeStruct(tuple(shape), a.dtype)


def _valid(t, lo, hi):
    """``keep(new, old)``: `new` where step `t` is valid for the row (``lo <= t < hi``), else
    `old`. The (B, 1) bounds are broadcast to the values' shape before the comparison, so no
    boolean vector is broadcast (lane broadcasts of int32 are Mosaic's common case)."""
    def keep(new, old):
        shape = jnp.broadcast_shapes(new.shape, lo.shape)
        valid = (jnp.broadcast_to(lo, shape) <= t) & (t < jnp.broadcast_to(hi, shape))
        return jnp.where(valid, new, old)
    return keep


def _recurrent(h, m, w, dot, dtype):
    """The recurrent product of state `h` (B, S) with `w` (S, G*H), reading ``h * m[g]`` for
    gate block g where a recurrent dropout mask (K, B, S) is given (as `driver.masked_product`,
    one product per mask). With heads, `w` (NH, DH, G*DH): `_head_products`."""
    if w.ndim == 3:
        return _head_products(h, m, w, dot, dtype)
    if m is None:
        return dot(operand(h, dtype, w.dtype), w)
    k = m.shape[0]
    width = w.shape[1] // k
    parts = [dot(operand(h.astype(m.dtype) * m[g], dtype, w.dtype),
                 w[:, g * width:(g + 1) * width]) for g in range(k)]
    return parts[0] if k == 1 else jnp.concatenate(parts, axis=-1)


def _head_products(h, m, w, dot, dtype):
    """`_recurrent` with heads, w (NH, DH, G*DH) (`driver.recurrent_product`'s layout): a
    static loop over the heads of 2-D products, head k's units of ``h`` times its block, (B,
    DH) x (DH, G*DH), or with a mask per gate (K = G) per head and gate, (B, DH) x (DH, DH);
    the pieces concatenated gate-major: gate g of head k, unit j at g*H + k*DH + j. Every
    slice and concatenation is at a multiple of DH (`padded_hidden`)."""
    nh, dh, width = w.shape
    gates = width // dh
    vs = [operand(h, dtype, w.dtype)] if m is None else [
        operand(h.astype(m.dtype) * m[g], dtype, w.dtype) for g in range(m.shape[0])]

    def head(v, k):
        return v[:, k * dh:(k + 1) * dh]

    if len(vs) == 1:
        z = [dot(head(vs[0], k), w[k]) for k in range(nh)]  # (B, G*DH) per head
        parts = [z[k][:, g * dh:(g + 1) * dh] for g in range(gates) for k in range(nh)]
    else:
        parts = [dot(head(vs[g], k), w[k][:, g * dh:(g + 1) * dh])
                 for g in range(gates) for k in range(nh)]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


def _products(cell, state, m, w, dot, dtype, rounding):
    """What the cell's step takes as ``zh``: the recurrent product of ``state[0]``, or, for a
    cell that computes its own (`cell.own_products`), ``zh(v, first, last)``: ``v`` times gate
    blocks ``first`` to ``last - 1`` of `w`, as `driver.RecurrentProducts` (masked per block,
    ``v`` rounded to the compute dtype by `rounding`: `operand`, or `rounded_operand` where the
    step is differentiated, as the scan path does)."""
    if not own_products(cell):
        return _recurrent(state[0], m, w, dot, dtype)
    width = w.shape[1] // cell.family.gates

    def zh(v, first, last):
        if m is None or m.shape[0] == 1:
            v = v if m is None else v.astype(m.dtype) * m[0]
            return dot(rounding(v, dtype, w.dtype), w[:, first * width:last * width])
        parts = [dot(rounding(v.astype(m.dtype) * m[g], dtype, w.dtype),
                     w[:, g * width:(g + 1) * width]) for g in range(first, last)]
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)
    return zh


def _recurrent_dh(dz, m, w_t, dot):
    """The gradient of `_recurrent` with respect to ``h``; w_t (G*H, S), or with heads (NH,
    G*DH, DH) (`driver.transposed`): `_head_products_dh`."""
    if w_t.ndim == 3:
        return _head_products_dh(dz, m, w_t, dot)
    if m is None:
        return dot(dz, w_t)
    k = m.shape[0]
    width = w_t.shape[0] // k
    return sum(dot(dz[:, g * width:(g + 1) * width], w_t[g * width:(g + 1) * width]) * m[g]
               for g in range(k))


def _head_products_dh(dz, m, w_t, dot):
    """`_recurrent_dh` with heads, per head: head k's gate blocks of dz (B, G*H), gathered
    (B, G*DH), times its (G*DH, DH) block; with a mask per gate (K = G), per head and gate,
    (B, DH) x (DH, DH), each gate's part times its mask."""
    nh, width, dh = w_t.shape
    gates = width // dh
    hidden = nh * dh

    def block(g, k):  # gate g of head k
        return dz[:, g * hidden + k * dh:g * hidden + (k + 1) * dh]

    def over_heads(parts):
        return parts[0] if nh == 1 else jnp.concatenate(parts, axis=-1)

    if m is None or m.shape[0] == 1:
        gathered = [block(0, k) if gates == 1 else jnp.concatenate(
            [block(g, k) for g in range(gates)], axis=-1) for k in range(nh)]
        grad = over_heads([dot(gathered[k], w_t[k]) for k in range(nh)])
        return grad if m is None else grad * m[0]
    return sum(over_heads([dot(block(g, k), w_t[k][g * dh:(g + 1) * dh]) for k in range(nh)])
               * m[g] for g in range(gates))


# --- one direction, forward and backward --------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Options:
    """Static options of the kernels: Pallas interpret mode (a CPU), a forced time block or
    batch tile (None: `plan` chooses), and where the backward's gate factors come from:
    saved by the forward kernel (the default), or, with `recompute`, recomputed by XLA before
    the backward kernel from the states the forward saved (one GEMM over all steps, then the
    cell's step vectorised over time): the forward then writes only the states per step.
    `unroll` and `carry_values` force the time loop's form (None: `loop_form` chooses).
    `remat_every`: segment checkpointing of a gradient (`_segments_forward_dir`), or None."""

    interpret: bool = False
    time_block: int | None = None
    batch_tile: int | None = None
    recompute: bool = False  # the backward's gate factors: saved by the forward, or recomputed
    unroll: int | None = None  # the time loop's steps per iteration (None: `loop_form`'s)
    carry_values: bool | None = None  # the state as loop values, else in VMEM scratch (likewise)
    remat_every: int | None = None  # segment checkpointing of a gradient, every so many steps


def _pad_time(a, steps):
    return a if a.shape[0] == steps else jnp.pad(a, [(0, steps - a.shape[0])]
                                                 + [(0, 0)] * (a.ndim - 1))


def _forward_dir(cell, opts, mm, dtype, zx, lo, hi, w_hh, p, state0, rmask, train):
    """One direction's forward in scan time: zx (T, B, G*H) without biases; lo, hi (B, 1);
    w_hh (S, G*H); p the cell's parameters; state0 tuple of (B, size); rmask (K, B, S) or
    None. Returns (h per step (T, B, S), saved per step (a tuple of (T, B, n), padded), final
    states)."""
    steps, batch, width = zx.shape
    acc = zx.dtype
    dot = functools.partial(_mm, acc=acc, precision=mm.precision)
    cmm = functools.partial(_mm, precision=mm.precision)
    p_leaves, p_tree = jax.tree.flatten(p)
    p_leaves = [_as_2d(a) for a in p_leaves]
    state_dtypes = [s.dtype for s in state0]

    def step(t, lo, hi, m, w, p_leaves, zx_t, state):
        state = tuple(state)
        params = jax.tree.unflatten(p_tree, p_leaves)
        zh = _products(cell, state, m, w, dot, dtype, operand)
        new, aux = cell.step(zx_t, zh, state, params, functools.partial(cmm, acc=acc))
        keep = _valid(t, lo, hi)
        new = tuple(keep(n, o) for n, o in zip(new, state))
        outs = (new[0],)
        if train == "states":
            outs += tuple(new)
        elif train:
            outs += tuple(cell.saved(state, new, aux))
        return new, outs

    pl_ = _forward_plan(opts, steps, batch, acc, w_hh, p_leaves, state0, train)
    bt = pl_.batch_tile
    example = (jax.ShapeDtypeStruct((), jnp.int32), _tile(lo, bt), _tile(hi, bt),
               None if rmask is None else _tile(rmask, bt, 1), _aval(w_hh),
               [_aval(a) for a in p_leaves], _tile(zx[0], bt), [_tile(s, bt) for s in state0])
    call, consts = _traced(step, *example)
    out_avals = jax.eval_shape(step, *example)[1]
    padded = -(-steps // pl_.time_block) * pl_.time_block
    rows = [lo, hi] + ([] if rmask is None else [rmask])
    n_c = len(consts)

    def kernel_step(t, rows, resident, xs, carries):
        m = rows[2] if rmask is not None else None
        return call(resident[:n_c], t, rows[0], rows[1], m, resident[n_c],
                    resident[n_c + 1:], xs[0], carries)

    outs, finals = _run_loop(
        kernel_step, [_pad_time(zx, padded)], rows, consts + [w_hh] + p_leaves, list(state0),
        [o.shape[-1] for o in out_avals], [o.dtype for o in out_avals], state_dtypes,
        jnp.float32 if acc.itemsize <= 4 else acc, plan_=pl_, reverse=False,
        interpret=opts.interpret)
    return outs[0][:steps], tuple(outs[1:]), tuple(finals)


def _width(w_hh) -> int:
    """The width G*H of the recurrent product of one direction's W_hh, (S, G*H) or with heads
    (NH, DH, G*DH)."""
    return w_hh.shape[-1] * (w_hh.shape[0] if w_hh.ndim == 3 else 1)


def _forward_plan(opts, steps, batch, acc, w_hh, p_leaves, state0, train) -> Plan:
    """The forward kernel's plan and loop form (`forward_form`; the backward reads the saved
    values in the same blocks, and carries state gradients as wide as the states)."""
    resident_bytes = (w_hh.size * w_hh.dtype.itemsize
                      + sum(a.size * a.dtype.itemsize for a in p_leaves))
    return forward_form(opts, batch, steps, _width(w_hh), [s.shape[-1] for s in state0],
                        resident_bytes, np.dtype(acc).itemsize, train)


def forward_form(opts: Options, batch: int, steps: int, width: int, state_widths: list[int],
                 resident_bytes: int, acc_itemsize: int, train) -> Plan:
    """The forward kernel's plan with its time loop's form (`loop_form`: unroll, state as loop
    values) from a call's sizes: the recurrent product's width G*H, the states' widths (the
    first the output's), the bytes of the blocks every tile reads whole."""
    # what one step streams per batch row: the projection in, the state and the saved values out
    row_bytes = width * acc_itemsize * (4 if train else 1) + state_widths[0] * 4
    plan_ = plan(batch, steps, row_bytes, resident_bytes, sum(state_widths) * 4,
                 opts.time_block, opts.batch_tile)
    unroll, values = loop_form(opts, plan_.batch_tile, width, sum(state_widths))
    return dataclasses.replace(plan_, unroll=unroll, carry_values=values)


def _backward_dir(cell, opts, mm, dtype, pl_, saved, dy, lo, hi, w_hh, p, dfinal, rmask):
    """One direction's backward in scan time, from the forward's saved values (padded) and
    the output gradient dy (T, B, S): returns (dzx (T, B, G*H) in W_hh's dtype, emits per
    step, the gradient of the initial states)."""
    steps = dy.shape[0]
    padded = saved[0].shape[0]
    acc = dfinal[0].dtype
    dot = functools.partial(_mm, acc=acc, precision=mm.precision)
    cmm = functools.partial(_mm, precision=mm.precision)
    w_t = transposed(w_hh)
    p_leaves, p_tree = jax.tree.flatten(p)
    p_leaves = [_as_2d(a) for a in p_leaves]

    def step(t, lo, hi, m, w_t, p_leaves, dy_t, saved_t, dstate):
        params = jax.tree.unflatten(p_tree, p_leaves)
        keep = _valid(t, lo, hi)
        dstate = (dstate[0] + dy_t.astype(acc),) + tuple(dstate[1:])

        def write(dzx):
            return keep(dzx, jnp.zeros((), dzx.dtype)).astype(w_t.dtype)

        dzx, dzh, direct, emit = cell.step_bwd(tuple(saved_t), dstate, params,
                                               functools.partial(cmm, acc=acc), write)
        emit = tuple(keep(e, jnp.zeros((), e.dtype)) for e in emit)
        direct = direct[:1] + tuple(None if g is None else keep(g, ds)
                                    for g, ds in zip(direct[1:], dstate[1:]))
        dh_p = _recurrent_dh(dzh.astype(w_t.dtype), m, w_t, dot)
        if direct[0] is not None:
            dh_p = direct[0] + dh_p
        dh_p = keep(dh_p, dstate[0])
        new = (dh_p,) + tuple(ds if g is None else g for g, ds in zip(direct[1:], dstate[1:]))
        return new, (dzx,) + emit

    bt = pl_.batch_tile
    example = (jax.ShapeDtypeStruct((), jnp.int32), _tile(lo, bt), _tile(hi, bt),
               None if rmask is None else _tile(rmask, bt, 1), _aval(w_t),
               [_aval(a) for a in p_leaves], _tile(dy[0], bt), [_tile(s[0], bt) for s in saved],
               [_tile(d, bt) for d in dfinal])
    call, consts = _traced(step, *example)
    out_avals = jax.eval_shape(step, *example)[1]
    rows = [lo, hi] + ([] if rmask is None else [rmask])
    n_c, n_s = len(consts), len(saved)

    def kernel_step(t, rows, resident, xs, carries):
        m = rows[2] if rmask is not None else None
        return call(resident[:n_c], t, rows[0], rows[1], m, resident[n_c],
                    resident[n_c + 1:], xs[0], xs[1:1 + n_s], carries)

    outs, dstate0 = _run_loop(
        kernel_step, [_pad_time(dy, padded)] + list(saved), rows, consts + [w_t] + p_leaves,
        list(dfinal), [o.shape[-1] for o in out_avals], [o.dtype for o in out_avals],
        [d.dtype for d in dfinal], jnp.float32 if acc.itemsize <= 4 else acc, plan_=pl_,
        reverse=True, interpret=opts.interpret)
    return outs[0][:steps], tuple(o[:steps] for o in outs[1:]), tuple(dstate0)


def _differentiated_dir(cell, opts, mm, dtype, pl_, zx, prev, dy, lo, hi, w_hh, p, dfinal,
                       rmask):
    """One direction's backward in scan time for a cell without a backward step: each step
    differentiates the cell's step (`jax.vjp`, traced once outside the kernel) at the state
    before it, recomputing the step's products, and passes the gradient to that state on.
    zx (T', B, G*H) the input projection and prev (per component, (T', B, size)) the states
    before each step, padded to the forward's time blocks. Returns (the gradient of each step's
    new states (T, B, size), zero at invalid steps, the gradient of the initial states)."""
    steps = dy.shape[0]
    padded = zx.shape[0]
    acc = dfinal[0].dtype
    dot = functools.partial(_mm, acc=acc, precision=mm.precision)
    p_leaves, p_tree = jax.tree.flatten(p)
    p_leaves = [_as_2d(a) for a in p_leaves]

    def step(t, lo, hi, m, w, p_leaves, dy_t, zx_t, prev, dstate):
        params = jax.tree.unflatten(p_tree, p_leaves)
        keep = _valid(t, lo, hi)

        def new_states(prev):
            zh = _products(cell, prev, m, w, dot, dtype, rounded_operand)
            return cell.step(zx_t, zh, prev, params, dot)[0]

        dnew = (dstate[0] + dy_t.astype(acc),) + tuple(dstate[1:])
        out, vjp = jax.vjp(new_states, tuple(prev))
        dout = tuple(keep(d, jnp.zeros((), d.dtype)).astype(o.dtype) for d, o in zip(dnew, out))
        (dprev,) = vjp(dout)
        return tuple(keep(g.astype(d.dtype), d) for g, d in zip(dprev, dnew)), dout

    bt = pl_.batch_tile
    example = (jax.ShapeDtypeStruct((), jnp.int32), _tile(lo, bt), _tile(hi, bt),
               None if rmask is None else _tile(rmask, bt, 1), _aval(w_hh),
               [_aval(a) for a in p_leaves], _tile(dy[0], bt), _tile(zx[0], bt),
               [_tile(s[0], bt) for s in prev], [_tile(d, bt) for d in dfinal])
    call, consts = _traced(step, *example)
    out_avals = jax.eval_shape(step, *example)[1]
    rows = [lo, hi] + ([] if rmask is None else [rmask])
    n_c = len(consts)

    def kernel_step(t, rows, resident, xs, carries):
        m = rows[2] if rmask is not None else None
        return call(resident[:n_c], t, rows[0], rows[1], m, resident[n_c],
                    resident[n_c + 1:], xs[0], xs[1], xs[2:], carries)

    outs, dstate0 = _run_loop(
        kernel_step, [_pad_time(dy, padded), zx] + list(prev), rows,
        consts + [w_hh] + p_leaves, list(dfinal), [o.shape[-1] for o in out_avals],
        [o.dtype for o in out_avals], [d.dtype for d in dfinal],
        jnp.float32 if acc.itemsize <= 4 else acc, plan_=pl_, reverse=True,
        interpret=opts.interpret)
    return tuple(o[:steps] for o in outs), tuple(dstate0)


def _step_gradients(cell, mm, dtype, x, w_ih, w_hh, p, prev, dnew, m):
    """The gradients of x (T, B, I), w_ih, w_hh and the cell's parameters `p` given each
    step's new-state gradients `dnew` (`_differentiated_dir`) and the states before each step
    `prev`: JAX differentiates the input projection and the cell's step vectorised over time
    (its products as the scan path's: GEMMs over all steps), the states held constant."""
    acc = accumulation_dtype(dtype)
    step_mm = functools.partial(mm, acc=acc)

    def new_states(x, w_ih, w_hh, p):
        zx = mm(x.astype(w_ih.dtype), w_ih, acc, contract=((2,), (0,)))
        products = (RecurrentProducts.of(w_hh, m, mm, acc, dtype, cell.family.gates)
                    if own_products(cell) else None)

        def one(zx_t, prev_t):
            if products is not None:
                zh = products
            elif m is None:
                zh = recurrent_product(operand(prev_t[0], dtype, w_hh.dtype), w_hh, mm, acc)
            else:
                zh = masked_product(prev_t[0], m, w_hh, mm, acc, dtype)
            return cell.step(zx_t, zh, prev_t, p, step_mm)[0]
        return jax.vmap(one)(zx, prev)

    return jax.vjp(new_states, x, w_ih, w_hh, p)[1](dnew)


def _mm(a, b, acc, contract=((1,), (0,)), out_sharding=None, *, precision):
    """The cell's ``mm`` inside the kernel (`driver.Products` without sharding or fence)."""
    del out_sharding
    return lax.dot_general(a, b, (contract, ((), ())), precision=precision,
                           preferred_element_type=acc)


# --- one layer, both directions -----------------------------------------------------------------

def _bounds(mask, steps, batch, num_dirs):
    """Per direction, the valid steps [lo, hi) of each row in scan time, (B, 1) int32 each."""
    lengths = (jnp.full((batch,), steps, jnp.int32) if mask is None
               else jnp.sum(mask, axis=0, dtype=jnp.int32))
    zero = jnp.zeros((batch, 1), jnp.int32)
    full = jnp.full((batch, 1), steps, jnp.int32)
    fwd = (zero, lengths[:, None])
    return [fwd, (steps - lengths[:, None], full)][:num_dirs]


def _layer_forward(cell, opts, mm, x, w_ih, w_hh, params, state0, mask, rmask, train):
    steps, batch = x.shape[:2]
    acc = accumulation_dtype(x.dtype)
    num_dirs = w_ih.shape[0]
    xs = [x, x[::-1]][:num_dirs]
    bounds = _bounds(mask, steps, batch, num_dirs)
    hs, saved, finals = [], [], []
    if train and opts.remat_every is not None:
        for d in range(num_dirs):
            p = jax.tree.map(lambda a, d=d: a[d], params)
            h, checkpoints, fin = _segments_forward_dir(
                cell, opts, mm, x.dtype, xs[d], w_ih[d], w_hh[d], p,
                tuple(s[d] for s in state0), None if rmask is None else rmask[d], *bounds[d])
            hs.append(h)
            saved.append(checkpoints)
            finals.append(fin)
        return (_outputs(hs, mask, x.dtype), _finals(finals)), (saved,)
    for d in range(num_dirs):
        zx = mm(xs[d].astype(w_ih.dtype), w_ih[d], acc, contract=((2,), (0,)))
        p = jax.tree.map(lambda a, d=d: a[d], params)
        h, sv, fin = _forward_dir(
            cell, opts, mm, x.dtype, zx, *bounds[d], w_hh[d], p, tuple(s[d] for s in state0),
            None if rmask is None else rmask[d],
            "states" if train and (opts.recompute or not hand_written_backward(cell))
            else train)
        hs.append(h)
        saved.append(sv)
        finals.append(fin)
    y = _outputs(hs, mask, x.dtype)
    out = (y, _finals(finals))
    return out, (hs, saved)


# --- segment checkpointing (`Options.remat_every`) ----------------------------------------------
#
# As the scan driver's (`driver.rnn_layer` with ``every``): per direction, the forward runs the
# forward kernel once per segment of k steps (a `lax.scan` over the segments, the input
# projection per segment), keeping the states at the start of each; the backward runs the
# segments in reverse: the forward kernel again from the segment's checkpoint, saving what the
# backward kernel reads, then the backward kernel and the segment's weight gradients, summed
# over the segments. Time is padded to whole segments with invalid steps (the kernels' bounds).


def _segments(a, every):
    """(T, ...) zero-padded to whole segments of `every` steps: (segments, every, ...)."""
    segments = -(-a.shape[0] // every)
    return _pad_time(a, segments * every).reshape((segments, every) + a.shape[1:])


def _shifted(lo, hi, t0, x_s):
    """The valid steps [lo, hi) of each row within the segment from step `t0` whose input is
    `x_s`: past the segment's end none (the kernels pad a segment to whole time blocks with
    steps they take as invalid only past `hi`)."""
    return lo - t0, jnp.minimum(hi - t0, x_s.shape[0])


def _segments_forward_dir(cell, opts, mm, dtype, x, w_ih, w_hh, p, state0, rmask, lo, hi):
    """One direction's forward in segments (scan time): x (T, B, I), w_ih (I, G*H). Returns
    (h per step (T, B, S), the states at the start of each segment (a tuple of (segments, B,
    size)), the final states)."""
    steps = x.shape[0]
    acc = accumulation_dtype(dtype)
    xs = _segments(x, opts.remat_every)
    starts = jnp.arange(xs.shape[0], dtype=jnp.int32) * opts.remat_every

    def segment(state, inputs):
        x_s, t0 = inputs
        zx = mm(x_s.astype(w_ih.dtype), w_ih, acc, contract=((2,), (0,)))
        h, _, final = _forward_dir(cell, opts, mm, dtype, zx, *_shifted(lo, hi, t0, x_s), w_hh,
                                   p, state, rmask, False)
        return final, (state, h)

    final, (checkpoints, hs) = lax.scan(segment, tuple(state0), (xs, starts))
    return hs.reshape((-1,) + hs.shape[2:])[:steps], checkpoints, final


def _segments_backward_dir(cell, opts, mm, d, dtype, xs, w_ih, w_hh, params, rmask,
                           checkpoints, dys, bounds, dfinal, batch, acc, like_ih, like_hh,
                           step_mm):
    """Direction `d`'s gradients in segments, in reverse: per segment, the forward kernel
    from its checkpoint (saving what `_direction_grads` reads), then `_direction_grads` on
    the segment; the weights' gradients summed over the segments. Returns what
    `_direction_grads` does, for the whole sequence."""
    every = opts.remat_every
    steps = xs[d].shape[0]
    lo, hi = bounds[d]
    one = lambda a: a[d:d + 1]  # noqa: E731 - direction d of a stacked array, kept stacked
    w_ih_d, w_hh_d = one(w_ih), one(w_hh)
    params_d = jax.tree.map(one, params)
    rmask_d = None if rmask is None else one(rmask)
    p = jax.tree.map(lambda a: a[d], params)
    m = None if rmask is None else rmask[d]
    mode = "states" if opts.recompute or not hand_written_backward(cell) else True

    def segment(dstate, inputs):
        start, x_s, dy_s, t0 = inputs
        bounds = _shifted(lo, hi, t0, x_s)
        zx = mm(x_s.astype(w_ih.dtype), w_ih[d], acc, contract=((2,), (0,)))
        h, saved, _ = _forward_dir(cell, opts, mm, dtype, zx, *bounds, w_hh[d], p, start, m,
                                   mode)
        dx, dw_ih, dw_hh, dparams, ds0 = _direction_grads(
            cell, opts, mm, 0, dtype, [x_s], w_ih_d, w_hh_d, params_d,
            tuple(s[None] for s in start), rmask_d, [h], [saved], [dy_s], [bounds],
            tuple(g[None] for g in dstate), every, batch, acc, like_ih, like_hh, step_mm)
        return tuple(ds0), ((dw_ih, dw_hh, dparams), dx)

    def body(carry, inputs):
        dstate, sums = carry
        dstate, (grads, dx) = segment(dstate, inputs)
        return (dstate, jax.tree.map(jnp.add, sums, grads)), dx

    inputs = (checkpoints, _segments(xs[d], every), _segments(dys[d], every),
              jnp.arange(checkpoints[0].shape[0], dtype=jnp.int32) * every)
    dstate = tuple(g[d].astype(acc) for g in dfinal)
    sums = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(
        segment, dstate, jax.tree.map(lambda a: a[0], inputs))[1][0])
    (ds0, (dw_ih, dw_hh, dparams)), dx = lax.scan(body, (dstate, sums), inputs, reverse=True)
    return dx.reshape((-1,) + dx.shape[2:])[:steps], dw_ih, dw_hh, dparams, ds0


def _direction_grads(cell, opts, mm, d, dtype, xs, w_ih, w_hh, params, state0, rmask, hs,
                     saved, dys, bounds, dfinal, steps, batch, acc, like_ih, like_hh, step_mm):
    """Direction `d`'s gradients from the forward kernel's residuals over `steps` steps (scan
    time): the backward kernel, then the weight and input gradients as GEMMs over those steps.
    Returns (dx (T, B, I), dW_ih, dW_hh, the parameters' gradients, the initial states')."""
    p = jax.tree.map(lambda a, d=d: a[d], params)
    m = None if rmask is None else rmask[d]
    pl_ = _forward_plan(opts, steps, batch, acc, w_hh[d],
                        [_as_2d(a) for a in jax.tree.leaves(p)],
                        tuple(s[d] for s in state0), True)
    saved_d = saved[d]
    if not hand_written_backward(cell):  # the forward saved the states after each step
        prev = tuple(jnp.concatenate([s0[d][None].astype(s.dtype), s[:-1]])
                     for s0, s in zip(state0, saved_d))
        zx = _pad_time(mm(xs[d].astype(w_ih.dtype), w_ih[d], acc, contract=((2,), (0,))),
                       prev[0].shape[0])
        dnew, ds0 = _differentiated_dir(
            cell, opts, mm, dtype, pl_, zx, prev, dys[d].astype(acc), *bounds[d],
            w_hh[d], p, tuple(g[d].astype(acc) for g in dfinal), m)
        grads = _step_gradients(cell, mm, dtype, xs[d], w_ih[d], w_hh[d], p,
                                tuple(s[:steps] for s in prev), dnew, m)
        return (*grads, ds0)
    if opts.recompute:
        saved_d = _recomputed(cell, mm, dtype, xs[d], w_ih[d], w_hh[d], p,
                              tuple(s[d] for s in state0), saved_d, *bounds[d], m)
    dzx, emits, ds0 = _backward_dir(
        cell, opts, mm, dtype, pl_, saved_d, dys[d].astype(acc), *bounds[d],
        w_hh[d], p, tuple(g[d].astype(acc) for g in dfinal), m)
    pieces = [a.astype(w_hh.dtype) for a in (
        (dzx,) if cell.shared_dz else cell.dzh_pieces(dzx, emits))]
    dzh = pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=-1)
    h_prev = jnp.concatenate([state0[0][d][None].astype(hs[d].dtype), hs[d][:-1]])
    dx = mm(dzx, w_ih[d], acc, contract=((2,), (1,)))
    dw_ih = mm(xs[d].astype(w_ih.dtype), dzx, acc, contract=STEPS_BATCH, out_sharding=like_ih)
    nh = w_hh.shape[1] if w_hh.ndim == 4 else 1
    if m is None:
        dw_hh = jnp.concatenate([recurrent_product_dw(operand(h_prev, dtype, w_hh.dtype), a, mm,
                                                      acc, like_hh, nh)
                                 for a in pieces], axis=-1)
    else:
        dw_hh = _masked_product_dw(h_prev, m, dzh, mm, acc, like_hh, dtype, nh)
    saved_d = tuple(s[:steps] for s in saved_d)
    return dx, dw_ih, dw_hh, cell.param_grads(dzx, dzh, emits, saved_d, p, step_mm), ds0


@own_rank_promotion
def _layer_backward(cell, opts, mm, res, args, outs, couts):
    """The layer's VJP from the kernels' residuals: the backward kernel per direction, then the
    weight and input gradients as GEMMs over all steps (as `driver._rnn_layer_bwd`); with
    `Options.remat_every`, segment by segment from the forward's checkpoints."""
    x, w_ih, w_hh, params, state0, mask, rmask = args
    dy, dfinal = couts
    num_dirs, size = w_hh.shape[0], state_size(w_hh)
    steps, batch = x.shape[:2]
    acc = accumulation_dtype(x.dtype)
    if mask is not None:
        dy = jnp.where(mask[..., None], dy, jnp.zeros((), dy.dtype))
    dys = [dy[..., :size], dy[::-1, :, size:]][:num_dirs]
    bounds = _bounds(mask, steps, batch, num_dirs)
    xs = [x, x[::-1]][:num_dirs]
    like_ih, like_hh = jax.typeof(w_ih[0]).sharding, jax.typeof(w_hh[0]).sharding
    step_mm = functools.partial(mm, acc=acc)
    dx_d, dw_ih, dw_hh, dparams, dstate0 = [], [], [], [], []
    for d in range(num_dirs):
        if opts.remat_every is not None:
            grads = _segments_backward_dir(
                cell, opts, mm, d, x.dtype, xs, w_ih, w_hh, params, rmask, res[0][d], dys,
                bounds, dfinal, batch, acc, like_ih, like_hh, step_mm)
        else:
            grads = _direction_grads(
                cell, opts, mm, d, x.dtype, xs, w_ih, w_hh, params, state0, rmask, res[0],
                res[1], dys, bounds, dfinal, steps, batch, acc, like_ih, like_hh, step_mm)
        for out, g in zip((dx_d, dw_ih, dw_hh, dparams, dstate0), grads):
            out.append(g)
    dx = dx_d[0] if num_dirs == 1 else dx_d[0] + dx_d[1][::-1]
    dstate0 = tuple(jnp.stack([c[k] for c in dstate0]).astype(s.dtype)
                    for k, s in enumerate(state0))
    dparams = jax.tree.map(lambda *a: jnp.stack(a), *dparams)
    dparams = jax.tree.map(lambda g, q: g.astype(q.dtype), dparams, params)
    return (dx.astype(x.dtype), jnp.stack(dw_ih).astype(w_ih.dtype),
            jnp.stack(dw_hh).astype(w_hh.dtype), dparams, dstate0)


def _recomputed(cell, mm, dtype, x, w_ih, w_hh, p, state0, states, lo, hi, m):
    """What the cell's backward step reads per step (its ``saved``), recomputed from the
    states the forward kernel saved (`Options.recompute`): every step's recurrent product as
    one GEMM over all steps, the cell's step vectorised over time. x (T, B, I) in scan time;
    states: per component (T', B, size), padded to the forward's time blocks."""
    padded = states[0].shape[0]
    acc = accumulation_dtype(dtype)
    prev = tuple(jnp.concatenate([s0[None].astype(s.dtype), s[:-1]])
                 for s0, s in zip(state0, states))
    zx = _pad_time(mm(x.astype(w_ih.dtype), w_ih, acc, contract=((2,), (0,))), padded)
    dot = functools.partial(_mm, acc=acc, precision=mm.precision)
    zh = jax.vmap(lambda h: _recurrent(h, m, w_hh, dot, dtype))(prev[0])
    step_mm = functools.partial(mm, acc=acc)
    new, aux = jax.vmap(lambda zx, zh, prev: cell.step(zx, zh, prev, p, step_mm))(zx, zh, prev)
    t = jnp.arange(padded, dtype=jnp.int32)[:, None, None]
    valid = (lo[None] <= t) & (t < hi[None])  # (T', B, 1)
    new = tuple(jnp.where(valid, n, o) for n, o in zip(new, prev))
    return tuple(cell.saved(prev, new, aux))


# (x, w_ih, w_hh, params, state0, mask, rmask): batch axes; None for the weights
BATCH_AXES = (1, None, None, None, 1, 1, 2)
OUT_AXES = (1, 1)  # y (T, B, D*S), final states (D, B, size)


@functools.cache
def _layer_op(cell, opts: Options, mm):
    def fallback(x, w_ih, w_hh, params, state0, mask, rmask):
        return rnn_layer(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm,
                         (UNROLL, TRAIN_UNROLL, TRAIN_UNROLL), False, None, opts.remat_every)

    def infer(*args):
        return _layer_forward(cell, opts, mm, *args, train=False)[0]

    def train(*args):
        return _layer_forward(cell, opts, mm, *args, train=True)

    def backward(res, args, outs, couts):
        return _layer_backward(cell, opts, mm, res, args, outs, couts)

    return fused.op(infer, train, backward, fallback, BATCH_AXES, OUT_AXES, num_diff=5,
                    res_axis=1)  # every residual is (T, B, n)


@dataclasses.dataclass(frozen=True)
class Layer:
    """The Pallas kernel as the scan driver's layer (`driver.rnn_scan(..., layer=Layer(...))`):
    the same arguments and results as `driver.rnn_layer`, whose loop options it ignores (its
    segment checkpointing, ``every``, becomes `Options.remat_every`)."""

    options: Options = Options()

    def __call__(self, cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop,
                 stack, every=None):
        del unroll, in_loop, stack
        hand_written_backward(cell)  # a cell with part of the backward protocol fails here
        options = self.options if every is None else dataclasses.replace(
            self.options, remat_every=min(every, x.shape[0]))
        gates = cell.family.gates
        heads = w_hh.shape[1] if w_hh.ndim == 4 else 1
        hidden = heads * w_hh.shape[-1] // gates
        padded = padded_hidden(hidden, gates, heads)
        args = (x, w_ih, w_hh, params, state0, mask, rmask)
        if padded != hidden:
            args = _padded(args, gates, hidden, padded, heads)
        f = _layer_op(cell, options, mm)
        y, finals = fused.over_batch(f, args, BATCH_AXES, OUT_AXES, ref_axis=1, check_vma=False)
        if padded != hidden:
            unit, unit_padded = hidden // heads, padded // heads
            if state_size(w_hh) == hidden:  # the output state is the hidden one: padded too
                y = _unpadded(y, unit, unit_padded)
            finals = tuple(f if f.shape[-1] == s.shape[-1] else _unpadded(f, unit, unit_padded)
                           for f, s in zip(finals, state0))
        return y, finals


def _padded(args, gates, hidden, padded, heads=1):
    """The layer's arguments with the hidden size `hidden` zero-padded to `padded` (generic
    over the cell protocol's parameters): every axis of size G*H past the direction's (the
    weights' and parameters' gate blocks) padded per gate block, every axis of size H (the
    states, a projection's rows, the recurrent input where it is the hidden state) at its end.
    A projection's P < H and the input size are left as they are. With heads, each head's
    DH units are padded, inside each gate block (a G*H axis is G*NH blocks of DH), and W_hh,
    (D, NH, DH, G*DH), by its layout (its G*DH may equal H).

    The padded units run the cell on zero pre-activations from a zero state: for every gated
    family that keeps them zero (the LSTM: i = f = o = 1/2, g = 0, so c = c / 2 + 0 and h = o *
    tanh(0); the GRUs and the MGU: n = tanh(0 + r * 0) = 0 and h = z * h + (1 - z) * 0), and
    the zero rows of W_hh (and of W_hr) keep them out of every real unit, forward and backward.
    """
    x, w_ih, w_hh, params, state0, mask, rmask = args
    unit, unit_padded = hidden // heads, padded // heads

    def pad(a, axes):
        for ax in axes:
            if a.shape[ax] == gates * hidden:
                a = _padded_blocks(a, ax, gates * heads, unit, unit_padded)
            elif a.shape[ax] == hidden:
                a = _padded_blocks(a, ax, heads, unit, unit_padded)
        return a

    w_ih = pad(w_ih, [2])
    if w_hh.ndim == 4:
        w_hh = _padded_blocks(_padded_blocks(w_hh, 2, 1, unit, unit_padded), 3, gates, unit,
                              unit_padded)
    else:
        w_hh = pad(w_hh, [1, 2])
    params = jax.tree.map(lambda a: pad(a, range(1, a.ndim)), params)
    state0 = tuple(pad(s, [2]) for s in state0)
    rmask = None if rmask is None else pad(rmask, [3])
    return x, w_ih, w_hh, params, state0, mask, rmask


def _padded_blocks(a, axis, blocks, size, padded):
    """`a` whose `axis` holds `blocks` blocks of `size` with each block zero-padded to
    `padded`."""
    a = a.reshape(a.shape[:axis] + (blocks, size) + a.shape[axis + 1:])
    a = jnp.pad(a, [(0, 0)] * (axis + 1) + [(0, padded - size)] + [(0, 0)] * (a.ndim - axis - 2))
    return a.reshape(a.shape[:axis] + (blocks * padded,) + a.shape[axis + 2:])


def _unpadded(a, size, padded):
    """`_padded_blocks` undone on the last axis: each block of `padded` back to `size`."""
    return a.reshape(a.shape[:-1] + (-1, padded))[..., :size].reshape(a.shape[:-1] + (-1,))

"""The pure-JAX recurrent driver: layers, directions, lengths and dropout, written once for every
family.

A cell (each family's ``cell.py``) supplies only its math: how its weights are laid out for the
loop, one fused step, and optionally that step's hand-written backward (without one, JAX
differentiates the forward loop). The driver does the rest, the same way for every cell, and
never names a family:

- per layer and direction, the loop does one fused (S, G*H) recurrent matmul per step (S: the
  recurrent input size), or with heads (a block-diagonal ``W_hh``, `layout`) one batched
  product over the heads, (B, NH, DH) x (NH, DH, G*DH), never the dense matrix; the input
  projection is either one GEMM over all time steps before the loop, or a matmul per step
  inside it (``project_in_loop``: on CPUs, where the cell measured it faster; XLA:CPU runs the
  GRU forward up to 2x faster that way);
- both directions of a bidirectional layer advance in the same loop (the reverse one over a
  time-reversed copy of the input), so a layer costs T sequential steps, not 2T;
- with the cell's backward step, the backward loop only propagates ``dz_h @ W_hh^T`` (plus what
  the cell passes to the previous state directly) through time; every weight and input gradient
  is a large GEMM after the loop, instead of T small accumulations as plain autodiff of the loop
  does (the path of a cell without a backward step);
- ragged sequences: a step past a sequence's length leaves the carry unchanged. The forward
  direction therefore ends at the last valid step, and the reverse direction, which reads the
  time-reversed input (padding first), starts from the initial state at the last valid step; a
  sequence of length 0 returns the initial state;
- dropout on every layer's output but the last, from one key, with the mask every path shares.

The cells' side of it is the protocol of `cell`.
"""

from __future__ import annotations

import dataclasses
import functools
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.checks import own_rank_promotion
from ..core.sharding import split_like, vary_together
from . import layout
from .cell import STEPS_BATCH, accumulation_dtype, hand_written_backward, own_products

Array = jax.Array

# The loops' unroll factors: 4 steps per iteration without a gradient; 1 where a gradient is
# taken, for both loops (XLA compiles every unrolled copy of a step into kernels of its own,
# which costs a train step more compile time than the unrolling saves; benchmarks/results,
# `compile.json` and `lstm_driver.json`).
UNROLL = 4
TRAIN_UNROLL = 1


@dataclasses.dataclass(frozen=True)
class Products:
    """How the driver multiplies: at `precision` (as in `lax.dot_general`), and with `fence`,
    each product behind an optimization barrier.

    The fence is for 16-bit operands on XLA:CPU, which multiplies bfloat16 x bfloat16 = float32
    natively only in the layouts its YNNPACK fusion takes (the left operand's contracting axis
    last) and converts the operands of any other dot to float32 itself, before it folds
    transposes: a transpose of a product folded into it afterwards (``dot(a, b).T`` becomes
    ``dot(b, a)``: under `jax.vmap`, moving a batch axis is such a transpose) leaves a 16-bit
    dot that fails at run time ("Unsupported element type for DotThunk::Execute: BF16 x BF16 =
    F32"; jaxlib 0.10.2). Behind the barrier every product keeps the layout the driver wrote.
    """

    precision: Any = None
    fence: bool = False

    def __call__(self, a: Array, b: Array, acc, contract=((1,), (0,)),
                 out_sharding=None) -> Array:
        """`a` times `b` with `acc` accumulation; `contract` and `out_sharding` as in
        `lax.dot_general`."""
        out = lax.dot_general(a, b, (contract, ((), ())), precision=self.precision,
                              preferred_element_type=acc, out_sharding=out_sharding)
        return lax.optimization_barrier(out) if self.fence else out

    def dot_general(self, a: Array, b: Array, dims, acc, out_sharding=None) -> Array:
        out = lax.dot_general(a, b, dims, precision=self.precision, preferred_element_type=acc,
                              out_sharding=out_sharding)
        return lax.optimization_barrier(out) if self.fence else out


def operand(a: Array, dtype, mm_dtype) -> Array:
    """A matmul operand computed in the accumulation dtype (a state, a masked state): rounded to
    the compute `dtype`, as every matmul operand is, then handed to the backend in `mm_dtype`
    (float32 for float16 inputs on CPUs, where this keeps the 16-bit computation's products)."""
    return a.astype(dtype).astype(mm_dtype)


def _itemsize(dtype) -> int:
    return np.dtype(dtype).itemsize


def _stacked(dtype, stack):
    """The dtype a per-step value of `dtype` is stacked in over the loop: at least `stack`.

    On CPUs, 16-bit values are stacked in float32 (`Profile.wide_stacks`): XLA:CPU converts a
    whole 16-bit (T, ...) stack to float32 and back on every step instead of updating it in
    place."""
    return dtype if stack is None else max(np.dtype(dtype), np.dtype(stack), key=_itemsize)


def _where(m, new, old):
    return jnp.where(m, new, old)


def rounded_operand(a: Array, dtype, mm_dtype) -> Array:
    """`operand` whose derivative is taken as 1 (the gradient passes unrounded), as the driver's
    hand-written backward step passes it: for a cell JAX differentiates, whose gradient would
    otherwise be rounded to the compute dtype at every product of every step."""
    return _rounded_operand(a, dtype, mm_dtype)


@partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _rounded_operand(a, dtype, mm_dtype):
    return operand(a, dtype, mm_dtype)


@_rounded_operand.defjvp
def _rounded_operand_jvp(dtype, mm_dtype, primals, tangents):
    return _rounded_operand(primals[0], dtype, mm_dtype), tangents[0].astype(mm_dtype)


# --- heads: a block-diagonal recurrent kernel ----------------------------------------------------
#
# A dense kernel is (S, G*H) per direction, a kernel with heads (NH, DH, G*DH) (`cell.
# recurrent_kernel`); the products below take either, the dense one as before. The state's
# units are head-major (head k's are k*DH .. (k+1)*DH - 1) and the product's (B, G*H) has each
# gate's block of H head-major, as a dense kernel's: gate g of head k, unit j at g*H + k*DH + j.


def _heads(w) -> bool:
    """Whether one direction's recurrent kernel (or its transpose) has heads: rank 3."""
    return w.ndim == 3


def state_size(w_hh) -> int:
    """The recurrent input size S of stacked (D, ...) recurrent kernels, with or without heads."""
    return w_hh.shape[1] * w_hh.shape[2] if w_hh.ndim == 4 else w_hh.shape[1]


def recurrent_product(v, w, mm, acc):
    """``v`` (B, S) times one direction's recurrent kernel: (B, G*H). With heads, head k's
    DH units times its (DH, G*DH) block, one batched product, rearranged to gate-major."""
    if not _heads(w):
        return mm(v, w, acc)
    nh, dh, width = w.shape
    b = v.shape[0]
    z = mm.dot_general(v.reshape(b, nh, dh), w, (((2,), (1,)), ((1,), (0,))), acc)  # (NH,B,G*DH)
    gates = width // dh
    return jnp.transpose(z.reshape(nh, b, gates, dh), (1, 2, 0, 3)).reshape(b, gates * nh * dh)


def transposed(w):
    """One direction's recurrent kernel transposed for the backward: (G*H, S), or per head
    (NH, G*DH, DH)."""
    return jnp.swapaxes(w, -1, -2)


def recurrent_product_t(dz, w_t, mm, acc):
    """The gradient of `recurrent_product` with respect to ``v``: dz (B, G*H) times `transposed`
    kernel, (B, S)."""
    if not _heads(w_t):
        return mm(dz, w_t, acc)
    nh, width, dh = w_t.shape
    b, gates = dz.shape[0], width // w_t.shape[2]
    dz = dz.reshape(b, gates, nh, -1)  # (B, G, NH, DH)
    dv = mm.dot_general(dz, w_t.reshape(nh, gates, -1, dh), (((1, 3), (1, 2)), ((2,), (0,))),
                        acc)  # (NH, B, DH)
    return jnp.swapaxes(dv, 0, 1).reshape(b, nh * dh)


def recurrent_product_dw(v, dz, mm, acc, like, nh):
    """The gradient of `recurrent_product` with respect to the kernel over all steps: v (T, B,
    S), dz (T, B, k*H) for k gate blocks; (S, k*H) with sharding `like`, or with `nh` > 1 heads
    (NH, DH, k*DH): per head and gate block a 2-D GEMM contracting (T, B), head h's units of v
    times its units of the block, each (DH, DH) block with the sharding of `like`'s second axis
    (a batch-sharded B summed over the shards). (One GEMM batched over the heads needs them as
    a leading axis of both operands: XLA copies dz to put them there, and on a TPU v5e that
    took 1.6x the time of these GEMMs.)"""
    if nh == 1:
        return mm(v, dz, acc, contract=STEPS_BATCH, out_sharding=like)
    size = v.shape[-1]
    dh = size // nh
    block = None
    if like is not None and hasattr(like, "update"):
        rows = (tuple(like.spec) + (None,) * 3)[1]
        block = like.update(spec=jax.sharding.PartitionSpec(rows, None))

    def unit(a, first):
        return a[..., first:first + dh]

    return jnp.stack([jnp.concatenate(
        [mm(unit(v, h * dh), unit(dz, g * size + h * dh), acc, contract=STEPS_BATCH,
            out_sharding=block) for g in range(dz.shape[-1] // size)], axis=-1)
        for h in range(nh)])


def _num_heads(w_hh) -> int:
    """The heads of stacked (D, ...) recurrent kernels: 1 for dense ones."""
    return w_hh.shape[1] if w_hh.ndim == 4 else 1


def masked_product(h, m, w, mm, acc, dtype, rounding=operand):
    """Recurrent dropout: the recurrent product when gate block ``g`` of ``w`` reads ``h *
    m[g]`` (``m[0]`` for every block when K = 1). h (B, S), m (K, B, S), w (S, G*H) or with
    heads (NH, DH, G*DH), with K = 1 or G; returns (B, G*H). The rest of the step reads the
    unmasked ``h``. ``h * m`` is a matmul operand in the compute `dtype` (`rounding`: `operand`
    or `rounded_operand`)."""
    if m.shape[0] == 1:
        return recurrent_product(rounding(h.astype(m.dtype) * m[0], dtype, w.dtype), w, mm, acc)
    k = m.shape[0]
    hm = rounding(h.astype(m.dtype)[None] * m, dtype, w.dtype)  # (K, B, S)
    if _heads(w):
        nh, dh, _ = w.shape
        b = h.shape[0]
        z = mm.dot_general(hm.reshape(k, b, nh, dh), w.reshape(nh, dh, k, -1),
                           (((3,), (1,)), ((0, 2), (2, 0))), acc)  # (K, NH, B, DH)
        return jnp.transpose(z, (2, 0, 1, 3)).reshape(b, -1)
    z = mm.dot_general(hm, w.reshape(w.shape[0], k, -1), (((2,), (0,)), ((0,), (1,))),
                       acc)  # (K, B, H)
    return jnp.swapaxes(z, 0, 1).reshape(h.shape[0], -1)


@dataclasses.dataclass(frozen=True)
class RecurrentProducts:
    """The recurrent products of a cell that computes its own (`cell.own_products`), which the
    driver hands its ``step`` as ``zh``: ``zh(v, first, last)`` is ``v`` (B, S) times gate blocks
    ``first`` to ``last - 1`` of the recurrent kernel, (B, (last - first) * H) in the
    accumulation dtype, with the recurrent dropout mask of those blocks applied to ``v`` (as
    `masked_product`). ``v`` is rounded to the compute dtype with its gradient passed
    unrounded (`rounded_operand`). The kernel's blocks and the masks are sliced before the
    loop, once per range (slices the step does not read are removed by XLA)."""

    blocks: dict
    masks: dict | None
    mm: Any
    acc: Any
    dtype: Any

    @classmethod
    def of(cls, w, m, mm, acc, dtype, gates):
        """From one direction's recurrent kernel w (S, G*H) and mask m (K, B, S) or None."""
        width = w.shape[1] // gates
        ranges = [(a, b) for a in range(gates) for b in range(a + 1, gates + 1)]
        blocks = {(a, b): w[:, a * width:b * width] for a, b in ranges}
        masks = None if m is None else {
            (a, b): m if m.shape[0] == 1 else m[a:b] for a, b in ranges}
        return cls(blocks, masks, mm, acc, dtype)

    def __call__(self, v, first, last):
        w = self.blocks[(first, last)]
        if self.masks is None:
            return self.mm(rounded_operand(v, self.dtype, w.dtype), w, self.acc)
        return masked_product(v, self.masks[(first, last)], w, self.mm, self.acc, self.dtype,
                              rounded_operand)


def _masked_product_dh(dz, m, w_t, mm, acc):
    """The gradient of `masked_product` with respect to ``h``; dz (B, G*H), w_t (G*H, S) or
    with heads (NH, G*DH, DH) (`transposed`)."""
    if m.shape[0] == 1:
        return recurrent_product_t(dz, w_t, mm, acc) * m[0]
    k = m.shape[0]
    if _heads(w_t):
        nh, _, dh = w_t.shape
        b = dz.shape[0]
        dhm = mm.dot_general(dz.reshape(b, k, nh, -1), w_t.reshape(nh, k, -1, dh),
                             (((3,), (2,)), ((1, 2), (1, 0))), acc)  # (K, NH, B, DH)
        return jnp.sum(jnp.swapaxes(dhm, 1, 2).reshape(k, b, nh * dh) * m, axis=0)
    dz = jnp.swapaxes(dz.reshape(dz.shape[0], k, -1), 0, 1)  # (K, B, H)
    dhm = mm.dot_general(dz, w_t.reshape(k, -1, w_t.shape[1]), (((2,), (1,)), ((0,), (0,))),
                         acc)  # (K, B, S)
    return jnp.sum(dhm * m, axis=0)


def _masked_product_dw(h_prev, m, dz, mm, acc, like, dtype, nh=1):
    """The gradient of `masked_product` with respect to ``w`` over all steps: h_prev (T, B, S),
    dz (T, B, G*H); returns (S, G*H), or with `nh` > 1 heads (NH, DH, G*DH), with sharding
    `like`."""
    k = m.shape[0]
    blocks = jnp.split(dz, k, axis=-1)
    h_prev = h_prev.astype(m.dtype)
    return jnp.concatenate([recurrent_product_dw(operand(h_prev * m[g], dtype, dz.dtype),
                                                 blocks[g], mm, acc, like, nh)
                            for g in range(k)], axis=-1)


def _per_direction(num_dirs, w_ih, w_hh, rmask, params):
    """The stacked (D, ...) weights, recurrent masks and cell parameters as lists of D."""
    def split(a):
        return None if a is None else [a[d] for d in range(num_dirs)]
    return (split(w_ih), split(w_hh), split(rmask),
            [jax.tree.map(lambda a, d=d: a[d], params) for d in range(num_dirs)])


def _directions(cell, dtype, w_ih, w_hh, rmask, params, mm, acc):
    """The stacked (D, ...) kernels, recurrent masks and cell parameters per direction (lists of
    D), sliced before the loop (indexed inside it, XLA:CPU copied every weight matrix out of
    the stacked array on every step), and the recurrent products of a cell that computes its
    own (`RecurrentProducts`; else None)."""
    num_dirs = w_ih.shape[0]
    w_ih, w_hh, rmask, ps = _per_direction(num_dirs, w_ih, w_hh, rmask, params)
    products = None
    if own_products(cell):
        products = [RecurrentProducts.of(w_hh[d], None if rmask is None else rmask[d], mm, acc,
                                         dtype, cell.family.gates) for d in range(num_dirs)]
    return w_ih, w_hh, rmask, ps, products


def _loop(cell, dirs, xs, masks, carry, mm, acc, x, unroll, in_loop, stack, save):
    """The forward loop over per-direction inputs in scan time (`_forward`), from per-direction
    `carry` (a list of state tuples), with the per-direction weights `dirs` (`_directions`);
    `x` the layer's input, whose dtype is the compute dtype. Returns the final carry and per
    direction the states after every step (with `save`, a pair (states, aux))."""
    w_ih, w_hh, rmask, ps, products = dirs
    step_mm = partial(mm, acc=acc)

    def step(carry, inputs):
        x_t, m_t = inputs
        new_carry, outs = [], []
        for d, state in enumerate(carry):
            zx = mm(x_t[d], w_ih[d], acc) if in_loop else x_t[d]
            if products is not None:  # the cell multiplies by the recurrent kernel itself
                zh = products[d]
            elif rmask is None:
                zh = recurrent_product(operand(state[0], x.dtype, w_hh[d].dtype), w_hh[d], mm,
                                       acc)
            else:
                zh = masked_product(state[0], rmask[d], w_hh[d], mm, acc, x.dtype)
            new, aux = cell.step(zx, zh, state, ps[d], step_mm)
            if m_t is not None:
                m = m_t[d][:, None]
                new = tuple(_where(m, n, o) for n, o in zip(new, state))
            new_carry.append(new)
            out = (new[0].astype(_stacked(new[0].dtype, stack)),) + new[1:]
            outs.append((out, aux) if save else out[0])
        return new_carry, outs

    return lax.scan(step, carry, (xs, masks), unroll=min(unroll, xs[0].shape[0]))


def _forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop, stack,
             save):
    """One layer, both directions. Shapes (per direction d < D):

    x (T, B, I); w_ih (D, I, G*H), w_hh (D, S, G*H) in the matmul dtype; params: the cell's pytree,
    stacked over D; state0: tuple of (D, B, size); mask (T, B) bool or None; rmask (D, K, B, S)
    or None: recurrent dropout, see `masked_product`. Direction 1 runs over time-reversed input
    ("scan time").

    Returns per direction the states after every step in scan time (with `save`, a pair
    (states, aux)), and the final states.
    """
    acc = accumulation_dtype(x.dtype)
    num_dirs = w_ih.shape[0]
    xs = [xd.astype(w_ih.dtype) for xd in [x, x[::-1]][:num_dirs]]
    if not in_loop:
        # (T, B, I) x (I, G*H): one GEMM over all steps, without merging T and B (a reshape that
        # a batch-sharded `x` cannot follow under explicit sharding).
        xs = [mm(xd, w_ih[d], acc, contract=((2,), (0,))) for d, xd in enumerate(xs)]
    masks = None if mask is None else [mask, mask[::-1]][:num_dirs]
    dirs = _directions(cell, x.dtype, w_ih, w_hh, rmask, params, mm, acc)
    carry = [tuple(s[d] for s in state0) for d in range(num_dirs)]
    carry, outs = _loop(cell, dirs, xs, masks, carry, mm, acc, x, unroll, in_loop, stack,
                        save)
    return outs, carry


# --- segment checkpointing ---------------------------------------------------------------------
#
# With a segment length k (`rnn_layer`'s `every`), the forward of a gradient keeps each layer's
# state only at the start of every segment of k steps (in scan time; the last segment is
# shorter where k does not divide T), and the backward runs the segments in reverse: each one's
# forward again from its checkpoint, keeping that segment's residuals, then its backward. The
# memory a gradient keeps grows as T / k states and k steps' residuals instead of T steps'. The
# steps compute what the loop without segments computes, op for op, so outputs, final states
# and the gradients of the input and the initial states are the same bits; the weight
# gradients are summed per segment, then over the segments (the same terms in another order).


def _stacked_carry(carry):
    """A per-direction carry (a list of state tuples) as a tuple of (D, B, size) arrays."""
    return tuple(jnp.stack(parts) for parts in zip(*carry))


def _unstacked_carry(states, num_dirs):
    return [tuple(s[d] for s in states) for d in range(num_dirs)]


def _packed(a, packed: bool):
    """A 16-bit array as its uint16 bits where `packed`: how the loop of segments takes its
    16-bit inputs and stacks its 16-bit outputs on CPUs (`stack` set), where XLA:CPU
    converts a whole 16-bit stack to float32 and back on every iteration instead of updating
    it in place, and converts a 16-bit input to float32 whole before the loop."""
    return lax.bitcast_convert_type(a, jnp.uint16) if packed else a


def _unpacked(a, dtype, packed: bool):
    return lax.bitcast_convert_type(a, dtype) if packed else a


def _padded_time(a, steps):
    """`a` with time (axis 0) padded to `steps`: zeros, False for a mask."""
    if a.shape[0] == steps:
        return a
    return jnp.pad(a, [(0, steps - a.shape[0])] + [(0, 0)] * (a.ndim - 1))


def _segment_masks(masks, steps, every, num_dirs):
    """The per-direction masks of a loop of segments: (T, B) as given, or, without lengths
    where `every` does not divide the steps, (T, 1), True but on the steps the last segment
    is padded with (False after `_padded_time`), or None."""
    if masks is not None or steps % every == 0:
        return masks
    return [jnp.ones((steps, 1), jnp.bool_)] * num_dirs


def _scan_segments(body, carry, per_segment, per_step, every, reverse=False):
    """`lax.scan` of ``body(carry, (per_segment row, per_step segment)) -> (carry,
    (per_segment row, per_step segment))`` over the segments of `every` steps of `per_step` (a
    pytree of arrays with time on axis 0; None stays None), in order or, with `reverse`, in
    reverse; time padded to whole segments (`_padded_time`). `per_segment`: a pytree of arrays
    with one row per segment, or None. Returns the carry, the per-segment outputs (one row per
    segment) and the per-step outputs over time (the padding cut off).

    Every segment runs inside the loop, the last one padded, so that XLA compiles each step's
    products as in the loop without segments (outside a loop, XLA:CPU folds the kernels'
    transposes into the products, which then sum in another order)."""
    steps = jax.tree.leaves(per_step)[0].shape[0]
    segments = -(-steps // every)
    per_step = jax.tree.map(lambda a: _padded_time(a, segments * every).reshape(
        (segments, every) + a.shape[1:]), per_step)
    carry, (rows, outs) = lax.scan(body, carry, (per_segment, per_step), reverse=reverse)
    return carry, rows, jax.tree.map(
        lambda a: a.reshape((segments * every,) + a.shape[2:])[:steps], outs)


def _segments_forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop,
                      stack, every, checkpoint):
    """`_forward` without `save`, in segments of `every` steps (`_scan_segments`): returns per
    direction the output state after every step in scan time, the final states, and the
    checkpoints: the states at the start of each segment, a tuple of (segments, D, B, size).

    The input projection runs per segment, before its loop (`_projected`). With `checkpoint`
    (the path JAX differentiates), each segment is a `jax.checkpoint`: JAX keeps its inputs
    (the state at its start) and runs it again in the backward; the outputs are stacked as the
    loop stacks them. Without, the outputs come back in x's dtype (where `_outputs` rounds
    them)."""
    acc = accumulation_dtype(x.dtype)
    num_dirs = w_ih.shape[0]
    xs = [xd.astype(w_ih.dtype) for xd in [x, x[::-1]][:num_dirs]]
    masks = None if mask is None else [mask, mask[::-1]][:num_dirs]
    masks = _segment_masks(masks, x.shape[0], every, num_dirs)
    dirs = _directions(cell, x.dtype, w_ih, w_hh, rmask, params, mm, acc)
    w_ih_t = None if in_loop else [w.T for w in dirs[0]]
    packed = not checkpoint and stack is not None and _itemsize(x.dtype) == 2
    packed_in = not checkpoint and stack is not None and _itemsize(w_ih.dtype) == 2

    def segment(carry, inputs):
        _, (xs, masks) = inputs
        xs = [_unpacked(xd, w_ih.dtype, packed_in) for xd in xs]
        xs = xs if in_loop else _projected(xs, w_ih_t, mm, acc)
        new, hs = _loop(cell, dirs, xs, masks, carry, mm, acc, x, unroll, in_loop, stack,
                        save=False)
        if not checkpoint:
            hs = [_packed(h.astype(x.dtype), packed) for h in hs]
        return new, (_stacked_carry(carry), hs)

    if checkpoint:
        segment = jax.checkpoint(segment, prevent_cse=False)
    carry = _unstacked_carry(state0, num_dirs)
    carry, checkpoints, hs = _scan_segments(
        segment, carry, None, ([_packed(xd, packed_in) for xd in xs], masks), every)
    if not checkpoint:
        hs = [_unpacked(h, x.dtype, packed) for h in hs]
    return hs, carry, checkpoints


def _projected(xs, w_ih_t, mm, acc):
    """A segment's input projection, per direction: xs (k, B, I) times the input kernel, given
    transposed (G*H, I) as XLA folds the transpose of a projection outside a loop, so that the
    product inside the loop of segments has the same operands (and sums) as the one GEMM over
    all steps before the loop without segments."""
    return [mm(xd, w, acc, contract=((2,), (1,))) for xd, w in zip(xs, w_ih_t)]


def _outputs(hs, mask, dtype):
    """Layer output y (T, B, D*S) in original time order, zero past each length."""
    y = jnp.concatenate([hs[0], hs[1][::-1]] if len(hs) == 2 else hs, axis=-1).astype(dtype)
    return y if mask is None else jnp.where(mask[..., None], y, jnp.zeros((), y.dtype))


def _finals(carry):
    return tuple(jnp.stack(parts) for parts in zip(*carry))


def rnn_layer(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop, stack,
              every=None):
    """One (bidirectional) layer: returns y (T, B, D*S) in x's dtype and the final states, a
    tuple of (D, B, size). See `_forward` for the argument shapes; `in_loop`: the input
    projection inside the loop; `unroll`: the unroll factors of the forward loop without and
    with a gradient and of the backward loop; `every`: segment checkpointing of a gradient,
    every so many steps (None: none). Differentiable in everything but `mask` and `rmask`.

    With the cell's hand-written backward step (`cell.hand_written_backward`), a `jax.custom_vjp`
    whose backward loop calls it; without one, the forward loop as it is, which JAX
    differentiates."""
    if every is not None:
        every = min(every, x.shape[0])
    if hand_written_backward(cell):
        if every is not None:
            return _rnn_layer_remat(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm,
                                    unroll, in_loop, stack, every)
        return _rnn_layer_vjp(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll,
                              in_loop, stack)
    return _rnn_layer_autodiff(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll,
                               in_loop, stack, every)


def _rnn_layer_autodiff(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop,
                        stack, every=None):
    """`rnn_layer` for a cell without a backward step: JAX differentiates the forward loop (it
    saves what each step's derivative reads, and transposes the loop into the backward one);
    with `every`, a loop of segments, each one a `jax.checkpoint` (`_segments_forward`).

    The loop runs at the unroll factor with a gradient (``unroll[1]``) whether or not one is
    taken, since a plain function cannot tell; JAX's backward loop takes the same factor. The
    recurrent dropout mask is a constant, as in the hand-written path."""
    rmask = None if rmask is None else lax.stop_gradient(rmask)
    if every is not None:
        hs, carry, _ = _segments_forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm,
                                         unroll[1], in_loop, stack, every, checkpoint=True)
        return _outputs(hs, mask, x.dtype), _finals(carry)
    hs, carry = _forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll[1],
                         in_loop, stack, save=False)
    return _outputs(hs, mask, x.dtype), _finals(carry)


@partial(jax.custom_vjp, nondiff_argnums=(0, 8, 9, 10, 11))
def _rnn_layer_vjp(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop, stack):
    """`rnn_layer` with the cell's hand-written backward step."""
    hs, carry = _forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll[0],
                         in_loop, stack, save=False)
    return _outputs(hs, mask, x.dtype), _finals(carry)


def _rnn_layer_fwd(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop,
                   stack):
    outs, carry = _forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll[1],
                           in_loop, stack, save=True)
    hs = [new[0] for new, _ in outs]
    return (_outputs(hs, mask, x.dtype), _finals(carry)), (x, w_ih, w_hh, params, state0, mask,
                                                           rmask, outs)


@own_rank_promotion
def _rnn_layer_bwd(cell, mm, unroll, in_loop, stack, residuals, cotangents):
    x, w_ih, w_hh, params, state0, mask, rmask, outs = residuals
    dy, dfinal = cotangents
    num_dirs, size = w_hh.shape[0], state_size(w_hh)
    if mask is not None:
        dy = jnp.where(mask[..., None], dy, jnp.zeros((), dy.dtype))
    dys = [dy[..., :size], dy[::-1, :, size:]][:num_dirs]  # per direction, scan time
    masks = None if mask is None else [mask, mask[::-1]][:num_dirs]
    w_ihs, _, rmasks, ps = _per_direction(num_dirs, w_ih, w_hh, rmask, params)
    dx_d, dw_ih, dw_hh, dparams, carry = _backward(
        cell, mm, unroll, stack, x.dtype, w_ih, w_hh, w_ihs, rmasks, ps, state0, outs, dys,
        masks, dfinal, lambda: [x, x[::-1]][:num_dirs])
    dx = dx_d[0] if num_dirs == 1 else dx_d[0] + dx_d[1][::-1]
    dstate0 = tuple(jnp.stack([c[k] for c in carry]).astype(s.dtype)
                    for k, s in enumerate(state0))
    dparams = jax.tree.map(lambda *a: jnp.stack(a), *dparams)
    return _gradients(x, w_ih, w_hh, params, dx, dw_ih, dw_hh, dparams, dstate0)


def _gradients(x, w_ih, w_hh, params, dx, dw_ih, dw_hh, dparams, dstate0):
    """The layer's gradients in their arguments' dtypes (and None for the mask and the
    recurrent mask); `dw_ih`, `dw_hh`: stacked over the directions, or lists to stack."""
    dparams = jax.tree.map(lambda g, p: g.astype(p.dtype), dparams, params)
    # The barrier keeps XLA from folding the transposes that follow (the time-major to
    # batch-major `dx`, the cells' (in, G*H) kernels back to PyTorch's (G*H, in)) into these
    # GEMMs: folded, they become dots with transposed operands that XLA:CPU runs outside its
    # fast GEMM path (measured 5-16% of the whole LSTM fwd+bwd at five benchmark shapes).
    def stacked(a):
        return jnp.stack(a) if isinstance(a, list) else a

    return lax.optimization_barrier((dx.astype(x.dtype), stacked(dw_ih).astype(w_ih.dtype),
                                     stacked(dw_hh).astype(w_hh.dtype), dparams, dstate0)) + (
        None, None)


def _backward(cell, mm, unroll, stack, dtype, w_ih, w_hh, w_ihs, rmasks, ps, state0, outs, dys,
              masks, dfinal, inputs, w_hh_t=None, w_ih_t=None):
    """The hand-written backward of one layer in scan time, from its forward's states and aux
    `outs` (per direction, `_forward` with `save`) over the steps of `dys` (per direction, the
    gradient of each step's output; `masks` likewise): `state0` (a tuple of (D, B, size)) the
    states before the first of them, `dfinal` the gradient of the states after the last.
    `inputs()`: per direction the layer's input over these steps (x, or its time-reversed copy);
    `w_ihs`, `rmasks`, `ps`: per direction (`_per_direction`); `w_hh_t`, `w_ih_t`: per direction
    the kernels transposed, or None to transpose here (`_projected` says why a loop of segments
    passes them). Returns per direction the input's gradient (in scan time), the
    kernels' and the parameters' gradients over these steps, and the gradient of the states
    before the first step."""
    num_dirs = w_hh.shape[0]
    steps = dys[0].shape[0]
    acc = accumulation_dtype(dtype)
    prevs = [tuple(jnp.concatenate([s0[d][None].astype(s.dtype), s[:-1]])
                   for s0, s in zip(state0, new))
             for d, (new, _) in enumerate(outs)]
    saved = [cell.saved(prevs[d], new, aux) for d, (new, aux) in enumerate(outs)]
    # The backward loop writes each step's dzx over the saved component `cell.dz_inplace` of
    # the same step (read just before), where the two have one dtype: the stacked dzx then
    # takes no memory of its own.
    store = _stacked(w_hh.dtype, stack)  # dzx is rounded to w_hh's dtype, stored in this one
    k = cell.dz_inplace
    if k is not None and saved[0][k].dtype != store:
        k = None
    bufs = None if k is None else [s[k] for s in saved]
    if k is not None:
        saved = [s[:k] + (None,) + s[k + 1:] for s in saved]
    # (G*H, S) per direction: a plain GEMM per step, not a transposed one
    if w_hh_t is None:
        w_hh_t = [transposed(w_hh[d]) for d in range(num_dirs)]
    step_mm = partial(mm, acc=acc)

    def step(carry, inputs):
        carry, bufs = carry
        t, saved_s, dy_s, m_s = inputs
        new_carry, new_bufs, grads = [], [], []
        for d, dstate in enumerate(carry):
            saved_d = saved_s[d]
            if bufs is not None:
                slot = lax.dynamic_index_in_dim(bufs[d], t, keepdims=False)
                saved_d = saved_d[:k] + (slot,) + saved_d[k + 1:]
            dstate = (dstate[0] + dy_s[d].astype(acc),) + tuple(dstate[1:])
            m = None if m_s is None else m_s[d][:, None]

            def write(dzx, d=d, m=m):
                """dzx as the rest of the step reads it: zero past each length, and written
                over its saved slot first where the cell asks for it."""
                if m is not None:
                    dzx = jnp.where(m, dzx, 0)
                dzx = dzx.astype(w_hh.dtype).astype(store)
                if bufs is None:
                    return dzx
                # The rest of the step reads dzx back from the updated buffer: with no use of
                # the old slot left after the write, XLA updates the buffer in place.
                new_bufs.append(lax.optimization_barrier(
                    lax.dynamic_update_index_in_dim(bufs[d], dzx, t, 0)))
                return lax.dynamic_index_in_dim(new_bufs[d], t, keepdims=False)

            dzx, dzh, direct, emit = cell.step_bwd(saved_d, dstate, ps[d], step_mm, write)
            if m is not None:
                emit = tuple(jnp.where(m, e, 0) for e in emit)
                # dzh and direct[0] reach only dh_p, which is replaced below
                direct = direct[:1] + tuple(None if g is None else jnp.where(m, g, ds)
                                            for g, ds in zip(direct[1:], dstate[1:]))
            dzh = dzh.astype(w_hh.dtype)
            if rmasks is None:
                dh_p = recurrent_product_t(dzh, w_hh_t[d], mm, acc)
            else:
                dh_p = _masked_product_dh(dzh, rmasks[d], w_hh_t[d], mm, acc)
            if direct[0] is not None:
                dh_p = direct[0] + dh_p
            if m is not None:
                dh_p = jnp.where(m, dh_p, dstate[0])
            new_carry.append((dh_p,) + tuple(ds if g is None else g
                                             for g, ds in zip(direct[1:], dstate[1:])))
            grads.append((None if bufs is not None else dzx, emit))
        return (new_carry, None if bufs is None else new_bufs), grads

    init = [tuple(g[d].astype(acc) for g in dfinal) for d in range(num_dirs)]
    (carry, bufs), grads = lax.scan(
        step, (init, bufs), (jnp.arange(steps, dtype=jnp.int32), saved, dys, masks),
        reverse=True, unroll=min(unroll[2], steps))
    if bufs is not None:
        grads = [(b, g[1]) for b, g in zip(bufs, grads)]
    xs = inputs()
    # Weight gradients contract over (T, B); with a batch-sharded B, the result is summed over
    # the shards and has the weights' own sharding (as JAX's transpose of dot_general gives).
    like_ih, like_hh = jax.typeof(w_ih[0]).sharding, jax.typeof(w_hh[0]).sharding
    nh = _num_heads(w_hh)
    dx_d, dw_ih, dw_hh, dparams = [], [], [], []
    for d in range(num_dirs):
        dzx, emits = grads[d]
        dzx = dzx.astype(w_hh.dtype)  # as the backward step rounded it (`store`: its stack)
        pieces = [a.astype(w_hh.dtype) for a in (
            (dzx,) if cell.shared_dz else cell.dzh_pieces(dzx, emits))]
        dzh = pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=-1)
        h_prev = operand(prevs[d][0], dtype, w_hh.dtype)
        dx_d.append(mm(dzx, w_ihs[d], acc, contract=((2,), (1,))) if w_ih_t is None else
                    mm(dzx, w_ih_t[d], acc, contract=((2,), (0,))))
        dw_ih.append(mm(xs[d].astype(w_ih.dtype), dzx, acc, contract=STEPS_BATCH,
                        out_sharding=like_ih))
        if rmasks is None:  # one GEMM per piece: dzh is not materialised
            dw_hh.append(jnp.concatenate([recurrent_product_dw(h_prev, a, mm, acc, like_hh, nh)
                                          for a in pieces], axis=-1))
        else:
            dw_hh.append(_masked_product_dw(prevs[d][0], rmasks[d], dzh, mm, acc, like_hh,
                                            dtype, nh))
        dparams.append(cell.param_grads(dzx, dzh, emits, saved[d], ps[d], step_mm))
    return dx_d, dw_ih, dw_hh, dparams, carry


_rnn_layer_vjp.defvjp(_rnn_layer_fwd, _rnn_layer_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0, 8, 9, 10, 11, 12))
def _rnn_layer_remat(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop, stack,
                     every):
    """`rnn_layer` with the cell's hand-written backward step and segment checkpointing every
    `every` steps; without a gradient, `_rnn_layer_vjp`'s forward."""
    hs, carry = _forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll[0],
                         in_loop, stack, save=False)
    return _outputs(hs, mask, x.dtype), _finals(carry)


def _rnn_layer_remat_fwd(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll, in_loop,
                         stack, every):
    hs, carry, checkpoints = _segments_forward(cell, x, w_ih, w_hh, params, state0, mask, rmask,
                                               mm, unroll[1], in_loop, stack, every,
                                               checkpoint=False)
    return (_outputs(hs, mask, x.dtype), _finals(carry)), (x, w_ih, w_hh, params, state0, mask,
                                                           rmask, checkpoints)


@own_rank_promotion
def _rnn_layer_remat_bwd(cell, mm, unroll, in_loop, stack, every, residuals, cotangents):
    """The segments in reverse: each one's forward again from its checkpoint (`_loop` with
    `save`), then its backward (`_backward`), the kernels' and parameters' gradients summed
    over the segments in the accumulation dtype."""
    x, w_ih, w_hh, params, state0, mask, rmask, checkpoints = residuals
    dy, dfinal = cotangents
    num_dirs, size = w_hh.shape[0], state_size(w_hh)
    acc = accumulation_dtype(x.dtype)
    if mask is not None:
        dy = jnp.where(mask[..., None], dy, jnp.zeros((), dy.dtype))
    dys = [dy[..., :size], dy[::-1, :, size:]][:num_dirs]  # per direction, scan time
    masks = None if mask is None else [mask, mask[::-1]][:num_dirs]
    masks = _segment_masks(masks, x.shape[0], every, num_dirs)
    xs = [xd.astype(w_ih.dtype) for xd in [x, x[::-1]][:num_dirs]]
    dirs = _directions(cell, x.dtype, w_ih, w_hh, rmask, params, mm, acc)
    w_ihs, w_hhs, rmasks, ps, _ = dirs
    w_ih_t, w_hh_t = [w.T for w in w_ihs], [transposed(w) for w in w_hhs]
    # one direction: the input's gradient rounded per segment (as after the sum of two below)
    packed = stack is not None and _itemsize(x.dtype) == 2 and num_dirs == 1
    packed_x = stack is not None and _itemsize(w_ih.dtype) == 2
    packed_dy = stack is not None and _itemsize(dy.dtype) == 2

    def segment(dstate, inputs):
        start, (xs, masks, dys) = inputs
        xs = [_unpacked(xd, w_ih.dtype, packed_x) for xd in xs]
        dys = [_unpacked(d, dy.dtype, packed_dy) for d in dys]
        zx = xs if in_loop else _projected(xs, w_ih_t, mm, acc)
        _, outs = _loop(cell, dirs, zx, masks, _unstacked_carry(start, num_dirs), mm, acc, x,
                        unroll[1], in_loop, stack, save=True)
        dx_d, dw_ih, dw_hh, dparams, carry = _backward(
            cell, mm, unroll, stack, x.dtype, w_ih, w_hh, w_ihs, rmasks, ps, start, outs, dys,
            masks, dstate, lambda: xs, w_hh_t, w_ih_t)
        dx = [_packed(dx_d[0].astype(x.dtype), packed)] if num_dirs == 1 else dx_d
        sums = (jnp.stack(dw_ih), jnp.stack(dw_hh), jax.tree.map(lambda *a: jnp.stack(a),
                                                                   *dparams))
        return _stacked_carry(carry), (sums, dx)

    def body(carry, inputs):
        dstate, sums = carry
        dstate, (grads, dx) = segment(dstate, inputs)
        return (dstate, jax.tree.map(jnp.add, sums, grads)), (None, dx)

    dstate = tuple(g.astype(acc) for g in dfinal)
    xs = [_packed(xd, packed_x) for xd in xs]
    dys = [_packed(d, packed_dy) for d in dys]
    first = (jax.tree.map(lambda a: a[0], checkpoints),
             jax.tree.map(lambda a: a[:every], (xs, masks, dys)))
    sums = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                        jax.eval_shape(segment, dstate, first)[1][0])
    (dstate, (dw_ih, dw_hh, dparams)), _, dx_d = _scan_segments(
        body, (dstate, sums), checkpoints, (xs, masks, dys), every, reverse=True)
    if num_dirs == 1:
        dx = _unpacked(dx_d[0], x.dtype, packed)
    else:
        dx = dx_d[0] + dx_d[1][::-1]
    dstate0 = tuple(d.astype(s.dtype) for d, s in zip(dstate, state0))
    return _gradients(x, w_ih, w_hh, params, dx, dw_ih, dw_hh, dparams, dstate0)


_rnn_layer_remat.defvjp(_rnn_layer_remat_fwd, _rnn_layer_remat_bwd)


@functools.cache
def stash_bytes(cell, input_size: int, hidden_size: int, proj_size: int, num_dirs: int, dtype,
                stack, num_heads: int = 1) -> int:
    """The bytes one layer's gradient keeps per time step and sequence without segment
    checkpointing: the residuals of `rnn_layer`'s VJP over two steps less those over one (at
    batch 1, abstractly): the states and factors the hand-written backward reads, or what JAX
    saves for a cell without one, and the step's input. `stack`: as `rnn_layer`'s."""
    dtype = np.dtype(dtype)
    acc = accumulation_dtype(dtype)
    shapes = layout.param_shapes(input_size, hidden_size, 1, False, cell.family, proj_size,
                                 num_heads)[0]
    weights = {n: jax.ShapeDtypeStruct(shape, dtype) for n, shape in shapes.items()}
    widths = (proj_size or hidden_size,) + (hidden_size,) * (len(cell.family.states) - 1)
    state0 = tuple(jax.ShapeDtypeStruct((num_dirs, 1, n), d)
                   for n, d in zip(widths, cell.state_dtypes(dtype, acc)))

    def residuals(steps):
        def vjp(weights, x, state0):
            w_ih, w_hh, params = jax.tree.map(lambda a: jnp.stack([a] * num_dirs),
                                              cell.prepare(weights, dtype, acc, dtype))
            return jax.vjp(lambda *a: rnn_layer(cell, *a, None, None, Products(), (1, 1, 1),
                                                False, stack),
                           x, w_ih, w_hh, params, state0)[1]
        out = jax.eval_shape(vjp, weights, jax.ShapeDtypeStruct((steps, 1, input_size), dtype),
                             state0)
        return sum(a.size * np.dtype(a.dtype).itemsize for a in jax.tree.leaves(out))

    return residuals(2) - residuals(1)


def segment_length(steps: int, longest: int = 1) -> int:
    """The automatic segment length: about sqrt(T) (T / k checkpoints and k steps' residuals
    at a time), or up to `longest` steps where that is longer (each segment has a fixed cost,
    its kernel calls or loop and its weight-gradient GEMMs, that longer segments amortise),
    evened out so that the last segment is as long as the others or nearly."""
    first = max(1, -(-steps // max(1, round(steps ** 0.5))), min(longest, steps))
    segments = -(-steps // first)
    return -(-steps // segments)


def apply_layer_dropout(y: Array, rng: Array, layer: int, rate: float, *, time_major: bool):
    """Dropout on layer `layer`'s output, with the mask every path shares.

    The keep-mask is ``bernoulli(fold_in(rng, layer), 1 - rate, (B, T, D*H))``, so a key gives the
    same result on every path; kept values are scaled by ``1 / (1 - rate)``.
    """
    shape = (y.shape[1], y.shape[0], y.shape[2]) if time_major else y.shape
    keep = jax.random.bernoulli(jax.random.fold_in(rng, layer), 1.0 - rate, shape)
    if time_major:
        keep = jnp.swapaxes(keep, 0, 1)
    factor = 0.0 if rate >= 1 else 1.0 / (1.0 - rate)
    return jnp.where(keep, y * jnp.asarray(factor, y.dtype), jnp.zeros((), y.dtype))


def layer_by_layer(run_layer, x: Array, h_0: Array, c_0: Array, num_layers: int,
                   num_directions: int, dropout_rng: Array, dropout: float):
    """A stack run one layer at a time (batch-major ``x``), with `apply_layer_dropout` between
    layers: ``run_layer(layer, y, h_0, c_0) -> (y, h, c)`` on the layer's slices of the initial
    states. Returns (y, h_n, c_n). The cuDNN routes' way to honour dropout with our masks."""
    y, hs, cs = x, [], []
    for layer in range(num_layers):
        sl = slice(layer * num_directions, (layer + 1) * num_directions)
        y, h, c = run_layer(layer, y, h_0[sl], c_0[sl])
        hs.append(h)
        cs.append(c)
        if layer < num_layers - 1:
            y = apply_layer_dropout(y, dropout_rng, layer, dropout, time_major=False)
    return y, jnp.concatenate(hs), jnp.concatenate(cs)


@dataclasses.dataclass(frozen=True)
class ScanConfig:
    """The static configuration of `rnn_scan`: the network's sizes and the driver's options.

    ``cell``: the family's cell (its options bound). ``input_size``, ``hidden_size``,
    ``num_layers``, ``bidirectional``, ``proj_size``, ``num_heads``: the network, as
    `layout.unpack` reads the weights. ``dropout``: the rate between layers, applied only with
    a ``dropout_rng``. ``precision``: of every matmul, as in `lax.dot_general`.

    The driver's options (`api.scan_options` gives the platform's): ``matmul_dtype`` (default:
    ``x``'s dtype) is the dtype the matmul operands are handed to the backend in. Weights are
    always rounded to ``x``'s dtype first, so float32 here for 16-bit inputs gives the same
    products (exact in float32) with float32 accumulation, as the 16-bit matmul does (on CPUs
    for float16, which XLA:CPU would convert in every step otherwise). ``fence_products``: every
    product behind an optimization barrier (`Products`; bfloat16 operands on CPUs).
    ``stack_dtype``: per-step values are stacked over the loop in at least this dtype
    (`_stacked`; float32 for 16-bit inputs on CPUs), or None for their own.
    ``project_in_loop``: the input projection as a matmul per step inside the loop rather than
    one GEMM over all steps before it (the same products). ``unroll``: the loops' unroll
    factors, an int for all three or ``(forward, forward with a gradient, backward)``; by
    default `UNROLL` and `TRAIN_UNROLL` twice. ``layer_impl``: what runs one layer, `rnn_layer`
    (None) or a fused kernel with its arguments and results (a hashable callable: the Pallas
    route's `routes.pallas.kernel.Layer`). ``remat_every``: segment checkpointing of a
    gradient, every so many steps of each layer (`rnn_layer`'s ``every``), or None for none.
    """

    cell: Any
    input_size: int
    hidden_size: int
    num_layers: int
    bidirectional: bool = False
    dropout: float = 0.0
    precision: Any = None
    proj_size: int = 0
    matmul_dtype: Any = None
    fence_products: bool = False
    stack_dtype: Any = None
    project_in_loop: bool = False
    unroll: Any = None
    layer_impl: Any = None
    remat_every: int | None = None
    num_heads: int = 1


@partial(jax.jit, static_argnums=0)
def rnn_scan(config: ScanConfig, x, state0, weights, seq_lengths=None, dropout_rng=None,
             recurrent_mask=None):
    """A multi-layer recurrent network on checked arguments; returns (y, final states).

    ``config``: the static configuration (`ScanConfig`). ``state0`` is a tuple of (L*D, B, size)
    arrays (``(h_0,)``, or ``(h_0, c_0)`` for the LSTM); the final states come back in their
    dtypes. ``seq_lengths`` is int32, or None for full length. ``dropout_rng``: the key of the
    dropout between layers (`apply_layer_dropout`), or None for none. ``recurrent_mask``
    (L*D, K, B, S) or None: recurrent dropout per layer and direction (`masked_product`).
    """
    cell, num_layers, unroll = config.cell, config.num_layers, config.unroll
    mm_dtype = x.dtype if config.matmul_dtype is None else config.matmul_dtype
    if unroll is None:
        unroll = (UNROLL, TRAIN_UNROLL, TRAIN_UNROLL)
    elif isinstance(unroll, int):
        unroll = (unroll,) * 3
    batch, steps, _ = x.shape
    dtype = x.dtype
    acc = accumulation_dtype(dtype)
    num_dirs = 2 if config.bidirectional else 1
    if steps == 0:
        size = config.proj_size or config.hidden_size
        return jnp.zeros((batch, 0, num_dirs * size), dtype), state0
    state0 = tuple(split_like(s, 1, x) for s in state0)  # carries sharded as the batch
    if seq_lengths is not None:
        seq_lengths = split_like(seq_lengths, 0, x)
    if recurrent_mask is not None:
        recurrent_mask = split_like(recurrent_mask, 2, x)
    x, weights, seq_lengths, recurrent_mask, *state0 = vary_together(
        x, weights, seq_lengths, recurrent_mask, *state0)
    state0 = tuple(state0)
    groups = layout.unpack(weights, config.input_size, config.hidden_size, num_layers,
                           config.bidirectional, cell.family, config.proj_size, config.num_heads)
    mask = None
    if seq_lengths is not None:
        mask = jnp.arange(steps, dtype=jnp.int32)[:, None] < seq_lengths[None, :]  # (T, B)
    state_dtypes = cell.state_dtypes(dtype, acc)

    y = jnp.swapaxes(x, 0, 1)  # time-major inside
    finals = []
    for layer in range(num_layers):
        ps = range(layer * num_dirs, (layer + 1) * num_dirs)
        prepared = [cell.prepare({n: g[p] for n, g in groups.items()}, dtype, acc, mm_dtype)
                    for p in ps]
        w_ih, w_hh, params = jax.tree.map(lambda *a: jnp.stack(a), *prepared)
        sl = slice(ps[0], ps[-1] + 1)
        layer_state0 = tuple(s[sl].astype(sd) for s, sd in zip(state0, state_dtypes))
        rmask = None if recurrent_mask is None else recurrent_mask[sl].astype(acc)
        y, final = (config.layer_impl or rnn_layer)(
            cell, y, w_ih, w_hh, params, layer_state0, mask, rmask,
            Products(config.precision, config.fence_products), unroll, config.project_in_loop,
            config.stack_dtype, config.remat_every)
        finals.append(final)
        if dropout_rng is not None and config.dropout > 0 and layer < num_layers - 1:
            y = apply_layer_dropout(y, dropout_rng, layer, config.dropout, time_major=True)
    return jnp.swapaxes(y, 0, 1), tuple(
        jnp.concatenate([f[k] for f in finals]).astype(s.dtype) for k, s in enumerate(state0))

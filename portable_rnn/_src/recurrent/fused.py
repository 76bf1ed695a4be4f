"""What every fused recurrent route shares: a kernel's forward and backward made an op that
`jax.jit`, `jax.grad`, `jax.vmap`, `jax.shard_map` and `jax.export` compose with.

A fused kernel (cuDNN's RNN call, portable_rnn's own cuDNN call, the Pallas TPU kernel) has no
batching rule and no VJP of its own. `op` builds both around it:

- a `jax.custom_vjp` outside, whose forward and backward are each a
  `jax.custom_batching.custom_vmap` function (`custom_vmap` alone supports no reverse mode);
- the forward rule folds the vmapped axis (already moved to the front) into the batch axis of
  every batched argument, since a recurrence is independent per batch row: one kernel call
  serves the whole vmap. It calls the same function again, so nested vmaps fold level by level;
- weights that differ per vmapped instance cannot share one call: such calls run the portable
  fallback (the scan path), vmapped;
- the backward rule must return a weight gradient *per instance* (``vmap(grad(f))`` asks for
  exactly that; ``grad(vmap(f))`` sums them), which a folded call cannot separate: under vmap
  it runs the fallback's VJP, vmapped. Outside vmap, the backward runs the kernel's own.

`over_batch` runs a call once per shard of a batch sharded over explicit mesh axes, in a
`jax.shard_map`: XLA cannot partition a custom call (or a Pallas kernel) it has no rule for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..core.batching import fold, unfold
from ..core.sharding import vary_together


def _lead(a, batched):
    """The aval of one instance of `a` (its vmapped axis, at 0, dropped)."""
    return jax.ShapeDtypeStruct(a.shape[1:] if batched else a.shape, a.dtype)


def op(infer: Callable, train: Callable, backward: Callable, fallback: Callable,
       batch_axes: Sequence[int | None], out_axes: Sequence[int], num_diff: int,
       res_axis: int | None = None) -> Callable:
    """A fused kernel as a transformable op ``f(*args) -> outs``.

    Args:
      infer: ``(*args) -> outs``, the kernel without a gradient; `outs` a tuple of pytrees.
      train: ``(*args) -> (outs, res)``, the kernel's forward keeping residuals `res` (a pytree
        of arrays) for `backward`.
      backward: ``(res, args, outs, couts) -> grads``, the gradients of the first `num_diff`
        arguments.
      fallback: ``(*args) -> outs``, the portable computation of the same function: what runs
        where weights differ per vmapped instance, and whose VJP serves every vmapped backward.
      batch_axes: per argument (a pytree), the batch axis of each of its arrays, or None for an
        argument shared by every batch row (the weights): batching one runs `fallback`.
      out_axes: per output (a pytree), the batch axis of each of its arrays.
      num_diff: the leading arguments that are differentiable; the others (lengths, masks) get
        no cotangent.
      res_axis: the batch axis of every array in `res`, or None where `res` is opaque (cuDNN's
        reserve space): a vmapped forward then returns the folded call's `res` unbatched, and
        `backward` must not check its shape against the arguments' (a vmapped backward traces
        it on one instance's arguments, then runs the fallback's VJP instead).
    """
    batch_axes, out_axes = tuple(batch_axes), tuple(out_axes)

    def per_instance(in_batched) -> bool:
        return any(any(jax.tree.leaves(b)) for b, ax in zip(in_batched, batch_axes)
                   if ax is None)

    def folded(axis_size, in_batched, args):
        return [arg if ax is None else
                jax.tree.map(lambda a, b, ax=ax: fold(a, b, axis_size, ax), arg, b)
                for arg, b, ax in zip(args, in_batched, batch_axes)]

    def unfolded(axis_size, outs):
        return tuple(jax.tree.map(lambda a, ax=ax: unfold(a, axis_size, ax), o)
                     for o, ax in zip(outs, out_axes))

    def vmapped_fallback(in_batched, args):
        axes = [jax.tree.map(lambda b: 0 if b else None, b) for b in in_batched]
        return jax.vmap(fallback, in_axes=axes)(*args)

    def all_true(tree):
        return jax.tree.map(lambda _: True, tree)

    @jax.custom_batching.custom_vmap
    def f_infer(*args):
        return tuple(infer(*args))

    @f_infer.def_vmap
    def f_infer_rule(axis_size, in_batched, *args):
        if per_instance(in_batched):
            outs = tuple(vmapped_fallback(in_batched, args))
        else:
            outs = unfolded(axis_size, f_infer(*folded(axis_size, in_batched, args)))
        return outs, all_true(outs)

    @jax.custom_batching.custom_vmap
    def f_train(*args):
        outs, res = train(*args)
        return tuple(outs), res

    @f_train.def_vmap
    def f_train_rule(axis_size, in_batched, *args):
        if per_instance(in_batched):
            # The residuals are never read: a vmapped backward runs the fallback's VJP.
            one = [jax.tree.map(_lead, a, b) for a, b in zip(args, in_batched)]
            res = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                               jax.eval_shape(f_train, *one)[1])
            outs = tuple(vmapped_fallback(in_batched, args))
        else:
            outs, res = f_train(*folded(axis_size, in_batched, args))
            outs = unfolded(axis_size, outs)
            if res_axis is not None:
                res = jax.tree.map(lambda a: unfold(a, axis_size, res_axis), res)
                return (outs, res), (all_true(outs), all_true(res))
        return (outs, res), (all_true(outs), jax.tree.map(lambda _: False, res))

    @jax.custom_batching.custom_vmap
    def f_bwd(res, args, outs, couts):
        return tuple(backward(res, args, outs, couts))

    @f_bwd.def_vmap
    def f_bwd_rule(axis_size, in_batched, res, args, outs, couts):
        del axis_size, res, outs
        arg_b, cout_b = in_batched[1], in_batched[3]

        def one(args, couts):
            diff, rest = tuple(args[:num_diff]), tuple(args[num_diff:])
            return jax.vjp(lambda *d: tuple(fallback(*d, *rest)), *diff)[1](tuple(couts))

        axes = [jax.tree.map(lambda b: 0 if b else None, list(arg_b)),
                jax.tree.map(lambda b: 0 if b else None, list(cout_b))]
        grads = jax.vmap(one, in_axes=axes)(list(args), list(couts))
        return grads, all_true(grads)

    @jax.custom_vjp
    def f(*args):
        return f_infer(*args)

    def f_fwd(*args):
        outs, res = f_train(*args)
        return outs, (res, args, outs)

    def f_bwd_vjp(saved, couts):
        res, args, outs = saved
        grads = f_bwd(res, args, outs, couts)
        return tuple(grads) + (None,) * (len(args) - num_diff)

    f.defvjp(f_fwd, f_bwd_vjp)
    return f


def over_batch(fn: Callable, args: Sequence, batch_axes: Sequence[int | None],
               out_axes: Sequence[int], ref_axis: int = 0, check_vma: bool = True):
    """``fn(*args)``, once per shard where the batch (axis `ref_axis` of ``args[0]``) is sharded
    over explicit mesh axes (a `jax.shard_map` over them), else once.

    `batch_axes` (per argument, a pytree prefix) and `out_axes` (per output) give each array's
    batch axis, None for arrays every shard needs whole (the weights). Whatever else is sharded
    (time, features, weights) is gathered first, as a kernel needs it whole. Under auto sharding
    the input's sharding is unknown while tracing: XLA replicates the call. `check_vma` as in
    `jax.shard_map` (False for a Pallas kernel in interpret mode, whose grid loop drops the
    varying manual axes from its carries: jax 0.10.2).
    """
    sharding = jax.typeof(args[0]).sharding
    spec = tuple(sharding.spec) + (None,) * (args[0].ndim - len(sharding.spec))
    axes = spec[ref_axis]
    if axes is None:
        flat, tree = jax.tree.flatten(list(args))
        return fn(*jax.tree.unflatten(tree, vary_together(*flat)))

    def spec_of(ax):  # a prefix: the axes after the batch are not sharded
        return P() if ax is None else P(*[None] * ax, axes)

    in_specs = [spec_of(ax) for ax in batch_axes]
    args = [jax.tree.map(lambda a, s=s: jax.sharding.reshard(a, NamedSharding(sharding.mesh, s)),
                         arg) for arg, s in zip(args, in_specs)]
    out_specs = tuple(spec_of(ax) for ax in out_axes)

    def per_shard(*shard_args):
        flat, tree = jax.tree.flatten(list(shard_args))
        return tuple(fn(*jax.tree.unflatten(tree, vary_together(*flat))))

    names = {axes} if isinstance(axes, str) else set(axes)
    return jax.shard_map(per_shard, mesh=sharding.mesh, in_specs=tuple(in_specs),
                         out_specs=out_specs, axis_names=names, check_vma=check_vma)(*args)

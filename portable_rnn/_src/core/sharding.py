"""Sharding helpers: custom derivatives inside `jax.shard_map`, types under explicit sharding.

Inside `shard_map` (with its default ``check_vma=True``), JAX types every value with the manual
mesh axes it *varies* over: a batch shard varies over ``"batch"``, a replicated weight does not.
An operation mixing the two marks the weight as varying (``pvary``), and autodiff transposes that
mark into a ``psum`` of the weight's gradient. A `jax.custom_vjp`, however, must return for each
input a cotangent that varies exactly as the input does, and a weight gradient computed from one
shard's data varies over ``"batch"``: the backward pass fails with "the manual axis types do not
match". Marking every operand of a custom-derivative call as varying over the union of their axes
*before* the call keeps the rule consistent, and JAX's own transpose of the mark sums the weight
gradient over the shards, exactly as for code differentiated by JAX. Outside `shard_map` (plain
`jit`, `NamedSharding`), nothing varies and this is a no-op.

Under `jit` on a mesh with explicit axes (the default of `jax.make_mesh`), shardings are part of
the types. `split_like` and `typed_like` give an array the batch sharding it should have where a
replicated input or a primitive that drops shardings from its types would otherwise force a
gather. Under auto axes and inside `shard_map`, types carry no sharded axes: both are no-ops.
"""

from __future__ import annotations

import jax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .compat import varying_axes


def _vary(a, axes: frozenset):
    missing = () if a is None else tuple(sorted(axes - varying_axes(a), key=str))
    return lax.pcast(a, missing, to="varying") if missing else a


def vary_together(*arrays):
    """`arrays` (None allowed), each marked as varying over every manual axis any of them
    varies over."""
    axes = frozenset().union(*(varying_axes(a) for a in arrays if a is not None))
    return tuple(_vary(a, axes) for a in arrays) if axes else arrays


def vary_like(ref, *arrays):
    """`arrays`, each marked as varying over (at least) the manual axes `ref` varies over."""
    axes = varying_axes(ref)
    return tuple(_vary(a, axes) for a in arrays) if axes else arrays


def split_like(a, axis: int, ref, ref_axis: int = 0):
    """`a` resharded so that its `axis` is split over the explicit mesh axes that split `ref`'s
    `ref_axis`, when nothing splits it yet; otherwise `a` itself.

    Under explicit sharding a replicated initial state (say ``jnp.zeros``) would make a scan
    carry replicated, and every step would all-gather the batch-sharded update into it. Under
    auto sharding (XLA propagates shardings) and inside `shard_map`, types carry no sharded
    axes and this is a no-op.
    """
    ref_sharding = jax.typeof(ref).sharding
    spec = tuple(ref_sharding.spec) + (None,) * (ref.ndim - len(ref_sharding.spec))
    axes = spec[ref_axis]
    if axes is None:
        return a
    own = tuple(jax.typeof(a).sharding.spec)
    own += (None,) * (a.ndim - len(own))
    used = {n for s in own if s is not None for n in ((s,) if isinstance(s, str) else s)}
    if own[axis] is not None or used & ({axes} if isinstance(axes, str) else set(axes)):
        return a
    target = P(*own[:axis], axes, *own[axis + 1:])
    return jax.sharding.reshard(a, NamedSharding(ref_sharding.mesh, target))


def typed_like(a, ref):
    """`a`, shaped like `ref`, typed with `ref`'s sharding over explicit mesh axes.

    For the outputs of JAX's cuDNN primitives, which drop the sharding from their types: XLA
    partitions the call per shard, but a type without sharding, combined with an explicitly
    typed array, would make the result replicated (an all-gather). A no-op where `ref`'s type
    carries no sharded axis (auto sharding, `shard_map`, no mesh).
    """
    sharding = jax.typeof(ref).sharding
    if all(s is None for s in sharding.spec) or jax.typeof(a).sharding == sharding:
        return a
    return jax.sharding.reshard(a, sharding)



def on_mesh_of(a, ref):
    """`a` (typed with no mesh) typed as replicated over the explicit mesh `ref` is typed with.

    For an accumulator of values computed from sharded data: a sum over a batch-sharded axis is
    typed with the batch's mesh even when it is replicated, and an update must match the buffer
    it is written into. A no-op where `ref`'s type has no mesh axes or `a` has one already.
    """
    mesh = jax.typeof(ref).sharding.mesh
    if not mesh.axis_names or jax.typeof(a).sharding.mesh.axis_names:
        return a
    return jax.sharding.reshard(a, NamedSharding(mesh, P(*jax.typeof(a).sharding.spec)))

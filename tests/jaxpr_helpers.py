"""What a traced program contains, read from its equations rather than from its printed form.

JAX's printing of jaxprs changes between releases (jax 0.12 prints each nested `jit` as a
sub-jaxpr of its own, with its parameters); the equations and their parameters are the API.
Every helper walks the equations recursively, through the sub-jaxprs held in parameters
(`jit`, `custom_vjp_call`, `custom_vmap_call`, `scan`, `cond`, `shard_map`, ...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import jax
from jax.extend import core as jex_core

_JAXPRS = (jex_core.Jaxpr, jex_core.ClosedJaxpr)


def _sub_jaxprs(value) -> Iterator:
    if isinstance(value, _JAXPRS):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _sub_jaxprs(v)


def equations(jaxpr) -> Iterator:
    """Every equation of `jaxpr` (a `Jaxpr` or `ClosedJaxpr`) and of its sub-jaxprs, outer
    equations before the ones they hold."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                yield from equations(sub)


def trace(f, *args, **kwargs):
    """The jaxpr of `f(*args, **kwargs)` (`jax.make_jaxpr`)."""
    return jax.make_jaxpr(f)(*args, **kwargs)


def primitive_names(jaxpr) -> Counter:
    """How often each primitive is bound, sub-jaxprs included."""
    return Counter(eqn.primitive.name for eqn in equations(jaxpr))


def binds(jaxpr, name: str) -> list:
    """The equations that bind primitive `name`, sub-jaxprs included."""
    return [eqn for eqn in equations(jaxpr) if eqn.primitive.name == name]


def binds_any(jaxpr, *names: str) -> bool:
    """Whether any of the primitives `names` is bound, sub-jaxprs included."""
    return any(eqn.primitive.name in names for eqn in equations(jaxpr))

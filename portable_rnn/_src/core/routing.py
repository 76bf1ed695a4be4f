"""The routing model (work in progress)."""

from __future__ import annotations


def variant_name(route: str, **params) -> str:
    """A route's variant as the grid names it: ``splash@block=512``."""
    return route + "".join(f"@{k}={v}" for k, v in sorted(params.items()))

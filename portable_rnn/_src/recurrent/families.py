"""The registry of recurrent families: one line per cell."""

from __future__ import annotations

from ..core import dispatch
from .cell import Family
from .gru.family import FAMILY as GRU
from .lstm.family import FAMILY as LSTM
from .simple_rnn.family import FAMILY as SIMPLE_RNN

FAMILIES: dict[str, Family] = {f.name: f for f in (LSTM, GRU, SIMPLE_RNN)}


def _register_policy_options() -> None:
    """Makes each family's `Family.policy_options` keywords of `portable_rnn.policy`."""
    for f in FAMILIES.values():
        for name, values in f.policy_options.items():
            dispatch.register_option(name, values)


_register_policy_options()


def family(name) -> Family:
    """The family named `name` (a `Family` is returned as it is)."""
    if isinstance(name, Family):
        return name
    if name not in FAMILIES:
        raise ValueError(f"`family` must be one of {sorted(FAMILIES)}; got {name!r}.")
    return FAMILIES[name]


def with_gates(gates: int) -> Family | None:
    """The family whose weights have `gates` blocks per matrix (for "it looks like" hints)."""
    return next((f for f in FAMILIES.values() if f.gates == gates), None)

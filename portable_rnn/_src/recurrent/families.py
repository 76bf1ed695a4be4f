"""The registry of recurrent families: a cell is registered by naming its folder here, once."""

from __future__ import annotations

from ..core import dispatch
from . import classic_gru, gru, lstm, mgu, simple_rnn, slstm
from .cell import Family, Folder

# One entry per cell folder (its package's `Folder`), in the order the docs and tables list them.
FOLDERS: dict[str, Folder] = {m.FOLDER.family.name: m.FOLDER
                              for m in (lstm, gru, simple_rnn, classic_gru, mgu, slstm)}
FAMILIES: dict[str, Family] = {name: folder.family for name, folder in FOLDERS.items()}


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


def with_gates(gates: int) -> tuple[Family, ...]:
    """The families whose weights have `gates` blocks per matrix, in the registry's order (for
    "it looks like" hints, which name every one)."""
    return tuple(f for f in FAMILIES.values() if f.gates == gates)

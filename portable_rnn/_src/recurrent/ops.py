"""The recurrent ops by family name, for the public package, the layers and the tools: made from
the registry (`families`), with no line per family."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from . import functions
from .cell import Family
from .families import FOLDERS


@dataclasses.dataclass(frozen=True)
class Op:
    """A family's functional API: ``run`` (`portable_rnn.lstm`, ...), ``explain``
    (`explain_lstm`, ...), ``num_params`` (`get_num_params_in_lstm`, ...), ``init``
    (`init_lstm_weight`, ...) and ``float64``, the float64 reference the self-test holds the
    op to (the family's ``reference.py``: it shares no code with the op); ``option_checks``:
    per option of ``family.layer_options`` that needs one, the check the functional call makes
    of it (raising for a bad value); ``functions``: every public function of the family, by
    name (the op, ``explain_*``, the weight functions and the converters of its peers)."""

    family: Family
    run: Callable
    explain: Callable
    num_params: Callable
    init: Callable
    float64: Callable
    option_checks: tuple[tuple[str, Callable], ...] = ()
    functions: Mapping[str, Callable] = dataclasses.field(default_factory=dict)


def _op(folder) -> Op:
    made, n = functions.make(folder), folder.family.name
    return Op(folder.family, made[n], made[f"explain_{n}"], made[f"get_num_params_in_{n}"],
              made[f"init_{n}_weight"], folder.float64, folder.option_checks, made)


OPS: dict[str, Op] = {name: _op(folder) for name, folder in FOLDERS.items()}

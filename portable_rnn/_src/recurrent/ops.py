"""The recurrent ops by family name, for the layers and tools that serve every family: one line
per cell."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .cell import Family
from .gru import api as gru_api
from .gru import reference as gru_reference
from .gru import weights as gru_weights
from .lstm import api as lstm_api
from .lstm import reference as lstm_reference
from .lstm import weights as lstm_weights
from .simple_rnn import api as simple_rnn_api
from .simple_rnn import reference as simple_rnn_reference
from .simple_rnn import weights as simple_rnn_weights


@dataclasses.dataclass(frozen=True)
class Op:
    """A family's functional API: ``run`` (`portable_rnn.lstm`, ...), ``explain``
    (`explain_lstm`, ...), ``num_params`` (`get_num_params_in_lstm`, ...), ``init``
    (`init_lstm_weight`, ...) and ``float64``, the float64 reference the self-test holds the
    op to (the family's ``reference.py``: it shares no code with the op); ``option_checks``:
    per option of ``family.layer_options`` that needs one, the check the functional call makes
    of it (raising for a bad value)."""

    family: Family
    run: Callable
    explain: Callable
    num_params: Callable
    init: Callable
    float64: Callable
    option_checks: tuple[tuple[str, Callable], ...] = ()


OPS: dict[str, Op] = {op.family.name: op for op in (
    Op(lstm_api.FAMILY, lstm_api.lstm, lstm_api.explain_lstm, lstm_weights.get_num_params_in_lstm,
       lstm_weights.init_lstm_weight, lstm_reference.float64),
    Op(gru_api.FAMILY, gru_api.gru, gru_api.explain_gru, gru_weights.get_num_params_in_gru,
       gru_weights.init_gru_weight, gru_reference.float64),
    Op(simple_rnn_api.FAMILY, simple_rnn_api.simple_rnn, simple_rnn_api.explain_simple_rnn,
       simple_rnn_weights.get_num_params_in_simple_rnn, simple_rnn_weights.init_simple_rnn_weight,
       simple_rnn_reference.float64,
       option_checks=(("nonlinearity", simple_rnn_api.check_nonlinearity),)),
)}

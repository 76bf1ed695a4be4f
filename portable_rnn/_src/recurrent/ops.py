"""The recurrent ops by family name, for the layers and tools that serve every family: one line
per cell."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .cell import Family
from .gru import api as gru_api
from .gru import weights as gru_weights
from .lstm import api as lstm_api
from .lstm import weights as lstm_weights
from .simple_rnn import api as simple_rnn_api
from .simple_rnn import weights as simple_rnn_weights


@dataclasses.dataclass(frozen=True)
class Op:
    """A family's functional API: ``run`` (`portable_rnn.lstm`, ...), ``explain``
    (`explain_lstm`, ...) and ``num_params`` (`get_num_params_in_lstm`, ...)."""

    family: Family
    run: Callable
    explain: Callable
    num_params: Callable


OPS: dict[str, Op] = {op.family.name: op for op in (
    Op(lstm_api.FAMILY, lstm_api.lstm, lstm_api.explain_lstm, lstm_weights.get_num_params_in_lstm),
    Op(gru_api.FAMILY, gru_api.gru, gru_api.explain_gru, gru_weights.get_num_params_in_gru),
    Op(simple_rnn_api.FAMILY, simple_rnn_api.simple_rnn, simple_rnn_api.explain_simple_rnn,
       simple_rnn_weights.get_num_params_in_simple_rnn),
)}

"""portable_rnn: JAX LSTM and attention that run everywhere, fast where they can."""

from ._attention import dot_product_attention as dot_product_attention
from ._attention import explain_attention as explain_attention
from ._capabilities import Capabilities as Capabilities
from ._capabilities import capabilities as capabilities
from ._dispatch import Decision as Decision
from ._dispatch import FallbackError as FallbackError
from ._dispatch import FallbackWarning as FallbackWarning
from ._dispatch import policy as policy
from ._lstm import explain_lstm as explain_lstm
from ._lstm import lstm as lstm
from ._weights import get_num_params_in_lstm as get_num_params_in_lstm
from ._weights import init_lstm_weight as init_lstm_weight
from ._weights import lstm_weights_from_flax as lstm_weights_from_flax
from ._weights import lstm_weights_from_torch as lstm_weights_from_torch
from ._weights import lstm_weights_to_torch as lstm_weights_to_torch
from ._weights import pack_lstm_weights as pack_lstm_weights
from ._weights import unpack_lstm_weights as unpack_lstm_weights

__version__ = "0.1.0.dev0"

__all__ = [
    "Capabilities",
    "Decision",
    "FallbackError",
    "FallbackWarning",
    "capabilities",
    "dot_product_attention",
    "explain_attention",
    "explain_lstm",
    "policy",
    "get_num_params_in_lstm",
    "init_lstm_weight",
    "lstm",
    "lstm_weights_from_flax",
    "lstm_weights_from_torch",
    "lstm_weights_to_torch",
    "pack_lstm_weights",
    "unpack_lstm_weights",
]

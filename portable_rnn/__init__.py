"""portable_rnn: JAX recurrent networks (LSTM, GRU, RNN) and attention that run everywhere,
fast where they can."""

from ._src.attention.api import dot_product_attention as dot_product_attention
from ._src.attention.api import explain_attention as explain_attention
from ._src.core.capabilities import Capabilities as Capabilities
from ._src.core.capabilities import capabilities as capabilities
from ._src.core.dispatch import Decision as Decision
from ._src.core.dispatch import FallbackError as FallbackError
from ._src.core.dispatch import FallbackWarning as FallbackWarning
from ._src.core.dispatch import policy as policy
from ._src.recurrent.gru.api import explain_gru as explain_gru
from ._src.recurrent.gru.api import gru as gru
from ._src.recurrent.gru.weights import get_num_params_in_gru as get_num_params_in_gru
from ._src.recurrent.gru.weights import gru_weights_from_flax as gru_weights_from_flax
from ._src.recurrent.gru.weights import gru_weights_from_keras as gru_weights_from_keras
from ._src.recurrent.gru.weights import gru_weights_from_torch as gru_weights_from_torch
from ._src.recurrent.gru.weights import gru_weights_to_flax as gru_weights_to_flax
from ._src.recurrent.gru.weights import gru_weights_to_keras as gru_weights_to_keras
from ._src.recurrent.gru.weights import gru_weights_to_torch as gru_weights_to_torch
from ._src.recurrent.gru.weights import init_gru_weight as init_gru_weight
from ._src.recurrent.gru.weights import pack_gru_weights as pack_gru_weights
from ._src.recurrent.gru.weights import unpack_gru_weights as unpack_gru_weights
from ._src.recurrent.lstm.api import explain_lstm as explain_lstm
from ._src.recurrent.lstm.api import lstm as lstm
from ._src.recurrent.lstm.weights import get_num_params_in_lstm as get_num_params_in_lstm
from ._src.recurrent.lstm.weights import init_lstm_weight as init_lstm_weight
from ._src.recurrent.lstm.weights import lstm_weights_from_flax as lstm_weights_from_flax
from ._src.recurrent.lstm.weights import lstm_weights_from_keras as lstm_weights_from_keras
from ._src.recurrent.lstm.weights import lstm_weights_from_torch as lstm_weights_from_torch
from ._src.recurrent.lstm.weights import lstm_weights_to_flax as lstm_weights_to_flax
from ._src.recurrent.lstm.weights import lstm_weights_to_keras as lstm_weights_to_keras
from ._src.recurrent.lstm.weights import lstm_weights_to_torch as lstm_weights_to_torch
from ._src.recurrent.lstm.weights import pack_lstm_weights as pack_lstm_weights
from ._src.recurrent.lstm.weights import unpack_lstm_weights as unpack_lstm_weights
from ._src.recurrent.simple_rnn.api import explain_simple_rnn as explain_simple_rnn
from ._src.recurrent.simple_rnn.api import simple_rnn as simple_rnn
from ._src.recurrent.simple_rnn.weights import (
    get_num_params_in_simple_rnn as get_num_params_in_simple_rnn,
)
from ._src.recurrent.simple_rnn.weights import init_simple_rnn_weight as init_simple_rnn_weight
from ._src.recurrent.simple_rnn.weights import pack_simple_rnn_weights as pack_simple_rnn_weights
from ._src.recurrent.simple_rnn.weights import (
    simple_rnn_weights_from_flax as simple_rnn_weights_from_flax,
)
from ._src.recurrent.simple_rnn.weights import (
    simple_rnn_weights_from_keras as simple_rnn_weights_from_keras,
)
from ._src.recurrent.simple_rnn.weights import (
    simple_rnn_weights_from_torch as simple_rnn_weights_from_torch,
)
from ._src.recurrent.simple_rnn.weights import (
    simple_rnn_weights_to_flax as simple_rnn_weights_to_flax,
)
from ._src.recurrent.simple_rnn.weights import (
    simple_rnn_weights_to_keras as simple_rnn_weights_to_keras,
)
from ._src.recurrent.simple_rnn.weights import (
    simple_rnn_weights_to_torch as simple_rnn_weights_to_torch,
)
from ._src.recurrent.simple_rnn.weights import (
    unpack_simple_rnn_weights as unpack_simple_rnn_weights,
)

__version__ = "0.1.0.dev0"

# The layer modules, imported on first use: `import portable_rnn` imports neither Flax's layer
# libraries nor Keras nor Equinox, and `portable_rnn.linen` works without
# `import portable_rnn.linen`.
_LAYER_MODULES = ("equinox", "keras", "linen", "nnx")


def __getattr__(name: str):
    if name in _LAYER_MODULES:
        import importlib

        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name and not e.name.startswith(__name__):  # an extra is not installed
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}: "
                                     f"portable_rnn.{name} needs {e.name!r} ({e})") from e
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAYER_MODULES))

__all__ = [
    "Capabilities",
    "Decision",
    "FallbackError",
    "FallbackWarning",
    "capabilities",
    "dot_product_attention",
    "explain_attention",
    "explain_gru",
    "explain_lstm",
    "explain_simple_rnn",
    "get_num_params_in_gru",
    "get_num_params_in_lstm",
    "get_num_params_in_simple_rnn",
    "gru",
    "gru_weights_from_flax",
    "gru_weights_from_keras",
    "gru_weights_from_torch",
    "gru_weights_to_flax",
    "gru_weights_to_keras",
    "gru_weights_to_torch",
    "init_gru_weight",
    "init_lstm_weight",
    "init_simple_rnn_weight",
    "lstm",
    "lstm_weights_from_flax",
    "lstm_weights_from_keras",
    "lstm_weights_from_torch",
    "lstm_weights_to_flax",
    "lstm_weights_to_keras",
    "lstm_weights_to_torch",
    "pack_gru_weights",
    "pack_lstm_weights",
    "pack_simple_rnn_weights",
    "policy",
    "simple_rnn",
    "simple_rnn_weights_from_flax",
    "simple_rnn_weights_from_keras",
    "simple_rnn_weights_from_torch",
    "simple_rnn_weights_to_flax",
    "simple_rnn_weights_to_keras",
    "simple_rnn_weights_to_torch",
    "unpack_gru_weights",
    "unpack_lstm_weights",
    "unpack_simple_rnn_weights",
]

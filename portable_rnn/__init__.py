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
from ._src.recurrent.ops import OPS as _OPS

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
            if e.name and not e.name.startswith(__name__):  # a framework or its dependency
                # `keras` and `equinox` are missing extras of the same name; else Python's words
                why = (f', which is not installed: pip install "{__name__}[{name}]"'
                       if e.name == name else f" ({e})")
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}: "
                                     f"{__name__}.{name} needs {e.name!r}{why}") from e
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAYER_MODULES))

# Every registered family's functions (`portable_rnn.gru`, `explain_gru`, `init_gru_weight`,
# the converters of its peers, ...), made from the registry of cells.
_FAMILY_FUNCTIONS = {name: f for op in _OPS.values() for name, f in op.functions.items()}
globals().update(_FAMILY_FUNCTIONS)

__all__ = sorted([
    "Capabilities",
    "Decision",
    "FallbackError",
    "FallbackWarning",
    "capabilities",
    "dot_product_attention",
    "explain_attention",
    "policy",
    *_FAMILY_FUNCTIONS,
])

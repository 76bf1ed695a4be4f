"""The simple (Elman) RNN: its facts, its cell, its float64 reference and the check of its
``nonlinearity``, as the registry takes them."""

from ..cell import Folder
from . import reference
from .cell import NONLINEARITIES, SimpleRNNCell
from .family import FAMILY


def check_nonlinearity(nonlinearity):
    if nonlinearity not in NONLINEARITIES:
        raise ValueError("`nonlinearity` must be one of 'tanh', 'relu' (as PyTorch nn.RNN); got "
                         f"{nonlinearity!r}.")


FOLDER = Folder(FAMILY, SimpleRNNCell, reference.float64,
                option_checks=(("nonlinearity", check_nonlinearity),))

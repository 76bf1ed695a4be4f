"""The LSTM: its facts, its cell and its float64 reference, as the registry takes them."""

from ..cell import Folder
from . import reference
from .cell import LSTMCell
from .family import FAMILY

FOLDER = Folder(FAMILY, LSTMCell, reference.float64)

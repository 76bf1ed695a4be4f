"""The sLSTM: its facts, its cell and its float64 reference, as the registry takes them; its
weights convert from and to FlashRNN's with `flashrnn`."""

from ..cell import Folder
from . import reference
from .cell import SLSTMCell
from .family import FAMILY

FOLDER = Folder(FAMILY, SLSTMCell, reference.float64)

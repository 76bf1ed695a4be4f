"""The GRU: its facts, its cell and its float64 reference, as the registry takes them."""

from ..cell import Folder
from . import reference
from .cell import GRUCell
from .family import FAMILY

FOLDER = Folder(FAMILY, GRUCell, reference.float64)

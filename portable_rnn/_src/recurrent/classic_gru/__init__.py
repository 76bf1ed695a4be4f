"""The classic GRU (Keras' ``reset_after=False``): its facts, its cell and its float64
reference, as the registry takes them."""

from ..cell import Folder
from . import reference
from .cell import ClassicGRUCell
from .family import FAMILY

FOLDER = Folder(FAMILY, ClassicGRUCell, reference.float64)

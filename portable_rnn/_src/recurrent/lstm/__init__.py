"""The LSTM: its facts, its cell, its float64 reference and its route to JAX's cuDNN LSTM, as
the registry takes them."""

from ..cell import Folder
from . import cudnn, reference
from .cell import LSTMCell
from .family import FAMILY

FOLDER = Folder(FAMILY, LSTMCell, reference.float64, cudnn=cudnn.ROUTE)

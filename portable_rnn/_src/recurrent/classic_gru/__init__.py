"""The classic GRU (Keras' ``reset_after=False``): its facts, its cell, its float64 reference
and the check of its ``num_heads`` (one head only), as the registry takes them."""

from ...core import checks
from ..cell import Folder
from . import reference
from .cell import ClassicGRUCell
from .family import FAMILY


def check_one_head(num_heads):
    if checks.static_int("num_heads", num_heads) != 1:
        raise ValueError(
            f"`num_heads`={num_heads}: the classic GRU has no heads (its step computes its own "
            "recurrent products, the candidate's from (r * h), which a block-diagonal W_hh "
            "would not reach); pass num_heads=1, or use portable_rnn.gru (reset_after=True) "
            "with heads.")


FOLDER = Folder(FAMILY, ClassicGRUCell, reference.float64,
                option_checks=(("num_heads", check_one_head),))

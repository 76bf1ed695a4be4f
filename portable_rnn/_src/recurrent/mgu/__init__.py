"""The MGU: its facts, its cell, its float64 reference and the check of its ``reset_gate``, as
the registry takes them."""

from ...core import checks
from ..cell import Folder
from . import reference
from .cell import MGUCell
from .family import FAMILY


def check_reset_gate(reset_gate):
    checks.static_bool("reset_gate", reset_gate)


FOLDER = Folder(FAMILY, MGUCell, reference.float64,
                option_checks=(("reset_gate", check_reset_gate),))

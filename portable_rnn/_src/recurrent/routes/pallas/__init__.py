"""The ``pallas`` route: portable_rnn's Pallas TPU recurrent kernel (`route`, its decision and
wiring; `kernel`, the kernel and its backward)."""

from .route import ROUTE

__all__ = ["ROUTE"]

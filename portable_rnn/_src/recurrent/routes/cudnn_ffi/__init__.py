"""The ``cudnn_ffi`` route: portable_rnn's own cuDNN RNN call through the XLA FFI (`route`, its
decision and wiring; `call`, the call and its build; ``cudnn_rnn.cc``, the C++ handler)."""

from .route import ROUTE

__all__ = ["ROUTE"]

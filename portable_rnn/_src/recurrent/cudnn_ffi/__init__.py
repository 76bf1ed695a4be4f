"""portable_rnn's own cuDNN RNN call through the XLA FFI (the ``cudnn_ffi`` route)."""

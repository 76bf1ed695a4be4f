"""The LSTM: its facts, cell, op, weight functions and cuDNN route."""

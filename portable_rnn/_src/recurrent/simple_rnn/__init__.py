"""The simple (Elman) RNN: its facts, cell, op and weight functions."""

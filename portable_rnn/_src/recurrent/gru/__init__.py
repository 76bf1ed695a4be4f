"""The GRU: its facts, cell, op and weight functions."""

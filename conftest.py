"""Doctest collection of the package: `portable_rnn/keras.py` imports Keras, on the JAX backend
unless KERAS_BACKEND says otherwise, and is skipped where Keras is not installed."""

import importlib.util
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
collect_ignore = [] if importlib.util.find_spec("keras") else ["portable_rnn/keras.py"]

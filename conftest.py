"""Doctest collection of the package: `portable_rnn/keras.py` imports Keras, on the JAX backend
unless KERAS_BACKEND says otherwise, and `portable_rnn/equinox.py` imports Equinox; each is
skipped where its extra is not installed."""

import importlib.util
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
collect_ignore = [f"portable_rnn/{name}.py" for name in ("keras", "equinox")
                  if importlib.util.find_spec(name) is None]

# Written by `python -m portable_rnn._src.tools.stubs` from the live objects; do not edit.
# ruff: noqa: E501
"""Keras 3 layers `LSTM`, `GRU` and `SimpleRNN` (one per Keras layer that a registered family
computes) that run on portable_rnn on the JAX backend, and a `Bidirectional` wrapper that runs
both directions of one of them as one call.

Each subclasses the stock layer (``keras.layers.LSTM`` ...): the same constructor, weights,
config and saved files, so swapping the import is enough. On the JAX backend the recurrence runs
as one call of the family's function (`portable_rnn.lstm`, ...; the family whose
`Family.keras_config` the layer's configuration matches) instead of Keras' step loop; on other
backends, and for settings portable_rnn does not compute, the stock implementation runs.
``layer.decision`` holds the last call's `Decision`: its ``implementation`` is ``"keras"`` when
the stock loop ran, with the reasons under ``rejected["portable_rnn"]``.

Importing this module imports Keras (``import portable_rnn`` does not). Keras chooses its
backend once, when it is first imported; if that has not happened yet, ``KERAS_BACKEND`` is unset
and Keras' ``keras.json`` names no backend other than Keras' own default (TensorFlow, which
Keras writes there itself on its first import), this module sets ``KERAS_BACKEND=jax``: the only
backend these layers accelerate, and one that needs no TensorFlow.
"""

import keras

from portable_rnn._src.core.dispatch import Decision

class Bidirectional(keras.layers.Bidirectional):
    """``keras.layers.Bidirectional`` that runs a `portable_rnn.keras` layer's two directions
    as one bidirectional portable_rnn call.

    The constructor, weights, config and saved files are those of the stock wrapper. On the JAX
    backend, when both directions are `portable_rnn.keras` layers of one kind with the same
    settings, one ``bidirectional=True`` call runs both (one loop for both directions, and cuDNN's
    bidirectional LSTM on a GPU when it can serve the call), masks of any pattern included.
    Otherwise (dropout or recurrent dropout in training, whose masks Keras draws per direction;
    ``stateful``; the directions' settings differ; the stock loop's settings) the stock wrapper
    calls the two layers. ``layer.decision`` says which ran and why.
    """

    @property
    def decision(self) -> Decision | None:
        """The `Decision` of the last call traced on the JAX backend (None before the first)."""

class _PortableRNN:
    """Routes a Keras recurrent layer's `inner_loop` through portable_rnn on the JAX backend.

    A subclass (`_layer` makes one per Keras layer) sets ``_families``: the registered families
    that compute that Keras layer, each for the configuration its `Family.keras_config` states.
    """

    @property
    def decision(self) -> Decision | None:
        """The `Decision` of the last call traced on the JAX backend (None before the first)."""

class GRU(_PortableRNN, keras.layers.GRU):
    """``keras.layers.GRU``, computed by `portable_rnn.gru`, `portable_rnn.classic_gru` on the JAX backend.

    The constructor, weights (``get_weights``/``set_weights``), config and saved ``.keras``
    files are those of ``keras.layers.GRU``. On the JAX backend one portable_rnn call runs
    the whole sequence (the fused scan path, or a fused route where it serves the call and
    ``use_cudnn`` allows it). Which function runs follows the layer's configuration: ``reset_after=True`` is `portable_rnn.gru`; ``reset_after=False`` is `portable_rnn.classic_gru`; a configuration no family claims runs the stock loop. Masks of any pattern (a stable sort puts each row's
    valid steps first, and they run as ``seq_lengths``), ``go_backwards``, ``stateful``,
    ``return_sequences``/``return_state``, ``dropout`` and ``recurrent_dropout`` (Keras' masks,
    one per sequence or one per gate, the same at every step), ``use_bias=False`` and
    mixed-precision policies (16-bit compute with float32 accumulation and a float32 state) are
    supported; ``unroll`` is accepted and ignored. Other activations than those computed
    (gru: ``activation`` tanh, ``recurrent_activation`` sigmoid; classic_gru: ``activation`` tanh, ``recurrent_activation`` sigmoid) run the stock Keras loop; ``layer.decision`` says which ran and why.
    """

class LSTM(_PortableRNN, keras.layers.LSTM):
    """``keras.layers.LSTM``, computed by `portable_rnn.lstm` on the JAX backend.

    The constructor, weights (``get_weights``/``set_weights``), config and saved ``.keras``
    files are those of ``keras.layers.LSTM``. On the JAX backend one portable_rnn call runs
    the whole sequence (the fused scan path, or a fused route where it serves the call and
    ``use_cudnn`` allows it). Masks of any pattern (a stable sort puts each row's
    valid steps first, and they run as ``seq_lengths``), ``go_backwards``, ``stateful``,
    ``return_sequences``/``return_state``, ``dropout`` and ``recurrent_dropout`` (Keras' masks,
    one per sequence or one per gate, the same at every step), ``use_bias=False`` and
    mixed-precision policies (16-bit compute with float32 accumulation and a float32 state) are
    supported; ``unroll`` is accepted and ignored. Other activations than those computed
    (lstm: ``activation`` tanh, ``recurrent_activation`` sigmoid) run the stock Keras loop; ``layer.decision`` says which ran and why.
    """

class SimpleRNN(_PortableRNN, keras.layers.SimpleRNN):
    """``keras.layers.SimpleRNN``, computed by `portable_rnn.simple_rnn` on the JAX backend.

    The constructor, weights (``get_weights``/``set_weights``), config and saved ``.keras``
    files are those of ``keras.layers.SimpleRNN``. On the JAX backend one portable_rnn call runs
    the whole sequence (the fused scan path, or a fused route where it serves the call and
    ``use_cudnn`` allows it). Masks of any pattern (a stable sort puts each row's
    valid steps first, and they run as ``seq_lengths``), ``go_backwards``, ``stateful``,
    ``return_sequences``/``return_state``, ``dropout`` and ``recurrent_dropout`` (Keras' masks,
    one per sequence or one per gate, the same at every step), ``use_bias=False`` and
    mixed-precision policies (16-bit compute with float32 accumulation and a float32 state) are
    supported; ``unroll`` is accepted and ignored. Other activations than those computed
    (simple_rnn: ``activation`` tanh or relu) run the stock Keras loop; ``layer.decision`` says which ran and why.
    """

__all__ = ["Bidirectional", "GRU", "LSTM", "SimpleRNN"]

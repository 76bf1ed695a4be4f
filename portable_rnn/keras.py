"""Keras 3 layers `LSTM`, `GRU` and `SimpleRNN` that run on portable_rnn on the JAX backend.

Each subclasses the stock layer (``keras.layers.LSTM`` ...): the same constructor, weights,
config and saved files, so swapping the import is enough. On the JAX backend the recurrence runs
as one `portable_rnn.lstm` / `gru` / `simple_rnn` call (cuDNN for the LSTM when it can serve the
call, else the fused scan path with its hand-written backward pass) instead of Keras' step loop;
on other backends, and for settings portable_rnn does not compute, the stock implementation runs.
``layer.decision`` holds the last call's `Decision`: its ``implementation`` is ``"keras"`` when
the stock loop ran, with the reasons under ``rejected["portable_rnn"]``.

Importing this module imports Keras (``import portable_rnn`` does not).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import keras

from . import _dispatch
from ._dispatch import Decision
from ._keras_weights import _direction, _permute_gates
from ._lstm import explain_lstm, lstm
from ._recurrent import explain_gru, explain_simple_rnn, gru, simple_rnn
from ._weights import pack

_ACTIVATIONS = {
    "tanh": (keras.activations.tanh, keras.ops.tanh, jnp.tanh),
    "sigmoid": (keras.activations.sigmoid, keras.ops.sigmoid, jax.nn.sigmoid),
    "relu": (keras.activations.relu, keras.ops.relu, jax.nn.relu),
}
_USE_CUDNN = {"auto": None, True: "cudnn", False: "scan"}


def _activation_name(fn) -> str | None:
    return next((name for name, fns in _ACTIVATIONS.items() if fn in fns), None)


def _described(fn) -> str:
    return getattr(fn, "__name__", repr(fn))


class _PortableRNN:
    """Routes a Keras recurrent layer's `inner_loop` through portable_rnn on the JAX backend."""

    _family: str
    _activations: dict[str, tuple[str, ...]]  # cell attribute -> activations we compute

    @property
    def decision(self) -> Decision | None:
        """The `Decision` of the last call traced on the JAX backend (None before the first)."""
        return getattr(self, "_portable_decision", None)

    def _stock_reasons(self, training) -> list[str]:
        """Why portable_rnn cannot compute this call exactly as Keras does (empty: it can)."""
        cell, reasons = self.cell, []
        for attr, names in self._activations.items():
            fn = getattr(cell, attr)
            if _activation_name(fn) not in names:
                reasons.append(f"{attr}={_described(fn)}: portable_rnn's {self._family} computes "
                               f"{' or '.join(names)} only")
        if getattr(cell, "reset_after", True) is False:
            reasons.append("reset_after=False applies the reset gate before the recurrent kernel "
                           "(another formula than PyTorch's and cuDNN's GRU)")
        if (self._family == "gru" and training and 0.0 < cell.recurrent_dropout < 1.0
                and getattr(cell, "dropout_mask_count", None) is None):
            reasons.append(f"recurrent_dropout={cell.recurrent_dropout} in training: this Keras "
                           "version's GRU multiplies the state by the mask in the update-gate "
                           "blend too (z * masked h), not only in the recurrent product")
        return reasons

    def _input_dropout_mask(self, sequences):
        return self.cell.get_dropout_mask(sequences[:, 0, :])

    def _gate_masks(self, masks):
        """Keras' per-gate masks (implementation=1), stacked in portable_rnn's gate order."""
        return _permute_gates(jnp.stack([jnp.asarray(m) for m in masks]), self._family)

    def _flat_weights(self, input_copies=1):
        """The flat weights; with `input_copies` K > 1, gate block g of ``W_ih`` reads the
        inputs' g-th copy (a block-diagonal (G*H, K*I) ``W_ih``, K = G)."""
        cell = self.cell
        arrays = [cell.kernel, cell.recurrent_kernel] + ([cell.bias] if cell.use_bias else [])
        arrays = [jnp.asarray(a.value) for a in arrays]
        w_ih, w_hh, b_ih, b_hh = _direction(arrays, f"`{self.name}` weights", self._family)
        inputs = arrays[0].shape[0]
        if input_copies > 1:
            blocks = w_ih.reshape(input_copies, cell.units, inputs)
            w_ih = jnp.einsum("ghi,gk->ghki", blocks, jnp.eye(input_copies, dtype=w_ih.dtype))
            w_ih = w_ih.reshape(input_copies * cell.units, input_copies * inputs)
        groups = {"W_ih": [w_ih], "W_hh": [w_hh], "b_ih": [b_ih], "b_hh": [b_hh]}
        return pack(groups, input_copies * inputs, cell.units, 1, False, self._family)

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if keras.backend.backend() != "jax":
            return super().inner_loop(sequences, initial_state, mask, training=training)
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        reasons = self._stock_reasons(training)
        if reasons:
            self._portable_decision = Decision(
                self._family, "keras", {"portable_rnn": tuple(reasons)},
                (f"the stock keras.layers.{type(self).__name__} step loop",), None,
                _dispatch.resolve_capabilities(None))
            _dispatch.report_fallback(self._portable_decision)
            return super().inner_loop(sequences, initial_state, mask, training=training)
        return self._portable_loop(sequences, list(initial_state), mask, training)

    def _portable_loop(self, x, states, mask, training):
        cell, copies, recurrent_mask, notes = self.cell, 1, None, []
        if training and 0.0 < cell.dropout < 1.0:  # one mask for every step, as Keras' cell
            masks = self._input_dropout_mask(x)
            if isinstance(masks, (list, tuple)):  # one per gate: a copy of x per gate
                masks = self._gate_masks(masks)
                copies = masks.shape[0]
                x = jnp.concatenate([x * m[:, None, :] for m in masks], axis=-1)
                notes.append(f"dropout with one input mask per gate: {copies} masked copies of "
                             "the input, read by a block-diagonal input kernel")
            else:
                x = x * masks[:, None, :]
        if training and 0.0 < cell.recurrent_dropout < 1.0:
            masks = cell.get_recurrent_dropout_mask(states[0])
            per_gate = isinstance(masks, (list, tuple))
            recurrent_mask = (self._gate_masks(masks) if per_gate else jnp.asarray(masks))[None]
        if self.go_backwards:
            x = jnp.flip(x, axis=1)
            mask = None if mask is None else jnp.flip(mask, axis=1)
        lengths = None
        if mask is not None:
            # A masked step keeps the state, so the state after step t is the state after the
            # valid steps up to t: gather the valid steps to the front (a stable sort per row),
            # run them with seq_lengths, then give step t the output after count(t) valid steps.
            # Exact for every mask (right-padded or not), and traceable.
            mask = jnp.asarray(mask).astype(bool)
            order = jnp.argsort(~mask, axis=1, stable=True)
            x = jnp.take_along_axis(x, order[..., None], axis=1)
            lengths = jnp.sum(mask, axis=1, dtype=jnp.int32)
        args = (x, *(s[None] for s in states), self._flat_weights(copies), lengths, x.shape[-1],
                cell.units, 1, 0.0, False)
        kwargs = {"implementation": _USE_CUDNN.get(getattr(self, "use_cudnn", "auto")),
                  "recurrent_dropout_mask": recurrent_mask}
        if self._family == "simple_rnn":
            kwargs["nonlinearity"] = _activation_name(cell.activation)
        explain, run = {"lstm": (explain_lstm, lstm), "gru": (explain_gru, gru),
                        "simple_rnn": (explain_simple_rnn, simple_rnn)}[self._family]
        decision = explain(*args, **kwargs)
        if self.unroll:
            notes.append("unroll=True ignored: one fused loop instead")
        for note in notes:
            decision = _noted(decision, note)
        self._portable_decision = decision
        y, *new_states = run(*args, **kwargs)
        h_0 = states[0]
        if mask is not None:
            count = jnp.cumsum(mask, axis=1, dtype=jnp.int32)
            y_at = jnp.take_along_axis(y, jnp.maximum(count - 1, 0)[..., None], axis=1)
            # A masked step repeats the last output (h_0 before the first valid step), or is
            # zero with zero_output_for_mask.
            y = jnp.where((count > 0)[..., None], y_at, h_0[:, None, :].astype(y.dtype))
            if self.zero_output_for_mask:
                y = jnp.where(mask[..., None], y, jnp.zeros((), y.dtype))
        return y[:, -1], y, [s[0] for s in new_states]


def _noted(decision: Decision, note: str) -> Decision:
    return dataclasses.replace(decision, notes=decision.notes + (note,))


_DOC = """{stock}, computed by `portable_rnn.{fn}` on the JAX backend.

    The constructor, weights (``get_weights``/``set_weights``), config and saved ``.keras``
    files are those of ``keras.layers.{name}``. On the JAX backend one `portable_rnn.{fn}` call
    runs the whole sequence{extra}; masks of any pattern (a stable sort puts each row's valid
    steps first, and they run as ``seq_lengths``), ``go_backwards``, ``stateful``,
    ``return_sequences``/``return_state``, ``dropout`` and ``recurrent_dropout`` (Keras'
    masks, one per sequence or one per gate, the same at every step),
    ``use_bias=False`` and mixed-precision policies (16-bit compute with float32 accumulation and
    a float32 {state}) are supported; ``unroll`` is accepted and ignored. {stock_runs} run the
    stock Keras loop; ``layer.decision`` says which ran and why.
    """


@keras.saving.register_keras_serializable(package="portable_rnn")
class LSTM(_PortableRNN, keras.layers.LSTM):
    _family = "lstm"
    _activations = {"activation": ("tanh",), "recurrent_activation": ("sigmoid",)}
    __doc__ = _DOC.format(
        stock="``keras.layers.LSTM``", fn="lstm", name="LSTM",
        extra=" (cuDNN on a GPU for float32, masks included; otherwise the fused scan path)",
        state="cell state",
        stock_runs="Other activations")


@keras.saving.register_keras_serializable(package="portable_rnn")
class GRU(_PortableRNN, keras.layers.GRU):
    _family = "gru"
    _activations = {"activation": ("tanh",), "recurrent_activation": ("sigmoid",)}
    __doc__ = _DOC.format(
        stock="``keras.layers.GRU``", fn="gru", name="GRU",
        extra=" (the fused scan path: JAX has no cuDNN GRU)", state="hidden state",
        stock_runs=("``reset_after=False`` (another formula), other activations, and "
                    "``recurrent_dropout`` in training on Keras versions whose GRU also masks "
                    "the state in the update-gate blend"))


@keras.saving.register_keras_serializable(package="portable_rnn")
class SimpleRNN(_PortableRNN, keras.layers.SimpleRNN):
    _family = "simple_rnn"
    _activations = {"activation": ("tanh", "relu")}
    __doc__ = _DOC.format(
        stock="``keras.layers.SimpleRNN``", fn="simple_rnn", name="SimpleRNN",
        extra=" (``activation`` tanh or relu; the fused scan path)", state="hidden state",
        stock_runs="Other activations")


__all__ = ["GRU", "LSTM", "SimpleRNN"]

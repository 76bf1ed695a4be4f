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

from __future__ import annotations

import dataclasses
import json
import os
import sys

import jax
import jax.numpy as jnp

from ._src.core import dispatch as _dispatch
from ._src.core.dispatch import Decision
from ._src.core.extras import missing_extra
from ._src.layers import docs as _docs
from ._src.recurrent.cell import Family
from ._src.recurrent.keras_weights import direction, permute_gates
from ._src.recurrent.layout import pack
from ._src.recurrent.ops import OPS


def _default_to_jax() -> None:
    """Sets ``KERAS_BACKEND=jax`` unless Keras is imported or its backend was chosen."""
    if "keras" in sys.modules or os.environ.get("KERAS_BACKEND"):
        return
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            configured = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        configured = None
    if configured in (None, "tensorflow"):
        os.environ["KERAS_BACKEND"] = "jax"


_default_to_jax()
try:
    import keras  # noqa: E402 - after the backend is chosen
except ModuleNotFoundError as e:  # the `keras` extra is not installed
    raise missing_extra(e, "keras", "Keras")  # noqa: B904 - its cause is set

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


def _configured(layer, key: str):
    """The layer's configuration value `key` (its cell's, where the cell holds it)."""
    return getattr(layer.cell, key, getattr(layer, key, None))


class _PortableRNN:
    """Routes a Keras recurrent layer's `inner_loop` through portable_rnn on the JAX backend.

    A subclass (`_layer` makes one per Keras layer) sets ``_families``: the registered families
    that compute that Keras layer, each for the configuration its `Family.keras_config` states.
    """

    _families: tuple[Family, ...] = ()

    def _facts(self) -> Family | None:
        """The family that computes this layer's configuration (None: none does)."""
        return next((f for f in self._families
                     if all(_configured(self, k) == v for k, v in f.keras_config.items())), None)

    @property
    def _family(self) -> str:
        """The op this layer runs, or the first family's where no family claims the layer's
        configuration (its decisions then name the stock loop)."""
        return (self._facts() or self._families[0]).name

    @property
    def decision(self) -> Decision | None:
        """The `Decision` of the last call traced on the JAX backend (None before the first)."""
        return getattr(self, "_portable_decision", None)

    def _stock_reasons(self, training) -> list[str]:
        """Why portable_rnn cannot compute this call exactly as Keras does (empty: it can)."""
        cell, reasons, facts = self.cell, [], self._facts()
        if facts is None:
            keys = sorted({k for f in self._families for k in f.keras_config})
            got = ", ".join(f"{k}={_configured(self, k)!r}" for k in keys)
            claimed = "; ".join(
                f"{f.name}: " + ", ".join(f"{k}={v!r}" for k, v in f.keras_config.items())
                for f in self._families)
            return [f"{got}: no portable_rnn family computes keras.layers."
                    f"{self._families[0].keras_layer} so configured (they compute {claimed})"]
        for attr, names in facts.keras_activations.items():
            fn = getattr(cell, attr)
            if _activation_name(fn) not in names:
                reasons.append(f"{attr}={_described(fn)}: portable_rnn's {self._family} computes "
                               f"{' or '.join(names)} only")
        if (facts.keras_state_mask and training and 0.0 < cell.recurrent_dropout < 1.0
                and getattr(cell, "dropout_mask_count", None) is None):
            reasons.append(f"recurrent_dropout={cell.recurrent_dropout} in training: this Keras "
                           f"version's {facts.keras_layer} multiplies the state by the mask "
                           f"{facts.keras_state_mask}, not only in the recurrent product")
        return reasons

    def _input_dropout_mask(self, sequences):
        return self.cell.get_dropout_mask(sequences[:, 0, :])

    def _gate_masks(self, masks):
        """Keras' per-gate masks (implementation=1), stacked in portable_rnn's gate order."""
        return permute_gates(jnp.stack([jnp.asarray(m) for m in masks]), self._facts())

    def _direction_weights(self, input_copies=1):
        """This layer's ``W_ih``, ``W_hh``, ``b_ih``, ``b_hh`` in portable_rnn's layout; with
        `input_copies` K > 1, gate block g of ``W_ih`` reads the inputs' g-th copy (a
        block-diagonal (G*H, K*I) ``W_ih``, K = G)."""
        cell = self.cell
        arrays = [cell.kernel, cell.recurrent_kernel] + ([cell.bias] if cell.use_bias else [])
        arrays = [jnp.asarray(a.value) for a in arrays]
        w_ih, w_hh, b_ih, b_hh = direction(arrays, f"`{self.name}` weights", self._facts())
        inputs = arrays[0].shape[0]
        if input_copies > 1:
            blocks = w_ih.reshape(input_copies, cell.units, inputs)
            w_ih = jnp.einsum("ghi,gk->ghki", blocks, jnp.eye(input_copies, dtype=w_ih.dtype))
            w_ih = w_ih.reshape(input_copies * cell.units, input_copies * inputs)
        return {"W_ih": w_ih, "W_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh}

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
        return self._portable_loop(_promoted(sequences, self.cell.compute_dtype),
                                   list(initial_state), mask, training)

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
        x, mask, lengths = _valid_steps_first(x, mask)
        y, new_states = self._run([self], x, [states], lengths, recurrent_mask, copies, notes)
        if mask is not None:
            y = _at_each_step(y, mask, lengths, states[0], self.zero_output_for_mask)
        return y[:, -1], y, [s[0] for s in new_states]

    def _run(self, layers, x, states, lengths, recurrent_mask=None, copies=1, notes=()):
        """One portable_rnn call over `layers` (one, or forward and backward) and the states of
        each; records its `Decision` on `self`."""
        cell = self.cell
        flat = [layer._direction_weights(copies) for layer in layers]
        groups = {name: [w[name] for w in flat] for name in flat[0]}
        bidirectional = len(layers) == 2
        op = OPS[self._family]
        weights = pack(groups, x.shape[-1], cell.units, 1, bidirectional, op.family)
        args = (x, *(jnp.stack(s) for s in zip(*states)), weights, lengths, x.shape[-1],
                cell.units, 1, 0.0, bidirectional)
        kwargs = {"implementation": _USE_CUDNN.get(getattr(self, "use_cudnn", "auto")),
                  "recurrent_dropout_mask": recurrent_mask}
        if "nonlinearity" in op.family.call_options:
            kwargs["nonlinearity"] = _activation_name(cell.activation)
        decision = op.explain(*args, **kwargs)
        if self.unroll:
            notes = [*notes, "unroll=True ignored: one fused loop instead"]
        for note in notes:
            decision = _noted(decision, note)
        self._portable_decision = decision
        y, *new_states = op.run(*args, **kwargs)
        return y, new_states


def _promoted(x, dtype):
    """`x` as an array; integer and bool inputs in the compute `dtype`, as the stock cells'
    first product with the kernel promotes them (Keras' own layers leave them as they are)."""
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(dtype)


def _noted(decision: Decision, note: str) -> Decision:
    return dataclasses.replace(decision, notes=decision.notes + (note,))


def _valid_steps_first(x, mask):
    """`x` with each row's valid steps moved to the front (a stable sort), the boolean mask and
    the number of valid steps per row (None, None without a mask).

    A masked step keeps the state, so the state after step t is the state after the valid steps
    up to t: the valid steps run as ``seq_lengths`` and `_at_each_step` gives each step its
    output. Exact for every mask (right-padded or not), and traceable.
    """
    if mask is None:
        return x, None, None
    mask = jnp.asarray(mask).astype(bool)
    order = jnp.argsort(~mask, axis=1, stable=True)
    return (jnp.take_along_axis(x, order[..., None], axis=1), mask,
            jnp.sum(mask, axis=1, dtype=jnp.int32))


def _at_each_step(y, mask, lengths, h_0, zero_output, reverse=False):
    """The outputs over the valid steps (`_valid_steps_first`) placed at each original step.

    Forward, step t gets the output after the valid steps up to t; `reverse` (a backward
    direction, back in the original time order), the output after the valid steps from t on.
    A step with no such valid step gets `h_0`; a masked step gets zeros with `zero_output`.
    """
    valid = mask.astype(jnp.int32)
    count = jnp.cumsum(valid, axis=1)
    index, has = ((count - valid, count - valid < lengths[:, None]) if reverse
                  else (count - 1, count > 0))
    index = jnp.clip(index, 0, y.shape[1] - 1)
    y = jnp.where(has[..., None], jnp.take_along_axis(y, index[..., None], axis=1),
                  h_0[:, None, :].astype(y.dtype))
    if zero_output:
        y = jnp.where(mask[..., None], y, jnp.zeros((), y.dtype))
    return y


def _merge(y, y_rev, mode):
    if mode == "concat":
        return jnp.concatenate([y, y_rev], axis=-1)
    if mode == "sum":
        return y + y_rev
    if mode == "ave":
        return (y + y_rev) / 2
    if mode == "mul":
        return y * y_rev
    return (y, y_rev)  # Keras checks merge_mode in the constructor


@keras.saving.register_keras_serializable(package="portable_rnn")
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
        return getattr(self, "_portable_decision", None)

    def _two_calls_reasons(self, training) -> list[str]:
        """Why the directions cannot run as one call (empty: they can)."""
        fwd, bwd = self.forward_layer, self.backward_layer
        if not (isinstance(fwd, _PortableRNN) and type(fwd) is type(bwd)):
            return [f"the directions are {type(fwd).__name__} and {type(bwd).__name__}, not "
                    "two portable_rnn.keras layers of one kind"]
        reasons = fwd._stock_reasons(training) + bwd._stock_reasons(training)
        configured = sorted({k for f in fwd._families for k in f.keras_config})
        for attr in ("units", "use_bias", *configured, "use_cudnn", "unroll"):
            if getattr(fwd, attr, None) != getattr(bwd, attr, None):
                reasons.append(f"the directions' {attr} differ")
        facts = fwd._facts()
        for attr in facts.keras_activations if facts else ():
            if _activation_name(getattr(fwd.cell, attr)) != _activation_name(
                    getattr(bwd.cell, attr)):
                reasons.append(f"the directions' {attr} differ")
        if self.stateful:
            reasons.append("stateful=True: each direction keeps its own state variables")
        if training and any(0.0 < getattr(layer.cell, rate) < 1.0
                            for layer in (fwd, bwd) for rate in ("dropout", "recurrent_dropout")):
            reasons.append("dropout in training: Keras draws each direction's masks separately")
        return reasons

    def call(self, sequences, initial_state=None, mask=None, training=None):
        if keras.backend.backend() != "jax":
            return super().call(sequences, initial_state=initial_state, mask=mask,
                                training=training)
        reasons = self._two_calls_reasons(training)
        if reasons:
            output = super().call(sequences, initial_state=initial_state, mask=mask,
                                  training=training)
            decision = getattr(self.forward_layer, "decision", None)
            self._portable_decision = decision and _noted(
                decision, "the directions ran as two calls: " + "; ".join(reasons))
            return output
        fwd, bwd = self.forward_layer, self.backward_layer
        dtype = fwd.cell.compute_dtype
        if initial_state is None:
            batch = jnp.shape(sequences)[0]
            states = [fwd.get_initial_state(batch), bwd.get_initial_state(batch)]
        else:
            half = len(initial_state) // 2
            states = [initial_state[:half], initial_state[half:]]
        states = [[jnp.asarray(s, dtype) for s in direction] for direction in states]
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        x, mask, lengths = _valid_steps_first(_promoted(sequences, dtype), mask)
        y, new_states = fwd._run([fwd, bwd], x, states, lengths,
                                 notes=["both directions in one bidirectional call"])
        self._portable_decision = fwd.decision
        y, y_rev = y[..., :fwd.cell.units], y[..., fwd.cell.units:]
        if mask is not None:
            zero = fwd.zero_output_for_mask  # the stock wrapper sets it to return_sequences
            y = _at_each_step(y, mask, lengths, states[0][0], zero)
            y_rev = _at_each_step(y_rev, mask, lengths, states[1][0], zero, reverse=True)
        if not self.return_sequences:
            y, y_rev = y[:, -1], y_rev[:, 0]
        output = _merge(y.astype(self.compute_dtype), y_rev.astype(self.compute_dtype),
                        self.merge_mode)
        if not self.return_state:
            return output
        states = tuple(s[d].astype(dtype) for d in (0, 1) for s in new_states)
        return (*output, *states) if self.merge_mode is None else (output, *states)


def _layer(name: str, families: tuple[Family, ...]) -> type:
    """The portable_rnn subclass of ``keras.layers.<name>``, computed by `families`."""
    namespace = {"__module__": __name__, "__qualname__": name, "_families": families,
                 "__doc__": _docs.keras_doc(name, families)}
    return type(name, (_PortableRNN, getattr(keras.layers, name)), namespace)


def _by_keras_layer() -> dict[str, tuple[Family, ...]]:
    """The registered families of each Keras layer, in the registry's order."""
    out: dict[str, tuple[Family, ...]] = {}
    for op in OPS.values():
        if op.family.keras_layer:
            out[op.family.keras_layer] = out.get(op.family.keras_layer, ()) + (op.family,)
    return out


_LAYERS = {name: keras.saving.register_keras_serializable(package="portable_rnn")(
    _layer(name, families)) for name, families in _by_keras_layer().items()}
globals().update(_LAYERS)

__all__ = ["Bidirectional"]
__all__ += sorted(_LAYERS)

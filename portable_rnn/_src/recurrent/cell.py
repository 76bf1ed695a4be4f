"""What a recurrent cell is to the rest of the package: the cell protocol the scan driver calls,
the `Family` that holds every per-family fact, and the helpers cells share.

The cell protocol (a frozen, hashable dataclass; ``D`` directions, ``G`` gates) has a forward
part, which every cell provides, and an optional backward part.

The forward part:

- ``family``: the cell's `Family` (its weight layout's gate count and names, among others).
- ``project_in_loop(batch, dtype)``: the stated rule for whether, on CPUs, the input projection
  runs per step inside the loop, where no measured grid ranks the scan route's two variants
  (`api.project_in_loop`).
- ``state_dtypes(dtype, acc)``: the dtype of each state component in the loop.
- ``prepare(weights, dtype, acc, mm_dtype)``: from one pseudo-layer's PyTorch-layout arrays, the
  input kernel (in, G*H), the recurrent kernel (S, G*H) and a pytree of the cell's other
  parameters (biases, a projection); differentiable, outside the loop. With heads (`layout`:
  ``W_hh`` (NH, G*DH, DH)), the recurrent kernel is (NH, DH, G*DH) (`recurrent_kernel` makes
  either), and the driver's ``zh`` is still (B, G*H), each head's gate blocks in place.
- ``step(zx, zh, state, params, mm)``: ``zx`` (B, G*H) this step's input projection, ``zh`` the
  recurrent product, both in the accumulation dtype and without biases; returns the new state
  (a tuple; component 0 is the output) and an ``aux`` tuple kept for the backward step (``()``
  for a cell without one).
- ``own_products`` (optional, False when absent): True for a cell whose step computes its own
  recurrent products, because a product reads a value the step computes first (the classic
  GRU's candidate reads ``(r * h) U_h``). The driver then does not multiply the state before
  the step, and hands ``step`` as ``zh`` a callable (`driver.RecurrentProducts`): ``zh(v, first,
  last)`` is ``v`` (B, S) times the recurrent kernel's gate blocks ``first`` to ``last - 1``,
  in the accumulation dtype, the recurrent dropout mask of those blocks applied to ``v``. Such a
  cell has no backward part (the driver's backward loop reads the gradient of one product of
  the state); JAX differentiates its step.

The backward part (all of it or none; `hand_written_backward` tells which; `ForwardOnly` hides
it). Without it, the driver lets JAX differentiate the forward loop (`driver.rnn_layer`): the same
lengths, recurrent dropout, dtypes, directions and loop options, with JAX saving each step's
residuals and accumulating the weight gradients step by step. With it, the driver's own
backward loop propagates only the recurrent gradient and computes the weight gradients as GEMMs
after the loop (faster, and less memory where ``dz_inplace`` applies); each such cell is tested
against the autodiff path (``tests/test_autodiff_backward.py``).

- ``shared_dz``: True when the gradients of the input projection and of the recurrent product are
  the same array (the driver then saves one of them).
- ``dzh_pieces(dzx, emits)`` (only where ``shared_dz`` is False): the recurrent product's gradient
  as pieces along its last axis, from the input projection's and the emitted values, so the
  driver never stores it per step (the GRU's is ``dzx``'s r and z blocks and its emitted
  ``dn * r``).
- ``dz_inplace``: the index of a component of ``saved`` that the backward step reads only to
  compute ``dzx``, of ``dzx``'s shape (the LSTM's and the GRU's ``q``), or None: the backward
  loop then writes each step's ``dzx`` over that step's slot, and the stacked ``dzx`` takes no
  memory of its own.
- ``saved(prev, new, aux)``: from the whole sequences of previous states, new states and aux,
  what the backward step reads per step.
- ``step_bwd(saved, dstate, params, mm, write)``: from the gradient of the new state, returns
  ``(dzx, dzh, direct, emit)``: the gradients of the input projection and of the recurrent
  product, the gradient that reaches each previous state component other than through ``zh``
  (None for none), and per-step values for `param_grads` (and `dzh_pieces`). The step computes
  ``dzx`` first and hands it to ``write``, which returns it as the rest of the step must read it
  (zero past each length, and read back from its slot where it is written in place): with every
  other use of ``saved[dz_inplace]`` before the write, XLA updates the buffer in place.
- ``param_grads(dzx, dzh, emits, saved, params, mm)``: the gradient of ``params`` from the whole
  sequences (after the loop); ``saved`` lacks its ``dz_inplace`` component (None in its place).

``mm(a, b, contract=..., out_sharding=...)`` is the driver's matmul at the call's precision and
accumulation dtype.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class Family:
    """Every fact about one cell that code outside its folder reads: the weight layout, the
    names its peers give it, the converters' maps and the layers' options. One per cell, in its
    folder's ``family.py``; registered in `families`.

    A peer field is None where that peer has no such cell (no PyTorch module, no Keras layer,
    no cuDNN mode); code reading it says so (`peer`) instead of failing on a None."""

    name: str  # "lstm": the op, and the stem of its weight functions' names
    gates: int  # G: gate blocks per weight matrix and bias
    gate_names: str  # the gate blocks in order, "i, f, g, o"
    states: tuple[str, ...]  # the initial states' argument names, output state first
    article: str  # "an": for "an LSTMCell" in messages
    torch_module: str | None  # "nn.LSTM"; None: PyTorch has no such module
    keras_layer: str | None  # "LSTM": the Keras and Flax/NNX layer classes' name; None: none
    keras_order: tuple[int, ...]  # Keras' gate block k is our gate keras_order[k] (self-inverse)
    keras_bias_rows: int  # 2: Keras keeps input and recurrent biases apart (the GRU), 1: summed
    flax_cells: str | None  # the Flax cells whose parameters convert, "LSTMCell/OptimizedLSTMCell"
    flax_cell: str | None  # the Flax cell the converters write for, "nn.OptimizedLSTMCell"
    flax_dense: tuple[tuple[str, str], ...]  # per gate, Flax's Dense names (input, hidden side)
    flax_biased: frozenset[str]  # the Flax Dense layers that have a bias
    layer_options: Mapping[str, Any]  # the layers' keyword options beyond the shared ones
    call_options: tuple[str, ...]  # those options the functional call takes as keywords
    cudnn_name: str | None  # how cuDNN's RNN modes name it: "LSTM", "GRU", "RNN"; None: none
    wide_state: str  # the state kept in float32 for 16-bit inputs: "cell state"
    projection: bool = False  # PyTorch's proj_size (W_hr)
    # The cudnnRNNMode_t of the family's cells: an int, or (the cell's attribute, the mode per
    # its value) where the mode depends on an option (the simple RNN's nonlinearity); None:
    # cuDNN has no such cell (the cudnn_ffi route rejects it).
    cudnn_mode: int | tuple[str, Mapping[str, int]] | None = None
    # The gate block whose recurrent bias acts inside another gate's product (the GRU's n, whose
    # ``W_hn h + b_hn`` the reset gate scales), so that it cannot be summed into the input
    # bias: single-step cells with fewer biases keep it apart (Equinox's ``bias_n``). None:
    # every recurrent bias sums into the input bias.
    inner_bias_gate: int | None = None
    # Where Keras' layer, in versions whose cells lack ``dropout_mask_count``, multiplies the
    # state by the recurrent dropout mask besides the recurrent product (the GRU's "in the
    # update-gate blend too (z * masked h)"): portable_rnn cannot compute such a training call
    # as Keras does. None: only in the recurrent product.
    keras_state_mask: str | None = None
    # The `policy` options of the family's routes: name -> values, the default first (the LSTM's
    # ``lstm_low_precision``: how its jaxlib cuDNN route serves 16-bit calls); registered in
    # `dispatch` with the family.
    policy_options: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # The public layer classes' name ("LSTM", "SimpleRNN") and the functions' docstrings: what
    # the cell is ("an Elman RNN") and its equations, as the op's docstring states them.
    title: str = ""
    long_name: str = ""
    formula: str = ""
    # Equinox's single-step cell of the same equations ("GRUCell": the Equinox layer converts
    # from and to stacks of ``eqx.nn.GRUCell``); None: Equinox has none.
    eqx_cell: str | None = None
    # The Keras layer's configuration that is this family: a Keras `keras_layer` whose config
    # has these values is computed by this family's op (the GRU: ``{"reset_after": True}``). A
    # layer whose config no family claims runs Keras' own loop, with the reason.
    keras_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # What the weight converters' docstrings add about where the peer keeps the biases and
    # what it does not record (one paragraph each; empty: nothing).
    flax_note: str = ""
    keras_note: str = ""
    # Per option of `layer_options`: its type and what it does, as the layers and the op
    # document it ("int", "``P > 0`` projects ...").
    option_docs: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    # The Keras cell's activation attributes and the activations the family computes for each
    # ("activation": ("tanh", "relu")); another activation runs Keras' own loop.
    keras_activations: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # What each initial state is, in `states`' order, for the docstrings ("hidden state",
    # "memory state"); empty: the output state is the hidden one, the others `wide_state`'s.
    state_docs: tuple[str, ...] = ()
    # The step cells' carry (`linen.LSTMCell`, ...) as indices into `states`, where Flax's own
    # cell orders it otherwise (Flax's ``LSTMCell`` carries ``(c, h)``: ``(1, 0)``); empty:
    # `states`' order.
    flax_carry: tuple[int, ...] = ()

    @property
    def class_name(self) -> str:
        """The public layer classes' name: `title`, else the Keras layer's, else the name."""
        return self.title or self.keras_layer or self.name

    @property
    def display(self) -> str:
        """What the docstrings call the cell ("an LSTM", "an Elman RNN")."""
        return self.long_name or f"{self.article} {self.class_name}"

    def peer(self, field: str, peer: str) -> str:
        """The family's `field` (``"torch_module"``, ``"keras_layer"``, ...), or a ValueError
        saying that `peer` (``"PyTorch"``, ``"Keras"``, ...) has no such cell."""
        value = getattr(self, field)
        if value is None:
            raise ValueError(f"the {self.name} cell has no {peer} counterpart.")
        return value


def accumulation_dtype(dtype) -> np.dtype:
    """float32 for 16-bit floats, else the dtype itself."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def gate_vector(values, hidden: int, dtype) -> np.ndarray:
    """One value per gate, repeated over the hidden units: (G*H,)."""
    return np.repeat(np.asarray(values, dtype), hidden)


# The option of the families whose recurrence may be block-diagonal (FlashRNN's heads; `layout`):
# the op, the weight functions and the layers take it; it shapes the weights, not the cell.
HEADS = "num_heads"
HEADS_DOC = ("int", "``NH >= 1`` heads (FlashRNN's ``num_heads``; H a multiple of NH): a "
             "block-diagonal ``W_hh``, each head's ``DH = H / NH`` units reading only their "
             "own part of ``h``, stored (NH, G*DH, DH) per layer and direction (the layout "
             "note of the family's ``unpack_*_weights``). 1 (default): the dense layer. The "
             "scan path multiplies per head (a batched product), the Pallas TPU kernel head by "
             "head with the heads' blocks resident; cuDNN runs one head.")


def recurrent_kernel(w_hh, dtype, mm_dtype, scale=None):
    """The loop's recurrent kernel from one pseudo-layer's ``W_hh``: (S, G*H) from a dense
    (G*H, S), (NH, DH, G*DH) from heads' (NH, G*DH, DH) (`layout`): each head's matrix
    transposed, in the compute `dtype` handed over in `mm_dtype`. `scale`: one factor per gate
    for its rows (the gate trick's halves), or None."""
    if scale is not None:
        rows = gate_vector(scale, w_hh.shape[-2] // len(scale), np.float32)
        w_hh = w_hh * rows[:, None].astype(w_hh.dtype)
    return jnp.swapaxes(w_hh, -1, -2).astype(dtype).astype(mm_dtype)


# The backward part of the protocol; `dzh_pieces` only where `shared_dz` is False.
BACKWARD = ("shared_dz", "dz_inplace", "saved", "step_bwd", "param_grads")


def own_products(cell) -> bool:
    """Whether `cell`'s step computes its own recurrent products (``own_products``)."""
    return bool(getattr(cell, "own_products", False))


def hand_written_backward(cell) -> bool:
    """Whether `cell` has the protocol's backward part (then the driver's backward loop calls
    it), or none of it (then JAX differentiates the forward). A part of it is an error, and so
    is a backward part in a cell that computes its own recurrent products."""
    missing = [n for n in BACKWARD if not hasattr(cell, n)]
    if not missing and not cell.shared_dz and not hasattr(cell, "dzh_pieces"):
        missing = ["dzh_pieces (shared_dz is False)"]
    if len(missing) == len(BACKWARD):
        return False
    if own_products(cell):
        raise TypeError(
            f"`cell` {type(cell).__name__} computes its own recurrent products "
            "(own_products=True) and must have no backward part (the driver's backward loop "
            "reads the gradient of one product of the state); it has "
            f"{', '.join(n for n in BACKWARD if hasattr(cell, n))}.")
    if missing:
        raise TypeError(
            f"`cell` {type(cell).__name__} must have all of the cell protocol's backward part "
            f"({', '.join(BACKWARD)}, and dzh_pieces where shared_dz is False) or none of it; "
            f"it lacks {', '.join(missing)}.")
    return True


@dataclasses.dataclass(frozen=True)
class ForwardOnly:
    """`inner`'s forward part of the protocol, delegated, and no backward part: the driver
    lets JAX differentiate it (how a hand-written backward step is checked and measured)."""

    inner: Any

    @property
    def family(self) -> Family:
        return self.inner.family

    @property
    def own_products(self) -> bool:
        return own_products(self.inner)

    def project_in_loop(self, batch, dtype):
        return self.inner.project_in_loop(batch, dtype)

    def state_dtypes(self, dtype, acc):
        return self.inner.state_dtypes(dtype, acc)

    def prepare(self, w, dtype, acc, mm_dtype):
        return self.inner.prepare(w, dtype, acc, mm_dtype)

    def step(self, zx, zh, state, p, mm):
        return self.inner.step(zx, zh, state, p, mm)[0], ()  # nothing kept for a backward


STEPS_BATCH = ((0, 1), (0, 1))  # contract over (T, B): the weight gradients' GEMMs


@dataclasses.dataclass(frozen=True)
class Folder:
    """What a cell's folder hands the registry (`families`): its `Family`, its cell, its
    float64 reference and what only it has. Each folder's package exports one as ``FOLDER``.

    ``cell(**options)`` builds the cell from the call's `Family.call_options`; ``float64`` is
    the reference the self-test holds the op to (the folder's ``reference.py``);
    ``option_checks``, per call option that needs one, its check (raising for a bad value),
    made first by the op and by the layers."""

    family: Family
    cell: Any
    float64: Any
    option_checks: tuple[tuple[str, Any], ...] = ()

    def make_cell(self, **options):
        """The cell for a call's `Family.call_options` values, but `HEADS`, which shapes the
        weights (`layout`), not the cell."""
        return self.cell(**{n: v for n, v in options.items() if n != HEADS})

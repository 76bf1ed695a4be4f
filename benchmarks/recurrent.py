"""GRU and simple RNN on CPU: portable_rnn vs Flax nn.RNN cells, Keras 3 (JAX) and PyTorch.

`portable_rnn.gru` against `nn.RNN(nn.GRUCell)`, `keras.layers.GRU(reset_after=True)` and
`torch.nn.GRU`; `portable_rnn.simple_rnn` (tanh) against `nn.RNN(nn.SimpleCell)`,
`keras.layers.SimpleRNN` and `torch.nn.RNN`. The shapes, dtypes and the way each peer is built
and timed are the LSTM benchmark's (`benchmarks/lstm.py`).

Every implementation computes the same function: one set of flat weights (PyTorch's layout, two
biases per gate) is converted into each peer's parameters. Flax's GRUCell and Keras' GRU
(``reset_after=True``) compute PyTorch's GRU exactly: their one bias of the r and z gates is
``b_i + b_h``, and the candidate keeps ``b_hn`` inside ``r * (W_hn h + b_hn)``; Keras orders the
gates z, r, n. Before anything is timed, each one's output and input gradient are checked against
a plain step loop of PyTorch's equations (`reference`, no code shared with portable_rnn) run in
float32 at the highest matmul precision (for bfloat16 rows: on the same bfloat16-rounded inputs
and weights, with a looser tolerance).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import portable_rnn

from . import lstm
from ._harness import Impl, bfloat16_goals, dtype_goals, goal, import_torch, measure, print_row
from .lstm import Case

BASELINE = "portable_rnn"
TARGETS = ("GRU fwd+bwd, every shape and dtype: Flax's time over ours at least 1.3, ours within "
           "1.5x of PyTorch; GRU and simple RNN in bfloat16 no slower than in float32 by more "
           "than 1.2x (forward too); bfloat16 fwd+bwd: faster than our float32 at every shape "
           "(at least 1.3x from B8) and within 1.2x of PyTorch's bfloat16")


class Cell(NamedTuple):
    """A recurrent cell as every library names it."""

    family: str  # portable_rnn's name
    label: str
    num_params: Callable
    unpack: Callable
    to_torch: Callable
    ours: Callable
    flax_cell: type
    torch_module: str


class SimpleCell(nn.SimpleCell):
    """`nn.SimpleCell` with its carry started in the compute dtype. Flax starts it in
    `param_dtype` (float32), the cell returns `dtype` (bfloat16), and `nn.RNN`'s scan rejects the
    change of carry type; GRUCell's update ``z * h`` keeps float32, so only this cell needs it."""

    @nn.nowrap
    def initialize_carry(self, rng, input_shape):
        carry = super().initialize_carry(rng, input_shape)
        return carry if self.dtype is None else carry.astype(self.dtype)


FLAX_NOTE = ("flax, RNN (tanh) bfloat16: nn.SimpleCell starts its carry in float32 and returns "
             "bfloat16, which nn.RNN's scan rejects; it is started in bfloat16 here")

CELLS = {
    "gru": Cell("gru", "GRU", portable_rnn.get_num_params_in_gru, portable_rnn.unpack_gru_weights,
                portable_rnn.gru_weights_to_torch, portable_rnn.gru, nn.GRUCell, "GRU"),
    "simple_rnn": Cell("simple_rnn", "RNN (tanh)", portable_rnn.get_num_params_in_simple_rnn,
                       portable_rnn.unpack_simple_rnn_weights,
                       portable_rnn.simple_rnn_weights_to_torch, portable_rnn.simple_rnn,
                       SimpleCell, "RNN"),
}


def gru_step(x, h, W_ih, W_hh, b_ih, b_hh):
    """PyTorch's nn.GRU: gates r, z, n; the reset gate multiplies W_hn h + b_hn."""
    i_r, i_z, i_n = jnp.split(x @ W_ih.T + b_ih, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(h @ W_hh.T + b_hh, 3, axis=-1)
    r, z = jax.nn.sigmoid(i_r + h_r), jax.nn.sigmoid(i_z + h_z)
    n = jnp.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def simple_rnn_step(x, h, W_ih, W_hh, b_ih, b_hh):
    """PyTorch's nn.RNN(nonlinearity="tanh")."""
    return jnp.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)


STEPS = {"gru": gru_step, "simple_rnn": simple_rnn_step}


def reverse_within(a, lengths: np.ndarray):
    """(B, T, F) with each sequence's first `length` steps reversed and its padding in place."""
    t = np.arange(a.shape[1])[None, :]
    idx = np.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return jnp.take_along_axis(a, jnp.asarray(idx)[..., None], axis=1)


def reference(cell: str, x, groups, lengths: np.ndarray, num_layers: int, bidirectional: bool):
    """y (B, T, D*H), zero past each length: one step at a time, the reverse direction over each
    sequence reversed within its length, the state held past the length."""
    W_ih, W_hh, b_ih, b_hh = groups
    B, T, _ = x.shape
    D = 2 if bidirectional else 1
    valid = jnp.asarray(np.arange(T)[None, :, None] < lengths[:, None, None])
    step = STEPS[cell]
    inp = x
    for layer in range(num_layers):
        outs = []
        for d in range(D):
            p = layer * D + d
            h0 = jnp.zeros((B, W_hh[p].shape[1]), x.dtype)

            def body(h, xs, p=p):
                x_t, m_t = xs
                h = jnp.where(m_t, step(x_t, h, W_ih[p], W_hh[p], b_ih[p], b_hh[p]), h)
                return h, h

            seq = reverse_within(inp, lengths) if d else inp
            _, hs = lax.scan(body, h0, (jnp.swapaxes(seq, 0, 1), jnp.swapaxes(valid, 0, 1)))
            hs = jnp.swapaxes(hs, 0, 1)
            outs.append(reverse_within(hs, lengths) if d else hs)
        inp = jnp.where(valid, jnp.concatenate(outs, axis=-1), 0)
    return inp


class Problem(NamedTuple):
    """One cell, case and dtype: inputs, weights, and what every implementation is checked
    against (the fields `lstm.jax_impl`, `lstm.check` and `lstm.torch_impl` read)."""

    cell: Cell
    case: Case
    dtype: jnp.dtype
    x: jax.Array  # (B, T, I) in `dtype`
    w: np.ndarray  # flat float32 weights (rounded to `dtype`)
    lengths: np.ndarray  # (B,) int32
    valid: jax.Array  # (B, T, 1) bool
    ct: jax.Array  # (B, T, D*H) float32 cotangent of y, zero past each length
    y_ref: np.ndarray
    dx_ref: np.ndarray


def problem(cell: Cell, case: Case, dtype) -> Problem:
    B, T, I, H, L, bidir, ragged = case
    D = 2 if bidir else 1
    rng = np.random.default_rng(0)  # NumPy: no compilation before the first timed function
    x = jnp.asarray(rng.standard_normal((B, T, I), np.float32)).astype(dtype)
    n = cell.num_params(I, H, L, bidir)  # as init_gru_weight / init_simple_rnn_weight
    w = np.asarray(jnp.asarray(rng.uniform(-H ** -0.5, H ** -0.5, n).astype(np.float32))
                   .astype(dtype).astype(jnp.float32))
    lengths = np.full((B,), T, np.int32)
    if ragged:
        lengths = rng.integers(T // 4, T + 1, B).astype(np.int32)
        lengths[0] = T
    valid = jnp.asarray(np.arange(T)[None, :, None] < lengths[:, None, None])
    ct = jnp.asarray(np.where(np.asarray(valid), rng.standard_normal((B, T, D * H)), 0)
                     .astype(np.float32))
    groups = cell.unpack(jnp.asarray(w), I, H, L, bidir)

    @jax.jit
    def ref_and_grad(x):
        def ref(x):
            with jax.default_matmul_precision("highest"):
                return reference(cell.family, x, groups, lengths, L, bidir)

        y, vjp = jax.vjp(ref, x.astype(jnp.float32))
        return y, vjp(ct)[0]

    y_ref, dx_ref = ref_and_grad(x)
    return Problem(cell, case, jnp.dtype(dtype), x, w, lengths, valid, ct, np.asarray(y_ref),
                   np.asarray(dx_ref))


def ours(p: Problem) -> Impl:
    B, T, I, H, L, bidir, ragged = p.case
    h0 = jnp.zeros(((2 if bidir else 1) * L, B, H), p.dtype)
    seq = jnp.asarray(p.lengths) if ragged else None
    return lstm.jax_impl(p, lambda x, w: p.cell.ours(x, h0, w, seq, I, H, L, 0.0, bidir)[0],
                    jnp.asarray(p.w))


def flax_params(p: Problem) -> dict:
    """Flax cell parameters computing the same network as the flat weights: GRUCell's ir, iz
    carry b_i + b_h of the r and z gates, in and hn carry b_in and b_hn (hr, hz have no bias);
    SimpleCell's i carries b_ih + b_hh."""
    B, T, I, H, L, bidir, _ = p.case
    W_ih, W_hh, b_ih, b_hh = p.cell.unpack(jnp.asarray(p.w), I, H, L, bidir)
    cells = {}
    for q in W_ih:
        if p.cell.family == "simple_rnn":
            cells[f"cell_{q}"] = {"i": {"kernel": W_ih[q].T, "bias": b_ih[q] + b_hh[q]},
                                  "h": {"kernel": W_hh[q].T}}
            continue
        cell = {}
        for k, g in enumerate("rzn"):
            rows = slice(k * H, (k + 1) * H)
            cell[f"i{g}"] = {"kernel": W_ih[q][rows].T,
                             "bias": b_ih[q][rows] + (0 if g == "n" else b_hh[q][rows])}
            cell[f"h{g}"] = {"kernel": W_hh[q][rows].T}
        cell["hn"]["bias"] = b_hh[q][2 * H:]
        cells[f"cell_{q}"] = cell
    return {"params": cells}


def flax(p: Problem) -> Impl:
    B, T, I, H, L, bidir, ragged = p.case
    model = lstm.FlaxStack(p.cell.flax_cell, H, L, bidir,
                      dtype=None if p.dtype == jnp.float32 else p.dtype)
    seq = jnp.asarray(p.lengths) if ragged else None
    return lstm.jax_impl(p, lambda x, params: model.apply(params, x, seq_lengths=seq),
                         flax_params(p))


def keras_rnn(p: Problem, layers=None) -> Impl:
    """`layers.GRU` / `layers.SimpleRNN` (default `keras.layers`; `portable_rnn.keras` too)."""
    layers = layers or lstm.import_keras().layers
    B, T, I, H, L, bidir, ragged = p.case
    W_ih, W_hh, b_ih, b_hh = (
        {q: np.asarray(a) for q, a in g.items()}
        for g in p.cell.unpack(jnp.asarray(p.w), I, H, L, bidir))
    if p.cell.family == "gru":
        zrn = np.concatenate([np.arange(H, 2 * H), np.arange(H), np.arange(2 * H, 3 * H)])

        def weights(q):  # keras: kernel (in, 3H), gates z, r, n; biases (2, 3H): input, recurrent
            return [W_ih[q][zrn].T, W_hh[q][zrn].T, np.stack([b_ih[q][zrn], b_hh[q][zrn]])]

        def layer(**options):
            return layers.GRU(H, return_sequences=True, reset_after=True, **options)
    else:
        def weights(q):  # keras: kernel (in, H), recurrent kernel (H, H), one bias
            return [W_ih[q].T, W_hh[q].T, b_ih[q] + b_hh[q]]

        def layer(**options):
            return layers.SimpleRNN(H, return_sequences=True, **options)

    return lstm.keras_impl(p, layer, weights, layers.Bidirectional)


def torch_rnn(p: Problem) -> Impl:
    torch = import_torch()
    B, T, I, H, L, bidir, ragged = p.case
    tdtype = lstm.torch_dtype(torch, p.dtype)
    mod = getattr(torch.nn, p.cell.torch_module)(I, H, L, batch_first=True,
                                                 bidirectional=bidir).to(tdtype)
    sd = p.cell.to_torch(jnp.asarray(p.w), I, H, L, bidir)
    mod.load_state_dict({k: torch.from_numpy(np.array(v)).to(tdtype) for k, v in sd.items()})
    return lstm.torch_impl(p, mod)


def gemm_floor(p: Problem) -> Impl:
    return lstm.gemm_floor(p, gates=3 if p.cell.family == "gru" else 1)


PEERS = {"portable_rnn": ours, "flax": flax, "keras_jax": keras_rnn, "torch": torch_rnn,
         "gemm_floor": gemm_floor}


def targets(rows: list[dict]) -> list[dict]:
    """`TARGETS`, checked on every row they concern (see `_harness.goal`)."""
    out = []
    for row in rows:
        if row["cell"] == "gru" and row["mode"] == "fwd+bwd":
            ratio = {n: r["ratio"] for n, r in row["results"].items()}
            out += goal(f"GRU {row['dtype']} fwd+bwd: Flax's time / ours >= 1.3", row,
                        ratio.get("flax"), 1.3, at_least=True)
            out += goal(f"GRU {row['dtype']} fwd+bwd: ours / PyTorch's time <= 1.5", row,
                        1 / ratio["torch"] if ratio.get("torch") else None, 1.5, at_least=False)
    for cell in CELLS.values():
        family_rows = [r for r in rows if r["cell"] == cell.family]
        out += dtype_goals(family_rows, cell.label) + bfloat16_goals(family_rows, cell.label)
    return out


def run(quick: bool, rounds: int | None = None) -> dict:
    rounds = rounds or (3 if quick else 15)
    skipped = {n: r for n in PEERS if (r := lstm.missing(n))}
    rows = []
    for cell in CELLS.values():
        for case in lstm.QUICK_CASES if quick else lstm.CASES:
            for dtype in ("float32",) if quick else ("float32", "bfloat16"):
                p = problem(cell, case, jnp.dtype(dtype))
                makers = {n: partial(make, p) for n, make in PEERS.items() if n not in skipped}
                print(f"recurrent {cell.label} {case.label} {dtype}", flush=True)
                for mode, row in measure(makers, BASELINE, rounds).items():
                    rows.append({"panel": f"{cell.label} {dtype}, {mode}", "case": case.label,
                                 "cell": cell.family, "dtype": dtype, "mode": mode,
                                 "params": case._asdict(), "skipped": skipped, **row})
                    if cell.family == "simple_rnn" and dtype == "bfloat16":
                        rows[-1]["note"] = FLAX_NOTE
                    print_row("recurrent", rows[-1])
    return {"family": "recurrent", "title": "GRU and simple RNN, CPU", "rows": rows,
            "targets": {"about": TARGETS, "rows": targets(rows)},
            "about": "portable_rnn.gru vs Flax nn.RNN(nn.GRUCell), Keras GRU(reset_after=True) "
                     "and PyTorch nn.GRU; portable_rnn.simple_rnn (tanh) vs Flax "
                     "nn.RNN(nn.SimpleCell), Keras SimpleRNN and PyTorch nn.RNN. Under jit; "
                     "fwd+bwd is the gradient in the inputs and every weight. Inputs (B, T, I), "
                     "hidden H, L layers. Every peer gets the same weights (Flax's and Keras' "
                     "GRU compute PyTorch's GRU exactly). Checked against a step loop of "
                     "PyTorch's equations in float32 before timing. gemm_floor is not a peer: "
                     "the same matmuls in the same dependency chain without the gate math "
                     "(operands in the row's dtype, float32 accumulation), the time XLA:CPU "
                     "needs for the GEMMs alone."}

"""LSTM on CPU: portable_rnn vs Flax nn.RNN cells, lstm_ref, Keras 3 (JAX) and PyTorch nn.LSTM.

Every implementation computes the same function: one set of flat weights (two biases per gate,
as cuDNN and PyTorch) is converted into each peer's parameters. Before anything is timed, each
one's output and input gradient are checked against `jax.experimental.rnn.lstm_ref` run in
float32 at the highest matmul precision (for bfloat16 rows: on the same bfloat16-rounded inputs
and weights, with a looser tolerance).
"""

from __future__ import annotations

import os
import sys
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import rnn as jrnn

import portable_rnn

from ._harness import (
    Impl,
    agreement,
    bfloat16_goals,
    block,
    dtype_goals,
    goal,
    import_torch,
    measure,
    print_row,
)

BASELINE = "portable_rnn"
TOL = {"float32": 1e-4, "bfloat16": 5e-2}  # max error relative to max |reference|


class Case(NamedTuple):
    B: int
    T: int
    I: int
    H: int
    L: int
    bidirectional: bool = False
    ragged: bool = False

    @property
    def label(self) -> str:
        extra = " bidir" if self.bidirectional else ""
        extra += " ragged" if self.ragged else ""
        return f"B{self.B} T{self.T} I{self.I} H{self.H} L{self.L}{extra}"


CASES = [Case(32, 128, 256, 256, 1), Case(32, 128, 256, 256, 2), Case(8, 512, 128, 512, 1),
         Case(64, 64, 64, 128, 1, bidirectional=True), Case(1, 1024, 64, 256, 1),
         Case(32, 128, 256, 256, 1, ragged=True)]
QUICK_CASES = [Case(4, 16, 8, 16, 1, ragged=True)]


class Problem(NamedTuple):
    """One case in one dtype: inputs, weights, and what every implementation is checked against."""

    case: Case
    dtype: jnp.dtype
    x: jax.Array  # (B, T, I) in `dtype`
    w: np.ndarray  # flat float32 weights (rounded to `dtype`)
    lengths: np.ndarray  # (B,) int32
    valid: jax.Array  # (B, T, 1) bool
    ct: jax.Array  # (B, T, D*H) float32 cotangent of y, zero past each length
    y_ref: np.ndarray
    dx_ref: np.ndarray


def problem(case: Case, dtype) -> Problem:
    B, T, I, H, L, bidir, ragged = case
    D = 2 if bidir else 1
    rng = np.random.default_rng(0)  # NumPy: no compilation before the first timed function
    x = jnp.asarray(rng.standard_normal((B, T, I), np.float32)).astype(dtype)
    n = portable_rnn.get_num_params_in_lstm(I, H, L, bidir)  # as init_lstm_weight
    w = np.asarray(jnp.asarray(rng.uniform(-H ** -0.5, H ** -0.5, n).astype(np.float32))
                   .astype(dtype).astype(jnp.float32))
    lengths = np.full((B,), T, np.int32)
    if ragged:
        lengths = rng.integers(T // 4, T + 1, B).astype(np.int32)
        lengths[0] = T
    valid = jnp.asarray(np.arange(T)[None, :, None] < lengths[:, None, None])
    ct = jnp.asarray(np.where(np.asarray(valid), rng.standard_normal((B, T, D * H)), 0)
                     .astype(np.float32))

    def ref(x):
        z = jnp.zeros((L * D, B, H), jnp.float32)
        with jax.default_matmul_precision("highest"):
            y = jrnn.lstm_ref(x, z, z, *jrnn.unpack_lstm_weights(w, I, H, L, bidir),
                              jnp.asarray(lengths), I, H, L, 0.0, bidir)[0]
        return jnp.where(valid, y, 0)

    @jax.jit
    def ref_and_grad(x):
        y, vjp = jax.vjp(ref, x.astype(jnp.float32))
        return y, vjp(ct)[0]

    y_ref, dx_ref = ref_and_grad(x)
    return Problem(case, jnp.dtype(dtype), x, w, lengths, valid, ct,
                   np.asarray(y_ref), np.asarray(dx_ref))


def check(p: Problem, y, dx) -> dict:
    y = np.where(np.asarray(p.valid), np.asarray(y, np.float32), 0)  # padding is not compared
    return agreement({"y": (y, p.y_ref), "dx": (dx, p.dx_ref)}, TOL[p.dtype.name])


def jax_impl(p: Problem, apply, params) -> Impl:
    """`apply(x, params) -> y (B, T, D*H)`, jitted, forward and gradient in (x, params)."""
    def loss(x, params):
        return jnp.sum(jnp.where(p.valid, apply(x, params).astype(jnp.float32), 0) * p.ct)

    fwd, grad = jax.jit(apply), jax.jit(jax.grad(loss, (0, 1)))
    return Impl(fwd=lambda: block(fwd(p.x, params)), fwd_bwd=lambda: block(grad(p.x, params)),
                check=lambda: check(p, fwd(p.x, params), grad(p.x, params)[0]))


def ours(p: Problem) -> Impl:
    B, T, I, H, L, bidir, ragged = p.case
    z = jnp.zeros(((2 if bidir else 1) * L, B, H), p.dtype)
    seq = jnp.asarray(p.lengths) if ragged else None
    return jax_impl(p, lambda x, w: portable_rnn.lstm(x, z, z, w, seq, I, H, L, 0.0, bidir)[0],
                    jnp.asarray(p.w))


def two_unidirectional(p: Problem) -> Impl:
    """A one-layer bidirectional case as two unidirectional `portable_rnn.lstm` calls, the
    reverse one on the time-reversed input (full-length sequences): what one bidirectional call
    is held against."""
    B, T, I, H, L, bidir, ragged = p.case
    if not bidir or ragged or L != 1:
        raise ValueError("only for one-layer bidirectional cases at full length")
    z = jnp.zeros((1, B, H), p.dtype)
    parts = portable_rnn.unpack_lstm_weights(jnp.asarray(p.w), I, H, L, True)
    ws = [portable_rnn.pack_lstm_weights(*({0: g[d]} for g in parts), I, H, 1, False)
          for d in range(2)]

    def apply(x, ws):
        fwd = portable_rnn.lstm(x, z, z, ws[0], None, I, H, 1, 0.0, False)[0]
        rev = portable_rnn.lstm(x[:, ::-1], z, z, ws[1], None, I, H, 1, 0.0, False)[0]
        return jnp.concatenate([fwd, rev[:, ::-1]], axis=-1)

    return jax_impl(p, apply, ws)


def lstm_ref(p: Problem) -> Impl:
    B, T, I, H, L, bidir, _ = p.case
    z = jnp.zeros(((2 if bidir else 1) * L, B, H), p.dtype)

    def apply(x, w):
        weights = jrnn.unpack_lstm_weights(w.astype(x.dtype), I, H, L, bidir)
        return jrnn.lstm_ref(x, z, z, *weights, jnp.asarray(p.lengths), I, H, L, 0.0, bidir)[0]

    return jax_impl(p, apply, jnp.asarray(p.w))


def flax_params(w, case: Case) -> dict:
    """Flax cell parameters computing the same LSTM as the flat weights `w` (the inverse of
    `portable_rnn.lstm_weights_from_flax`; Flax's one bias per gate is b_ih + b_hh)."""
    B, T, I, H, L, bidir, _ = case
    W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_lstm_weights(jnp.asarray(w), I, H, L, bidir)
    cells = {}
    for p in W_ih:
        cell = {}
        for n, g in enumerate("ifgo"):
            rows = slice(n * H, (n + 1) * H)
            cell[f"i{g}"] = {"kernel": W_ih[p][rows].T}
            cell[f"h{g}"] = {"kernel": W_hh[p][rows].T, "bias": b_ih[p][rows] + b_hh[p][rows]}
        cells[f"cell_{p}"] = cell
    return {"params": cells}


class FlaxStack(nn.Module):
    """`num_layers` of `nn.RNN(cell)` (in `nn.Bidirectional` pairs); cells named cell_<p> in
    pseudo-layer order p = layer * D + direction."""

    cell: type
    hidden_size: int
    num_layers: int
    bidirectional: bool
    dtype: jnp.dtype | None = None

    @nn.compact
    def __call__(self, x, seq_lengths=None):
        D = 2 if self.bidirectional else 1

        def rnn(p):
            return nn.RNN(self.cell(self.hidden_size, dtype=self.dtype, name=f"cell_{p}"))

        for layer in range(self.num_layers):
            if self.bidirectional:
                x = nn.Bidirectional(rnn(D * layer), rnn(D * layer + 1))(
                    x, seq_lengths=seq_lengths)
            else:
                x = rnn(layer)(x, seq_lengths=seq_lengths)
        return x


def flax(cell):
    def make(p: Problem) -> Impl:
        B, T, I, H, L, bidir, ragged = p.case
        model = FlaxStack(cell, H, L, bidir, dtype=None if p.dtype == jnp.float32 else p.dtype)
        seq = jnp.asarray(p.lengths) if ragged else None
        return jax_impl(p, lambda x, params: model.apply(params, x, seq_lengths=seq),
                        flax_params(p.w, p.case))
    return make


def import_keras():
    """Keras 3 on the JAX backend, or a string saying why it cannot be used."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "jax"
    try:
        import keras
    except ImportError:
        return "keras is not installed (pip install keras>=3)"
    if keras.backend.backend() != "jax":
        return f"keras was imported with the {keras.backend.backend()} backend"
    return keras


def keras_impl(p, layer, weights, bidirectional=None) -> Impl:
    """Keras 3 on the JAX backend: `L` layers made by `layer(**options)` (wrapped in
    `bidirectional`, default `keras.layers.Bidirectional`, when the case is), each direction's
    variables set from `weights(q)` for pseudo-layer q, timed through a jitted
    `stateless_call`."""
    keras = import_keras()
    B, T, I, H, L, bidir, ragged = p.case
    # Keras's "bfloat16" policy fails in its JAX LSTM; "mixed_bfloat16" computes in bfloat16
    # with float32 variables, as the Flax and portable_rnn rows do.
    policy = "float32" if p.dtype == jnp.float32 else "mixed_bfloat16"
    # Zeros, not Keras's random (orthogonal: a QR) initializers: `set_weights` replaces them, and
    # each random one compiles a kernel per shape.
    options = dict(dtype=policy, kernel_initializer="zeros", recurrent_initializer="zeros",
                   bias_initializer="zeros")

    class Stack(keras.Model):
        def __init__(self):
            super().__init__()
            self.rnns = [(bidirectional or keras.layers.Bidirectional)(layer(**options)) if bidir
                         else layer(**options) for _ in range(L)]

        def call(self, x, mask=None):
            for rnn in self.rnns:
                x = rnn(x, mask=mask)
            return x

    model = Stack()
    for n, rnn in enumerate(model.rnns):  # creates the variables (an eager call compiles each op)
        rnn.build((None, None, I if n == 0 else (2 if bidir else 1) * H))
    model.built = True
    mask = jnp.asarray(p.valid[..., 0]) if ragged else None
    layers = [d for r in model.rnns for d in ((r.forward_layer, r.backward_layer) if bidir
                                              else (r,))]
    for q, one in enumerate(layers):
        one.set_weights(weights(q))
    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]

    def apply(x, trainable):
        return model.stateless_call(trainable, fixed, x, mask=mask)[0]

    return jax_impl(p, apply, trainable)


def keras_lstm(p: Problem, layers=None) -> Impl:
    """`layers.LSTM` (default `keras.layers`; `portable_rnn.keras` for its drop-in layers)."""
    layers = layers or import_keras().layers
    B, T, I, H, L, bidir, ragged = p.case
    W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_lstm_weights(jnp.asarray(p.w), I, H, L, bidir)

    def weights(q):  # keras: kernel (in, 4H), gates i, f, c, o; one bias
        return [np.asarray(W_ih[q]).T, np.asarray(W_hh[q]).T, np.asarray(b_ih[q] + b_hh[q])]

    return keras_impl(p, lambda **options: layers.LSTM(H, return_sequences=True, **options),
                      weights, layers.Bidirectional)


def torch_dtype(torch, dtype):
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype.name]


def torch_impl(p, mod) -> Impl:
    """A PyTorch recurrent module (batch_first, weights loaded), on padded or packed input."""
    torch = import_torch()
    T, ragged = p.case.T, p.case.ragged
    tdtype = torch_dtype(torch, p.dtype)
    tx = torch.from_numpy(np.array(p.x, np.float32)).to(tdtype)
    ct = torch.from_numpy(np.array(p.ct))
    tlen = torch.from_numpy(p.lengths).long()

    def run(inp):
        if not ragged:
            return mod(inp)[0]
        packed = torch.nn.utils.rnn.pack_padded_sequence(inp, tlen, batch_first=True,
                                                         enforce_sorted=False)
        return torch.nn.utils.rnn.pad_packed_sequence(mod(packed)[0], batch_first=True,
                                                      total_length=T)[0]

    def fwd():
        with torch.no_grad():
            return run(tx)

    def grads():
        inp = tx.clone().requires_grad_(True)
        mod.zero_grad(set_to_none=True)
        y = run(inp)
        (y.float() * ct).sum().backward()
        return y, inp.grad

    def check_():
        y, dx = grads()
        return check(p, y.detach().float().numpy(), dx.float().numpy())

    return Impl(fwd=fwd, fwd_bwd=grads, check=check_)


def torch_lstm(p: Problem) -> Impl:
    torch = import_torch()
    B, T, I, H, L, bidir, ragged = p.case
    tdtype = torch_dtype(torch, p.dtype)
    mod = torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=bidir).to(tdtype)
    sd = portable_rnn.lstm_weights_to_torch(jnp.asarray(p.w), I, H, L, bidir)
    mod.load_state_dict({k: torch.from_numpy(np.array(v)).to(tdtype) for k, v in sd.items()})
    return torch_impl(p, mod)


def gemm_floor(p, gates: int) -> Impl:
    """Not a recurrent network: the GEMMs of one with G = `gates` gates, in its dependency chain,
    and almost nothing else. Per layer and direction, the forward loop computes ``z = x_t W_i +
    h W_h`` and keeps ``h = z[:, :H]``; the backward loop computes ``dh = dz W_h^T`` with ``dz``
    the incoming gradient repeated over the G gates; after it, ``dx``, ``dW_i`` and ``dW_h`` are
    one GEMM each. The same matmuls as a fwd+bwd of the cell (shapes and count) with the gate
    math removed: the time XLA:CPU needs for the matmuls alone. Not checked (it computes nothing
    meaningful); ragged cases run at full length. Operands in the case's dtype, products
    accumulated in float32 (as ours)."""
    B, T, I, H, L, bidir, _ = p.case
    D, G = (2 if bidir else 1), gates
    dtype = p.dtype

    def mm(spec, a, b):
        return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32).astype(dtype)
    rng = np.random.default_rng(1)
    ws = [(jnp.asarray(rng.uniform(-0.1, 0.1, (I if l == 0 else D * H, G * H)), dtype),
           jnp.asarray(rng.uniform(-0.1, 0.1, (H, G * H)), dtype))
          for l in range(L) for _ in range(D)]

    def direction(x, w_i, w_h):  # x (T, B, in) -> hs (T, B, H), and the backward closure
        def step(h, x_t):
            h = (mm("bi,ig->bg", x_t, w_i) + mm("bh,hg->bg", h, w_h))[:, :H]
            return h, h

        _, hs = lax.scan(step, jnp.zeros((B, H), dtype), x, unroll=4)

        def backward(dy):  # dy (T, B, H) -> dx, dw_i, dw_h
            def bstep(dh, dy_t):
                dz = jnp.tile(dh + dy_t.astype(dtype), (1, G))
                return mm("bg,hg->bh", dz, w_h), dz

            _, dz = lax.scan(bstep, jnp.zeros((B, H), dtype), dy, reverse=True, unroll=4)
            h_prev = jnp.concatenate([jnp.zeros((1, B, H), dtype), hs[:-1]])
            return (mm("tbg,ig->tbi", dz, w_i), mm("tbi,tbg->ig", x, dz),
                    mm("tbh,tbg->hg", h_prev, dz))

        return hs, backward

    def network(x, grad):
        y = jnp.swapaxes(x.astype(dtype), 0, 1)
        backwards = []
        for l in range(L):
            outs = [direction(y if d == 0 else y[::-1], *ws[l * D + d]) for d in range(D)]
            backwards.append([b for _, b in outs])
            y = jnp.concatenate([hs if d == 0 else hs[::-1] for d, (hs, _) in enumerate(outs)],
                                axis=-1)
        if not grad:
            return y
        dy, dws = jnp.swapaxes(p.ct, 0, 1), []
        for l in reversed(range(L)):
            grads = [b(dy[..., d * H:(d + 1) * H][::1 if d == 0 else -1])
                     for d, b in enumerate(backwards[l])]
            dws += [g[1:] for g in grads]
            dy = sum(g[0] if d == 0 else g[0][::-1] for d, g in enumerate(grads))
        return dy, dws

    fwd, fwd_bwd = jax.jit(partial(network, grad=False)), jax.jit(partial(network, grad=True))
    return Impl(fwd=lambda: block(fwd(p.x)), fwd_bwd=lambda: block(fwd_bwd(p.x)),
                check=lambda: {"not checked": "a timing floor, not a recurrent network"})


PEERS = {"portable_rnn": ours, "flax_optimized": flax(nn.OptimizedLSTMCell),
         "flax_lstmcell": flax(nn.LSTMCell), "lstm_ref": lstm_ref, "keras_jax": keras_lstm,
         "torch": torch_lstm, "gemm_floor": partial(gemm_floor, gates=4)}


TARGETS = ("fwd+bwd in float32 unless said: Flax OptimizedLSTM's time over ours at least 1.3 on "
           "every shape; ours within 1.2x of PyTorch at B1 and B8; ours within 1.15x of "
           "gemm_floor at B32; one bidirectional call no slower than two unidirectional ones; "
           "ours in bfloat16 no slower than in float32 by more than 1.2x (forward too); "
           "bfloat16 fwd+bwd: faster than our float32 at every shape (at least 1.3x from B8) "
           "and within 1.2x of PyTorch's bfloat16")


def targets(rows: list[dict]) -> list[dict]:
    """`TARGETS`, checked on every row they concern (see `_harness.goal`)."""
    out = []
    for row in rows:
        if row["dtype"] != "float32" or row["mode"] != "fwd+bwd":
            continue
        B, ratio = row["params"]["B"], {n: r["ratio"] for n, r in row["results"].items()}
        out += goal("float32 fwd+bwd: Flax OptimizedLSTM's time / ours >= 1.3", row,
                    ratio.get("flax_optimized"), 1.3, at_least=True)
        if B in (1, 8) and ratio.get("torch"):
            out += goal("float32 fwd+bwd: ours / PyTorch's time <= 1.2", row,
                        1 / ratio["torch"], 1.2, at_least=False)
        if B == 32 and ratio.get("gemm_floor"):
            out += goal("float32 fwd+bwd: ours / gemm_floor <= 1.15", row,
                        1 / ratio["gemm_floor"], 1.15, at_least=False)
        out += goal("float32 fwd+bwd: two unidirectional calls' time / ours >= 1", row,
                    ratio.get("two_unidirectional"), 1.0, at_least=True)
    return out + dtype_goals(rows, "LSTM") + bfloat16_goals(rows, "LSTM")


def missing(name: str) -> str | None:
    """Why a peer cannot run on this machine, or None."""
    if name == "torch" and import_torch() is None:
        return "torch is not installed"
    if name == "keras_jax" and isinstance(reason := import_keras(), str):
        return reason
    return None


def run(quick: bool, rounds: int | None = None) -> dict:
    rounds = rounds or (3 if quick else 15)
    skipped = {n: r for n in PEERS if (r := missing(n))}
    rows = []
    for case in QUICK_CASES if quick else CASES:
        for dtype in ("float32",) if quick else ("float32", "bfloat16"):
            p = problem(case, jnp.dtype(dtype))
            makers = {n: partial(make, p) for n, make in PEERS.items() if n not in skipped}
            if case.bidirectional and not case.ragged and case.L == 1:
                makers["two_unidirectional"] = partial(two_unidirectional, p)
            print(f"lstm {case.label} {dtype}", flush=True)
            for mode, row in measure(makers, BASELINE, rounds).items():
                rows.append({"panel": f"{dtype}, {mode}", "case": case.label, "dtype": dtype,
                             "mode": mode, "params": case._asdict(), "skipped": skipped, **row})
                print_row("lstm", rows[-1])
    return {"family": "lstm", "title": "LSTM, CPU", "rows": rows,
            "targets": {"about": TARGETS, "rows": targets(rows)},
            "about": "portable_rnn.lstm (automatic path) vs peers, under jit; fwd+bwd is the "
                     "gradient in the inputs and every weight. Inputs (B, T, I), hidden H, "
                     "L layers. Checked against lstm_ref in float32 before timing. gemm_floor is "
                     "not a peer: the same matmuls in the same dependency chain without the gate "
                     "math (operands in the row's dtype, float32 accumulation), the time XLA:CPU "
                     "needs for the GEMMs alone; "
                     "two_unidirectional: the bidirectional case as two unidirectional calls."}

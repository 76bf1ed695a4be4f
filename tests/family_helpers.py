"""Shared strategies, inputs and references for the GRU, simple-RNN and projected-LSTM tests.

A *kind* is one member of the recurrent family as the tests see it: ``"gru"``, ``"rnn_tanh"``,
``"rnn_relu"``, ``"lstm_proj"`` (an LSTM with ``proj_size``) or ``"lstm"`` (without; the LSTM's
own properties live with `lstm_helpers`, so `KINDS` leaves it out and `ALL_KINDS` has it).
Functions take a projection size ``P`` for every kind and use it only for ``"lstm_proj"``.
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

import portable_rnn
from portable_rnn._src.recurrent import layout as _weights
from portable_rnn._src.recurrent.families import family
from references import loop_rnn

KINDS = ("gru", "rnn_tanh", "rnn_relu", "lstm_proj")
ALL_KINDS = ("lstm", *KINDS)
FAMILY = {"gru": "gru", "rnn_tanh": "simple_rnn", "rnn_relu": "simple_rnn", "lstm_proj": "lstm",
          "lstm": "lstm"}


@st.composite
def family_cases(draw, min_length=0, max_layers=2, kinds=KINDS):
    """Half the draws small (T <= 6, H <= 5), half long and wide (T 64-96, H 32-40)."""
    kind = draw(st.sampled_from(kinds))
    large = draw(st.booleans())
    B = draw(st.integers(1, 3))
    T = draw(st.integers(64, 96) if large else st.integers(max(1, min_length), 6))
    I = draw(st.integers(1, 16 if large else 5))
    H = draw(st.integers(32, 40) if large else st.integers(2 if kind == "lstm_proj" else 1, 5))
    P = draw(st.integers(1, H - 1)) if kind == "lstm_proj" else 0
    L = draw(st.integers(1, max_layers))
    bidir = draw(st.booleans())
    lengths = np.array(draw(st.lists(st.integers(min_length, T), min_size=B, max_size=B)),
                       np.int32)
    seed = draw(st.integers(0, 2**16))
    return kind, B, T, I, H, P, L, bidir, lengths, seed


def make_inputs(kind, B, T, I, H, P, L, bidir, seed, dtype=jnp.float32):
    """(x, state0 tuple, flat weights) drawn from `seed` (`draws`: jax.random's bits)."""
    P = P if kind == "lstm_proj" else 0  # a projection size only for the LSTM
    D = 2 if bidir else 1
    k = jax.random.split(jax.random.key(seed), 4)
    x = draws.normal(k[0], (B, T, I), dtype)
    h0 = draws.normal(k[1], (L * D, B, P or H), dtype)
    c0 = draws.normal(k[2], (L * D, B, H), dtype)
    states = (h0, c0) if FAMILY[kind] == "lstm" else (h0,)
    w = draws.init_weight(k[3], I, H, L, bidir, FAMILY[kind], P)
    return x, states, w


def call(kind, x, states, w, lengths, I, H, P, L, bidir, dropout=0.0, **kw):
    """The public function of `kind`; returns (y, final states tuple)."""
    if FAMILY[kind] == "lstm":
        y, h, c = portable_rnn.lstm(x, *states, w, lengths, I, H, L, dropout, bidir,
                                    proj_size=P if kind == "lstm_proj" else 0, **kw)
        return y, (h, c)
    if kind == "gru":
        y, h = portable_rnn.gru(x, *states, w, lengths, I, H, L, dropout, bidir, **kw)
    else:
        y, h = portable_rnn.simple_rnn(x, *states, w, lengths, I, H, L, dropout, bidir,
                                       nonlinearity=kind[4:], **kw)
    return y, (h,)


def reference(kind, x, states, w, lengths, I, H, P, L, bidir, xp=np, recurrent_mask=None,
              dtype=None, dropout=None, gradient_dtype=None):
    """`loop_rnn` on the same weights: float64 NumPy (xp=np) or differentiable jnp; `dtype`: a
    16-bit compute dtype, rounded where `loop_rnn` says; `dropout`, `gradient_dtype`: see
    `loop_rnn`."""
    P = P if kind == "lstm_proj" else 0  # a projection size only for the LSTM
    # NumPy's slices for the NumPy loop (host=True): no device op compiled per drawn shape
    groups = _weights.unpack(w, I, H, L, bidir, family(FAMILY[kind]), P, host=xp is np)
    if xp is np:
        as64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
        x, states = as64(x), tuple(as64(s) for s in states)
        recurrent_mask = None if recurrent_mask is None else as64(recurrent_mask)
        groups = {n: {p: as64(a) for p, a in g.items()} for n, g in groups.items()}
    return loop_rnn(FAMILY[kind], x, states, groups, lengths, L, bidir,
                    nonlinearity=kind[4:] if kind.startswith("rnn") else "tanh", xp=xp,
                    recurrent_mask=recurrent_mask, dtype=dtype, dropout=dropout,
                    gradient_dtype=gradient_dtype)


def torch_module(kind, w, I, H, P, L, bidir):
    """The PyTorch module of `kind` holding weights `w` (float32). Needs torch."""
    import torch

    if FAMILY[kind] == "lstm":
        P = P if kind == "lstm_proj" else 0
        mod = torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=bidir, proj_size=P)
        sd = portable_rnn.lstm_weights_to_torch(w, I, H, L, bidir, proj_size=P)
    elif kind == "gru":
        mod = torch.nn.GRU(I, H, L, batch_first=True, bidirectional=bidir)
        sd = portable_rnn.gru_weights_to_torch(w, I, H, L, bidir)
    else:
        mod = torch.nn.RNN(I, H, L, nonlinearity=kind[4:], batch_first=True,
                           bidirectional=bidir)
        sd = portable_rnn.simple_rnn_weights_to_torch(w, I, H, L, bidir)
    mod.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()})
    return mod


def torch_run(kind, mod, x, states, lengths):
    """PyTorch's outputs on packed (ragged) sequences: (y zero-padded, final states tuple)."""
    import torch

    packed = torch.nn.utils.rnn.pack_padded_sequence(
        x, torch.from_numpy(np.array(lengths, np.int64)), batch_first=True, enforce_sorted=False)
    lstm = FAMILY[kind] == "lstm"
    out, final = mod(packed, tuple(states) if lstm else states[0])
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                  total_length=x.shape[1])
    return y, (tuple(final) if lstm else (final,))


def dropout_masks(key, rate, L, B, T, width):
    """The documented keep-masks between layers (docs/semantics.md, "Dropout"), written out:
    ``bernoulli(fold_in(key, l), 1 - rate, (B, T, width))`` for every layer l but the last."""
    return [np.asarray(jax.random.bernoulli(jax.random.fold_in(key, l), 1 - rate,
                                            (B, T, width))) for l in range(L - 1)]


def case_dropout(c):
    """A drawn case's dropout between layers: (key, (the documented masks, rate)) for the
    reference, or (None, None) without it (no rate, or one layer)."""
    if not (c["dropout"] and c["L"] > 1):
        return None, None
    key = jax.random.key(c["seed"] + 7)
    D = 2 if c["bidir"] else 1
    return key, (dropout_masks(key, c["dropout"], c["L"], c["B"], c["T"], D * c["H"]),
                 c["dropout"])

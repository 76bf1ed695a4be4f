"""Float64 references of the recurrent ops for `python -m portable_rnn selftest`: PyTorch's
equations as a step loop (the step in plain `jax.numpy`, `lax.scan` over time: an unrolled
Python loop compiled too slowly for the self-test), sharing no code with the cells or the scan
driver.

Each family's folder holds its step (``reference.py``: ``step(zx, zh, state, **options)``, from
this step's input and recurrent products with their biases, the new state before any projection)
and its op's reference (``float64``, with the op's own signature), registered in `ops`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


def loop(step: Callable, gates: int, own_products: bool = False):
    """The op of `step` as a step loop, its flat weights read in their documented order (per
    layer and direction W_ih, W_hh, W_hr; then likewise the biases b_ih, b_hh); every length T,
    no dropout. ``states``: the initial states in the op's order (the output state first).

    With `own_products`, `step` gets as ``zh`` the function ``zh(v, first, last) = v @
    W_hh[first*H:last*H].T + b_hh[first*H:last*H]`` (gate blocks ``first`` to ``last - 1``)
    instead of the state's product."""

    def fn(x, states, w, input_size, hidden_size, num_layers, bidirectional, proj_size=0,
           **options):
        D, H, G = (2 if bidirectional else 1), hidden_size, gates * hidden_size
        out = proj_size or H
        offset, mats, biases = 0, [], []

        def take(*shape):
            nonlocal offset
            n = int(np.prod(shape))
            offset += n
            return w[offset - n:offset].reshape(shape)

        for p in range(num_layers * D):
            mats.append((take(G, input_size if p < D else D * out), take(G, out),
                         take(proj_size, H) if proj_size else None))
        for _ in mats:
            biases.append((take(G), take(G)))

        def one(p, state, x_t):
            (W_ih, W_hh, W_hr), (b_ih, b_hh) = mats[p], biases[p]
            if own_products:
                def zh(v, first, last):
                    rows = slice(first * H, last * H)
                    return v @ W_hh[rows].T + b_hh[rows]
            else:
                zh = state[0] @ W_hh.T + b_hh
            new = step(x_t @ W_ih.T + b_ih, zh, state, **options)
            return new if W_hr is None else (new[0] @ W_hr.T, *new[1:])

        y, finals = jnp.swapaxes(x, 0, 1), []
        for layer in range(num_layers):
            outs = []
            for d in range(D):
                p = layer * D + d

                def body(state, x_t, p=p):
                    state = tuple(one(p, state, x_t))
                    return state, state[0]

                # the reverse direction reads the sequence from its end; outputs stay in place
                state, hs = jax.lax.scan(body, tuple(s[p] for s in states), y, reverse=d == 1)
                outs.append(hs)
                finals.append(state)
            y = jnp.concatenate(outs, axis=-1)
        return (jnp.swapaxes(y, 0, 1),) + tuple(jnp.stack(f) for f in zip(*finals))

    return fn


def one_state_op(step: Callable, gates: int, own_products: bool = False):
    """The reference of a one-state op (``(x, h_0, weights, seq_lengths, ...)``, as
    `portable_rnn.gru`), for calls with every length T and no dropout; `own_products` as in
    `loop`."""

    def fn(x, h0, w, seq_lengths, input_size, hidden_size, num_layers, dropout, bidirectional,
           precision=None, *, implementation=None, **options):
        del seq_lengths, dropout, precision, implementation  # the self-test's cases: none
        return loop(step, gates, own_products)(x, (h0,), w, input_size, hidden_size,
                                               num_layers, bidirectional, **options)

    return fn

"""References that share no code with portable_rnn: a float64 NumPy step loop."""

import numpy as np


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def numpy_lstm(x, h0, c0, W_ih, W_hh, b_ih, b_hh, lengths, num_layers, bidirectional):
    """PyTorch nn.LSTM(batch_first=True) semantics, one step at a time, in float64.

    W_ih etc. are per-pseudo-layer lists ((4H, in), gates i, f, g, o). Returns (y, h_n, c_n).
    """
    x = np.asarray(x, np.float64)
    B, T, _ = x.shape
    D = 2 if bidirectional else 1
    H = np.asarray(W_hh[0]).shape[1]
    h_n = np.array(h0, np.float64)
    c_n = np.array(c0, np.float64)
    inp = x
    for layer in range(num_layers):
        out = np.zeros((B, T, D * H))
        for d in range(D):
            p = layer * D + d
            w_ih, w_hh = np.asarray(W_ih[p], np.float64), np.asarray(W_hh[p], np.float64)
            bias = np.asarray(b_ih[p], np.float64) + np.asarray(b_hh[p], np.float64)
            for b in range(B):
                h, c = h_n[p, b].copy(), c_n[p, b].copy()
                steps = range(int(lengths[b]))
                for t in (reversed(steps) if d else steps):
                    z = w_ih @ inp[b, t] + w_hh @ h + bias
                    i, f, g, o = np.split(z, 4)
                    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
                    h = _sigmoid(o) * np.tanh(c)
                    out[b, t, d * H:(d + 1) * H] = h
                h_n[p, b], c_n[p, b] = h, c
        inp = out
    return inp, h_n, c_n



def _family_step(family, nonlinearity, xp, w, x_t, state, rm=None):
    """One step for a batch: x_t (B, in), states (B, size) each; `rm` (K, B, size): recurrent
    dropout, gate block g of ``W_hh h`` computed from ``h * rm[g]`` (``rm[0]`` if K = 1)."""
    sigmoid = (lambda v: 1.0 / (1.0 + xp.exp(-v)))
    h = state[0]
    if rm is None:
        hw = h @ w["W_hh"].T
    else:
        blocks = xp.split(w["W_hh"], rm.shape[0], axis=0)
        hw = xp.concatenate([(h * rm[g]) @ wg.T for g, wg in enumerate(blocks)], axis=-1)
    if family == "lstm":
        h, c = state
        z = x_t @ w["W_ih"].T + hw + w["b_ih"] + w["b_hh"]
        i, f, g, o = xp.split(z, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * xp.tanh(g)
        h = sigmoid(o) * xp.tanh(c)
        return (h @ w["W_hr"].T if "W_hr" in w else h, c)
    (h,) = state
    if family == "gru":  # PyTorch nn.GRU: the reset gate multiplies W_hn h + b_hn
        i_r, i_z, i_n = xp.split(x_t @ w["W_ih"].T + w["b_ih"], 3, axis=-1)
        h_r, h_z, h_n = xp.split(hw + w["b_hh"], 3, axis=-1)
        r, z = sigmoid(i_r + h_r), sigmoid(i_z + h_z)
        n = xp.tanh(i_n + r * h_n)
        return ((1 - z) * n + z * h,)
    pre = x_t @ w["W_ih"].T + hw + w["b_ih"] + w["b_hh"]
    return (xp.tanh(pre) if nonlinearity == "tanh" else xp.maximum(pre, 0),)


def loop_rnn(family, x, state0, groups, lengths, num_layers, bidirectional, *,
             nonlinearity="tanh", xp=np, recurrent_mask=None):
    """PyTorch nn.LSTM / nn.GRU / nn.RNN (batch_first=True) semantics, one step at a time in
    plain Python, every sequence of the batch together: a step at or past a sequence's length
    leaves its state unchanged (so the reverse direction starts at its last valid step).

    `xp` is NumPy (pass float64 arrays for a float64 reference) or `jax.numpy` (differentiable:
    a reference for gradients). `state0` is a tuple of (L*D, B, size) arrays ((h,) or (h, c));
    `groups` maps W_ih, W_hh, b_ih, b_hh (and W_hr) to per-pseudo-layer lists. Returns (y, final
    states): y zero past each length, states at the last valid step. `recurrent_mask`
    (L*D, K, B, size): recurrent dropout (see `_family_step`).
    """
    T = x.shape[1]
    D = 2 if bidirectional else 1
    lengths = np.asarray(lengths)
    inp, finals = x, []
    for layer in range(num_layers):
        outs = []
        for d in range(D):
            p = layer * D + d
            w = {n: g[p] for n, g in groups.items()}
            state = tuple(s[p] for s in state0)
            out = [None] * T
            for t in (reversed(range(T)) if d else range(T)):
                valid = (t < lengths)[:, None]
                new = _family_step(family, nonlinearity, xp, w, inp[:, t], state,
                                   None if recurrent_mask is None else recurrent_mask[p])
                state = tuple(xp.where(valid, n, o) for n, o in zip(new, state))
                out[t] = xp.where(valid, state[0], 0 * state[0])
            outs.append(xp.stack(out, axis=1))
            finals.append(state)
        inp = xp.concatenate(outs, axis=-1)
    return inp, tuple(xp.stack([f[k] for f in finals]) for k in range(len(state0)))

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

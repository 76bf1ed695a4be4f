"""One direction of one layer as the arrays of a single-step cell with PyTorch's matrices and
fewer biases (Equinox's ``eqx.nn.LSTMCell`` and ``eqx.nn.GRUCell``), and back (no Equinox).

The cells compute PyTorch's equations with the matrices ``weight_ih`` (G*H, I) and
``weight_hh`` (G*H, H) of PyTorch's layout and gate order, and keep fewer biases:

- the LSTM cell one ``bias`` (4H,) added to both products: PyTorch's ``b_ih + b_hh``;
- the GRU cell a ``bias`` (3H,) added to the input product, and ``bias_n`` (H,) added to the
  recurrent product of the candidate gate n inside the reset gate's product: PyTorch's
  ``b_ih + [b_hr, b_hz, 0]`` and ``b_hn``. Its update ``h' = n + z * (h - n)`` is PyTorch's
  ``(1 - z) * n + z * h`` rearranged (equal up to rounding).

So a cell's function is exactly a PyTorch cell's, and a PyTorch cell's converts without loss of
function; what does not survive a round trip through a cell is how the summed biases were split.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..recurrent.families import family as family_of


def from_cell(family, weight_ih, weight_hh, bias=None, bias_n=None) -> dict:
    """``{"W_ih", "W_hh", "b_ih", "b_hh"}`` (PyTorch's layout) from one cell's arrays; a cell
    without biases (``use_bias=False``) gives zero biases."""
    weight_ih, weight_hh = jnp.asarray(weight_ih), jnp.asarray(weight_hh)
    rows = weight_hh.shape[0]
    zeros = jnp.zeros((rows,), weight_hh.dtype)
    b_ih = zeros if bias is None else jnp.asarray(bias)
    b_hh = zeros
    facts = family_of(family)
    if facts.inner_bias_gate is not None and bias_n is not None:
        H = rows // facts.gates
        b_hh = zeros.at[facts.inner_bias_gate * H:(facts.inner_bias_gate + 1) * H].set(
            jnp.asarray(bias_n))
    return {"W_ih": weight_ih, "W_hh": weight_hh, "b_ih": b_ih, "b_hh": b_hh}


def block_diagonal(w_hh, gates: int):
    """Heads' ``W_hh`` (NH, G*DH, DH) as the dense (G*H, H) matrix of PyTorch's layout that
    they compute: row g*H + k*DH + i, column k*DH + j holds head k's row g*DH + i, column j,
    and every other entry is zero."""
    nh, _, dh = w_hh.shape
    blocks = w_hh.reshape(nh, gates, dh, dh)  # (head k, gate g, row i, column j)
    dense = jnp.einsum("kgij,kl->gkilj", blocks, jnp.eye(nh, dtype=w_hh.dtype))
    return dense.reshape(gates * nh * dh, nh * dh)


def to_cell(family, arrays) -> dict:
    """One cell's arrays (``weight_ih``, ``weight_hh``, ``bias`` and, for a family with an
    ``inner_bias_gate`` (the GRU), ``bias_n``) from ``{"W_ih", "W_hh", "b_ih", "b_hh"}``: the
    same function. Heads' ``W_hh`` (NH, G*DH, DH) becomes the dense block-diagonal matrix
    (`block_diagonal`)."""
    facts = family_of(family)
    b_ih, b_hh = jnp.asarray(arrays["b_ih"]), jnp.asarray(arrays["b_hh"])
    w_hh = jnp.asarray(arrays["W_hh"])
    if w_hh.ndim == 3:
        w_hh = block_diagonal(w_hh, facts.gates)
    out = {"weight_ih": jnp.asarray(arrays["W_ih"]), "weight_hh": w_hh}
    if facts.inner_bias_gate is not None:
        H = b_hh.shape[0] // facts.gates
        inner = slice(facts.inner_bias_gate * H, (facts.inner_bias_gate + 1) * H)
        out["bias"] = b_ih + b_hh.at[inner].set(0)
        out["bias_n"] = b_hh[inner]
    else:
        out["bias"] = b_ih + b_hh
    return out

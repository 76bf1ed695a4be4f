"""The step cells (`portable_rnn.linen.LSTMCell`, ..., and their NNX twins): one step with the
carry in and out, inside Flax's own loops, against Flax's cells on the same weights (converted
with the layers' `variables_from_flax`) and against the layer over the whole sequence.

Ported from Flax's tests (``tests/linen/linen_recurrent_test.py``, ``tests/nnx/nn/
recurrent_test.py``: TestLSTMCell's basic, sequence, dtypes, initialize_carry, variable lengths
and stateful cases, RNNTest's numerical equivalence cases); Flax's ``gate_fn`` and
``activation_fn`` options are not ported (the cells compute their family's equations).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from flax.nnx.nn import initializers

import references
from portable_rnn import linen
from portable_rnn import nnx as prnn
from portable_rnn._src.recurrent.families import FAMILIES

CELLS = [f.class_name for f in FAMILIES.values()]
# the families whose Flax cell the layers' converters read, and that cell
FLAX = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell}


def _close(a, b, tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=tol, atol=tol)


def _layer_carry(name, carry):
    """A cell's carry as the layer's initial carry (L*D = 1 first, the layer's order)."""
    fam = getattr(linen, name)._FAMILY
    order = FAMILIES[fam].flax_carry or range(len(FAMILIES[fam].states))
    states = carry if isinstance(carry, tuple) else (carry,)
    out = [None] * len(states)
    for i, s in zip(order, states):
        out[i] = s[None]
    return tuple(out) if len(out) > 1 else out[0]


# --- against Flax's own cells, inside Flax's loops -----------------------------------------------

@pytest.mark.parametrize("name", sorted(FLAX))
def test_steps_equal_flaxs_cell_on_the_same_weights(name):
    """Step by step from a random carry: the outputs and the carry (in Flax's order) equal
    Flax's cell's, its weights converted by the layer's `variables_from_flax`."""
    B, I, H, T = 3, 5, 6, 4
    flax_cell = FLAX[name](features=H)
    k = jax.random.split(jax.random.key(0), 4)
    xs = jax.random.normal(k[0], (T, B, I))
    carry = flax_cell.initialize_carry(k[1], (B, I))
    carry = jax.tree.map(lambda c: jax.random.normal(k[2], c.shape), carry)
    flax_params = flax_cell.init(k[3], carry, xs[0])["params"]
    ours = getattr(linen, f"{name}Cell")(features=H)
    params = getattr(linen, name).variables_from_flax(flax_params)["params"]["layer_0"]["forward"]
    ours_carry = carry
    for t in range(T):
        carry, y = flax_cell.apply({"params": flax_params}, carry, xs[t])
        ours_carry, got = ours.apply({"params": params}, ours_carry, xs[t])
        # float32 at the default precision: a TPU's products round differently in the two
        # cells' orders of summation (2e-5 measured on a TPU v5e)
        _close((got, ours_carry), (y, carry), references.float32_tol(1e-5))


def test_inside_nn_rnn_nn_scan_and_bidirectional():
    """Flax's loops run the cell: ``nn.RNN`` (ragged lengths, reverse) equals the layer on the
    same parameters; ``nn.scan`` and ``nn.Bidirectional`` take it."""
    B, T, I, H = 3, 5, 4, 6
    x = jax.random.normal(jax.random.key(1), (B, T, I))
    lengths = jnp.array([5, 2, 1])
    rnn = nn.RNN(linen.LSTMCell(features=H), return_carry=True)
    variables = rnn.init(jax.random.key(0), x)
    (c, h), y = rnn.apply(variables, x, seq_lengths=lengths)
    tree = {"layer_0": {"forward": variables["params"]["cell"]}}
    ref, (h_ref, c_ref) = linen.LSTM(hidden_size=H).apply({"params": tree}, x, lengths,
                                                          return_carry=True)
    valid = (jnp.arange(T)[None, :] < lengths[:, None])[..., None].astype(y.dtype)
    _close((y * valid, h, c), (ref, h_ref[0], c_ref[0]), 1e-6)

    back = nn.RNN(linen.GRUCell(features=H), reverse=True, keep_order=True)
    v = back.init(jax.random.key(2), x)
    tree = {"layer_0": {"forward": v["params"]["cell"]}}
    got = back.apply(v, x, seq_lengths=lengths)
    ref = linen.GRU(hidden_size=H).apply({"params": tree}, x[:, ::-1])[:, ::-1]
    _close(got[0], ref[0], 1e-6)  # the full-length row: the reversed sequence, kept in order

    scan = nn.scan(linen.SLSTMCell, variable_broadcast="params", split_rngs={"params": False},
                   in_axes=1, out_axes=1)(features=H)
    carry = scan.initialize_carry(jax.random.key(0), x[:, 0].shape)
    (final, ys), v = scan.init_with_output(jax.random.key(3), carry, x)
    tree = {"layer_0": {"forward": v["params"]}}
    ref, states = linen.SLSTM(hidden_size=H).apply({"params": tree}, x, return_carry=True)
    _close((ys, final), (ref, tuple(s[0] for s in states)), 1e-6)

    bi = nn.Bidirectional(nn.RNN(linen.MGUCell(features=H)), nn.RNN(linen.MGUCell(features=H)))
    y, _ = bi.init_with_output(jax.random.key(4), x)
    assert y.shape == (B, T, 2 * H)


@pytest.mark.parametrize("name", CELLS)
def test_streaming_in_steps_equals_the_layer_over_the_sequence(name):
    """A sequence fed one step at a time, from a random carry (in the cell's order), gives the
    layer's outputs and final carry on the cell's parameters; grad flows through the loop."""
    B, T, I, H = 2, 4, 3, 5
    cell = getattr(linen, f"{name}Cell")(features=H)
    k = jax.random.split(jax.random.key(5), 3)
    x = jax.random.normal(k[0], (B, T, I))
    carry = cell.initialize_carry(k[1], x[:, 0].shape)
    carry = jax.tree.map(lambda c: jax.random.uniform(k[2], c.shape, c.dtype, 0.1, 1.0), carry)
    params = cell.init(jax.random.key(6), carry, x[:, 0])["params"]
    layer = getattr(linen, name)(hidden_size=H)
    tree = {"params": {"layer_0": {"forward": params}}}

    def streamed(params, x):
        c, ys = carry, []
        for t in range(T):
            c, y = cell.apply({"params": params}, c, x[:, t])
            ys.append(y)
        return jnp.stack(ys, 1), c

    y, final = jax.jit(streamed)(params, x)
    ref, ref_carry = layer.apply(tree, x, None, _layer_carry(name, carry), return_carry=True)
    _close((y, _layer_carry(name, final)), (ref, ref_carry), 1e-5)

    def loss_cell(p):
        return jnp.sum(streamed(p, x)[0] ** 2)

    def loss_layer(p):
        return jnp.sum(layer.apply({"params": {"layer_0": {"forward": p}}}, x, None,
                                   _layer_carry(name, carry)) ** 2)

    _close(jax.jit(jax.grad(loss_cell))(params), jax.jit(jax.grad(loss_layer))(params), 1e-4)


# --- Flax's TestLSTMCell, against our NNX cells ------------------------------------------------

@pytest.mark.parametrize("name", ["LSTM", "GRU", "SLSTM"])
def test_nnx_cell_basic_sequence_and_stateful(name):
    cls = getattr(prnn, f"{name}Cell")
    module = cls(in_features=3, hidden_features=4, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (5, 2, 3))  # seq_len, batch, feature
    carry = module.initialize_carry(x.shape[1:], nnx.Rngs(0))
    outputs = []
    for t in range(x.shape[0]):
        carry, y = module(carry, x[t])
        outputs.append(y)
    outputs = jnp.stack(outputs)
    assert outputs.shape == (5, 2, 4)
    # stateful: a second step from the first's carry differs from a step from zeros
    c1, y1 = module(module.initialize_carry((2, 3)), x[0])
    _, y2 = module(c1, x[0])
    assert y1.shape == y2.shape == (2, 4) and not np.allclose(y1, y2)
    # the NNX cell is the Linen cell's step on the same parameters
    lin = getattr(linen, f"{name}Cell")(features=4)
    params = {n: getattr(module, n)[...] for n in ("W_ih", "W_hh", "b_ih", "b_hh")}
    _close(lin.apply({"params": params}, c1, x[1]), module(c1, x[1]), 0)


def test_nnx_cell_dtypes_initialize_carry_and_variable_lengths():
    module = prnn.LSTMCell(3, 4, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16,
                           rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3), dtype=jnp.bfloat16)
    carry = module.initialize_carry(x.shape, nnx.Rngs(0))
    new_carry, y = module(carry, x)
    assert y.dtype == jnp.bfloat16 and y.shape == (2, 4)
    assert [a.dtype for a in new_carry] == [jnp.float32, jnp.bfloat16]  # (c, h): c kept wide

    module = prnn.LSTMCell(3, 4, carry_init=initializers.ones, rngs=nnx.Rngs(0))
    c, h = module.initialize_carry((1, 3), nnx.Rngs(0))
    assert c.shape == h.shape == (1, 4) and bool(jnp.all(c == 1.0)) and bool(jnp.all(h == 1.0))

    rnn = nnx.RNN(prnn.LSTMCell(3, 4, rngs=nnx.Rngs(4)), return_carry=True)
    x = jnp.array([[[1, 1, 1], [2, 2, 2], [3, 3, 3], [0, 0, 0], [0, 0, 0]],
                   [[4, 4, 4], [5, 5, 5], [6, 6, 6], [7, 7, 7], [8, 8, 8]]], jnp.float32)
    lengths = jnp.array([3, 5])
    (c, h), outputs = rnn(x, seq_lengths=lengths)
    assert outputs.shape == (2, 5, 4) and c.shape == h.shape == (2, 4)
    # the final carry of the short row is its carry after its last valid step
    cell = rnn.cell
    carry = cell.initialize_carry((1, 3))
    for t in range(3):
        carry, _ = cell(carry, x[:1, t])
    _close((carry[0][0], carry[1][0]), (c[0], h[0]), 1e-6)


# --- errors ------------------------------------------------------------------------------------

def test_a_wrong_carry_names_the_argument():
    cell = prnn.LSTMCell(3, 4, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3))
    with pytest.raises(TypeError, match=r"`carry` must be a tuple \(c, h\)"):
        cell(jnp.zeros((2, 4)), x)
    with pytest.raises(ValueError, match=r"`carry\[1\]` \(h\) must have shape \(\*batch, 4\) = "
                                         r"\(2, 4\) for `inputs` of shape \(2, 3\); got \(2, 5\)"):
        cell((jnp.zeros((2, 4)), jnp.zeros((2, 5))), x)
    with pytest.raises(ValueError, match=r"`inputs` must have input_size=3"):
        cell(cell.initialize_carry((2, 3)), jnp.ones((2, 7)))
    with pytest.raises(TypeError, match=r"`rngs` must be an `nnx.Rngs`"):
        prnn.GRUCell(3, 4, rngs=0)

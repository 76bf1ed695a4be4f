"""Every equivalence portable_rnn promises, stated once, as hypothesis properties.

 1. scan LSTM == float64 NumPy step loop (ragged, length 0, bidirectional, layers)
    `test_lstm_equals_numpy_loop`
 2. scan LSTM == `jax.experimental.rnn.lstm_ref`, outputs and gradients
    `test_lstm_equals_lstm_ref`
 3. scan LSTM == PyTorch `nn.LSTM` (packed sequences)
    `test_lstm_equals_torch`
 4. scan LSTM == Flax `nn.RNN(OptimizedLSTMCell or LSTMCell)`, stacked
    `test_lstm_equals_flax_cells`
 5. bfloat16 and float16 LSTM == a float64 loop rounding where the semantics round, outputs
    and gradients, within 2 ulps  `tests/test_low_precision.py`
 6. cuDNN LSTM route == scan, outputs and gradients (emulated on CPU)
    `test_lstm_cudnn_route_equals_scan`
 7. cuDNN LSTM route == scan on a real GPU
    `test_lstm_real_cudnn_equals_scan` (gpu)
 8. LSTM under `vmap` (any argument, any axis) == loop
    `test_lstm_vmap_equals_loop`
 9. LSTM batch-sharded over devices == unsharded, sharding kept
    `test_lstm_sharded_equals_unsharded`
10. `linen.LSTM` == `nnx.LSTM` with the same parameters
    `test_linen_equals_nnx`
11. attention "xla" == "chunked" == `jax.nn` (xla), outputs and gradients
    `test_attention_paths_equal_jax_nn`
12. chunked attention, any block sizes == dense
    `test_chunked_blocks_equal_dense`
13. attention == PyTorch SDPA, outputs and gradients
    `test_attention_equals_torch_sdpa`
14. cuDNN attention route == xla, outputs and gradients (emulated on CPU)
    `test_attention_cudnn_route_equals_xla`
15. attention under `vmap` (any operand, any axis) == loop
    `test_attention_vmap_equals_loop`
16. attention sharded over batch and heads == unsharded, sharding kept
    `test_attention_sharded_equals_unsharded`
17. GRU, simple RNN (tanh, relu), projected LSTM == float64 NumPy step loop
    `test_family_equals_numpy_loop`
18. their hand-written VJPs == autodiff of a jax.numpy step loop
    `test_family_gradients_equal_autodiff_of_a_loop`
19. GRU, simple RNN, projected LSTM == PyTorch `nn.GRU` / `nn.RNN` / `nn.LSTM(proj_size)`,
    outputs and gradients (packed sequences)  `test_family_equals_torch`
20. their bfloat16 and float16 == the rounded float64 loop  `tests/test_low_precision.py`
21. under `vmap` (any argument, any axis) == loop  `test_family_vmap_equals_loop`
22. batch-sharded == unsharded, sharding kept  `test_family_sharded_equals_unsharded`

Rows of attention whose query sees no key: portable_rnn gives 0, jax.nn the average of all
values; comparisons weight outputs by the rows that see a key (from a NumPy loop in
`attention_helpers.visible_rows`) and check separately that the other rows are exactly 0.

`HYPOTHESIS_PROFILE=thorough` runs 25x the examples of the default `ci` profile.
"""

from functools import partial

import draws
import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jax.experimental import rnn as jrnn
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import family_helpers as fam
import portable_rnn
from attention_helpers import attention_cases, make_attention_inputs, visible_rows
from cudnn_emulation import emulated_cudnn, emulated_cudnn_attention
from lstm_helpers import lstm_cases, make_inputs, run, torch_lstm
from portable_rnn import linen as plinen
from portable_rnn import nnx as pnnx
from portable_rnn._src.attention.routes.chunked import attention_chunked
from portable_rnn._src.attention.routes.xla import attention_dense
from references import (
    ATTENTION_FLOOR,
    ATTENTION_ULPS,
    assert_ulps,
    attention_ulps,
    float32_tol,
    gradient_scale,
    numpy_lstm,
)

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")


def _examples(fraction):
    """A share of the profile's examples, for the more expensive properties."""
    return settings(max_examples=max(2, int(settings.default.max_examples * fraction)))


# A third of the profile's examples, for properties whose `@example`s pin the hard cases
_A_THIRD = settings(max_examples=max(1, settings.default.max_examples // 3))


def _close(got, want, tol, msg=""):
    """float32 closeness at `tol`, or at the platform's float32 floor where that is coarser."""
    tol = float32_tol(tol)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.shape(a) == np.shape(b), msg
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   atol=tol, rtol=tol, err_msg=msg)


def _cotangents(outs, seed):
    return [draws.normal(jax.random.key(seed + i), o.shape) for i, o in enumerate(outs)]


def _lstm_case(B, T, I, H, L, bidir, lengths, seed):
    """An `lstm_cases` draw, for `@example`."""
    return B, T, I, H, L, bidir, np.array(lengths, np.int32), seed


def _family_case(kind, B, T, I, H, L, bidir, lengths, seed, P=0):
    """A `family_cases` draw, for `@example`."""
    return kind, B, T, I, H, P, L, bidir, np.array(lengths, np.int32), seed


def _weighted_sum(f, cot):
    def loss(*args):
        return sum(jnp.sum(o.astype(jnp.float32) * c) for o, c in zip(f(*args), cot))
    return loss


# ---------------------------------------------------------------------------------------------
# LSTM
# ---------------------------------------------------------------------------------------------


@_A_THIRD
@given(lstm_cases())
@example(_lstm_case(3, 5, 3, 4, 3, True, [5, 0, 2], 1))  # length 0 next to full, 3 layers
@example(_lstm_case(2, 64, 8, 32, 2, True, [64, 17], 2))
def test_lstm_equals_numpy_loop(case):
    B, T, I, H, L, bidir, lengths, seed = case
    x, h0, c0, w = make_inputs(B, T, I, H, L, bidir, seed)
    got = run(x, h0, c0, w, lengths, I, H, L, bidir)
    want = numpy_lstm(x, h0, c0, *portable_rnn.unpack_lstm_weights(w, I, H, L, bidir), lengths,
                      L, bidir)
    _close(got, want, 2e-5)


@partial(jax.jit, static_argnums=(5, 6, 7, 8))
def _lstm_ref(x, h0, c0, w, lengths, I, H, L, bidir):
    return jrnn.lstm_ref(x, h0, c0, *jrnn.unpack_lstm_weights(w, I, H, L, bidir),
                         jnp.asarray(lengths, jnp.int32), I, H, L, 0.0, bidir)


@_A_THIRD
@given(lstm_cases(min_length=1, max_layers=2))
@example(_lstm_case(3, 6, 3, 4, 2, True, [6, 1, 3], 3))
@example(_lstm_case(2, 64, 8, 32, 1, True, [64, 1], 4))
def test_lstm_equals_lstm_ref(case):
    """Lengths >= 1: for length 0, lstm_ref returns the last step's carry, not h_0 / c_0."""
    B, T, I, H, L, bidir, lengths, seed = case
    args = make_inputs(B, T, I, H, L, bidir, seed)
    ours = lambda *a: run(*a, lengths, I, H, L, bidir)  # noqa: E731
    ref = lambda *a: _lstm_ref(*a, lengths, I, H, L, bidir)  # noqa: E731
    out = ours(*args)
    _close(out, ref(*args), 1e-5)
    cot = _cotangents(out, seed)
    grads = [jax.jit(jax.grad(_weighted_sum(f, cot), (0, 1, 2, 3)))(*args) for f in (ours, ref)]
    _close(*grads, 5e-5)


def _torch():
    return pytest.importorskip("torch", reason="PyTorch cross-checks need torch (CPU)")


@given(lstm_cases(min_length=1))
@example(_lstm_case(3, 6, 3, 4, 3, True, [6, 1, 4], 5))
@example(_lstm_case(2, 64, 8, 32, 2, False, [64, 33], 6))
def test_lstm_equals_torch(case):
    """Lengths >= 1: PyTorch's packed sequences do not allow length 0."""
    _torch()
    B, T, I, H, L, bidir, lengths, seed = case
    x, h0, c0, w = make_inputs(B, T, I, H, L, bidir, seed)
    _close(run(x, h0, c0, w, lengths, I, H, L, bidir),
           torch_lstm(w, I, H, L, bidir, x, h0, c0, lengths), 1e-5)


@_examples(0.375)
@given(st.sampled_from(["OptimizedLSTMCell", "LSTMCell"]), lstm_cases(min_length=1, max_layers=2))
@example("LSTMCell", _lstm_case(3, 6, 3, 4, 2, True, [6, 1, 3], 7))
def test_lstm_equals_flax_cells(cell, case):
    """Stacked Flax nn.RNN / nn.Bidirectional layers, loaded through lstm_weights_from_flax."""
    B, T, I, H, L, bidir, lengths, seed = case
    cell_cls = getattr(flax_nn, cell)
    x = draws.normal(jax.random.key(seed), (B, T, I))
    seq = jnp.asarray(lengths)
    inp, trees = x, []
    for layer in range(L):
        m = (flax_nn.Bidirectional(flax_nn.RNN(cell_cls(H)), flax_nn.RNN(cell_cls(H))) if bidir
             else flax_nn.RNN(cell_cls(H)))
        params = m.init(jax.random.key(seed + 1 + layer), inp)
        inp = m.apply(params, inp, seq_lengths=seq)
        trees.append(params)
    w = portable_rnn.lstm_weights_from_flax(trees)
    zeros = jnp.zeros((L * (2 if bidir else 1), B, H))
    y = run(x, zeros, zeros, w, lengths, I, H, L, bidir)[0]
    # Flax leaves outputs past each length non-zero: compare where they are defined.
    valid = (jnp.arange(T)[None, :] < seq[:, None])[..., None]
    _close(jnp.where(valid, y, 0), jnp.where(valid, inp, 0), 1e-5)


def _lstm_loss(impl, lengths, I, H, L, bidir, cot, **kw):
    def f(x, h0, c0, w):
        return portable_rnn.lstm(x, h0, c0, w, lengths, I, H, L, 0.0, bidir,
                                 implementation=impl, **kw)
    return f, _weighted_sum(f, cot)


@_examples(0.375)
@given(lstm_cases(max_layers=2), st.sampled_from(["int32", "int64", "uint8", None]))
@example(_lstm_case(3, 6, 3, 4, 2, True, [6, 0, 3], 8), "int64")
def test_lstm_cudnn_route_equals_scan(case, seq_dtype):
    """The cuDNN wrapper (length-0 patch, casts, custom_vjp) through JAX's own cuDNN functions,
    whose primitives the test emulation computes with lstm_ref."""
    B, T, I, H, L, bidir, lengths, seed = case
    args = make_inputs(B, T, I, H, L, bidir, seed)
    seq = None if seq_dtype is None else lengths.astype(seq_dtype)
    cot = _cotangents(run(*args, lengths, I, H, L, bidir), seed)
    results = []
    with emulated_cudnn():
        for impl in ("cudnn", "scan"):
            f, loss = _lstm_loss(impl, seq, I, H, L, bidir, cot, capabilities=GPU,
                                 precision=jax.lax.Precision.HIGHEST)  # no TF32 rounding
            results.append((f(*args), jax.grad(loss, (0, 1, 2, 3))(*args)))
    _close(*results, 2e-5)


@pytest.mark.gpu
@_examples(0.5)
@given(lstm_cases(max_layers=2))
def test_lstm_real_cudnn_equals_scan(case):
    """On a GPU: cuDNN's own kernels (TF32 off through precision=HIGHEST) against scan."""
    B, T, I, H, L, bidir, lengths, seed = case
    args = make_inputs(B, T, I, H, L, bidir, seed)
    cot = _cotangents(run(*args, lengths, I, H, L, bidir), seed)
    results = []
    for impl in ("cudnn", "scan"):
        f, loss = _lstm_loss(impl, lengths, I, H, L, bidir, cot,
                             precision=jax.lax.Precision.HIGHEST)
        results.append((jax.jit(f)(*args), jax.jit(jax.grad(loss, (0, 1, 2, 3)))(*args)))
    _close(*results, 1e-4)


LSTM_ARGS = ("x", "h_0", "c_0", "weights", "seq_lengths")


@_examples(0.375)
@given(lstm_cases(max_layers=2), st.sampled_from(range(5)), st.data())
def test_lstm_vmap_equals_loop(case, arg, data):
    """An extra axis at a drawn position of a drawn argument; outputs mapped to a drawn axis."""
    B, T, I, H, L, bidir, lengths, seed = case
    V = 2
    base = [*make_inputs(B, T, I, H, L, bidir, seed), jnp.asarray(lengths)]
    if arg < 4:
        slices = [make_inputs(B, T, I, H, L, bidir, seed + 1 + v)[arg] for v in range(V)]
    else:
        slices = [jnp.asarray(data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                              jnp.int32) for _ in range(V)]
    axis = data.draw(st.integers(0, slices[0].ndim), label="in axis")
    out_axis = data.draw(st.integers(0, 1), label="out axis")
    in_axes = tuple(axis if i == arg else None for i in range(5))
    stacked = list(base)
    stacked[arg] = jnp.stack(slices, axis=axis)
    f = lambda *a: run(*a, I, H, L, bidir)  # noqa: E731
    got = jax.jit(jax.vmap(f, in_axes=in_axes, out_axes=out_axis))(*stacked)
    for v in range(V):
        one = list(base)
        one[arg] = slices[v]
        _close([jnp.take(g, v, axis=out_axis) for g in got], f(*one), 1e-6)


def _mesh(n, names=("batch",)):
    shape = (n,) if len(names) == 1 else (n // 2, 2)
    return jax.make_mesh(shape, names, devices=jax.devices("cpu")[:n])


@pytest.mark.cpu  # CPU devices: as many as the mesh needs
@_examples(0.375)
@given(lstm_cases(max_layers=2), st.sampled_from([2, 4, 8]))
def test_lstm_sharded_equals_unsharded(case, devices):
    """Batch over `devices` CPU devices under jit: same outputs and gradients, and the outputs
    stay batch-sharded (no gather onto one device)."""
    _, T, I, H, L, bidir, _, seed = case
    B = devices
    lengths = np.random.default_rng(seed).integers(0, T + 1, B).astype(np.int32)
    args = [*make_inputs(B, T, I, H, L, bidir, seed), jnp.asarray(lengths)]
    mesh = _mesh(devices)
    specs = (P("batch"), P(None, "batch"), P(None, "batch"), P(), P("batch"))
    sharded = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
    f = lambda *a: run(*a, I, H, L, bidir)  # noqa: E731
    loss = _weighted_sum(f, _cotangents(f(*args), seed))
    want = (f(*args), jax.grad(loss, (0, 3))(*args))
    got = jax.jit(lambda *a: (f(*a), jax.grad(loss, (0, 3))(*a)))(*sharded)
    _close(got, want, 1e-5)
    (y, h_n, c_n), (dx, _) = got
    for out, spec in ((y, P("batch")), (h_n, P(None, "batch")), (c_n, P(None, "batch")),
                      (dx, P("batch"))):
        assert out.sharding.is_equivalent_to(NamedSharding(mesh, spec), out.ndim), out.sharding


@_examples(0.375)
@given(lstm_cases(max_layers=2), st.integers(0, 2), st.booleans())
def test_linen_equals_nnx(case, extra_dims, with_carry):
    """The same parameter tree in both APIs; extra leading batch dims, lengths and carries."""
    B, T, I, H, L, bidir, lengths, seed = case
    lead = (2,) * extra_dims + (B,)
    x = draws.normal(jax.random.key(seed), (*lead, T, I))
    seq = jnp.broadcast_to(jnp.asarray(lengths), lead)
    carry = None
    if with_carry:
        ks = jax.random.split(jax.random.key(seed + 1))
        carry = tuple(draws.normal(k, (L * (2 if bidir else 1), *lead, H)) for k in ks)
    layer = plinen.LSTM(hidden_size=H, num_layers=L, bidirectional=bidir)
    variables = layer.init(jax.random.key(seed + 2), x)
    got = layer.apply(variables, x, seq, carry, return_carry=True)
    model = pnnx.LSTM(I, H, num_layers=L, bidirectional=bidir, rngs=nnx.Rngs(0))
    model.load_params(variables["params"])
    _close(got, model(x, seq, carry, return_carry=True), 1e-6)


# ---------------------------------------------------------------------------------------------
# The rest of the recurrent family: GRU, simple RNN (tanh, relu), LSTM with projections
# ---------------------------------------------------------------------------------------------


@_A_THIRD
@given(fam.family_cases())
@example(_family_case("gru", 3, 6, 3, 4, 2, True, [6, 0, 2], 9))
@example(_family_case("rnn_tanh", 2, 64, 8, 32, 2, True, [64, 0], 10))
@example(_family_case("rnn_relu", 3, 5, 3, 4, 2, False, [5, 2, 0], 11))
@example(_family_case("lstm_proj", 3, 6, 3, 5, 2, True, [6, 0, 3], 12, P=2))
def test_family_equals_numpy_loop(case):
    kind, B, T, I, H, P, L, bidir, lengths, seed = case
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed)
    got = fam.call(kind, x, states, w, lengths, I, H, P, L, bidir)
    _close(got, fam.reference(kind, x, states, w, lengths, I, H, P, L, bidir), 2e-5, kind)


@_A_THIRD
@given(fam.family_cases(max_layers=2))
@example(_family_case("gru", 3, 6, 3, 4, 2, True, [6, 0, 2], 13))
@example(_family_case("rnn_relu", 2, 64, 8, 32, 1, True, [64, 9], 14))
@example(_family_case("lstm_proj", 3, 5, 3, 5, 2, True, [5, 0, 3], 15, P=3))
def test_family_gradients_equal_autodiff_of_a_loop(case):
    """The driver's backward (per-cell backward step, GEMMs after the loop) against JAX's
    autodiff of a plain per-sequence, per-step loop; ragged lengths including 0."""
    kind, B, T, I, H, P, L, bidir, lengths, seed = case
    args = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed)
    ours = lambda x, s, w: fam.call(kind, x, s, w, lengths, I, H, P, L, bidir)  # noqa: E731
    ref = lambda x, s, w: fam.reference(kind, x, s, w, lengths, I, H, P, L, bidir,  # noqa: E731
                                        xp=jnp)
    out = jax.eval_shape(ours, *args)  # the cotangents' shapes
    cot = _cotangents(jax.tree.leaves(out), seed)
    # each gradient one compiled program (eagerly, the loop's ops compiled one by one)
    grads = [jax.jit(jax.grad(lambda *a, f=f: sum(jnp.sum(o * c) for o, c in zip(
        jax.tree.leaves(f(*a)), cot)), (0, 1, 2)))(*args) for f in (ours, ref)]
    _close(*grads, 5e-5, kind)


@_A_THIRD
@given(fam.family_cases(min_length=1, max_layers=3))
@example(_family_case("gru", 3, 6, 3, 4, 3, True, [6, 1, 2], 16))
@example(_family_case("rnn_tanh", 2, 64, 8, 32, 2, True, [64, 7], 17))
@example(_family_case("rnn_relu", 2, 5, 3, 4, 3, False, [5, 2], 18))
@example(_family_case("lstm_proj", 3, 6, 3, 5, 3, True, [6, 1, 3], 19, P=2))
def test_family_equals_torch(case):
    """Outputs, final states and the gradients of inputs, initial states and weights against
    PyTorch (float32, packed sequences: lengths >= 1)."""
    torch = _torch()
    kind, B, T, I, H, P, L, bidir, lengths, seed = case
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed)
    y, finals = fam.call(kind, x, states, w, lengths, I, H, P, L, bidir)
    cot = _cotangents([y, *finals], seed)
    mod = fam.torch_module(kind, w, I, H, P, L, bidir)
    tx = torch.tensor(np.asarray(x), requires_grad=True)
    ts = [torch.tensor(np.asarray(s), requires_grad=True) for s in states]
    ty, tfinals = fam.torch_run(kind, mod, tx, ts, lengths)
    sum((o * torch.from_numpy(np.array(c))).sum()
        for o, c in zip([ty, *tfinals], cot)).backward()
    _close((y, finals), (ty.detach().numpy(), [f.detach().numpy() for f in tfinals]), 1e-5, kind)

    def loss(x, states, w):
        y, finals = fam.call(kind, x, states, w, lengths, I, H, P, L, bidir)
        return sum(jnp.sum(o * c) for o, c in zip([y, *finals], cot))
    dx, dstates, dw = jax.jit(jax.grad(loss, (0, 1, 2)))(x, states, w)
    twgrad = {k: v.grad for k, v in mod.named_parameters()}
    to_flat = {"gru": portable_rnn.gru_weights_from_torch,
               "lstm_proj": portable_rnn.lstm_weights_from_torch}.get(
        kind, portable_rnn.simple_rnn_weights_from_torch)
    _close((dx, dstates, dw), (tx.grad.numpy(), [s.grad.numpy() for s in ts], to_flat(twgrad)),
           5e-5, kind)


@_A_THIRD
@given(fam.family_cases(max_layers=3, kinds=fam.ALL_KINDS), st.sampled_from([0.25, 0.5]))
@example(_family_case("lstm", 3, 6, 3, 4, 3, True, [6, 0, 2], 20), 0.25)
@example(_family_case("gru", 2, 64, 8, 32, 3, False, [64, 5], 21), 0.5)
@example(_family_case("lstm_proj", 2, 5, 3, 5, 3, True, [5, 3], 22, P=2), 0.25)
def test_family_with_dropout_equals_numpy_loop(case, rate):
    """Dropout between layers, ragged, every cell, against the float64 loop given the documented
    masks, ``bernoulli(fold_in(key, l), 1 - rate, (B, T, D*H))`` on layer l's output."""
    kind, B, T, I, H, P, L, bidir, lengths, seed = case
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed)
    key = jax.random.key(seed + 1)
    got = fam.call(kind, x, states, w, lengths, I, H, P, L, bidir, dropout=rate,
                   dropout_rng=key)
    width = (2 if bidir else 1) * (P if kind == "lstm_proj" else H)
    masks = fam.dropout_masks(key, rate, L, B, T, width)
    want = fam.reference(kind, x, states, w, lengths, I, H, P, L, bidir, dropout=(masks, rate))
    _close(got, want, 2e-5, kind)


@_examples(0.375)
@given(fam.family_cases(), st.data())
def test_family_vmap_equals_loop(case, data):
    """An extra axis at a drawn position of a drawn argument; outputs mapped to a drawn axis."""
    kind, B, T, I, H, P, L, bidir, lengths, seed = case
    V = 2
    x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed)
    base = [x, *states, w, jnp.asarray(lengths)]
    arg = data.draw(st.integers(0, len(base) - 1), label="argument")
    if arg < len(base) - 1:
        slices = []
        for v in range(V):
            xv, sv, wv = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed + 1 + v)
            slices.append([xv, *sv, wv][arg])
    else:
        slices = [jnp.asarray(data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                              jnp.int32) for _ in range(V)]
    axis = data.draw(st.integers(0, slices[0].ndim), label="in axis")
    out_axis = data.draw(st.integers(0, 1), label="out axis")
    n = len(states)

    def f(*a):
        return fam.call(kind, a[0], tuple(a[1:1 + n]), a[1 + n], a[2 + n], I, H, P, L, bidir)
    stacked = list(base)
    stacked[arg] = jnp.stack(slices, axis=axis)
    in_axes = tuple(axis if i == arg else None for i in range(len(base)))
    got = jax.jit(jax.vmap(f, in_axes=in_axes, out_axes=out_axis))(*stacked)
    for v in range(V):
        one = list(base)
        one[arg] = slices[v]
        _close(jax.tree.map(lambda g, v=v: jnp.take(g, v, axis=out_axis), got), f(*one), 1e-6,
               kind)


@pytest.mark.cpu  # CPU devices: as many as the mesh needs
@_examples(0.375)
@given(fam.family_cases(), st.sampled_from([2, 4]))
def test_family_sharded_equals_unsharded(case, devices):
    """Batch over `devices` CPU devices under jit: same outputs and gradients; outputs and the
    input gradient stay batch-sharded."""
    kind, _, T, I, H, proj, L, bidir, _, seed = case
    B = devices
    lengths = jnp.asarray(np.random.default_rng(seed).integers(0, T + 1, B).astype(np.int32))
    x, states, w = fam.make_inputs(kind, B, T, I, H, proj, L, bidir, seed)
    mesh = _mesh(devices)
    put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
    sharded = (put(x, P("batch")), tuple(put(s, P(None, "batch")) for s in states), put(w, P()),
               put(lengths, P("batch")))
    f = lambda x, s, w, n: fam.call(kind, x, s, w, n, I, H, proj, L, bidir)  # noqa: E731
    cot = _cotangents(jax.tree.leaves(f(x, states, w, lengths)), seed)
    loss = lambda *a: sum(jnp.sum(o * c) for o, c in zip(jax.tree.leaves(f(*a)), cot))  # noqa
    want = (f(x, states, w, lengths), jax.grad(loss, (0, 2))(x, states, w, lengths))
    got = jax.jit(lambda *a: (f(*a), jax.grad(loss, (0, 2))(*a)))(*sharded)
    _close(got, want, 1e-5, kind)
    (y, finals), (dx, _) = got
    for out, spec in ((y, P("batch")), (dx, P("batch")),
                      *((s, P(None, "batch")) for s in finals)):
        assert out.sharding.is_equivalent_to(NamedSharding(mesh, spec), out.ndim), out.sharding


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


def _attention_case(B, T, S, N, K, H, dtype=jnp.float32, **kw):
    """An `attention_cases` draw, for `@example`."""
    case = dict(B=B, T=T, S=S, N=N, K=K, H=H, dtype=dtype, rank=4, seed=1, is_causal=False,
                window=None, bias=None, mask=None, q_len=None, kv_len=None, scale=None)
    case.update(kw)
    return case


# GQA (2 query heads per key/value head) with padding: a key length of 0 next to a full one
_GQA_PADDED = dict(bias=(1, 4, 9, 7), mask=(2, 1, 9, 7), q_len=[9, 3], kv_len=[7, 0])


def _row_weights(out_shape, rows, seed):
    w = draws.normal(jax.random.key(seed), out_shape, jnp.float32)
    return w * jnp.asarray(rows, jnp.float32)[..., None]


def _attention_loss(f, weights):
    return lambda *a: jnp.sum(f(*a).astype(jnp.float32) * weights)


def _attend(impl, kw, **extra):
    return lambda q, k, v: portable_rnn.dot_product_attention(q, k, v, implementation=impl,
                                                              **kw, **extra)


@_A_THIRD
@given(attention_cases(dtypes=(jnp.float32, jnp.bfloat16, jnp.float16)))
@example(_attention_case(2, 9, 7, 4, 2, 8, jnp.bfloat16, **_GQA_PADDED))
@example(_attention_case(1, 12, 12, 2, 1, 8, jnp.float16, is_causal=True, window=(2, 1),
                         q_len=[10], kv_len=[12], scale=0.5))
@example(_attention_case(1, 5, 6, 2, 2, 4, rank=3, bias=(1, 1, 5, 6)))
def test_attention_paths_equal_jax_nn(case):
    """16-bit inputs: jax.nn on their float32 values, rounded to the 16-bit dtype (on a CPU
    portable_rnn computes every 16-bit product exactly in float32 and rounds the result; jax.nn
    itself cannot run every 16-bit shape on XLA:CPU: "Algorithm not supported by the
    ElementalIrEmitter: ALG_DOT_BF16_BF16_F32" at T = S = 1)."""
    (q, k, v), kw = make_attention_inputs(case)
    rows = visible_rows(case, kw)
    w = _row_weights(q.shape, rows, case["seed"] + 1)
    dtype = case["dtype"]
    low = jnp.dtype(dtype).itemsize == 2
    with jax.numpy_dtype_promotion("standard"):  # jax.nn itself relies on implicit promotion
        f32 = {n: a.astype(jnp.float32) if low and a.dtype == dtype else a
               for n, a in kw.items() if hasattr(a, "dtype")}
        stock = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla",
                                                             **dict(kw, **f32))
        args32 = [a.astype(jnp.float32) for a in (q, k, v)]
        ref = np.asarray(jax.jit(stock)(*args32), np.float32)
        # a 16-bit output's cotangent is 16-bit (JAX rounds it): so is the reference's
        w_ref = w.astype(dtype).astype(jnp.float32) if low else w
        ref_grads = jax.jit(jax.grad(_attention_loss(stock, w_ref), (0, 1, 2)))(*args32)
    for impl in ("xla", "chunked"):
        f = jax.jit(_attend(impl, kw))
        out = f(q, k, v)
        assert out.shape == q.shape and out.dtype == q.dtype
        got = np.asarray(out, np.float32)
        assert not got[~rows].any(), f"{impl}: rows without a visible key must be 0"
        grads = jax.jit(jax.grad(_attention_loss(f, w), (0, 1, 2)))(q, k, v)
        if not low:
            _close(got[rows], ref[rows], 2e-5, impl)
            _close(grads, ref_grads, 2e-4, impl)
            continue
        # 16-bit: exact-then-rounded on both sides, within the platform's bound (tests/
        # test_low_precision.py: measured <= 1 ulp on a CPU, against float64; one more on a TPU)
        ulps = attention_ulps()
        rounded = lambda a: np.asarray(np.asarray(a, np.float32).astype(dtype),  # noqa: E731
                                       np.float32)
        assert_ulps(got[rows], rounded(ref[rows]), dtype, ulps, f"{impl} output",
                    ATTENTION_FLOOR)
        largest = max(float(np.max(np.abs(np.asarray(r)), initial=0)) for r in ref_grads)
        for g, r, name in zip(grads, ref_grads, ("dq", "dk", "dv")):
            assert_ulps(g, rounded(r), dtype, ulps, f"{impl} {name}",
                        ATTENTION_FLOOR, gradient_scale(r, largest))


@_A_THIRD
@given(st.one_of(attention_cases(max_len=20), attention_cases(max_len=20, dynamic=False)),
       st.integers(1, 7), st.integers(1, 7))
@example(_attention_case(1, 20, 20, 2, 1, 4, is_causal=True, window=(5, 0)), 3, 4)
@example(_attention_case(2, 17, 19, 2, 2, 4, window=(3, 2), bias=(1, 2, 17, 19)), 4, 3)
def test_chunked_blocks_equal_dense(case, block_q, block_k):
    """Many small blocks (padding, block skipping, bias gradient accumulation) equal one. Half
    the cases have no mask and no lengths, where blocks wholly inside causality and the window
    skip the visibility mask."""
    (q, k, v), kw = make_attention_inputs(case)
    if case["rank"] == 3:
        q, k, v = q[None], k[None], v[None]
    bias = kw.get("bias")
    args = (kw.get("mask"), kw.get("query_seq_lengths"), kw.get("key_value_seq_lengths"))
    static = dict(scale=kw["scale"] or 0.5, is_causal=kw["is_causal"],
                  window=kw["local_window_size"])

    def path(impl, **blocks):
        return lambda q, k, v, b: impl(q, k, v, b, *args, **static, **blocks)

    dense = jax.jit(path(attention_dense))
    chunked = jax.jit(path(attention_chunked, block_q=block_q, block_k=block_k))
    _close(chunked(q, k, v, bias), dense(q, k, v, bias), 2e-5)
    w = draws.normal(jax.random.key(case["seed"]), q.shape)
    argnums = (0, 1, 2, 3) if bias is not None else (0, 1, 2)
    grads = [jax.jit(jax.grad(_attention_loss(f, w), argnums))(q, k, v, bias)
             for f in (chunked, dense)]
    _close(*grads, 5e-5)


@_examples(0.75)
@given(attention_cases(max_len=10))
@example(_attention_case(2, 9, 7, 4, 2, 8, **_GQA_PADDED))
def test_attention_equals_torch_sdpa(case):
    """PyTorch scaled_dot_product_attention with the combined boolean mask (GQA included)."""
    torch = _torch()
    (q, k, v), kw = make_attention_inputs(case)
    rows = visible_rows(case, kw)
    if case["rank"] == 3:
        q, k, v, rows = q[None], k[None], v[None], rows[None]
    B, T, S, N, K, H = (case[c] for c in "BTSNKH")
    allowed = np.ones((B, N, T, S), bool)
    if "mask" in kw:
        allowed &= np.broadcast_to(np.asarray(kw["mask"]), allowed.shape)
    t, s = np.arange(T)[:, None], np.arange(S)[None, :]
    if case["is_causal"]:
        allowed &= s <= t
    if case["window"] is not None:
        allowed &= (s >= t - case["window"][0]) & (s <= t + case["window"][1])
    for b in range(B):
        if case["kv_len"] is not None:
            allowed[b, ..., case["kv_len"][b]:] = False
    attn_bias = np.where(allowed, 0.0, -np.inf).astype(np.float32)
    # Rows without a visible key carry zero weight in the loss; let torch attend everywhere
    # there so that nothing is NaN.
    attn_bias[~allowed.any(-1)] = 0.0
    if "bias" in kw:
        attn_bias = attn_bias + np.broadcast_to(np.asarray(kw["bias"]), attn_bias.shape)
    scale = kw["scale"] if kw["scale"] is not None else 1 / np.sqrt(H)
    tq, tk, tv = (torch.tensor(np.asarray(a)).transpose(1, 2).requires_grad_(True)
                  for a in (q, k, v))
    w = np.asarray(_row_weights(q.shape, rows, case["seed"]))
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=torch.tensor(attn_bias), scale=float(scale), enable_gqa=True)
    out = out.transpose(1, 2)
    (out * torch.tensor(w)).sum().backward()
    want = out.detach().numpy()
    torch_grads = [t_.grad.transpose(1, 2).numpy() for t_ in (tq, tk, tv)]
    for impl in ("xla", "chunked"):
        f = jax.jit(_attend(impl, kw))
        got = np.asarray(f(q, k, v))
        _close(got[rows], want[rows], 2e-5, impl)
        grads = jax.jit(jax.grad(_attention_loss(f, jnp.asarray(w)), (0, 1, 2)))(q, k, v)
        _close(grads, torch_grads, 5e-5, impl)


@st.composite
def cudnn_attention_cases(draw):
    """Calls the cuDNN route serves: 16-bit, head dim a multiple of 8, bias/mask over (T, S)."""
    case = draw(attention_cases(dtypes=(jnp.bfloat16, jnp.float16), max_len=8))
    case["H"] = draw(st.sampled_from([8, 16]))
    case["T"] += case["T"] % 2  # cuDNN wants even lengths with a bias
    case["S"] += case["S"] % 2
    if case["window"] is not None:  # a left window only, with causal masking, that reaches a key
        case["window"], case["is_causal"] = (case["window"][0], 0), True
        case["S"] = max(case["S"], case["T"])
    full = lambda dims: dims and (*dims[:2], case["T"], case["S"])  # noqa: E731
    case["bias"], case["mask"] = full(case["bias"]), full(case["mask"])
    return case


@_examples(0.5)
@given(cudnn_attention_cases())
@example(_attention_case(2, 8, 8, 4, 2, 16, jnp.bfloat16, is_causal=True, mask=(2, 1, 8, 8),
                         q_len=[8, 5], kv_len=[8, 0]))
@example(_attention_case(2, 10, 6, 6, 2, 8, jnp.float16, bias=(1, 6, 10, 6), kv_len=[6, 3]))
def test_attention_cudnn_route_equals_xla(case):
    """The cuDNN wrapper (custom_vjp + custom_vmap around jax.nn's cuDNN call) through JAX's own
    cuDNN attention functions, whose primitives the test emulation computes in float32."""
    (q, k, v), kw = make_attention_inputs(case)
    rows = visible_rows(case, kw)
    w = _row_weights(q.shape, rows, case["seed"])
    with emulated_cudnn_attention():
        decision = portable_rnn.explain_attention(q, k, v, capabilities=GPU, **kw)
        assert decision.implementation == "cudnn", decision
        results = []
        for impl in ("cudnn", "xla"):
            f = _attend(impl, kw, capabilities=GPU)
            results.append((f(q, k, v), jax.grad(_attention_loss(f, w), (0, 1, 2))(q, k, v)))
    (got, got_grads), (want, want_grads) = results
    dtype = case["dtype"]
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    # Each is within ATTENTION_ULPS of the exact result (tests/test_low_precision.py: the
    # emulation computes in float32, the xla path on a CPU upcasts; both round once), so they
    # are within twice that of each other (measured: 2.5 float16 ulps for a GQA dk).
    ulps = 2 * ATTENTION_ULPS
    assert_ulps(got[rows], want[rows], dtype, ulps, "output", ATTENTION_FLOOR)
    assert not got[~rows].any()
    largest = max(float(np.max(np.abs(np.asarray(w_, np.float32)), initial=0))
                  for w_ in want_grads)
    for g, w_, name in zip(got_grads, want_grads, ("dq", "dk", "dv")):
        w_ = np.asarray(w_, np.float32)
        assert_ulps(g, w_, dtype, ulps, name, ATTENTION_FLOOR, gradient_scale(w_, largest))


ATTENTION_OPERANDS = ("query", "key", "value", "bias", "mask")


@_examples(0.375)
@given(attention_cases(max_len=8), st.sampled_from(["xla", "chunked"]),
       st.sampled_from(ATTENTION_OPERANDS), st.data())
def test_attention_vmap_equals_loop(case, impl, operand, data):
    """An extra axis at a drawn position of a drawn operand equals a loop over its slices."""
    V = 2
    case = dict(case, bias=case["bias"] or (1, 1, case["T"], case["S"]),
                mask=case["mask"] or (1, 1, case["T"], case["S"]))

    def operands(seed):
        (q, k, v), kw = make_attention_inputs(dict(case, seed=seed))
        return dict(query=q, key=k, value=v, bias=kw.pop("bias"), mask=kw.pop("mask")), kw

    base, kw = operands(case["seed"])
    slices = [operands(case["seed"] + 1 + i)[0][operand] for i in range(V)]
    axis = data.draw(st.integers(0, slices[0].ndim), label="axis")

    def f(query, key, value, bias, mask):
        return portable_rnn.dot_product_attention(query, key, value, bias, mask,
                                                  implementation=impl, **kw)

    in_axes = tuple(axis if n == operand else None for n in ATTENTION_OPERANDS)
    stacked = dict(base, **{operand: jnp.stack(slices, axis=axis)})
    got = jax.jit(jax.vmap(f, in_axes=in_axes))(*[stacked[n] for n in ATTENTION_OPERANDS])
    for i in range(V):
        one = dict(base, **{operand: slices[i]})
        _close(got[i], f(*[one[n] for n in ATTENTION_OPERANDS]), 1e-5, f"slice {i}")


@pytest.mark.cpu  # CPU devices: as many as the mesh needs
@_examples(0.375)
@given(attention_cases(max_len=8), st.sampled_from(["xla", "chunked"]),
       st.sampled_from([("batch",), ("batch", "heads")]))
def test_attention_sharded_equals_unsharded(case, impl, axes):
    """Batch (and heads) over the 8 CPU devices under jit: same outputs and gradients, and the
    output keeps the query's sharding."""
    n_heads = 2 if len(axes) == 2 else 1
    B, N = 8 // n_heads, 2 * (case["N"] // case["K"])
    case = dict(case, B=B, N=N, K=2, rank=4, q_len=None, kv_len=None,
                bias=case["bias"] and (1, N, case["T"], case["S"]),
                mask=case["mask"] and (B, 1, case["T"], case["S"]))
    (q, k, v), kw = make_attention_inputs(case)
    mesh = _mesh(8, axes)
    heads = "heads" if n_heads == 2 else None
    qkv_spec = P("batch", None, heads, None)
    put = lambda a: jax.device_put(a, NamedSharding(mesh, qkv_spec))  # noqa: E731
    f = _attend(impl, kw)
    w = draws.normal(jax.random.key(case["seed"]), q.shape)
    loss = _attention_loss(f, w)
    want = (f(q, k, v), jax.grad(loss, (0, 1, 2))(q, k, v))
    got = jax.jit(lambda q, k, v: (f(q, k, v), jax.grad(loss, (0, 1, 2))(q, k, v)))(
        put(q), put(k), put(v))
    _close(got, want, 2e-5)
    out, (dq, _, _) = got
    for a in (out, dq):
        assert a.sharding.is_equivalent_to(NamedSharding(mesh, qkv_spec), a.ndim), a.sharding

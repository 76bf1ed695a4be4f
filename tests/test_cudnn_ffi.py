"""portable_rnn's own cuDNN call (the ``cudnn_ffi`` route) end to end on a CPU, through the
test-only emulation of its primitives and native library (`cudnn_emulation.emulated_cudnn_ffi`),
and its routing rules, decided for pretend machines.

The emulation computes the RNN from PyTorch's equations, written in the emulation, and plans a
weight layout unlike portable_rnn's; everything the route adds (the layout rearranged both ways,
vmap folded into the batch, the scan path's VJP under vmap, casts, length handling, the reserve
space from forward to backward) is checked against the scan path, which shares no code with it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import family_helpers
import portable_rnn
from cudnn_emulation import emulated_cudnn_ffi
from jaxpr_helpers import binds, binds_any, trace
from lstm_helpers import make_inputs
from portable_rnn._src.core import compat, native
from portable_rnn._src.recurrent import ops as _ops
from portable_rnn._src.recurrent.families import FAMILIES
from portable_rnn._src.recurrent.routes.cudnn_ffi import call as ffi_call
from portable_rnn._src.recurrent.routes.cudnn_ffi import route as ffi_route

pytestmark = pytest.mark.cpu  # the cuDNN emulation lowers for the CPU only

GPU = portable_rnn.Capabilities("gpu", 91300, (9, 0), "NVIDIA H100")
B, T, I, H, L = 3, 5, 4, 3, 2
HIGHEST = jax.lax.Precision.HIGHEST
FWD, BWD = "portable_rnn_cudnn_rnn_fwd", "portable_rnn_cudnn_rnn_bwd"
S = jax.ShapeDtypeStruct


@pytest.fixture
def emulation():
    with emulated_cudnn_ffi() as backend:
        yield backend


def lstm(impl, x, h0, c0, w, seq=None, bidir=True, layers=L, **kw):
    return portable_rnn.lstm(x, h0, c0, w, seq, I, H, layers, kw.pop("dropout", 0.0), bidir,
                             kw.pop("precision", HIGHEST), implementation=impl,
                             capabilities=kw.pop("capabilities", GPU), **kw)


def scan(f, *args):
    """The scan path's reference result of `f`, one compiled program (eagerly, op by op, each
    reference took longer than the route it checks)."""
    return jax.jit(f)(*args)


def close(a, b, tol=2e-6):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert u.shape == v.shape and u.dtype == v.dtype, (u.shape, v.shape, u.dtype, v.dtype)
        u, v = np.asarray(u, np.float32), np.asarray(v, np.float32)
        np.testing.assert_allclose(u, v, atol=tol * (1 + np.abs(v).max()), rtol=tol)


def loss(impl, **kw):
    def f(x, h0, c0, w):
        y, h, c = lstm(impl, x, h0, c0, w, **kw)
        return (jnp.sum(y.astype(jnp.float32) ** 2) + jnp.sum(h.astype(jnp.float32) * 0.7)
                + jnp.sum(c.astype(jnp.float32) ** 3))
    return f


# --- the call, against the scan path -------------------------------------------------------------

def test_automatic_choice_keeps_the_scan_path_and_says_why(emulation):
    args = make_inputs(B, T, I, H, L, True, 0)
    d = portable_rnn.explain_lstm(*args, None, I, H, L, 0.0, True, HIGHEST, capabilities=GPU)
    assert d.implementation == "scan"
    assert d.rejected["cudnn_ffi"] == ffi_route.SKIP
    assert "not measured on a GPU yet" in ffi_route.SKIP[0]
    assert not binds_any(trace(lambda *a: lstm(None, *a), *args), FWD)
    assert binds_any(trace(lambda *a: lstm("cudnn_ffi", *a), *args), FWD)
    with portable_rnn.policy(lstm="cudnn_ffi"):
        d = portable_rnn.explain_lstm(*args, None, I, H, L, 0.0, True, HIGHEST,
                                      capabilities=GPU)
        assert d.implementation == "cudnn_ffi" and not d.fell_back
        assert binds_any(trace(lambda *a: lstm(None, *a), *args), FWD)


@pytest.mark.parametrize("bidir", [False, True])
def test_outputs_and_gradients_match_the_scan_path(emulation, bidir):
    args = make_inputs(B, T, I, H, L, bidir, 1)
    close(jax.jit(lambda *a: lstm("cudnn_ffi", *a, bidir=bidir))(*args),
          scan(lambda *a: lstm("scan", *a, bidir=bidir), *args))
    g = [jax.jit(jax.grad(loss(i, bidir=bidir), (0, 1, 2, 3)))(*args)
         for i in ("cudnn_ffi", "scan")]
    close(*g, tol=1e-5)
    jaxpr = trace(jax.grad(loss("cudnn_ffi", bidir=bidir), (0, 1, 2, 3)), *args)
    (fwd,) = binds(jaxpr, FWD)
    (bwd,) = binds(jaxpr, BWD)
    assert fwd.params["training"] == 1 and fwd.params["ragged"] == 0  # no host copy
    # the reserve space cuDNN asked for travels from the forward to the backward
    planned = [c for c in emulation.plans if c.training]
    assert fwd.outvars[3].aval.shape == (16 + 4 * B * T,) and planned
    assert bwd.invars[8].aval.shape == fwd.outvars[3].aval.shape


@pytest.mark.parametrize("dtype, tol", [(jnp.bfloat16, 3e-2), (jnp.float16, 1e-2)])
def test_16_bit_inputs_run_in_their_own_dtype(emulation, dtype, tol):
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 2)
    args = (x.astype(dtype), h0.astype(dtype), c0, w)  # c_0 float32: cast for cuDNN and back
    d = portable_rnn.explain_lstm(*args, None, I, H, L, 0.0, True, implementation="cudnn_ffi",
                                  capabilities=GPU)
    name = jnp.dtype(dtype).name
    assert d.notes[0] == (f"`c_0`, `weights` cast to {name} (cuDNN takes one data type per "
                          "call; the results are cast back)")
    assert d.notes[1] == f"{name}: tensor-op matmuls with float32 math precision (cuDNN's)"
    (fwd,) = binds(trace(lambda *a: lstm("cudnn_ffi", *a, precision=None), *args), FWD)
    assert {v.aval.dtype for v in fwd.invars[:4]} == {jnp.dtype(dtype)}
    got = jax.jit(lambda *a: lstm("cudnn_ffi", *a, precision=None))(*args)
    assert [a.dtype for a in got] == [jnp.dtype(dtype), jnp.dtype(dtype), jnp.float32]
    close(got, scan(lambda *a: lstm("scan", *a, precision=None), *args), tol)
    g = [jax.jit(jax.grad(loss(i, precision=None), (0, 3)))(*args) for i in ("cudnn_ffi", "scan")]
    close(*g, 5 * tol)


def test_float32_allows_tf32_unless_highest(emulation):
    args = make_inputs(B, T, I, H, L, True, 3)
    d = portable_rnn.explain_lstm(*args, None, I, H, L, 0.0, True, implementation="cudnn_ffi",
                                  capabilities=GPU)
    assert "TF32 matmuls allowed (precision HIGHEST disables them)" in d.notes
    (fwd,) = binds(trace(lambda *a: lstm("cudnn_ffi", *a, precision=None), *args), FWD)
    assert fwd.params["allow_tf32"] == 1
    tf32 = jax.jit(lambda *a: lstm("cudnn_ffi", *a, precision=None))(*args)
    exact = scan(lambda *a: lstm("scan", *a), *args)
    close(tf32, exact, 1e-2)
    assert not np.allclose(np.asarray(tf32[0]), np.asarray(exact[0]), atol=1e-7, rtol=0)


def test_vmap_folds_into_one_call_and_gradients_come_from_the_scan_path(emulation):
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 4)
    xs = jnp.stack([jnp.stack([x, -x, 2 * x]), jnp.stack([x * 0.5, x, -x])])  # (2, 3, B, T, I)
    f = lambda x: lstm("cudnn_ffi", x, h0, c0, w)[0]
    calls = binds(trace(jax.vmap(jax.vmap(f)), xs), FWD)
    assert [eqn.invars[0].aval.shape for eqn in calls] == [(T, 2 * 3 * B, I)]  # one folded call
    ref = jax.jit(lambda x: lstm("scan", x, h0, c0, w)[0])  # compiled once, run 6 times
    want = jnp.stack([jnp.stack([ref(xs[i, j]) for j in range(3)]) for i in range(2)])
    close(jax.jit(jax.vmap(jax.vmap(f)))(xs), want)
    # vmap(grad): per-instance gradients, from the scan path's VJP (no cuDNN backward)
    g = jax.vmap(jax.grad(lambda x, w: jnp.sum(lstm("cudnn_ffi", x, h0, c0, w)[0] ** 2), (0, 1)),
                 in_axes=(0, None))
    gs = jax.jit(jax.grad(lambda x, w: jnp.sum(lstm("scan", x, h0, c0, w)[0] ** 2), (0, 1)))
    jaxpr = trace(g, xs[0], w)
    assert binds_any(jaxpr, FWD) and not binds_any(jaxpr, BWD)
    close(jax.jit(g)(xs[0], w), jax.tree.map(lambda *a: jnp.stack(a), *[gs(v, w) for v in xs[0]]),
          1e-5)
    # outside vmap the backward is cuDNN's
    assert binds_any(trace(jax.grad(loss("cudnn_ffi"), (0, 3)), x, h0, c0, w), BWD)


@pytest.mark.parametrize("axis", [0, 1])
def test_vmap_over_an_inner_axis_and_grad_of_vmap(emulation, axis):
    x, h0, c0, w = make_inputs(B, T, I, H, 1, True, 5)
    xs = jnp.stack([x, -x], axis=axis)
    f = lambda impl: lambda x, w: jnp.sum(lstm(impl, x, h0, c0, w, layers=1)[0] ** 2)
    total = lambda impl: jax.grad(lambda xs, w: jnp.sum(jax.vmap(f(impl), in_axes=(axis, None))(
        xs, w)), (0, 1))
    close(jax.jit(total("cudnn_ffi"))(xs, w), scan(total("scan"), xs, w), 1e-5)


def test_weights_that_differ_per_instance_run_the_scan_path(emulation):
    """One cuDNN call per instance (lax.map) is the pattern XLA:GPU miscompiled for jaxlib's
    cuDNN call: vmap over the weights takes the scan path, forward and backward, and says so."""
    x, h0, c0, w = make_inputs(B, T, I, H, L, True, 6)
    ws = jnp.stack([w, 0.5 * w])
    f = lambda impl: jax.vmap(lambda w: lstm(impl, x, h0, c0, w)[0])
    assert not binds_any(trace(f("cudnn_ffi"), ws), FWD)
    close(jax.jit(f("cudnn_ffi"))(ws), scan(f("scan"), ws))
    g = lambda impl: jax.vmap(jax.grad(lambda w: jnp.sum(lstm(impl, x, h0, c0, w)[0] ** 2)))
    jaxpr = trace(g("cudnn_ffi"), ws)
    assert not binds_any(jaxpr, FWD) and not binds_any(jaxpr, BWD)
    close(jax.jit(g("cudnn_ffi"))(ws), scan(g("scan"), ws), 1e-5)
    d = portable_rnn.explain_lstm(x, h0, c0, w, None, I, H, L, 0.0, True,
                                  implementation="cudnn_ffi", capabilities=GPU)
    assert d.notes[-1] == ffi_route.PER_INSTANCE_WEIGHTS


def test_an_explicit_request_where_the_call_cannot_run_raises_with_the_reason():
    args = make_inputs(B, T, I, H, L, True, 7)
    with pytest.raises(ValueError, match=r"implementation='cudnn_ffi' cannot serve this lstm "
                                         r"call:\n  - platform is 'cpu': the cuDNN LSTM call of "
                                         "portable_rnn needs a CUDA GPU"):
        lstm("cudnn_ffi", *args, capabilities=portable_rnn.Capabilities("cpu"))
    if compat.cuda_versions() is None:  # a pretend GPU on this CPU jaxlib: nothing to build
        with pytest.raises(ValueError, match=r"implementation='cudnn_ffi' cannot run here: this "
                                             r"jaxlib has no CUDA plugin"):
            lstm("cudnn_ffi", *args)


@pytest.mark.parametrize("cpu_lowering", [True, False])
def test_a_preference_carries_one_branch_per_platform(cpu_lowering):
    """As for every cuDNN route: the CUDA lowering holds the call, the others the scan path
    (the emulation gives the primitives a CPU lowering, which the CPU branch then keeps)."""
    args = make_inputs(B, T, I, H, L, True, 8)
    f = lambda *a: lstm(None, *a)
    with emulated_cudnn_ffi(cpu_lowering=cpu_lowering), portable_rnn.policy(lstm="cudnn_ffi"):
        d = portable_rnn.explain_lstm(*args, None, I, H, L, 0.0, True, HIGHEST,
                                      capabilities=GPU)
        cpu = "cudnn_ffi" if cpu_lowering else "scan"
        assert {p: v.implementation for p, v in d.platforms.items()} == {
            "cuda": "cudnn_ffi", "cpu": cpu, "default": "scan"}
        hlo = jax.jit(f).lower(*args).as_text(debug_info=True)
        got = jax.jit(f)(*args)
    assert ("portable_rnn.lstm.cudnn_ffi" in hlo) == cpu_lowering
    assert ("portable_rnn.lstm.scan" in hlo) != cpu_lowering
    close(got, scan(lambda *a: lstm("scan", *a), *args))


# --- ragged lengths ------------------------------------------------------------------------------

LENGTHS = jnp.array([5, 2, 0])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_ragged_lengths_with_a_zero_match_the_scan_path(emulation, kind):
    """Lengths go to cuDNN as a device array and, once per call, to the host (cuDNN's data
    descriptors take host lengths); a length 0 never reaches it (cuDNN fails on one: the
    emulation raises at run time) and gets the initial state and zero outputs."""
    P_ = 0
    x, states, w = family_helpers.make_inputs("lstm_proj" if kind == "lstm" else kind, B, T, I,
                                              H, P_, L, True, 13)
    if kind == "lstm":
        states = (jax.random.normal(jax.random.key(1), (2 * L, B, H)), states[1])
        run = lambda impl: lambda x, s, w: lstm(impl, x, *s, w, seq=LENGTHS)
    else:
        run = lambda impl: lambda x, s, w: family_call(kind, impl, x, s, w, seq=LENGTHS)
    jaxpr = trace(jax.grad(lambda *a: jnp.sum(jax.tree.leaves(run("cudnn_ffi")(*a))[0] ** 2),
                           (0, 2)), x, states, w)
    for name in (FWD, BWD):
        (eqn,) = binds(jaxpr, name)
        assert eqn.params["ragged"] == 1 and eqn.params["algo"] == 0  # STANDARD
    got = jax.jit(run("cudnn_ffi"))(x, states, w)
    close(got, scan(run("scan"), x, states, w))
    final = got[1] if kind == "lstm" else got[1][0]
    np.testing.assert_array_equal(np.asarray(final[:, 2]), np.asarray(states[0][:, 2]))
    np.testing.assert_array_equal(np.asarray(got[0][2]), 0)
    g = lambda impl: jax.grad(lambda x, s, w: sum(
        jnp.sum(o ** 2) for o in jax.tree.leaves(run(impl)(x, s, w))), (0, 1, 2))
    close(jax.jit(g("cudnn_ffi"))(x, states, w), scan(g("scan"), x, states, w), 1e-5)


@pytest.mark.parametrize("dtype", ["int64", "uint8"])
def test_any_integer_lengths_and_the_notes(emulation, dtype):
    args = make_inputs(B, T, I, H, L, True, 14)
    with jax.enable_x64(True):
        seq = np.asarray(LENGTHS, dtype)
        close(jax.jit(lambda *a: lstm("cudnn_ffi", *a, seq=seq))(*args),
              scan(lambda *a: lstm("scan", *a, seq=seq), *args))
        d = portable_rnn.explain_lstm(*args, seq, I, H, L, 0.0, True,
                                      implementation="cudnn_ffi", capabilities=GPU)
    assert d.notes[-4:] == (
        "cuDNN algorithm STANDARD for inference, STANDARD for training (PyTorch's rules for this "
        "shape)",
        "seq_lengths given: copied to the host with one stream synchronisation per cuDNN call "
        "(cuDNN takes the lengths as a host array)", f"seq_lengths {dtype} cast to int32",
        ffi_route.PER_INSTANCE_WEIGHTS)


def test_vmap_over_the_lengths(emulation):
    x, h0, c0, w = make_inputs(B, T, I, H, 1, True, 15)
    seqs = jnp.array([[4, 1, 5], [0, 3, 2]])
    f = lambda impl: jax.vmap(lambda s: lstm(impl, x, h0, c0, w, seq=s, layers=1))
    (fwd,) = binds(trace(f("cudnn_ffi"), seqs), FWD)
    assert fwd.invars[4].aval.shape == (2 * B,)  # folded with the batch
    close(jax.jit(f("cudnn_ffi"))(seqs), scan(f("scan"), seqs))


# --- the LSTM's projection -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype, seq", [(jnp.float32, None), (jnp.float32, LENGTHS),
                                        (jnp.bfloat16, None)])
def test_projection_matches_the_scan_path(emulation, dtype, seq):
    P_ = 2
    x, states, w = family_helpers.make_inputs("lstm_proj", B, T, I, H, P_, L, True, 16, dtype)
    precision = HIGHEST if dtype == jnp.float32 else None
    run = lambda impl: lambda x, s, w: family_call("lstm_proj", impl, x, s, w, P=P_, seq=seq,
                                                   precision=precision)
    (fwd,) = binds(trace(run("cudnn_ffi"), x, states, w), FWD)
    assert fwd.params["proj_size"] == P_ and fwd.params["algo"] == 0  # STANDARD only
    assert fwd.outvars[0].aval.shape == (T, B, 2 * P_)
    tol = 2e-6 if dtype == jnp.float32 else 3e-2
    close(jax.jit(run("cudnn_ffi"))(x, states, w), scan(run("scan"), x, states, w), tol)
    g = lambda impl: jax.grad(lambda x, s, w: sum(
        jnp.sum(o.astype(jnp.float32) ** 2) for o in jax.tree.leaves(run(impl)(x, s, w))),
        (0, 1, 2))
    close(jax.jit(g("cudnn_ffi"))(x, states, w), scan(g("scan"), x, states, w), 5 * tol)


# --- dropout between layers ----------------------------------------------------------------------

@pytest.mark.parametrize("kind, P_", [("lstm_proj", 0), ("lstm_proj", 2), ("gru", 0)])
def test_dropout_runs_one_call_per_layer_with_the_scan_paths_masks(emulation, kind, P_):
    layers = 3
    x, states, w = family_helpers.make_inputs(kind, B, T, I, H, P_, layers, True, 17)
    kw = dict(P=P_, layers=layers, dropout=0.4, dropout_rng=jax.random.key(7), seq=LENGTHS)
    run = lambda impl: lambda x, s, w: family_call(kind, impl, x, s, w, **kw)
    calls = binds(trace(run("cudnn_ffi"), x, states, w), FWD)
    assert [eqn.params["num_layers"] for eqn in calls] == [1] * layers
    assert [eqn.params["input_size"] for eqn in calls] == [I] + [2 * (P_ or H)] * (layers - 1)
    close(jax.jit(run("cudnn_ffi"))(x, states, w), scan(run("scan"), x, states, w))
    g = lambda impl: jax.grad(lambda x, s, w: sum(
        jnp.sum(o ** 2) for o in jax.tree.leaves(run(impl)(x, s, w))), (0, 2))
    close(jax.jit(g("cudnn_ffi"))(x, states, w), scan(g("scan"), x, states, w), 1e-5)
    op = family_helpers.FAMILY[kind]
    d = getattr(portable_rnn, f"explain_{op}")(
        x, *states, w, LENGTHS, I, H, layers, 0.4, True, dropout_rng=jax.random.key(7),
        implementation="cudnn_ffi", capabilities=GPU,
        **({"proj_size": P_} if kind == "lstm_proj" else {}))
    assert ("dropout 0.4: 3 single-layer cuDNN calls with portable_rnn's masks between them "
            "(cuDNN's own dropout cannot use your key)") in d.notes


# --- GRU and the simple RNN ----------------------------------------------------------------------

def family_call(kind, impl, x, states, w, bidir=True, layers=L, **kw):
    """The reference ("scan") runs as on a CPU: the scan path's bfloat16 GRU backward with
    bfloat16 matmuls (its GPU configuration) mixes dtypes that this suite's strict promotion
    refuses."""
    caps = portable_rnn.Capabilities("cpu") if impl == "scan" else GPU
    return family_helpers.call(kind, x, states, w, kw.pop("seq", None), I, H, kw.pop("P", 0),
                               layers, bidir, kw.pop("dropout", 0.0),
                               precision=kw.pop("precision", HIGHEST), implementation=impl,
                               capabilities=caps, **kw)


@pytest.mark.parametrize("kind, mode", [("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 0)])
@pytest.mark.parametrize("bidir", [False, True])
def test_gru_and_rnn_match_the_scan_path(emulation, kind, mode, bidir):
    x, states, w = family_helpers.make_inputs(kind, B, T, I, H, 0, L, bidir, 10)
    f = lambda impl: lambda x, h0, w: family_call(kind, impl, x, (h0,), w, bidir)
    (fwd,) = binds(trace(f("cudnn_ffi"), x, *states, w), FWD)
    assert fwd.params["mode"] == mode and fwd.invars[2].aval.shape == (L * (1 + bidir), B, 0)
    close(jax.jit(f("cudnn_ffi"))(x, *states, w), scan(f("scan"), x, *states, w))
    g = lambda impl: jax.grad(lambda *a: sum(jnp.sum(o ** 2) for o in jax.tree.leaves(
        f(impl)(*a))), (0, 1, 2))
    close(jax.jit(g("cudnn_ffi"))(x, *states, w), scan(g("scan"), x, *states, w), 1e-5)


def test_gru_in_bfloat16_and_under_vmap_of_grad(emulation):
    x, states, w = family_helpers.make_inputs("gru", B, T, I, H, 0, L, True, 11, jnp.bfloat16)
    f = lambda impl, states=states: lambda x, w: jnp.sum(
        family_call("gru", impl, x, states, w, precision=None)[0].astype(jnp.float32) ** 2)
    close(jax.jit(f("cudnn_ffi"))(x, w), scan(f("scan"), x, w), 3e-2)
    close(jax.jit(jax.grad(f("cudnn_ffi"), (0, 1)))(x, w), scan(jax.grad(f("scan"), (0, 1)), x, w),
          1e-1)
    # vmap(grad), whose gradients come from the scan path's VJP with the GPU's options (float32:
    # see `family_call`)
    x, states, w = family_helpers.make_inputs("gru", B, T, I, H, 0, L, True, 12)
    xs = jnp.stack([x, -x])
    g = lambda impl: jax.vmap(jax.grad(f(impl, states), (0, 1)), in_axes=(0, None))
    assert not binds_any(trace(g("cudnn_ffi"), xs, w), BWD)  # the scan path's VJP
    close(jax.jit(g("cudnn_ffi"))(xs, w), scan(g("scan"), xs, w), 1e-2)


@pytest.mark.parametrize("op", ["gru", "simple_rnn"])
def test_gru_and_rnn_are_routed_as_the_lstm(op):
    n = _ops.OPS[op].num_params(I, H, 1, False)
    args = (S((B, T, I), jnp.float32), S((1, B, H), jnp.float32), S((n,), jnp.float32), None,
            I, H, 1, 0.0, False)
    explain = getattr(portable_rnn, f"explain_{op}")
    d = explain(*args, capabilities=GPU)
    assert d.implementation == "scan" and d.rejected["cudnn_ffi"] == ffi_route.SKIP
    assert d.rejected["cudnn"][-1].endswith("is LSTM-only")
    with portable_rnn.policy(**{op: "cudnn_ffi"}):
        assert explain(*args, capabilities=GPU).implementation == "cudnn_ffi"
    assert explain(*args, capabilities=GPU, implementation="cudnn_ffi").notes[-2:] == (
        "seq_lengths None: every length is T; no copy to the host, no synchronisation",
        ffi_route.PER_INSTANCE_WEIGHTS)


# --- the weight layout ---------------------------------------------------------------------------

def _identity_plan(family, input_size, hidden_size, num_layers, bidirectional, proj_size=0):
    """The plan of a cuDNN whose layout is portable_rnn's flat order."""
    from portable_rnn._src.recurrent import layout

    shapes = layout.param_shapes(input_size, hidden_size, num_layers, bidirectional, family,
                                 proj_size)
    rows, offset, G = {}, 0, family.gates
    for p, name in layout._flat_order(shapes):
        n = int(np.prod(shapes[p][name]))
        for g in range(G if name != "W_hr" else 1):
            lin = 2 * G if name == "W_hr" else g + (G if name in ("W_hh", "b_hh") else 0)
            row = rows.setdefault((p, lin), [p, lin, -1, 0, -1, 0])
            k = 2 if name.startswith("W") else 4
            size = n // (1 if name == "W_hr" else G)
            row[k:k + 2] = [offset, size]
            offset += size
    return ffi_call.Plan(0, 0, offset * 4, tuple(tuple(r) for r in rows.values()))


def test_a_cudnn_layout_equal_to_the_flat_one_costs_nothing():
    family = FAMILIES["lstm"]
    plan = _identity_plan(family, I, H, L, True)
    wl = ffi_call.weight_layout(plan, family, I, H, L, True, 0, 4)
    assert wl.identity
    w = jnp.arange(wl.params, dtype=jnp.float32)
    assert wl.pack(w) is w and wl.unpack(w) is w
    bad = ffi_call.Plan(0, 0, plan.weight_space, plan.blocks[:-1])
    with pytest.raises(native.Unavailable, match=r"cuDNN's weight space holds no"):
        ffi_call.weight_layout(bad, family, I, H, L, True, 0, 4)


def test_the_emulated_layout_is_rearranged_both_ways(emulation):
    family = FAMILIES["lstm"]
    config = ffi_call.Config(2, 0, I, H, 0, L, 1, B, T, 0, 1, 0)
    wl = ffi_call.weight_layout(ffi_call.plan(config), family, I, H, L, True, 0, 4)
    assert not wl.identity and wl.size > wl.params
    w = jnp.arange(1, wl.params + 1, dtype=jnp.float32)
    packed = wl.pack(w)
    assert packed.shape == (wl.size,) and int(jnp.sum(packed == 0)) == wl.size - wl.params
    np.testing.assert_array_equal(np.asarray(wl.unpack(packed)), np.asarray(w))


# --- the algorithm -------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh"])
def test_the_inference_algorithm_is_pytorchs(cell):
    """For inference, the route asks for what PyTorch's `get_algo` asks for (as transcribed in
    benchmarks/gpu_torch.py); a training forward takes its backward's algorithm."""
    from benchmarks.gpu_torch import DRY_DEVICE, pytorch_algorithm

    mode = {"lstm": 2, "gru": 3, "rnn_tanh": 1}[cell]
    device = ffi_call.Device(DRY_DEVICE["major"], DRY_DEVICE["minor"],
                             DRY_DEVICE["multi_processor_count"])
    for dtype in ("float32", "float16", "bfloat16"):
        for B_, H_, L_, bidir in [(64, 512, 1, False), (8, 128, 1, False), (12, 160, 1, False),
                                  (64, 1024, 1, False), (96, 1024, 1, False), (64, 512, 2, False),
                                  (32, 256, 1, True), (128, 384, 1, False)]:
            for forward in (True, False):
                ours = ffi_call.algorithm(mode, dtype, B_, 256, H_, H_, L_, bidir, 0, False,
                                          not forward, device)
                theirs = pytorch_algorithm(cell, dtype, B_, 256, H_, H_, L_, bidir, forward,
                                           DRY_DEVICE)
                assert ours == theirs, (dtype, B_, H_, L_, bidir, forward)
    assert ffi_call.algorithm(mode, "float16", 64, 256, 512, 512, 1, False, 64, False, False,
                              device) == "STANDARD"  # a projection
    assert ffi_call.algorithm(mode, "float16", 64, 256, 128, 128, 1, False, 0, True, False,
                              device) == "STANDARD"  # ragged lengths
    assert ffi_call.algorithm(mode, "float16", 64, 256, 128, 128, 1, False, 0, False, False,
                              None) == "STANDARD"  # no device known


def test_a_persistent_algorithm_cudnn_refuses_falls_back_to_standard(emulation):
    """Where cuDNN refuses the persistent algorithm PyTorch's rules pick for a shape (here: a
    vmapped call, planned at its folded batch size), the call plans the STANDARD one."""
    refuse = emulation.plan

    def plan(config):
        if ffi_call.ALGORITHMS[config.algo] != "STANDARD" and config.batch > B:
            raise native.Unavailable("CUDNN_STATUS_NOT_SUPPORTED (emulated)")
        return refuse(config)

    emulation.plan = plan
    x, h0, c0, w = make_inputs(B, T, I, H, 1, False, 9)
    f = lambda x: lstm("cudnn_ffi", x, h0, c0, w, bidir=False, layers=1)[0]
    xs = jnp.stack([x, -x])
    algos = {e.invars[0].aval.shape[1]: e.params["algo"]
             for g in (f, jax.vmap(f)) for e in binds(trace(g, xs[0] if g is f else xs), FWD)}
    assert algos == {B: ffi_call.ALGORITHMS.index("PERSIST_STATIC_SMALL_H"),
                     2 * B: ffi_call.ALGORITHMS.index("STANDARD")}
    close(jax.jit(jax.vmap(f))(xs), scan(jax.vmap(lambda x: lstm("scan", x, h0, c0, w, bidir=False,
                                                                 layers=1)[0]), xs))


# --- the rules, for pretend machines -------------------------------------------------------------


def explain(dtype=jnp.float32, *, caps=GPU, seq=None, proj=0, precision=None, **kw):
    n = portable_rnn.get_num_params_in_lstm(I, H, L, False, proj)
    states = (S((L, B, proj or H), dtype), S((L, B, H), dtype))
    return portable_rnn.explain_lstm(S((B, T, I), dtype), *states, S((n,), dtype),
                                     None if seq is None else S((B,), seq), I, H, L, 0.0, False,
                                     precision, capabilities=caps, proj_size=proj, **kw)


@pytest.mark.parametrize("kw, reason", [
    (dict(caps=portable_rnn.Capabilities("cpu")),
     "platform is 'cpu': the cuDNN LSTM call of portable_rnn needs a CUDA GPU"),
    (dict(caps=portable_rnn.Capabilities("gpu", None, (8, 0), "NVIDIA A100")),
     "no cuDNN: jaxlib reports no cuDNN version"),
    (dict(dtype=jnp.bfloat16, caps=portable_rnn.Capabilities("gpu", 91200, (9, 0), "H100")),
     "`x` is bfloat16: cuDNN runs bfloat16 RNNs from cuDNN 9.13 on; this machine has cuDNN "
     "9.12.0"),
    (dict(dtype=jnp.bfloat16, caps=portable_rnn.Capabilities("gpu", 91300, (7, 5), "T4")),
     "`x` is bfloat16: cuDNN's bfloat16 RNN needs compute capability 8.0 or newer; this GPU "
     "has 7.5"),
    (dict(precision=jax.lax.Precision.DEFAULT),
     "(effective DEFAULT) asks for bfloat16 matmuls of float32 inputs, which cuDNN's RNN does "
     "not offer"),
    (dict(precision=jax.lax.DotAlgorithmPreset.F32_F32_F32), "dot algorithms are not understood"),
])
def test_reasons_the_route_cannot_serve_a_call(kw, reason):
    d = explain(**kw)
    assert d.implementation == "scan"
    assert any(reason in r for r in d.rejected["cudnn_ffi"]), d.rejected
    with pytest.raises(ValueError, match="implementation='cudnn_ffi' cannot serve"):
        explain(**kw, implementation="cudnn_ffi")


def test_float64_is_left_to_the_scan_path():
    with jax.enable_x64(True):
        d = explain(jnp.float64)
    assert d.rejected["cudnn_ffi"][0] == ("`x` is float64: portable_rnn's cuDNN call runs "
                                          "float32, float16 and bfloat16")


def test_what_the_route_does_for_a_call_it_serves():
    d = explain(jnp.float16, implementation="cudnn_ffi")
    assert d.notes == (
        "float16: tensor-op matmuls with float32 math precision (cuDNN's)",
        "cuDNN algorithm PERSIST_STATIC_SMALL_H for inference, PERSIST_STATIC_SMALL_H for "
        "training (PyTorch's rules for this shape)",
        "seq_lengths None: every length is T; no copy to the host, no synchronisation",
        ffi_route.PER_INSTANCE_WEIGHTS)
    assert explain(jnp.bfloat16, implementation="cudnn_ffi").implementation == "cudnn_ffi"


def _probed(device=None):
    """A GPU decided as the machine itself (the probe's device set): its library is built and
    cuDNN asked for the plan where the route is asked for."""
    return portable_rnn.Capabilities("gpu", 91300, (9, 0), "NVIDIA H100",
                                     probe_device=device or jax.devices("cpu")[0])


def test_cudnn_refusing_the_plan_is_a_rejection_reason():
    with emulated_cudnn_ffi(refuse="CUDNN_STATUS_NOT_SUPPORTED (emulated)"):
        with pytest.raises(ValueError, match=r"portable_rnn's cuDNN call is unavailable here: "
                                             r"CUDNN_STATUS_NOT_SUPPORTED \(emulated\)"):
            explain(caps=_probed(), implementation="cudnn_ffi")
        with portable_rnn.policy(lstm="cudnn_ffi"):
            d = explain(caps=_probed())
        assert d.implementation == "scan"
        assert "CUDNN_STATUS_NOT_SUPPORTED (emulated)" in d.rejected["cudnn_ffi"][0]
        assert explain(caps=GPU, implementation="cudnn_ffi").implementation == "cudnn_ffi"


@pytest.fixture
def fresh_library(monkeypatch):
    """No library loaded or tried, and a jaxlib that claims a CUDA plugin, so that asking for
    the route on a probed GPU builds it; restored afterwards."""
    monkeypatch.setattr(ffi_call, "_backend", None)
    monkeypatch.setattr(ffi_call, "_failure", None)
    monkeypatch.setattr(compat, "cuda_versions", lambda: object())
    ffi_call._plan.cache_clear()
    yield monkeypatch
    ffi_call._plan.cache_clear()


def _reasons(caps):
    with portable_rnn.policy(lstm="cudnn_ffi"):
        d = explain(caps=caps)
    assert d.implementation == "scan"
    return d.rejected["cudnn_ffi"]


def test_a_missing_compiler_is_a_rejection_reason(fresh_library, tmp_path):
    fresh_library.setenv("CXX", str(tmp_path / "no-such-compiler"))
    (reason,) = _reasons(_probed())
    assert reason == (f"portable_rnn's cuDNN call is unavailable here: the C++ compiler "
                      f"CXX='{tmp_path / 'no-such-compiler'}' was not found")
    # known from now on, also for the automatic choice, without another attempt
    assert explain(caps=_probed()).rejected["cudnn_ffi"] == (reason,)


def test_a_missing_header_is_a_rejection_reason(fresh_library, tmp_path):
    """A compiler and the CUDA runtime headers (stand-ins) are found, cuDNN's header is not."""
    from test_native_build import fake_compiler, fake_cuda

    fresh_library.setenv("CXX", str(fake_compiler(tmp_path)))
    fresh_library.setattr(native, "cuda_prefixes", lambda *a: [fake_cuda(tmp_path / "cuda")])
    fresh_library.setattr(native, "cudnn_prefixes", lambda *a: [native.Prefix(
        str(tmp_path / "include"), str(tmp_path / "lib"), "an empty folder")])
    (reason,) = _reasons(_probed())
    assert reason.startswith("portable_rnn's cuDNN call is unavailable here: the cuDNN header "
                             "cudnn.h was not found (looked in: ")


def test_a_failing_compile_is_a_rejection_reason(fresh_library, tmp_path):
    from test_native_build import toolchain

    tc = toolchain(tmp_path, fail="cudnn_rnn.cc:9:9: error: emulated failure")
    fresh_library.setattr(native, "find_toolchain", lambda *a, **k: tc)
    fresh_library.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    (reason,) = _reasons(_probed())
    assert reason.startswith(f"portable_rnn's cuDNN call is unavailable here: compiling "
                             f"cudnn_rnn.cc with {tc.compiler} failed (exit 1): cudnn_rnn.cc:9:9: "
                             "error: emulated failure; full log: ")

"""The scan path's options for other platforms, run on this CPU.

The driver's platform options come from `core.profile` (docs/mixed-precision.md): on a CPU,
16-bit products are fenced and per-step values stacked in float32; on a TPU or a GPU, products
and stacks stay in the compute dtype (float16 included). The other tests decide for the CPU they
run on, so this module decides for a TPU and for a GPU (`capabilities=`) and holds every family,
in bfloat16 and float16, under strict dtype promotion (conftest.py), to the documented 16-bit
bounds against the rounded float64 loop of `tests/test_low_precision.py`: forward, gradient,
`vmap`, and `grad` of `vmap`. On a GPU the automatic choice of every family is the scan path
(cuDNN's LSTM measured slower; portable_rnn's own cuDNN call unmeasured), so both platforms run
the scan path with their own options.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import family_helpers as fam
import portable_rnn
import references
from references import FLOAT32_STATE_ULPS, RECURRENT_ULPS, assert_ulps
from test_low_precision import DTYPES, _as, _case, _float32_state, _inputs, _ours, _reference

pytestmark = pytest.mark.cpu  # other platforms' options, run on the CPU

PLATFORMS = {"tpu": portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite"),
             "pretend_gpu": portable_rnn.Capabilities("gpu", 91300, (9, 0), "NVIDIA H100")}
V = 2  # vmapped instances
# Every family and dtype for a TPU; two for a GPU, whose options are the TPU's
# (`test_a_gpu_runs_the_tpu_options`).
CASES = ([(kind, dtype, "tpu") for kind in fam.ALL_KINDS for dtype in sorted(DTYPES)]
         + [("gru", "bfloat16", "pretend_gpu"), ("lstm_proj", "float16", "pretend_gpu")])


def _case_for(kind, dtype):
    P = 3 if kind == "lstm_proj" else 0
    return _case(kind, dtype, 3, 6, 4, 8, 2, True, [6, 0, 3], P=P, f32=False, seed=7)


def _gradient_dtype(dtype):
    """Off the CPU, the backward rounds the products' output gradients to the compute dtype,
    float16 too (on a CPU float16 products run in float32 and stay there)."""
    return DTYPES[dtype]


def _float64_grads(c, xs, states, w, cot):
    """The rounded float64 loop's gradients at each x of `xs`, one compiled program for all."""
    lengths = np.asarray(c["lengths"], np.int32)
    dt = DTYPES[c["dtype"]]

    def loss(x, states, w):
        x, w = x.astype(jnp.float64), w.astype(jnp.float64)
        states = tuple(s.astype(jnp.float64) for s in states)
        y, finals = fam.reference(c["kind"], x, states, w, lengths, c["I"], c["H"], c["P"],
                                  c["L"], c["bidir"], xp=jnp, dtype=dt,
                                  gradient_dtype=_gradient_dtype(c["dtype"]))
        outs = [references.round_to(o, ct.dtype, jnp) for o, ct in zip((y, *finals), cot)]
        return sum(jnp.sum(o * jnp.asarray(ct, jnp.float64)) for o, ct in zip(outs, cot))

    with references.float64():
        grad = jax.jit(jax.grad(loss, (0, 1, 2)))
        return [jax.tree.map(np.asarray, grad(x, states, w)) for x in xs]


def _check(c, got, want, names):
    dt = DTYPES[c["dtype"]]
    for g, r, name in zip(got, want, names):
        ulps = FLOAT32_STATE_ULPS if _float32_state(c, name, g.dtype) else RECURRENT_ULPS
        assert_ulps(g, _as(g.dtype)(r), dt, ulps, f"{c['kind']} {c['dtype']} {name}")


@pytest.mark.parametrize(("kind", "dtype", "platform"), CASES)
def test_family_on_other_platforms_options_equals_the_rounded_float64_loop(kind, dtype, platform):
    c = _case_for(kind, dtype)
    x, states, w = _inputs(c)
    xs = jnp.stack([x, -x])
    f = _ours(c, None)
    out_names = ["y", "h_n", "c_n"][:1 + len(states)]
    grad_names = ["dx", *("d" + n + "_0" for n in ("h", "c")[:len(states)]), "dweights"]
    cot = [np.asarray(np.random.default_rng(i).standard_normal(s.shape).astype(s.dtype))
           for i, s in enumerate(jax.eval_shape(f, x, states, w))]

    def loss(x, states, w):
        return sum(jnp.sum(o.astype(jnp.float32) * jnp.asarray(ct, jnp.float32))
                   for o, ct in zip(f(x, states, w), cot))

    with portable_rnn.policy(capabilities=PLATFORMS[platform]):
        got = jax.jit(f)(x, states, w)
        grads = jax.jit(jax.grad(loss, (0, 1, 2)))(x, states, w)
        batched = jax.jit(jax.vmap(f, in_axes=(0, None, None)))(xs, states, w)
        batched_grads = jax.jit(jax.grad(
            lambda xs, states, w: jnp.sum(jax.vmap(loss, in_axes=(0, None, None))(xs, states, w)),
            (0, 1, 2)))(xs, states, w)
    want = [_reference(c, None, np)(v, states, w) for v in (x, -x)]
    _check(c, got, want[0], out_names)
    for i in range(V):
        _check(c, [b[i] for b in batched], want[i], out_names)
    want_grads = _float64_grads(c, (x, -x), states, w, cot)
    _check(c, jax.tree.leaves(grads), jax.tree.leaves(want_grads[0]), grad_names)
    dxs, *shared = jax.tree.leaves(batched_grads)
    for i in range(V):
        _check(c, [dxs[i]], [want_grads[i][0]], ["dx"])
    summed = [a + b for a, b in zip(jax.tree.leaves(want_grads[0])[1:],
                                     jax.tree.leaves(want_grads[1])[1:])]
    _check(c, shared, summed, grad_names[1:])


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_other_platforms_options_are_the_ones_run(platform):
    """The decision for the platform notes no CPU option, and the traced loop stacks 16-bit
    values in 16 bits (a CPU stacks them in float32)."""
    c = _case_for("gru", "bfloat16")
    x, states, w = _inputs(c)
    d = portable_rnn.explain_gru(x, *states, w, np.asarray(c["lengths"]), c["I"], c["H"], c["L"],
                                 0.0, c["bidir"], capabilities=PLATFORMS[platform])
    assert d.implementation == "scan", d
    assert not any("CPU" in note for note in d.notes), d.notes
    with portable_rnn.policy(capabilities=PLATFORMS[platform]):
        text = jax.jit(_ours(c, None)).lower(x, states, w).as_text()
    with portable_rnn.policy(capabilities=portable_rnn.Capabilities("cpu")):
        cpu_text = jax.jit(_ours(c, None)).lower(x, states, w).as_text()
    assert "optimization_barrier" not in text and "optimization_barrier" in cpu_text


def _lowered(c, caps, x, states, w):
    with portable_rnn.policy(capabilities=caps):
        f = jax.jit(jax.value_and_grad(lambda *a: jnp.sum(_ours(c, None)(*a)[0]), (0, 1, 2)))
        return f.lower(x, states, w).as_text()


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("kind", fam.ALL_KINDS)
def test_a_gpu_runs_the_tpu_options(kind, dtype):
    """The same scan-path program, forward and backward, for a GPU as for a TPU (so the GPU's
    two cases above stand for the rest), and another one for a CPU."""
    c = _case_for(kind, dtype)
    x, states, w = _inputs(c)
    with portable_rnn.policy(**{fam.FAMILY[kind]: "scan"}):  # where a TPU kernel serves too
        tpu, gpu, cpu = (_lowered(c, caps, x, states, w) for caps in (
            PLATFORMS["tpu"], PLATFORMS["pretend_gpu"], portable_rnn.Capabilities("cpu")))
    assert tpu == gpu
    assert tpu != cpu

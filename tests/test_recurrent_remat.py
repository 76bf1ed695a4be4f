"""Segment checkpointing of the recurrent ops' gradients (``remat_every``): the forward keeps
each layer's states at the start of every segment of k steps, the backward runs each segment's
forward again from there before its backward.

The checkpointed run computes the same steps as the run without segments: its outputs, final
states and the initial states' gradients come out equal to the last bit where XLA compiles a
segment's products as it compiles the whole sequence's (`test_the_steps_are_the_same_bits` pins
such calls; XLA:CPU's GEMMs may sum a segment's rows in another order at some small shapes), and
within a few ulps otherwise; the gradients of x (a GEMM per segment) and of the weights (summed
per segment first) agree to a few ulps. Over the families with and without a hand-written backward
step (the classic GRU's is JAX's, through `jax.checkpoint`), ragged lengths (0 among them), both
directions, layers with dropout between them, recurrent dropout masks, the LSTM's projection,
float32 and bfloat16, and segment lengths that do not divide T; the Pallas TPU kernel in
interpret mode; the automatic choice and its note; the compiled memory.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import family_helpers as fam
import portable_rnn
from portable_rnn._src.core import capabilities as caps_module
from portable_rnn._src.recurrent import layout
from portable_rnn._src.recurrent.driver import ScanConfig, rnn_scan, segment_length
from portable_rnn._src.recurrent.families import family
from portable_rnn._src.recurrent.gru.cell import GRUCell
from portable_rnn._src.recurrent.lstm.cell import LSTMCell
from portable_rnn._src.recurrent.routes.pallas import route as pallas
from portable_rnn._src.recurrent.routes.scan import scan_options

S = jax.ShapeDtypeStruct
CPU = portable_rnn.Capabilities("cpu")
TPU = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")
H100 = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
KINDS = ("lstm", "lstm_proj", "gru", "rnn_tanh", "classic_gru")
GATES = {"lstm": 4, "lstm_proj": 4, "gru": 3, "rnn_tanh": 1, "classic_gru": 3}
# the run without segments against the checkpointed one: a few ulps of the largest value
# (float32), one ulp (bfloat16: sums that differ in float32 round to neighbours at most)
TOL = {jnp.float32: 4e-6, jnp.bfloat16: 2.0 ** -7}


def _inputs(kind, B, T, I, H, P, L, bidir, seed, dtype):
    """(x, initial states, flat weights) of `kind` (`family_helpers`' kinds and the classic
    GRU)."""
    if kind != "classic_gru":
        x, states, w = fam.make_inputs(kind, B, T, I, H, P, L, bidir, seed, dtype)
        return x, states, w.astype(dtype)
    D = 2 if bidir else 1
    k = jax.random.split(jax.random.key(seed), 3)
    w = layout.init_weight(k[2], I, H, L, bidir, jnp.float32, family("classic_gru"))
    return (jax.random.normal(k[0], (B, T, I), dtype),
            (jax.random.normal(k[1], (L * D, B, H), dtype),), w.astype(dtype))


def _op(kind, x, states, w, lengths, I, H, P, L, bidir, **kw):
    """The public op of `kind`; returns (y, final states)."""
    if kind == "classic_gru":
        y, h = portable_rnn.classic_gru(x, *states, w, lengths, I, H, L, kw.pop("dropout", 0.0),
                                        bidir, **kw)
        return y, (h,)
    return fam.call(kind, x, states, w, lengths, I, H, P, L, bidir, **kw)


def _loss(outs):
    return sum(jnp.sum(jnp.sin(o.astype(jnp.float32) * (1 + i)))
               for i, o in enumerate(jax.tree.leaves(outs)))


def _outputs_and_gradients(c, every, impl=None, interpret=False):
    """(y, final states) and the gradients of x, the initial states and the weights."""
    x, states, w = _inputs(c["kind"], c["B"], c["T"], c["I"], c["H"], c["P"], c["L"],
                           c["bidir"], c["seed"], c["dtype"])
    kw = {"dropout": c["dropout"]}
    if c["dropout"]:
        kw["dropout_rng"] = jax.random.key(c["seed"] + 1)
    if c["rmask"]:
        D = 2 if c["bidir"] else 1
        gates = (GATES[c["kind"]],) if c["rmask"] == "per_gate" and GATES[c["kind"]] > 1 else ()
        shape = (c["L"] * D, *gates, c["B"], c["P"] or c["H"])
        kw["recurrent_dropout_mask"] = jax.random.bernoulli(
            jax.random.key(c["seed"] + 2), 0.75, shape).astype(c["dtype"]) / 0.75
    lengths = None if c["lengths"] is None else np.asarray(c["lengths"], np.int32)

    def f(x, states, w):
        mode = pallas.interpret() if interpret else contextlib.nullcontext()
        with mode:
            outs = _op(c["kind"], x, states, w, lengths, c["I"], c["H"], c["P"], c["L"],
                       c["bidir"], implementation=impl, remat_every=every, **kw)
        return _loss(outs), outs

    (_, outs), grads = jax.jit(jax.value_and_grad(f, (0, 1, 2), has_aux=True))(x, states, w)
    return outs, grads


def _close(got, want, tol, what):
    for i, (g, w) in enumerate(zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, i)
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()),
                                   err_msg=f"{what}: leaf {i}")


def _same_bits(got, want, what):
    for i, (g, w) in enumerate(zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)):
        assert g.dtype == w.dtype and np.array_equal(np.asarray(g), np.asarray(w)), (what, i)


def _case(kind, B, T, I, H, L, bidir, lengths, every, P=0, dropout=0.0, rmask=None, seed=0,
          dtype=jnp.float32):
    return dict(kind=kind, B=B, T=T, I=I, H=H, P=P, L=L, bidir=bidir, lengths=lengths,
                every=every, dropout=dropout, rmask=rmask, seed=seed, dtype=dtype)


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(KINDS))
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, 9))
    H = draw(st.sampled_from([3, 8, 16]))
    L = draw(st.integers(1, 2))
    lengths = draw(st.none() | st.lists(st.integers(0, T), min_size=B, max_size=B))
    rmask = draw(st.sampled_from([None, "one", "per_gate"])) if kind != "classic_gru" else None
    return _case(kind, B, T, draw(st.integers(1, 4)), H, L, draw(st.booleans()), lengths,
                 every=draw(st.integers(1, T + 2)),
                 P=draw(st.integers(1, H - 1)) if kind == "lstm_proj" and H > 1 else 0,
                 dropout=draw(st.sampled_from([0.0, 0.5])) if L > 1 else 0.0, rmask=rmask,
                 seed=draw(st.integers(0, 2 ** 16)),
                 dtype=draw(st.sampled_from([jnp.float32, jnp.bfloat16])))


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(cases())
@example(_case("lstm", 3, 7, 3, 8, 1, True, [7, 0, 5], every=1))  # k = 1, a length 0
@example(_case("gru", 2, 6, 2, 8, 1, False, [6, 3], every=6))  # k = T
@example(_case("lstm_proj", 2, 5, 2, 8, 2, False, None, every=9, P=3, rmask="per_gate",
               dtype=jnp.bfloat16))  # k > T
@example(_case("classic_gru", 3, 8, 3, 8, 2, True, [8, 0, 0], every=3, dropout=0.5))  # T % k
def test_checkpointed_equals_the_run_without_segments(c):
    """Outputs, final states and every gradient, the scan path with ``remat_every=k`` against
    ``remat_every=None`` (no segments at these sizes)."""
    want = _outputs_and_gradients(c, None)
    got = _outputs_and_gradients(c, c["every"])
    _close(got, want, TOL[c["dtype"]], str(c))


@pytest.mark.parametrize("kind, dtype", [("lstm", jnp.bfloat16)])
def test_the_steps_are_the_same_bits(kind, dtype):
    """Where XLA compiles a segment's products as the whole sequence's (the input projection
    inside the loop, as the CPU's scan route runs it from batch 8; lengths, both directions,
    k not dividing T), the outputs and final states are the same bits. The gradients agree to
    a few ulps: x's is a GEMM per segment, the weights' are summed per segment, and XLA may
    fuse the step run again inside the loop of segments otherwise (a multiply-add contracted
    or not). With one segment, nothing differs on a CPU; XLA:TPU may fuse the forward run again
    inside the backward otherwise, so there the gradients agree to a few ulps."""
    B, T, I, H = 8, 21, 8, 16
    cell = LSTMCell() if kind == "lstm" else GRUCell()
    x, states, w = _inputs(kind, B, T, I, H, 0, 1, True, 3, dtype)
    lengths = jnp.asarray(np.random.default_rng(0).integers(0, T + 1, B), jnp.int32)
    options = {**scan_options(cell, x, CPU), "project_in_loop": True}

    def run(every):
        config = ScanConfig(cell, I, H, 1, True, remat_every=every, **options)

        def f(x, states, w):
            y, finals = rnn_scan(config, x, states, w, lengths)
            return _loss((y, finals)), (y, finals)
        return jax.jit(jax.value_and_grad(f, (0, 1, 2), has_aux=True))(x, states, w)

    (_, want), grads = run(None)
    (_, got), got_grads = run(8)
    _same_bits(got, want, f"{kind} {dtype.__name__}")
    _close(got_grads, grads, TOL[dtype], "gradients")
    (_, one), one_grads = run(T)
    _same_bits(one, want, "one segment")
    if jax.default_backend() == "cpu":
        _same_bits(one_grads, grads, "one segment's gradients")
    else:
        _close(one_grads, grads, TOL[dtype], "one segment's gradients")


@pytest.mark.parametrize("c", [
    _case("lstm", 2, 7, 2, 128, 1, True, [7, 0], every=3),
    _case("classic_gru", 2, 5, 2, 128, 1, False, [5, 2], every=2),
], ids=["lstm bidirectional, ragged", "classic gru (its step differentiated)"])
def test_the_pallas_kernel_checkpoints_segments(c):
    """The Pallas TPU kernel (interpreted on a CPU) with segments, against the scan path
    without: the forward kernel per segment, then again from its checkpoint before the backward
    kernel; time padded to whole segments and the kernels' blocks."""
    want = _outputs_and_gradients(c, None, impl="scan")
    got = _outputs_and_gradients(c, c["every"], impl="pallas",
                                 interpret=jax.default_backend() != "tpu")
    _close(got, want, 2e-5, str(c))


def test_the_checkpointed_kernels_export_for_a_tpu():
    """`jax.export` for a TPU lowers the segments' kernels with Mosaic on any host: per
    direction the forward kernel (in the forward's loop of segments), and the forward kernel
    again and the backward kernel (in the backward's)."""
    x, states, w = _inputs("lstm", 8, 20, 16, 128, 0, 1, True, 0, jnp.bfloat16)
    lengths = np.asarray([20] * 7 + [3], np.int32)

    def loss(x, w):
        return _loss(_op("lstm", x, states, w, lengths, 16, 128, 0, 1, True,
                         implementation="pallas", capabilities=TPU, remat_every=8))

    exported = jax.export.export(jax.jit(jax.grad(loss, (0, 1))), platforms=["tpu"])(x, w)
    assert exported.mlir_module().count("tpu_custom_call") == 6


def _lstm(B, T, I, H, dtype=jnp.bfloat16, L=1, bidir=False):
    D = 2 if bidir else 1
    n = portable_rnn.get_num_params_in_lstm(I, H, L, bidir)
    return (S((B, T, I), dtype), S((L * D, B, H), dtype), S((L * D, B, H), dtype),
            S((n,), jnp.float32), None, I, H, L, 0.0, bidir)


def _checkpointing_note(decision):
    found = [n for n in decision.notes if "segment checkpointing" in n]
    assert len(found) <= 1, decision.notes
    return found[0] if found else None


def test_automatic_choice_where_the_residuals_do_not_fit(monkeypatch):
    """The residuals of every step, 4.06 GiB at B8 T16384 I256 H1024 in bfloat16 on a CPU
    (estimated), exceed a quarter of the CPU's fixed 16 GiB: segments whose residuals take at
    most 1/32 of that quarter (about 260 KiB a step: 4 GiB / 32 / 260 KiB = 516 steps, evened
    out over T: 33 segments of 497), longer than sqrt(T) = 128; on a TPU v5e at T 65536, 533
    steps. Where a 32nd of the budget is under sqrt(T) steps, sqrt(T). Below the budget, no
    segments and no note. (The figures stated for a kind, not a chip's own report where the
    test runs on one.)"""
    monkeypatch.setattr(caps_module, "_reported_memory", lambda platform: None)
    d = portable_rnn.explain_lstm(*_lstm(8, 16384, 256, 1024), capabilities=CPU)
    note = _checkpointing_note(d)
    assert note.startswith("segment checkpointing every 497 steps (automatic: ")
    assert "4.06 GiB, more than 0.25 of 16 GiB (a CPU's fixed figure)" in note
    assert "at most 1/32 of that share, and at least about sqrt(T) steps" in note
    assert "33 segments" in note
    d = portable_rnn.explain_lstm(*_lstm(8, 65536, 256, 1024), capabilities=TPU)
    assert d.implementation == "pallas"
    note = _checkpointing_note(d)
    assert "every 533 steps (automatic" in note and "a TPU v5 lite's" in note, note
    assert "the forward kernel again from its checkpoint" in note
    assert _checkpointing_note(portable_rnn.explain_lstm(*_lstm(8, 4096, 256, 1024),
                                                         capabilities=CPU)) is None
    with portable_rnn.policy(recurrent_memory_fraction=0.5):
        assert _checkpointing_note(portable_rnn.explain_lstm(*_lstm(8, 16384, 256, 1024),
                                                             capabilities=CPU)) is None
    with portable_rnn.policy(recurrent_memory_fraction=1e-6):
        note = _checkpointing_note(portable_rnn.explain_lstm(*_lstm(2, 100, 4, 8),
                                                             capabilities=CPU))
        assert note.startswith("segment checkpointing every 10 steps (automatic"), note


@given(st.integers(1, 10**6), st.integers(1, 10**6))
@example(16384, 516)  # 33 segments of 497
@example(16384, 1)  # sqrt(T)
@example(7, 100)  # one segment
def test_segment_length_is_the_longer_of_sqrt_t_and_the_allowed_length(steps, longest):
    """`driver.segment_length`: no empty segment, the last one nearly as long as the others,
    at least about sqrt(T) steps and about `longest` where that is longer (evened out over T:
    T / ceil(T / longest) at the least)."""
    k = segment_length(steps, longest)
    segments = -(-steps // k)
    assert 1 <= k <= steps
    assert (segments - 1) * k < steps <= segments * k
    assert steps - (segments - 1) * k >= k - segments
    assert k >= int(steps ** 0.5) // 2
    target = min(longest, steps)
    assert k * (steps + target) >= target * steps, (k, target)  # k >= T / ceil(T / target)


def test_explicit_segments_are_said_and_rule_out_cudnn():
    """``remat_every=k`` (or the policy's) checkpoints whatever the size, and the note says so;
    cuDNN, which keeps its own residuals of every step, cannot serve it (asked for, it
    raises with that reason)."""
    args = _lstm(4, 50, 8, 16, jnp.float32)
    note = _checkpointing_note(portable_rnn.explain_lstm(*args, capabilities=CPU,
                                                         remat_every=8))
    assert note.startswith("segment checkpointing every 8 steps (remat_every=8;"), note
    assert "7 segments" in note
    with portable_rnn.policy(remat_every=60):
        note = _checkpointing_note(portable_rnn.explain_lstm(*args, capabilities=CPU))
    assert note.startswith("segment checkpointing every 50 steps (policy(remat_every=60);")
    assert "one segment: each layer's forward runs again in its backward" in note
    with pytest.raises(ValueError, match="remat_every=8: jaxlib's cuDNN RNN call keeps its "
                                         "residuals of every step"):
        portable_rnn.explain_lstm(*args, capabilities=H100, implementation="cudnn",
                                  remat_every=8)
    with portable_rnn.policy(lstm="cudnn"):
        d = portable_rnn.explain_lstm(*args, capabilities=H100, remat_every=8)
    assert d.implementation == "scan" and "cannot checkpoint segments" in d.rejected["cudnn"][0]


def test_the_device_memory_behind_the_budget(monkeypatch):
    """A TPU v5e's 16 GiB by its kind, a GPU's from its name, a CPU's fixed figure; this
    machine's own report where the capabilities are the probed ones."""
    monkeypatch.setattr(caps_module, "_reported_memory", lambda platform: None)
    assert caps_module.device_memory(TPU) == (16 << 30, "a TPU v5 lite's")
    assert caps_module.device_memory(portable_rnn.Capabilities(
        "gpu", device_kind="NVIDIA H100 80GB HBM3"))[0] == 80 << 30
    assert caps_module.device_memory(CPU) == (16 << 30, "a CPU's fixed figure")
    monkeypatch.setattr(caps_module, "_reported_memory", lambda platform: 3 << 30)
    monkeypatch.setattr(caps_module, "capabilities", lambda: TPU)
    assert caps_module.device_memory(TPU) == (3 << 30, "as the TPU v5 lite reports it")


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_bad_remat_every_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match=r"`remat_every` must be an integer >= 1; got "):
        portable_rnn.explain_lstm(*_lstm(2, 5, 3, 4), remat_every=bad)
    with pytest.raises(ValueError, match=r"`remat_every` must be an integer >= 1; got "):
        portable_rnn.policy(remat_every=bad)


@pytest.mark.parametrize("bad", [0, -0.5, True, "0.5"])
def test_bad_memory_fraction_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="`recurrent_memory_fraction` must be a number > 0"):
        portable_rnn.policy(recurrent_memory_fraction=bad)


def test_without_segments_the_program_is_unchanged():
    """``remat_every=None`` where the residuals fit lowers the program it lowers when the
    automatic choice is off (``recurrent_memory_fraction=inf``); a policy that asks for
    segments lowers another."""
    x, states, w = _inputs("lstm", 4, 20, 8, 16, 0, 1, False, 0, jnp.bfloat16)

    def lowered():
        def loss(x, states, w):
            return _loss(portable_rnn.lstm(x, *states, w, None, 8, 16, 1, 0.0, False))
        return jax.jit(jax.grad(loss, (0, 1, 2))).lower(x, states, w).as_text()

    default = lowered()
    with portable_rnn.policy(recurrent_memory_fraction=float("inf")):
        assert lowered() == default
    with portable_rnn.policy(remat_every=5):
        assert lowered() != default


@pytest.mark.cpu
def test_compiled_memory_drops_with_segments():
    """A one-layer LSTM's training step at B4 T4096 I32 H256 in bfloat16, compiled (not run)
    for the CPU: XLA's temporary buffers without segments hold every step's residuals (the
    estimate, 4096 x 4 x 8.3 KiB = 130 MiB); with segments of 64 steps they drop to the
    output, its gradient and the time-major input (about 17 MiB), over 7-fold."""
    B, T, I, H = 4, 4096, 32, 256
    x = S((B, T, I), jnp.bfloat16)
    z = jnp.zeros((1, B, H), jnp.bfloat16)
    w = S((portable_rnn.get_num_params_in_lstm(I, H, 1, False),), jnp.float32)

    def temp(every):
        def loss(w, x):
            y, _, _ = portable_rnn.lstm(x, z, z, w, None, I, H, 1, 0.0, False,
                                        remat_every=every, capabilities=CPU)
            return jnp.mean(jnp.square(y.astype(jnp.float32)))
        return jax.jit(jax.grad(loss)).lower(w, x).compile().memory_analysis().temp_size_in_bytes

    without, with_segments = temp(None), temp(64)
    assert without > 120 << 20, without
    assert with_segments * 7 < without, (with_segments, without)

"""Bad input to portable_rnn.lstm: a clear error naming the argument, the expected and the got."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import portable_rnn

pytestmark = pytest.mark.cpu  # argument checks: the same on every platform

B, T, I, H, L = 2, 4, 3, 5, 2


def _args(**over):
    kw = dict(x=jnp.zeros((B, T, I)), h_0=jnp.zeros((L, B, H)), c_0=jnp.zeros((L, B, H)),
              weights=jnp.zeros(portable_rnn.get_num_params_in_lstm(I, H, L, False)),
              seq_lengths=jnp.full((B,), T), input_size=I, hidden_size=H, num_layers=L,
              dropout=0.0, bidirectional=False)
    kw.update(over)
    return kw


def _call(**over):
    kw = _args(**over)
    extra = {k: kw.pop(k) for k in ("precision", "dropout_rng", "implementation") if k in kw}
    return portable_rnn.lstm(*kw.values(), **extra)


CASES = [
    (dict(x=jnp.zeros((B, I))), ValueError, r"`x` must have shape \(batch, time, input_size\) "
     r"\(rank 3\); got shape \(2, 3\) \(rank 2\)"),
    (dict(x=jnp.zeros((B, T, I + 1))), ValueError, r"`x` must have input_size=3 features in its "
     r"last axis; got shape \(2, 4, 4\)"),
    (dict(x=jnp.zeros((B, T, I), jnp.int32)), TypeError, r"`x` must have a floating dtype .*; "
     r"got int32"),
    (dict(h_0=jnp.zeros((L, B + 1, H))), ValueError, r"`h_0` must have shape \(num_layers \* "
     r"num_directions, batch, hidden_size\)=\(2, 2, 5\); got \(2, 3, 5\)"),
    (dict(c_0=jnp.zeros((1, B, H))), ValueError, r"`c_0` must have shape .*=\(2, 2, 5\); got "
     r"\(1, 2, 5\)"),
    (dict(h_0=jnp.zeros((L, B, H + 1))), ValueError, r"`h_0` .* got \(2, 2, 6\)"),
    (dict(c_0=jnp.zeros((L, B, H), jnp.int8)), TypeError, r"`c_0` must have a floating dtype"),
    (dict(weights=jnp.zeros(7)), ValueError, r"`weights` must have shape "
     r"\(get_num_params_in_lstm\(...\),\)=\(440,\); got \(7,\)"),
    (dict(weights=jnp.zeros((20, 20))), ValueError, r"`weights` must have shape .* got \(20, 20\)"),
    (dict(seq_lengths=jnp.full((B,), 2.0)), TypeError, r"`seq_lengths` must have an integer "
     r"dtype; got float32"),
    (dict(seq_lengths=jnp.full((B + 1,), 2)), ValueError, r"`seq_lengths` must have shape "
     r"\(batch,\)=\(2,\); got \(3,\)"),
    (dict(seq_lengths=np.array([5, 1])), ValueError, r"`seq_lengths` must lie in \[0, T=4\]; "
     r"got \[5\] at batch indices \[0\]"),
    (dict(seq_lengths=np.array([1, -1])), ValueError, r"`seq_lengths` must lie in \[0, T=4\]; "
     r"got \[-1\] at batch indices \[1\]"),
    (dict(input_size=0), ValueError, r"`input_size` must be an integer >= 1; got 0"),
    (dict(hidden_size=2.5), ValueError, r"`hidden_size` must be an integer >= 1; got 2.5"),
    (dict(num_layers=True), ValueError, r"`num_layers` must be an integer >= 1; got True"),
    (dict(bidirectional=1), TypeError, r"`bidirectional` must be a Python bool; got 1"),
    (dict(dropout=1.5), ValueError, r"`dropout` must be a float in \[0, 1\]; got 1.5"),
    (dict(dropout=0.2), ValueError, r"`dropout`=0.2 needs a random key: pass "
     r"`dropout_rng=jax.random.key\(...\)` when training, or `dropout=0.0` for inference"),
    (dict(implementation="cudaa"), ValueError, r"`implementation` must be None \(automatic\) or "
     r"one of 'cudnn', 'cudnn_ffi', 'pallas', 'scan'; got 'cudaa'"),
    (dict(precision="nope"), ValueError, r"`precision` must be None, a `jax.lax.Precision`"),
    (dict(x=[[1.0]]), ValueError, r"`x` must have shape \(batch, time, input_size\)"),
]


@pytest.mark.parametrize("over, exc, match", CASES, ids=[",".join(c[0]) for c in CASES])
def test_error_messages(over, exc, match):
    with pytest.raises(exc, match=match):
        _call(**over)


STATE_HINTS = [
    (dict(x=jnp.zeros((T, B, I))), r"`h_0` must have shape .*=\(2, 4, 5\); got \(2, 2, 5\); "
     r"its batch size 2 is the length of `x`'s time axis: `x` looks time-major, \(time, batch, "
     r"features\); pass it batch-major, \(batch, time, features\), e.g. "
     r"`jnp.swapaxes\(x, 0, 1\)`\.$"),
    (dict(h_0=jnp.zeros((L, B, H + 1))), r"got \(2, 2, 6\); its last axis is 6, not "
     r"hidden_size=5: check `hidden_size`\.$"),
    (dict(c_0=jnp.zeros((L, B, 4))), r"`c_0` .* its last axis is 4, not hidden_size=5"),
    (dict(hidden_size=4, weights=jnp.zeros(portable_rnn.get_num_params_in_lstm(I, 4, L, False))),
     r"`h_0` .*=\(2, 2, 4\); got \(2, 2, 5\); its last axis is 5, not hidden_size=4"),
    (dict(h_0=jnp.zeros((B, H))), r"got \(2, 5\); it lacks the leading num_layers \* "
     r"num_directions axis\.$"),
    (dict(c_0=jnp.zeros((1, B, H))), r"its first axis is 1, not num_layers \* num_directions=2: "
     r"check `num_layers` and `bidirectional`\.$"),
]


@pytest.mark.parametrize("over, match", STATE_HINTS, ids=[",".join(c[0]) for c in STATE_HINTS])
def test_state_shape_errors_name_the_likely_cause(over, match):
    with pytest.raises(ValueError, match=match):
        _call(**over)


@pytest.mark.parametrize("family", ["gru", "simple_rnn"])
def test_one_state_families_hint_at_time_major_x(family):
    fn = getattr(portable_rnn, family)
    init = getattr(portable_rnn, f"init_{family}_weight")
    w = init(jax.random.key(0), I, H, 1, False)
    with pytest.raises(ValueError, match=r"`h_0` .*: `x` looks time-major"):
        fn(jnp.zeros((T, B, I)), jnp.zeros((1, B, H)), w, None, I, H, 1, 0.0, False)
    with pytest.raises(ValueError, match=r"`h_0` .*; its last axis is 6, not hidden_size=5"):
        fn(jnp.zeros((B, T, I)), jnp.zeros((1, B, H + 1)), w, None, I, H, 1, 0.0, False)


def test_layer_carry_hints_at_time_major_inputs():
    from portable_rnn import linen as plinen
    layer = plinen.GRU(hidden_size=H)
    v = layer.init(jax.random.key(0), jnp.zeros((B, T, I)))
    with pytest.raises(ValueError, match=r"`initial_carry` .*=\(1, 4, 5\); got \(1, 2, 5\); "
                                         r"its batch size 2 is the length of `inputs`'s time axis"):
        layer.apply(v, jnp.zeros((T, B, I)), initial_carry=jnp.zeros((1, B, H)))


def test_errors_raise_at_trace_time_under_jit():
    """Shape errors surface while tracing, before anything runs."""
    f = jax.jit(lambda x: portable_rnn.lstm(x, jnp.zeros((L, B, H)), jnp.zeros((L, B, H)),
                                            jnp.zeros(440), None, I, H, L, 0.0, False))
    with pytest.raises(ValueError, match=r"`x` must have input_size=3"):
        f.trace(jax.ShapeDtypeStruct((B, T, I + 2), jnp.float32))


def test_traced_sizes_are_rejected_with_advice():
    with pytest.raises(TypeError, match=r"`hidden_size` must be a static Python int"):
        jax.jit(lambda h: _call(hidden_size=h))(H)

"""Weight helpers: bit-compatible with jax.experimental.rnn, round trips with PyTorch and Flax."""

import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import rnn as jrnn

import portable_rnn

pytestmark = pytest.mark.cpu  # weight layouts: the same on every platform

sizes = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.booleans())


@given(sizes, st.integers(0, 1000))
def test_bit_compatible_with_jax_experimental_rnn(size, seed):
    I, H, L, bidir = size
    assert portable_rnn.get_num_params_in_lstm(I, H, L, bidir) == \
        jrnn.get_num_params_in_lstm(I, H, L, bidir)
    key = jax.random.key(seed)
    w = portable_rnn.init_lstm_weight(key, I, H, L, bidir)
    np.testing.assert_array_equal(np.asarray(w),
                                  np.asarray(jrnn.init_lstm_weight(key, I, H, L, bidir)))
    ours = portable_rnn.unpack_lstm_weights(w, I, H, L, bidir)
    theirs = jrnn.unpack_lstm_weights(w, I, H, L, bidir)
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys()
        for p in a:
            np.testing.assert_array_equal(np.asarray(a[p]), np.asarray(b[p]))
    packed = portable_rnn.pack_lstm_weights(*ours, I, H, L, bidir)
    np.testing.assert_array_equal(np.asarray(packed), np.asarray(w))
    # sequences in pseudo-layer order work as well as dicts
    as_lists = [[g[p] for p in sorted(g)] for g in ours]
    np.testing.assert_array_equal(
        np.asarray(portable_rnn.pack_lstm_weights(*as_lists, I, H, L, bidir)), np.asarray(w))


def test_init_range_and_dtype():
    w = portable_rnn.init_lstm_weight(jax.random.key(0), 3, 16, 2, True, dtype=jnp.bfloat16)
    assert w.dtype == jnp.bfloat16
    assert float(jnp.max(jnp.abs(w.astype(jnp.float32)))) <= 0.25


def test_pack_without_biases_uses_zeros():
    I, H = 3, 2
    W_ih, W_hh, _, _ = portable_rnn.unpack_lstm_weights(
        portable_rnn.init_lstm_weight(jax.random.key(0), I, H, 1, False), I, H, 1, False)
    w = portable_rnn.pack_lstm_weights(W_ih, W_hh, None, None, I, H, 1, False)
    _, _, b_ih, b_hh = portable_rnn.unpack_lstm_weights(w, I, H, 1, False)
    assert not np.any(np.asarray(b_ih[0])) and not np.any(np.asarray(b_hh[0]))


def test_pack_errors():
    with pytest.raises(ValueError, match=r"`W_ih\[0\]` must have shape \(8, 3\); got \(8, 4\)"):
        portable_rnn.pack_lstm_weights([jnp.zeros((8, 4))], [jnp.zeros((8, 2))], None, None,
                                       3, 2, 1, False)
    with pytest.raises(ValueError, match=r"`W_hh` must hold 2 arrays \(one per pseudo-layer\)"):
        portable_rnn.pack_lstm_weights([jnp.zeros((8, 3))] * 2, [jnp.zeros((8, 2))], None, None,
                                       3, 2, 1, True)
    with pytest.raises(ValueError, match=r"`weights` must have shape .*=\(56,\) for input_size=3, "
                       r"hidden_size=2, num_layers=1, bidirectional=False; got \(3,\)"):
        portable_rnn.unpack_lstm_weights(jnp.zeros(3), 3, 2, 1, False)


def _torch():
    return pytest.importorskip("torch", reason="needs torch (CPU)")


@pytest.mark.parametrize("L, bidir", [(1, False), (2, True), (3, False)])
def test_torch_state_dict_round_trip(L, bidir):
    torch = _torch()
    torch.manual_seed(0)
    I, H = 4, 3
    mod = torch.nn.LSTM(I, H, L, bidirectional=bidir, batch_first=True)
    w = portable_rnn.lstm_weights_from_torch(mod.state_dict())
    assert w.shape == (portable_rnn.get_num_params_in_lstm(I, H, L, bidir),)
    back = portable_rnn.lstm_weights_to_torch(w, I, H, L, bidir)
    assert back.keys() == mod.state_dict().keys()
    for k, v in mod.state_dict().items():
        np.testing.assert_array_equal(back[k], v.numpy())


def test_torch_prefix_no_bias_and_errors():
    torch = _torch()
    model = torch.nn.Sequential(torch.nn.LSTM(2, 3, bias=False))
    sd = model.state_dict()
    w = portable_rnn.lstm_weights_from_torch(sd, prefix="0.")
    _, _, b_ih, b_hh = portable_rnn.unpack_lstm_weights(w, 2, 3, 1, False)
    assert not np.any(np.asarray(b_ih[0])) and not np.any(np.asarray(b_hh[0]))
    with pytest.raises(ValueError, match=r"holds no nn.LSTM weights under prefix 'enc.'"):
        portable_rnn.lstm_weights_from_torch(sd, prefix="enc.")
    with pytest.raises(ValueError, match=r"holds no nn.LSTM weights under prefix ''.*"
                                         r"did you mean `prefix='0.'`\?$"):
        portable_rnn.lstm_weights_from_torch(sd)
    proj = torch.nn.LSTM(2, 4, proj_size=2).state_dict()
    w = portable_rnn.lstm_weights_from_torch(proj)  # the projection size is read from W_hr
    assert w.shape == (portable_rnn.get_num_params_in_lstm(2, 4, 1, False, proj_size=2),)
    with pytest.raises(ValueError, match=r"looks like an nn.LSTM"):
        portable_rnn.gru_weights_from_torch(torch.nn.LSTM(2, 3).state_dict())
    partial_sd = {k: v for k, v in torch.nn.LSTM(2, 3, 2).state_dict().items()
                  if k != "weight_hh_l1"}
    with pytest.raises(ValueError, match=r"`state_dict` is missing 'weight_hh_l1'"):
        portable_rnn.lstm_weights_from_torch(partial_sd)


def test_torch_prefix_hint_is_ready_to_paste():
    torch = _torch()
    model = torch.nn.Module()
    model.enc, model.head = torch.nn.LSTM(2, 3, 2), torch.nn.Linear(3, 1)
    with pytest.raises(ValueError) as info:
        portable_rnn.lstm_weights_from_torch(model.state_dict())
    assert str(info.value).endswith("; did you mean `prefix='enc.'`?")
    w = portable_rnn.lstm_weights_from_torch(model.state_dict(), prefix="enc.")
    assert w.shape == (portable_rnn.get_num_params_in_lstm(2, 3, 2, False),)
    model.dec = torch.nn.GRU(2, 3)
    with pytest.raises(ValueError, match=r"under prefix 'enc'; .*did you mean `prefix='dec.'` or "
                                         r"`prefix='enc.'`\?$"):
        portable_rnn.gru_weights_from_torch(model.state_dict(), prefix="enc")


def test_flax_params_layouts():
    """One layer, Bidirectional, and stacked sequences; Flax's single bias becomes b_hh."""
    I, H = 3, 4
    x = jnp.ones((1, 2, I))
    cell = flax_nn.OptimizedLSTMCell(H)
    p = flax_nn.RNN(cell).init(jax.random.key(0), x)
    w = portable_rnn.lstm_weights_from_flax(p)
    W_ih, W_hh, b_ih, b_hh = portable_rnn.unpack_lstm_weights(w, I, H, 1, False)
    c = p["params"]["cell"]
    np.testing.assert_array_equal(np.asarray(W_ih[0][H:2 * H]), np.asarray(c["if"]["kernel"]).T)
    np.testing.assert_array_equal(np.asarray(W_hh[0][3 * H:]), np.asarray(c["ho"]["kernel"]).T)
    np.testing.assert_array_equal(np.asarray(b_hh[0][2 * H:3 * H]), np.asarray(c["hg"]["bias"]))
    assert not np.any(np.asarray(b_ih[0]))
    # the cell dict alone, and {'cell': ...}, are accepted too
    for tree in (c, {"cell": c}, p["params"]):
        np.testing.assert_array_equal(np.asarray(portable_rnn.lstm_weights_from_flax(tree)),
                                      np.asarray(w))
    bi = flax_nn.Bidirectional(flax_nn.RNN(flax_nn.OptimizedLSTMCell(H)),
                               flax_nn.RNN(flax_nn.OptimizedLSTMCell(H)))
    p0 = bi.init(jax.random.key(1), x)
    p1 = bi.init(jax.random.key(2), jnp.ones((1, 2, 2 * H)))
    wb = portable_rnn.lstm_weights_from_flax([p0, p1])
    W_ih, W_hh, _, _ = portable_rnn.unpack_lstm_weights(wb, I, H, 2, True)
    back = p1["params"]["backward_rnn"]["cell"]
    np.testing.assert_array_equal(np.asarray(W_ih[3][:H]), np.asarray(back["ii"]["kernel"]).T)
    with pytest.raises(ValueError, match=r"`W_ih\[2\]` must have shape \(16, 8\); got \(16, 3\)"):
        portable_rnn.lstm_weights_from_flax([p0, p0])
    with pytest.raises(ValueError, match=r"not an LSTMCell/OptimizedLSTMCell parameter tree"):
        portable_rnn.lstm_weights_from_flax({"params": {"Dense_0": {"kernel": x}}})

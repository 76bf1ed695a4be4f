"""The routing model (`portable_rnn._src.core.routing`): its fit, its choice, its stated rule for
devices without a grid, and that a new route or device kind needs only its grid."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portable_rnn
from portable_rnn._src.attention import cost as attention_cost
from portable_rnn._src.core import dispatch, routing
from portable_rnn._src.recurrent import cost as recurrent_cost

pytestmark = pytest.mark.cpu  # decisions and fits: the same on every platform


# --- a toy op: two routes, then a third, each a module-sized Route plus grid rows --------------

class ToyCall:
    def __init__(self, n):
        self.n = n


def _route(name):
    return dispatch.Route(name, rejects=lambda call, caps: (), notes=lambda call, caps: (),
                          run=lambda d, call: name)


def _toy_basis(shape, route, params):
    return (1.0, float(shape["n"]))


def _toy_rule(shape, serving):
    return serving[-1], f"{serving[-1]}, the toy's stated rule"


# measured ms = a + b * n per route (fwd; fwd+bwd twice that)
TOY_COSTS = {"kernel": (1.0, 0.1), "portable": (0.2, 0.5), "newer": (0.1, 0.05)}


def _rows(routes, ns=(1, 2, 4, 8, 16, 32)):
    rows = []
    for n in ns:
        ms = {r: {"fwd": a + b * n, "fwdbwd": 2 * (a + b * n)} for r, (a, b) in TOY_COSTS.items()
              if r in routes}
        rows.append({"op": "toy", "n": n, "split": "fit", "ms": ms})
    return rows


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """Registers the toy op and points the routing model at an empty grid folder; returns a
    function that writes a device kind's grid there."""
    monkeypatch.setattr(routing, "GRIDS", tmp_path)
    monkeypatch.setitem(dispatch._ROUTES, "toy", {})
    monkeypatch.setitem(routing._OPS, "toy", "toy")
    monkeypatch.setitem(routing._GROUPS, "toy", routing.Group(
        "toy", ("call", "n"), _toy_basis, lambda call: {"n": call.n},
        lambda route, shape: [{}], _toy_rule, lambda shape: float(shape["n"])))
    routing.grid.cache_clear()
    routing.model.cache_clear()

    def install(device_kind, rows):
        path = tmp_path / f"{routing.slug(device_kind)}.json"
        path.write_text(json.dumps({"device_kind": device_kind, "platform": "tpu",
                                    "source": "test", "rows": rows}))
        routing.grid.cache_clear()
        routing.model.cache_clear()

    yield install
    routing.grid.cache_clear()
    routing.model.cache_clear()


def _decide(n, device_kind):
    caps = portable_rnn.Capabilities("tpu", device_kind=device_kind)
    return dispatch.decide("toy", ToyCall(n), caps, None, None)


def test_a_new_route_and_a_new_device_kind_need_only_their_grid(toy):
    dispatch.register("toy", _route("kernel"), _route("portable"))
    toy("Toy chip", _rows(("kernel", "portable")))
    # portable: 0.2 + 0.5n, kernel: 1 + 0.1n; they cross at n = 2
    assert _decide(1, "Toy chip").implementation == "portable"
    d = _decide(16, "Toy chip")
    assert d.implementation == "kernel"
    assert d.predicted["kernel"]["fwdbwd"] == pytest.approx(2 * (1 + 1.6), rel=1e-6)
    assert d.predicted["portable"]["fwdbwd"] == pytest.approx(2 * (0.2 + 8), rel=1e-6)
    assert "model fitted on Toy chip, 6 shapes" in d.notes[-1]
    assert d.passed_over["portable"][0].startswith("predicted 3.15x kernel's time "
                                                  "forward+backward")
    assert d.rejected == {} and not d.fell_back  # the first route, taken
    d = _decide(1, "Toy chip")
    assert d.rejected["kernel"][0].startswith("predicted ") and d.fell_back

    # a third route: its Route and its grid rows, nothing else
    dispatch.register("toy", _route("kernel"), _route("newer"), _route("portable"))
    assert _decide(16, "Toy chip").implementation == "kernel"  # not in this grid: not ranked
    assert "not in the grid of Toy chip" in _decide(16, "Toy chip").passed_over["newer"][0]
    toy("Toy chip", _rows(("kernel", "portable", "newer")))
    assert _decide(16, "Toy chip").implementation == "newer"
    assert _decide(1, "Toy chip").implementation == "newer"

    # another device kind: its own grid, where the kernel is not measured
    toy("Toy chip 2", _rows(("portable", "newer")))
    d = _decide(1, "Toy chip 2")  # the kernel serves first, and nothing there ranks it
    assert d.implementation == "kernel"
    assert d.notes[-1] == ("routing model: kernel is not in the grid of Toy chip 2; the first "
                          "route that serves the call is taken")
    toy("Toy chip 2", _rows(("kernel", "portable")))
    assert _decide(1, "Toy chip 2").implementation == "portable"
    # a device kind without a grid gets the stated rule, never another chip's figures
    d = _decide(16, "Toy chip 3")
    assert d.implementation == "portable"
    assert d.notes[-1] == ("no measured grid for Toy chip 3: stated rule: portable, the toy's "
                          "stated rule")
    assert d.predicted == {}


def test_a_preference_and_an_explicit_request_override_the_model(toy):
    dispatch.register("toy", _route("kernel"), _route("portable"))
    toy("Toy chip", _rows(("kernel", "portable")))
    caps = portable_rnn.Capabilities("tpu", device_kind="Toy chip")
    assert dispatch.decide("toy", ToyCall(16), caps, None, "portable").implementation == "portable"
    assert dispatch.decide("toy", ToyCall(16), caps, "portable", None).implementation == "portable"


@settings(max_examples=20)
@given(st.lists(st.floats(0.0, 5.0), min_size=len(recurrent_cost.TERMS),
                max_size=len(recurrent_cost.TERMS)))
def test_the_fit_recovers_times_made_by_the_basis(coefficients):
    """Times that are a non-negative combination of the recurrent terms are predicted back."""
    coefficients = np.asarray(coefficients)
    coefficients[0] += 0.1  # every call costs something
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(40):
        s = dict(op="recurrent", family="lstm", gates=4, dtype=str(rng.choice(["float32",
                                                                             "bfloat16"])),
                 B=int(rng.integers(1, 300)), T=int(rng.integers(1, 3000)),
                 I=int(rng.integers(8, 1100)), H=int(rng.integers(8, 1100)),
                 L=int(rng.integers(1, 4)), D=int(rng.integers(1, 3)), split="fit")
        t = float(np.dot(recurrent_cost.basis(s, "scan", {}), coefficients))
        s["ms"] = {"scan": {"fwd": t, "fwdbwd": 3 * t}}
        rows.append(s)
    group = routing._GROUPS["recurrent"]
    m = routing.fit(rows, group, "synthetic")
    for s in rows:
        predicted = m.predict(s, "scan")
        np.testing.assert_allclose(predicted["fwd"], s["ms"]["scan"]["fwd"], rtol=1e-3)
        np.testing.assert_allclose(predicted["fwdbwd"], s["ms"]["scan"]["fwdbwd"], rtol=1e-3)


def _visible_by_mask(s, block=None):
    T, S = s["T"], s["S"]
    t, k = np.arange(T)[:, None], np.arange(S)[None, :]
    seen = np.ones((T, S), bool)
    if s["causal"]:
        seen &= k <= t
    if s["window"] is not None:
        left, right = s["window"]
        seen &= (k >= t - left) & (k <= t + right)
    if block is None:
        return int(seen.sum())
    bq, bk = min(block, T), min(block, S)
    tiles = [seen[i:i + bq, j:j + bk].any() for i in range(0, T, bq) for j in range(0, S, bk)]
    return int(sum(tiles))


@given(T=st.integers(1, 300), S=st.integers(1, 300), causal=st.booleans(),
       window=st.none() | st.tuples(st.integers(0, 40), st.integers(0, 40)),
       block=st.none() | st.sampled_from([8, 16, 64, 512]))
def test_visible_logits_and_tiles_count_the_mask(T, S, causal, window, block):
    s = dict(T=T, S=S, causal=causal, window=window)
    assert attention_cost.visible(s, block) == _visible_by_mask(s, block)


def test_the_stated_rules_name_what_they_take():
    shape = dict(B=2, N=4, T=2048, S=1024)  # 2**24 logits
    assert attention_cost.rule(shape, ("splash", "flash", "chunked", "xla"))[0] == "splash"
    assert attention_cost.rule(shape, ("flash", "chunked", "xla"))[0] == "flash"
    assert attention_cost.rule(shape, ("chunked", "xla"))[0] == "chunked"
    assert attention_cost.rule(dict(shape, S=1023), ("chunked", "xla")) == (
        "xla", "xla (dense): 16,760,832 logits (B x N x T x S), below 2**24 (64 MiB in float32)")
    assert attention_cost.rule(dict(shape, S=1023), ("chunked",))[0] == "chunked"
    assert recurrent_cost.rule({}, ("pallas", "scan"))[0] == "pallas"


def test_an_unmeasured_tpu_generation_gets_the_stated_rule():
    import jax
    import jax.numpy as jnp

    caps = portable_rnn.Capabilities("tpu", device_kind="TPU v9 imaginary")
    x = jax.ShapeDtypeStruct((32, 512, 256), jnp.bfloat16)
    h = jax.ShapeDtypeStruct((1, 32, 1024), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((portable_rnn.get_num_params_in_lstm(256, 1024, 1, False),),
                             jnp.bfloat16)
    d = portable_rnn.explain_lstm(x, h, h, w, None, 256, 1024, 1, 0.0, False, capabilities=caps)
    assert d.implementation == "pallas"
    assert d.notes[-1].startswith("no measured grid for TPU v9 imaginary: stated rule: pallas")
    assert d.predicted == {}

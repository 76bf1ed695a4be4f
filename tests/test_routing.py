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
from portable_rnn._src.recurrent.families import FAMILIES

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


@pytest.mark.parametrize("family,gates", [("lstm", 4), ("gru", 3), ("simple_rnn", 1)])
def test_the_kernels_terms_count_the_hidden_size_it_computes(family, gates):
    """The Pallas kernel pads a gated cell's hidden size to the lanes: its terms at H = 300 are
    those at H = 384 (the projection's input is the real size), the scan path's are not; a
    one-gate cell is not padded."""
    s = dict(family=family, gates=gates, dtype="bfloat16", B=24, T=256, I=256, L=2, D=2, P=0)
    at = {H: {r: recurrent_cost.basis(dict(s, H=H), r, {}) for r in ("pallas", "scan")}
          for H in (300, 384)}
    padded = gates > 1
    assert recurrent_cost.computed_hidden(dict(s, H=300), "pallas") == (384 if padded else 300)
    assert recurrent_cost.computed_hidden(dict(s, H=300), "scan") == 300
    # every term but the input projection's (whose inputs are the layers' real outputs)
    assert (at[300]["pallas"][:-1] == at[384]["pallas"][:-1]) == padded
    assert at[300]["pallas"][-1] < at[384]["pallas"][-1]
    assert at[300]["scan"][4] < at[384]["scan"][4]  # W_hh bytes per step


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


# --- the committed grids of a GPU (from benchmarks/gpu.py) and of the CPU's scan variants ------

H200 = portable_rnn.Capabilities("gpu", 91900, (9, 0), "NVIDIA H200")


def _lstm_args(B, T, I, H, L=1, dtype="float32"):
    import jax

    x = jax.ShapeDtypeStruct((B, T, I), dtype)
    h = jax.ShapeDtypeStruct((L, B, H), dtype)
    w = jax.ShapeDtypeStruct((portable_rnn.get_num_params_in_lstm(I, H, L, False),), dtype)
    return x, h, h, w, None, I, H, L, 0.0, False


def test_the_h200_grid_is_the_gpu_benchmark_converted_with_a_seeded_split():
    """The committed grid of the NVIDIA H200 is `benchmarks.routing_from_gpu` of
    benchmarks/results/gpu.json: the same rows, times and split (drawn from the rows' order)."""
    import pathlib

    from benchmarks import routing_from_gpu

    root = pathlib.Path(__file__).parents[1]
    run = json.loads((root / "benchmarks/results/gpu.json").read_text())
    rows = routing_from_gpu.split(routing_from_gpu.convert(run))
    committed = routing.grid("nvidia_h200")
    assert committed["device_kind"] == "NVIDIA H200"
    assert [dict(r) for r in committed["rows"]] == json.loads(json.dumps(rows))
    assert routing_from_gpu.split(routing_from_gpu.convert(run), seed=1) != rows  # a draw
    for group in ("recurrent", "attention"):
        held = [r for r in rows if r["op"] == group and r["split"] == "held_out"]
        assert held and all(len(r["ms"]) >= 2 for r in held)
    # precision HIGHEST and the upcast are not what an automatic float32 call runs
    assert not any("highest" in v or "upcast" in v for r in rows for v in r["ms"])


@pytest.mark.parametrize("group, fitted, held_out", [("recurrent", 18, 3), ("attention", 2, 1)])
def test_the_h200_model_on_its_held_out_shapes(group, fitted, held_out):
    """The H200's held-out report (`benchmarks.routing_fit`): the automatic choice's measured
    time is the best measured route's at every held-out shape."""
    m = routing.model("nvidia_h200", group)
    assert m.fitted == fitted and m.device_kind == "NVIDIA H200"
    picks = routing.evaluate(routing.grid("nvidia_h200")["rows"], m)
    s = routing.summary([p["ratio"] for p in picks])
    assert s["n"] == held_out and s["max"] <= 1.05, picks


def test_an_h200_routes_the_lstm_by_the_model():
    """On a GPU of kind NVIDIA H200 the routing model ranks cuDNN against the scan path (no
    skip heuristic): the choice is its fastest prediction, at every shape the benchmark
    measured, and the decision says so; asking for cuDNN still selects it."""
    for shape in [(1, 16, 64, 64), (64, 256, 512, 512), (256, 128, 1024, 1024),
                  (16, 1024, 256, 1024, 2)]:
        d = portable_rnn.explain_lstm(*_lstm_args(*shape), capabilities=H200)
        assert set(d.predicted) == {"cudnn", "scan"}
        best = min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"])
        assert d.implementation == best == "scan"  # as measured: scan faster everywhere
        assert d.notes[-1].startswith("routing model (model fitted on NVIDIA H200, 18 shapes): "
                                      "scan predicted ")
        assert d.rejected["cudnn"][0].startswith("predicted ")
    with portable_rnn.policy(lstm="cudnn"):
        assert portable_rnn.explain_lstm(*_lstm_args(8, 64, 128, 128),
                                         capabilities=H200).implementation == "cudnn"
    d = portable_rnn.explain_lstm(*_lstm_args(8, 64, 128, 128), implementation="cudnn",
                                  capabilities=H200)
    assert d.implementation == "cudnn"
    with portable_rnn.policy(lstm_low_precision="upcast"):  # a policy that asks for cuDNN
        d = portable_rnn.explain_lstm(*_lstm_args(8, 64, 128, 128, dtype="bfloat16"),
                                      capabilities=H200)
    assert d.implementation == "cudnn" and d.predicted == {}


def test_a_gpu_without_a_grid_takes_the_scan_path_by_the_stated_rule():
    other = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100 80GB HBM3")
    d = portable_rnn.explain_lstm(*_lstm_args(64, 256, 512, 512), capabilities=other)
    assert d.implementation == "scan" and d.predicted == {}
    assert d.notes[-1].startswith("no measured grid for NVIDIA H100 80GB HBM3: stated rule: the "
                                  "automatic choice takes the scan path on a GPU unless a grid "
                                  "measures otherwise")
    assert d.rejected["cudnn"][0].startswith("the automatic choice takes the scan path")
    assert d.rejected["cudnn"][0].endswith(" (the stated rule: no measured grid for NVIDIA H100 "
                                           "80GB HBM3)")
    assert recurrent_cost.rule({}, ("cudnn", "scan"))[0] == "scan"
    assert recurrent_cost.rule({}, ("cudnn",))[0] == "cudnn"
    # beyond the H200 grid's reach, the same rule
    d = portable_rnn.explain_lstm(*_lstm_args(64, 4096, 1024, 1024, 2), capabilities=H200)
    assert d.implementation == "scan"
    assert any("beyond its reach: stated rule: the automatic choice takes the scan path" in n
               for n in d.notes), d.notes


def test_an_h200_routes_attention_by_the_model():
    """At each attention shape the H200 benchmark measured, the choice is the model's fastest
    prediction and, there, the route measured fastest (cuDNN; the chunked path at T=197, where
    the three lie within 3%)."""
    import jax

    rows = [r for r in routing.grid("nvidia_h200")["rows"] if r["op"] == "attention"]
    assert sorted(r["T"] for r in rows) == [197, 1024, 4096]
    for r in rows:
        q = jax.ShapeDtypeStruct((r["B"], r["T"], r["N"], r["H"]), r["dtype"])
        d = portable_rnn.explain_attention(q, q, q, is_causal=True, capabilities=H200)
        assert set(d.predicted) == {"cudnn", "xla", "chunked"}
        assert d.implementation == min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"])
        measured = {n: t["fwdbwd"] for n, t in r["ms"].items()}
        assert d.implementation == min(measured, key=measured.get)
        assert "routing model (model fitted on NVIDIA H200, 2 shapes)" in d.notes[-1]


def _cpu_in_loop(B, T, I, H, dtype):
    """The CPU decision's note on where an LSTM call's input projection runs."""
    d = portable_rnn.explain_lstm(*_lstm_args(B, T, I, H, 1, dtype),
                                  capabilities=portable_rnn.Capabilities("cpu"))
    (note,) = [n for n in d.notes if n.startswith("CPU: input projection")]
    return note


def test_the_cpu_ranks_the_scan_routes_projection_variants():
    """On a CPU the routing model ranks the scan route's input projection inside the loop
    against before it (`recurrent.cost.variants`), at the dtypes its grid measured; float16
    (not measured: its products run in float32) keeps the cell's stated rule."""
    m = routing.model("cpu", "recurrent")
    names = {routing.variant_name("scan", in_loop=v) for v in (0, 1)}
    assert {v for v, _ in m.coefficients} == names
    picked = set()
    for B, T, I, H in [(1, 256, 64, 128), (64, 32, 256, 128), (8, 128, 32, 384),
                       (2, 512, 512, 256), (1, 32, 32, 128)]:
        for dtype in ("float32", "bfloat16"):
            s = dict(family="lstm", gates=4, dtype=dtype, B=B, T=T, I=I, H=H, L=1, D=1, P=0)
            variant, t = m.best_variant(s, "scan")
            inside = routing.parse_variant(variant)[1]["in_loop"]
            note = _cpu_in_loop(B, T, I, H, dtype)
            where = "inside the loop" if inside else "before the loop (one GEMM)"
            assert note.startswith(f"CPU: input projection {where}: routing model (model "
                                   "fitted on cpu, "), note
            picked.add(inside)
    assert picked == {False, True}
    note = _cpu_in_loop(64, 32, 256, 128, "float16")
    assert note == ("CPU: input projection before the loop (one GEMM): the lstm cell's stated "
                    f"rule (project_in_loop): the routing model's grid ({m.describe()}) measured "
                    "no float16")
    note = _cpu_in_loop(256, 2048, 1024, 1024, "float32")  # beyond its reach
    assert note == ("CPU: input projection inside the loop: the lstm cell's stated rule "
                    f"(project_in_loop): the call is beyond the routing model's reach "
                    f"({m.describe()})")


def test_the_scan_option_follows_the_models_variant(monkeypatch):
    """What runs is what the decision says: the driver's ``project_in_loop`` is the variant the
    model ranks first (and the cell's rule without a grid)."""
    import jax
    import jax.numpy as jnp

    from portable_rnn._src.recurrent.routes import scan

    seen = []
    chosen = scan.scan_options

    def spy(*args, **kw):
        out = chosen(*args, **kw)
        seen.append(out["project_in_loop"])
        return out

    monkeypatch.setattr(scan, "scan_options", spy)
    m = routing.model("cpu", "recurrent")
    for B in (1, 64):
        x = jnp.ones((B, 16, 32))
        h = jnp.zeros((1, B, 128))
        w = portable_rnn.init_lstm_weight(jax.random.key(0), 32, 128, 1, False)
        jax.jit(lambda x, h, w: portable_rnn.lstm(x, h, h, w, None, 32, 128, 1, 0.0, False)[0]
                ).lower(x, h, w)
        s = dict(family="lstm", gates=4, dtype="float32", B=B, T=16, I=32, H=128, L=1, D=1, P=0)
        best = routing.parse_variant(m.best_variant(s, "scan")[0])[1]["in_loop"]
        assert seen[-1] == bool(best)


def test_a_family_no_grid_measured_takes_the_scan_path_on_a_tpu():
    """The TPU grid timed the Pallas kernel on some families: a family it did not (measured
    from the grid's own rows, not spelled out) takes the scan path automatically, saying so,
    and the kernel where asked for; a measured family keeps the model's choice."""
    import inspect

    import jax

    tpu = portable_rnn.Capabilities("tpu", device_kind="TPU v5 lite")
    m = routing.model(routing.device_key(tpu), "recurrent")
    assert m is not None and m.families
    grid = routing.grid(routing.device_key(tpu))
    assert m.families == {r["family"] for r in grid["rows"]
                          if r["op"] == "recurrent" and r["split"] == "fit"}
    registered = set(FAMILIES)
    unmeasured = sorted(registered - m.families)
    measured = sorted(registered & m.families)
    assert unmeasured and measured, (unmeasured, measured)

    def explain(name, **kw):
        fn = getattr(portable_rnn, f"explain_{name}")
        states = [p for p in inspect.signature(fn).parameters if p.endswith("_0")]
        x = jax.ShapeDtypeStruct((32, 256, 256), "bfloat16")
        h = jax.ShapeDtypeStruct((1, 32, 256), "bfloat16")
        n = getattr(portable_rnn, f"get_num_params_in_{name}")(256, 256, 1, False)
        w = jax.ShapeDtypeStruct((n,), "bfloat16")
        return fn(x, *[h] * len(states), w, None, 256, 256, 1, 0.0, False, capabilities=tpu,
                  **kw)

    for name in unmeasured:
        d = explain(name)
        assert d.implementation == "scan", (name, d.rejected)
        reason = d.rejected["pallas"][0]
        if "hand-written backward" not in reason:
            assert f"not the {name}: the automatic choice takes the scan path" in reason, reason
        assert explain(name, implementation="pallas").implementation == "pallas"
    for name in measured:
        rejected = explain(name).rejected
        assert not any("not the" in r for r in rejected.get("pallas", ())), name

"""Routing rules, explanations and policies, decided for pretend machines (no GPU needed)."""

import importlib.util
import itertools
import linecache
import re
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import portable_rnn
import references
from portable_rnn import Capabilities
from portable_rnn._src.core import dispatch as _dispatch
from portable_rnn._src.recurrent import cost as routing_cost
from portable_rnn._src.recurrent.families import FAMILIES
from portable_rnn._src.recurrent.routes import cudnn as _cudnn_lstm
from portable_rnn._src.recurrent.routes.cudnn_ffi import route as _cudnn_ffi

pytestmark = pytest.mark.cpu  # decisions for given capabilities: the same on every platform

S = jax.ShapeDtypeStruct
CPU = Capabilities("cpu")
GPU = Capabilities("gpu", 90800, (9, 0), "NVIDIA H100 80GB HBM3")
GPU_NO_CUDNN = Capabilities("gpu", None, (8, 0), "NVIDIA A100")
ROCM = Capabilities("rocm", None, None, "AMD Instinct MI300X")
B, T, I, H = 4, 6, 8, 16


def lstm_args(dtype=jnp.float32, w_dtype=None, L=1, bidir=False, seq=np.int32, batch=B,
              steps=T):
    D = 2 if bidir else 1
    n = portable_rnn.get_num_params_in_lstm(I, H, L, bidir)
    return (S((batch, steps, I), dtype), S((L * D, batch, H), dtype), S((L * D, batch, H), dtype),
            S((n,), w_dtype or dtype), None if seq is None else S((batch,), seq),
            I, H, L, 0.0, bidir)


def explain(*args, **kw):
    return portable_rnn.explain_lstm(*args, **kw)


@pytest.fixture(autouse=True)
def _fresh_warnings():
    _dispatch._WARNED.clear()
    yield


def test_cpu_routes_to_scan_with_reason():
    d = explain(*lstm_args(), capabilities=CPU)
    assert d.implementation == "scan" and d.fell_back
    assert d.rejected == {
        "cudnn": ("platform is 'cpu': the cuDNN LSTM needs a CUDA GPU",),
        "cudnn_ffi": ("platform is 'cpu': the cuDNN LSTM call of portable_rnn needs a CUDA GPU",),
        "pallas": ("platform is 'cpu': the Pallas TPU kernel needs a TPU (tests run it on a CPU "
                   "in Pallas interpret mode)",)}


@pytest.mark.parametrize("caps, reason", [
    (GPU_NO_CUDNN, "no cuDNN: jaxlib reports no cuDNN version"),
    (ROCM, "platform is 'rocm': the cuDNN LSTM needs a CUDA GPU"),
    (Capabilities("tpu", device_kind="TPU v5 lite"), "platform is 'tpu'"),
])
def test_non_cudnn_machines(caps, reason):
    d = explain(*lstm_args(), capabilities=caps)
    assert d.implementation == "scan"
    assert d.rejected["cudnn"][0].startswith(reason)


def test_gpu_float32_takes_scan_unless_cudnn_is_asked_for():
    """cuDNN can serve the call; on a GPU kind without a measured grid the recurrent group's
    stated rule passes over it for the scan path (measured faster on an H200), and a policy
    preference or an explicit implementation selects it."""
    d = explain(*lstm_args(), capabilities=GPU)
    assert d.implementation == "scan" and d.fell_back and d.predicted == {}
    assert d.rejected.pop("pallas")[0].startswith("platform is 'gpu': the Pallas TPU kernel")
    rule = routing_cost.rule({}, ("cudnn", "scan"))[1]
    assert d.rejected == {"cudnn": (f"{rule} (the stated rule: no measured grid for NVIDIA H100 "
                                    "80GB HBM3)",), "cudnn_ffi": _cudnn_ffi.SKIP}
    assert "measured faster" in rule and "policy(lstm='cudnn')" in rule
    with portable_rnn.policy(lstm="cudnn"):
        d = explain(*lstm_args(), capabilities=GPU)
    assert d.implementation == "cudnn" and not d.fell_back and d.rejected == {}
    assert "TF32 matmuls allowed" in d.notes[0]
    d = explain(*lstm_args(), lax.Precision.HIGHEST, implementation="cudnn", capabilities=GPU)
    assert d.notes == ("exact float32 matmuls (precision HIGHEST)",
                       _cudnn_lstm.PER_INSTANCE_WEIGHTS)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_goes_to_scan_or_upcast(dtype):
    d = explain(*lstm_args(dtype), capabilities=GPU)
    assert d.implementation == "scan"
    name = jnp.dtype(dtype).name
    assert d.rejected["cudnn"][0] == (
        f"`x` is {name}: the cuDNN LSTM supports float32 only (jax.experimental.rnn.lstm "
        "raises); policy(lstm_low_precision='upcast') runs it in float32 instead")
    assert len(d.rejected["cudnn"]) == 4  # x, h_0, c_0, weights
    assert d.notes == (f"{name}: matmuls accumulate in float32, cell state in float32",)
    with portable_rnn.policy(lstm_low_precision="upcast"):
        up = explain(*lstm_args(dtype), capabilities=GPU)
    assert up.implementation == "cudnn"
    assert up.notes[0] == (f"{name} cast to float32 for cuDNN and back (policy "
                           "lstm_low_precision='upcast')")


def test_low_precision_weights_alone_are_rejected():
    d = explain(*lstm_args(jnp.float32, jnp.bfloat16), capabilities=GPU)
    assert d.implementation == "scan"
    assert d.rejected["cudnn"] == ("`weights` is bfloat16: the cuDNN LSTM supports float32 only "
                                   "(jax.experimental.rnn.lstm raises); policy(lstm_low_precision"
                                   "='upcast') runs it in float32 instead",)


@pytest.mark.parametrize("precision", [lax.Precision.DEFAULT, "bfloat16", "default",
                                       (lax.Precision.DEFAULT, lax.Precision.HIGHEST)])
def test_precision_default_goes_to_scan(precision):
    d = explain(*lstm_args(), precision, capabilities=GPU)
    assert d.implementation == "scan"
    assert "asks for bfloat16 matmuls" in d.rejected["cudnn"][0]
    with portable_rnn.policy(lstm_low_precision="upcast"):
        assert explain(*lstm_args(), precision, capabilities=GPU).implementation == "cudnn"


def test_global_default_matmul_precision_is_honoured():
    with jax.default_matmul_precision("bfloat16"):
        d = explain(*lstm_args(), capabilities=GPU)
    assert d.implementation == "scan" and "effective DEFAULT" in d.rejected["cudnn"][0]
    with jax.default_matmul_precision("float32"), portable_rnn.policy(lstm="cudnn"):
        d = explain(*lstm_args(), capabilities=GPU)
    assert d.implementation == "cudnn" and d.notes[0].startswith("exact float32")


def test_dot_algorithm_precision_goes_to_scan():
    d = explain(*lstm_args(), lax.DotAlgorithmPreset.F32_F32_F32, capabilities=GPU)
    assert d.implementation == "scan"
    assert "dot algorithms are not understood" in d.rejected["cudnn"][0]


def test_float64_goes_to_scan():
    with references.float64():
        d = explain(*lstm_args(jnp.float64), capabilities=GPU)
    assert d.rejected["cudnn"][0] == "`x` is float64: the cuDNN LSTM supports float32 only"


@pytest.mark.parametrize("kw, reason", [(dict(steps=0), "T=0: there are no time steps to run"),
                                        (dict(batch=0), "batch=0: there are no sequences")])
def test_empty_shapes_go_to_scan(kw, reason):
    d = explain(*lstm_args(**kw), capabilities=GPU)
    assert d.implementation == "scan" and d.rejected["cudnn"][0].startswith(reason)


@pytest.mark.parametrize("seq, note", [(np.int64, "seq_lengths int64 cast to int32"),
                                       (np.uint8, "seq_lengths uint8 cast to int32"),
                                       (None, "seq_lengths None: every sequence runs T steps")])
def test_seq_lengths_dtype_notes(seq, note):
    with references.float64():
        d = explain(*lstm_args(seq=seq), implementation="cudnn", capabilities=GPU)
    assert d.implementation == "cudnn" and note in d.notes


def test_dropout_uses_per_layer_cudnn_calls():
    args = list(lstm_args(L=3, bidir=True))
    args[8] = 0.25
    with portable_rnn.policy(lstm="cudnn"):
        d = explain(*args, dropout_rng=jax.random.key(0), capabilities=GPU)
    assert d.implementation == "cudnn"
    assert ("dropout 0.25: 3 single-layer cuDNN calls with portable_rnn's masks between them "
            "(cuDNN's own dropout cannot use your key)") in d.notes
    with pytest.raises(ValueError, match="needs a random key"):
        explain(*args, capabilities=GPU)


def test_explicit_cudnn_raises_with_every_reason():
    with pytest.raises(ValueError) as e:
        explain(*lstm_args(jnp.bfloat16, seq=None), lax.Precision.DEFAULT,
                implementation="cudnn", capabilities=CPU)
    msg = str(e.value)
    assert msg.startswith("implementation='cudnn' cannot serve this lstm call:\n")
    assert msg.count("\n  - ") == 6  # platform, 4 dtypes, precision
    assert "platform is 'cpu'" in msg and "`c_0` is bfloat16" in msg and "bfloat16 matmuls" in msg
    # lstm itself raises the same, at trace time
    x, h0, c0, w = (jnp.zeros(a.shape, a.dtype) for a in lstm_args()[:4])
    with pytest.raises(ValueError, match="implementation='cudnn' cannot serve this lstm call"):
        portable_rnn.lstm(x, h0, c0, w, None, I, H, 1, 0.0, False, implementation="cudnn",
                          capabilities=CPU)


def test_explicit_scan_on_gpu():
    d = explain(*lstm_args(), implementation="scan", capabilities=GPU)
    assert d.implementation == "scan" and d.requested == "scan" and not d.fell_back


def test_decision_str_is_readable():
    text = str(explain(*lstm_args(jnp.bfloat16), capabilities=GPU))
    assert text.splitlines()[0] == ("lstm: scan (automatic; gpu, NVIDIA H100 80GB HBM3, sm90, "
                                    "cuDNN 9.8.0)")
    assert "  cudnn rejected:\n    - `x` is bfloat16" in text


def test_policy_preference_and_fallback_modes():
    x, h0, c0, w = (jnp.zeros(a.shape, a.dtype) for a in lstm_args()[:4])

    def call():
        return portable_rnn.lstm(x, h0, c0, w, None, I, H, 1, 0.0, False)

    with portable_rnn.policy(lstm="scan", capabilities=GPU):
        assert explain(*lstm_args()).implementation == "scan"
        assert not explain(*lstm_args()).fell_back
    with portable_rnn.policy(capabilities=CPU, on_fallback="warn"):
        with pytest.warns(portable_rnn.FallbackWarning, match=r"platform is 'cpu'"):
            call()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            call()  # the same decision warns once
    with portable_rnn.policy(capabilities=CPU, on_fallback="error"):
        with pytest.raises(portable_rnn.FallbackError, match=r"cudnn rejected"):
            call()
        # explain reports without raising
        assert explain(*lstm_args()).implementation == "scan"
    with portable_rnn.policy(lstm="scan", capabilities=CPU, on_fallback="error"):
        call()  # the preferred path serves the call: no fallback


@pytest.mark.parametrize("how", ["direct", "jit", "linen", "linen under jit"])
def test_fallback_warning_points_at_the_callers_line(how):
    x, h0, c0, w = (jnp.zeros(a.shape, a.dtype) for a in lstm_args()[:4])
    if how.startswith("linen"):
        from portable_rnn import linen as plinen
        layer = plinen.LSTM(hidden_size=H)
        v = layer.init(jax.random.key(0), x)
        apply = jax.jit(layer.apply) if how.endswith("jit") else layer.apply
        call = lambda: apply(v, x)  # noqa: E731
    else:
        def call():
            return portable_rnn.lstm(x, h0, c0, w, None, I, H, 1, 0.0, False)
        call = jax.jit(call) if how == "jit" else call
    _dispatch._WARNED.clear()
    with portable_rnn.policy(capabilities=CPU, on_fallback="warn"):
        with pytest.warns(portable_rnn.FallbackWarning) as record:
            call()
    assert [r.filename for r in record] == [__file__]
    assert ("lstm(" if how in ("direct", "jit") else "apply(") in linecache.getline(
        __file__, record[0].lineno)


def test_policy_nests_restores_and_is_per_thread():
    base = _dispatch.current_policy()
    with portable_rnn.policy(lstm="cudnn", on_fallback="warn") as outer:
        assert outer.lstm == "cudnn"
        with portable_rnn.policy(on_fallback="error") as inner:
            assert (inner.lstm, inner.on_fallback) == ("cudnn", "error")
            seen = []
            t = threading.Thread(target=lambda: seen.append(_dispatch.current_policy()))
            t.start()
            t.join()
            assert seen == [base]  # a new thread starts from the default policy
        assert _dispatch.current_policy() == outer
        with pytest.raises(RuntimeError), portable_rnn.policy(lstm="scan"):
            raise RuntimeError("boom")
        assert _dispatch.current_policy() == outer
    assert _dispatch.current_policy() == base


@pytest.mark.parametrize("kw, match", [
    (dict(lstm="cudnnn"),
         r"`lstm` must be one of 'cudnn', 'cudnn_ffi', 'pallas', 'scan'; got 'cudnnn'"),
    (dict(on_fallback="loud"), r"`on_fallback` must be one of 'silent', 'warn', 'error'"),
    (dict(lstm_low_precision="float32"), r"`lstm_low_precision` must be one of 'scan', 'upcast'"),
])
def test_policy_rejects_unknown_values(kw, match):
    with pytest.raises(ValueError, match=match), portable_rnn.policy(**kw):
        pass


def test_capabilities_type_is_checked():
    with pytest.raises(TypeError, match=r"`capabilities` must be a portable_rnn.Capabilities"):
        explain(*lstm_args(), capabilities={"platform": "gpu"})


def test_probe_on_this_machine():
    caps = portable_rnn.capabilities()
    assert caps is portable_rnn.capabilities()  # probed once
    assert caps.platform == jax.devices()[0].platform
    if caps.platform == "cpu":
        assert caps.cudnn_version is None and caps.compute_capability is None
        assert explain(*lstm_args()).implementation == "scan"


def test_decision_is_made_at_trace_time():
    """A policy entered around an already compiled function does not change it."""
    x, h0, c0, w = (jnp.ones(a.shape, a.dtype) for a in lstm_args()[:4])
    traces = []

    @jax.jit
    def f(x):
        traces.append(1)
        return portable_rnn.lstm(x, h0, c0, w, None, I, H, 1, 0.0, False)[0]

    f(x)
    with portable_rnn.policy(capabilities=CPU, on_fallback="error"):
        f(x)  # cached: not traced again, so no FallbackError
    assert len(traces) == 1


def _parse_table(text, domains):
    """The rows of a `python -m portable_rnn` table: ({case, ...}, path, why), wrapped lines
    joined, ``any`` and ``a, b`` cells expanded over `domains`."""
    rows = []
    for line in text.splitlines()[1:]:
        if line.startswith(" "):
            rows[-1][2] += " " + line.strip()
            continue
        *cells, path, why = re.split(r"\s{2,}", line.strip(), maxsplit=len(domains) + 1)
        values = [domain if c == "any" else tuple(c.split(", "))
                  for c, domain in zip(cells, domains)]
        rows.append([set(itertools.product(*values)), path, why])
    return rows


def test_collect_env_prints_the_decision_table(capsys):
    from portable_rnn.__main__ import main

    main(["--pretend-gpu"])
    out = capsys.readouterr().out
    assert out.startswith(f"portable_rnn {portable_rnn.__version__}\n")
    assert "capabilities: " in out and "jax " in out
    for name in ("optax", "torch", "keras"):
        if importlib.util.find_spec(name):
            assert re.search(rf"^{name} \d", out, re.MULTILINE), name
    assert "..." not in out  # no reason is cut short
    domains = (("float32", "bfloat16", "float16"), ("0.0", "0.1"), ("full", "ragged"),
               ("no", "yes"))
    gpu_table = out.split("LSTM decisions on a pretend GPU", 1)[1].split("\n\n")[0]
    rows = _parse_table(gpu_table.split("\n", 1)[1], domains)
    covered = [case for cases, _, _ in rows for case in cases]
    assert sorted(covered) == sorted(itertools.product(*domains))  # each case exactly once
    outcomes = [(path, why) for _, path, why in rows if why != "(as above)"]
    assert len(set(outcomes)) == len(outcomes) < len(covered)  # identical decisions merged
    assert {path for cases, path, _ in rows} == {"scan"}  # cuDNN only when asked for
    (why,) = {why for cases, _, why in rows if ("float32", "0.0", "full", "no") in cases}
    assert why.startswith(routing_cost.rule({}, ("cudnn", "scan"))[1])
    reason = explain(*lstm_args(jnp.bfloat16), capabilities=GPU).rejected["cudnn"][0]
    assert any(reason in why for cases, _, why in rows if ("bfloat16", "0.0", "full", "no")
               in cases)
    family = out.split("projected LSTM's decisions on a pretend GPU", 1)[1].split("\n\n")[0]
    names = tuple(n for name, f in FAMILIES.items()
                  for n in ((name, f"{name} proj_size=64") if f.projection else (name,)))
    family = _parse_table(family.split("\n", 1)[1], (names,))
    got = {next(iter(cases))[0]: (path, why) for cases, path, why in family}
    assert list(got) == list(names) and {path for path, _ in got.values()} == {"scan"}
    assert got["lstm"][1].startswith(routing_cost.rule({}, ("cudnn", "scan"))[1])
    assert got["gru"][1].endswith("LSTM-only") and got["simple_rnn"][1].endswith("LSTM-only")
    assert got["lstm proj_size=64"][1].endswith("proj_size)")
    assert got["mgu"][1].startswith("cuDNN has no mgu cell")  # no cuDNN counterpart at all
    attention = out.split("Attention decisions on a pretend GPU", 1)[1].split("\n", 1)[1]
    rows = _parse_table(attention, (("float32", "bfloat16"), ("128", "4096"), ("no", "yes"),
                                    ("no", "yes")))
    assert sum(len(cases) for cases, _, _ in rows) == 16
    assert {path for cases, path, _ in rows for c in cases if c[0] == "bfloat16"} == {"cudnn"}


def test_collect_env_table_lists_a_decision_once_with_every_case():
    from portable_rnn._src.tools.rules import _table

    domains = (("a", "b"), ("x", "y"))
    rows = [(("a", "x"), "p", "one"), (("b", "y"), "p", "one"), (("a", "y"), "q", "two " * 40),
            (("b", "x"), "q", "two " * 40)]
    lines = _table(("c1", "c2"), domains, rows)
    assert lines[:3] == ["c1  c2  path  why / how", "a   x   p     one", "b   y   p     (as above)"]
    assert " ".join(" ".join(line.split()) for line in lines[3:]) == (
        "a y q " + ("two " * 40).strip() + " b x q (as above)")
    assert all(len(line) <= 100 for line in lines)
    assert _table(("c1", "c2"), domains, [(c, "p", "-") for c in itertools.product(*domains)]) \
        == ["c1   c2   path  why / how", "any  any  p     -"]


# --- attention ------------------------------------------------------------------------------

def attn(T=64, S=64, H=64, N=8, K=8, dtype=jnp.bfloat16, bias=None, mask=None):
    q = S_((2, T, N, H), dtype)
    kv = S_((2, S, K, H), dtype)
    extra = {}
    if bias is not None:
        extra["bias"] = S_(bias, dtype)
    if mask is not None:
        extra["mask"] = S_(mask, jnp.bool_)
    return (q, kv, kv), extra


S_ = jax.ShapeDtypeStruct


def explain_attn(T=64, S=64, H=64, dtype=jnp.bfloat16, bias=None, mask=None, **kw):
    args, extra = attn(T, S, H, dtype=dtype, bias=bias, mask=mask)
    return portable_rnn.explain_attention(*args, **extra, **kw)


def test_attention_on_a_cpu_follows_the_routing_model_and_its_reach():
    for T in (64, 256, 1024):
        d = explain_attn(T=T, S=T, capabilities=CPU)
        assert set(d.predicted) == {"chunked", "xla"}
        assert d.implementation == min(d.predicted, key=lambda n: d.predicted[n]["fwdbwd"])
        assert d.rejected["cudnn"][0].startswith("platform is 'cpu'")
        assert "model fitted on cpu" in d.notes[-1]
    huge = explain_attn(T=16384, S=16384, capabilities=CPU)  # far past the CPU's grid
    assert huge.implementation == "chunked" and huge.predicted == {}
    assert "beyond its reach: stated rule: chunked" in huge.notes[-1]
    gpu_fp32 = explain_attn(T=512, S=512, dtype=jnp.float32, capabilities=GPU)
    assert gpu_fp32.implementation == "xla"  # no grid for the GPU: the stated rule
    assert gpu_fp32.notes[-1].startswith("no measured grid for NVIDIA H100")
    assert explain_attn(T=1024, S=1024, dtype=jnp.float32,  # 2**24 logits
                        capabilities=GPU).implementation == "chunked"
    assert gpu_fp32.rejected["cudnn"] == ("inputs are float32: cuDNN attention supports "
                                          "float16/bfloat16 only",)


def test_attention_gpu_routes_to_cudnn_within_its_constraints():
    assert explain_attn(capabilities=GPU).implementation == "cudnn"
    assert explain_attn(bias=(1, 8, 64, 64), is_causal=True,
                        capabilities=GPU).implementation == "cudnn"
    sm80 = Capabilities("gpu", 90100, (8, 0), "NVIDIA A100")
    cases = [
        (dict(H=12), "head dim 12: cuDNN needs a multiple of 8 that is <= 256"),
        (dict(H=160, capabilities=sm80), "head dim 160: cuDNN needs a multiple of 8 that is <= "
         "128 (256 on sm90+)"),
        (dict(local_window_size=(4, 2)), "local_window_size=(4, 2): cuDNN supports a right "
         "window only with plain causal masking"),
        (dict(T=0), "T=0 or S=0: nothing to attend"),
        (dict(capabilities=Capabilities("gpu", 90800, (7, 5), "Tesla T4")),
         "compute capability 7.5: cuDNN flash attention needs 8.0 (Ampere) or newer"),
        (dict(capabilities=Capabilities("gpu", 91000, (10, 3), "NVIDIA B300")),
         "compute capability 10.3 needs cuDNN >= 9.11 (JAX raises); this machine has cuDNN "
         "9.10.0"),
        (dict(local_window_size=(4, 0), is_causal=True,
              capabilities=Capabilities("gpu", 90100, (9, 0), "NVIDIA H100")),
         "local_window_size=(4, 0) needs cuDNN >= 9.2; this machine has cuDNN 9.1.0"),
    ]
    for kw, reason in cases:
        kw.setdefault("capabilities", GPU)
        d = explain_attn(**kw)
        assert d.implementation != "cudnn", kw
        assert any(r.startswith(reason) for r in d.rejected["cudnn"]), (kw, d.rejected)
    ok = explain_attn(local_window_size=(4, 2), is_causal=True, capabilities=GPU)
    assert ok.implementation == "cudnn"
    sm103 = Capabilities("gpu", 91100, (10, 3), "NVIDIA B300")
    assert explain_attn(capabilities=sm103).implementation == "cudnn"


@pytest.mark.parametrize("kw", [dict(bias=(1, 1, 1, 64)), dict(mask=(2, 1, 64, 1)),
                                dict(mask=(2, 1, 1, 64), bias=(1, 8, 64, 1))])
def test_attention_bias_and_mask_broadcast_for_cudnn(kw):
    """JAX's cuDNN call wants (T, S) whole; a (1, S) padding mask is broadcast, not refused."""
    d = explain_attn(capabilities=GPU, **kw)
    assert d.implementation == "cudnn" and not d.rejected


@pytest.mark.parametrize("kw, why", [
    (dict(T=63), "odd T=63 or S=64: JAX's cuDNN training kernels need even sequence lengths"),
    (dict(T=64, S=197, bias=(1, 1, 64, 197)), "odd T=64 or S=197"),
    (dict(H=192, capabilities=Capabilities("gpu", 90400, (9, 0), "NVIDIA H100")),
     "head dim 192 > 128: the cuDNN backward needs cuDNN 9.5.0 or newer on sm90"),
    (dict(H=256, capabilities=Capabilities("gpu", 91000, (10, 0), "NVIDIA B200")),
     "head dim 256 > 128: the cuDNN backward needs cuDNN 9.23.0 or newer on sm100"),
])
def test_attention_cudnn_forward_with_a_portable_backward(kw, why):
    """Where cuDNN can run the forward but not the backward, the gradient is portable."""
    kw.setdefault("capabilities", GPU)
    d = explain_attn(**kw)
    assert d.implementation == "cudnn"
    note = [n for n in d.notes if n.startswith("forward on cuDNN; gradients on the xla path: ")]
    assert len(note) == 1 and why in note[0], d.notes
    even = explain_attn(capabilities=GPU)
    assert not any("gradients on the" in n for n in even.notes)
    wide_new = explain_attn(H=192, capabilities=GPU)
    assert not any("gradients on the" in n for n in wide_new.notes)


def test_attention_policy_preferences():
    with portable_rnn.policy(attention="xla", capabilities=GPU):
        d = explain_attn(T=4096, S=4096)
        assert d.implementation == "xla" and not d.fell_back
    with portable_rnn.policy(attention="chunked", capabilities=CPU):
        assert explain_attn(T=8, S=8).implementation == "chunked"  # a preference beats the size
    assert explain_attn(T=8, S=8, implementation="chunked",
                        capabilities=CPU).implementation == "chunked"
    with pytest.raises(ValueError,
                       match=r"`attention` must be one of 'cudnn', 'splash', 'flash', 'chunked', "
                             r"'xla'"):
        with portable_rnn.policy(attention="pallas"):
            pass


def test_attention_bias_dtype_must_match_for_cudnn():
    (q, kv, _), _ = attn()
    d = portable_rnn.explain_attention(q, kv, kv, S_((1, 8, 64, 64), jnp.float32),
                                       capabilities=GPU)
    assert d.implementation == "xla"
    assert d.rejected["cudnn"] == ("bias is float32, inputs are bfloat16: cuDNN needs one dtype",)

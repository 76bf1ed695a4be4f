"""Test-only CPU emulation of JAX's cuDNN primitives, LSTM and attention (never in the package).

JAX's cuDNN features are ordinary primitives whose only missing piece on a CPU is a lowering (and,
for the LSTM, a reserve-space size that jaxlib's GPU plugin computes while tracing). This module
gives them both, so JAX's own Python code (custom_vjp, batchers, partitioning rules) and
portable_rnn's wrappers on top of it run unchanged on a CPU. The emulation's math shares no code
with portable_rnn: the LSTM is `jax.experimental.rnn.lstm_ref`, attention is a plain float32
softmax written here.

It is as strict as the real thing where that is known, and stricter where it is not (sources:
jax-ml/jax#17966, #32242 and #32430; `check_is_flash_attention` and
`_dot_product_attention_fwd_cuda_lowering` in JAX's jax/_src/cudnn/fused_attention_stablehlo.py;
`_rnn_fwd_lowering` and `_rnn_bwd_lowering` in jaxlib/gpu_rnn.py; `DnnRNNForward_` and
`DnnRNNBackward_` in jaxlib/gpu/rnn_kernels.cc; NVIDIA cudnn-frontend's sdpa_support_surface.h
and release notes; NVIDIA/TransformerEngine#1591):

- LSTM, at lowering time: every floating operand float32. jaxlib's `_rnn_fwd_lowering` raises
  ``ValueError("Unknown output type ...")`` for an `x` of any dtype but float32, float64 and the
  complex ones; its kernels (`DnnRNNForward_`, `DnnRNNBackward_`) describe every buffer (input,
  output, h, c, weights) as ``CUDNN_DATA_FLOAT`` whatever JAX's dtype, and `_rnn_bwd_lowering`
  aliases a float32 zero buffer to the weight gradient: a float64, bfloat16 or float16
  operand anywhere is refused here, with jaxlib's message where jaxlib has one.

- LSTM, at run time: the forward fails when every sequence has length 0, the backward when any
  has (jax-ml/jax#17966, CUDNN_STATUS_EXECUTION_FAILED). In a one-device program a host callback
  inside the lowering raises ``RuntimeError("CUDNN_STATUS_EXECUTION_FAILED (emulated): ...")``
  when the compiled program runs; JAX reports it as its runtime error (``JaxRuntimeError``) with
  that text, also under `jax.grad`. In a program over several devices (sharded jit, shard_map) a
  callback that raises on one device leaves the others waiting in their next collective, and the
  XLA CPU runtime aborts the process: there the outputs of the failing call are NaN instead.
- LSTM, numerics: with ``cudnn_allow_tf32=True`` (precision None or HIGH) every matmul operand of
  the forward and of the backward (inputs, weights, the recurrent state, cotangents) is rounded to
  TF32 (10-bit mantissa, round to nearest, ties away from zero, as ``cvt.rna.tf32.f32``) before
  the product; HIGHEST gives exact float32 products.
- Attention, at lowering time: only float16/bfloat16; head dims a multiple of 8 and <= 128, or <=
  256 on compute capability >= 9.0 (a backward with head dim > 128 needs cuDNN >= 9.5, and >= 9.23
  on compute capability 10.x); compute capability >= 8.0; sliding windows need cuDNN >= 9.2;
  compute capability 10.3 needs cuDNN >= 9.11; a training bias with odd T or S is refused. With
  ``cuda_runtime >= 13000`` or ``fail_compile=`` every fused attention lowering fails, as cuDNN on
  CUDA 13 builds no execution plans (jax-ml/jax#32430).
- Attention bias dtypes: a bias whose dtype is not q/k/v's is refused. JAX does not check it
  (`check_layout`), the backend config carries one element type, the query's
  (`_dot_product_attention_fwd_cuda_lowering`), and a float32 bias with bfloat16 q/k/v gave NaN
  gradients on an H100 (jax-ml/jax#32242).
- Attention rows cuDNN's own masks leave empty: what cuDNN returns for a query row inside
  `q_seqlen` whose every key its padding, causal or sliding-window mask hides (a `kv_seqlen` of 0,
  say) has not been checked on a GPU, and neither have rows past `q_seqlen`. Here both are NaN
  in the output and the statistics; in the backward such a query row's gradient is NaN, and an
  empty row inside `q_seqlen` also makes its batch row's key, value and bias gradients NaN (its
  NaN probabilities reach every key). A wrapper must not depend on either.
  Rows that only a bias (a boolean mask, turned into a large negative bias by JAX) hides are
  plain arithmetic: their softmax is finite, the average of the values.
- JAX's own trace-time checks see the emulated machine: `check_cudnn_version`,
  `check_compute_capability` and `is_cuda_compute_capability_equal` of
  `jax._src.cudnn.fused_attention_stablehlo` are replaced within the block.

``cpu_lowering=False`` emulates a GPU host whose default device is the CPU: only the trace-time
pieces are patched, and the primitives have no CPU lowering within the block, so a program
holding them cannot be lowered for the CPU.

Blocks whose settings differ from the defaults clear JAX's caches on entry and exit, so a program
compiled under one setting is never reused under another.

Works with jax 0.10.2 to 0.12: primitive params are read by name, and the TF32 rewrite re-binds
scans with their own params (whose names changed in 0.11).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import core, sharding_impls
from jax._src.cudnn import fused_attention_stablehlo as fa
from jax._src.interpreters import mlir
from jax.experimental import rnn as jrnn

RESERVE = 3
# jax 0.11 merged ClosedJaxpr into Jaxpr (an alias there; gone in 0.12)
_JAXPR_TYPES = tuple({getattr(core, n) for n in ("Jaxpr", "ClosedJaxpr") if hasattr(core, n)})
EXECUTION_FAILED = "CUDNN_STATUS_EXECUTION_FAILED (emulated)"
NO_PLANS = "cuDNN creates no execution plans on CUDA 13.0 (emulated; jax-ml/jax#32430)"


@dataclasses.dataclass(frozen=True)
class _Machine:
    cudnn_version: int = 91000
    compute_capability: tuple[int, int] = (9, 0)
    cuda_runtime: int = 12080
    fail_compile: str | None = None


_DEFAULT = _Machine()
_machines: list[_Machine] = []  # innermost block last
_lowering_off: collections.Counter = collections.Counter()  # open cpu_lowering=False blocks


def _machine() -> _Machine:
    return _machines[-1] if _machines else _DEFAULT


# --- shared machinery ---------------------------------------------------------------------------

def _cpu_rules(prims):
    return {p: mlir._platform_specific_lowerings["cpu"].get(p) for p in prims}


def _set_cpu_rules(saved):
    table = mlir._platform_specific_lowerings["cpu"]
    for prim, entry in saved.items():
        if entry is None:
            table.pop(prim, None)
        else:
            table[prim] = entry


@contextlib.contextmanager
def _block(machine, prims, rules, cpu_lowering, patches):
    """Registers `rules` (or removes every CPU rule of `prims`), applies `patches` (module,
    attribute, value), pushes `machine`; undoes all of it on exit."""
    saved_rules = _cpu_rules(prims)
    inside_off = any(_lowering_off[p] for p in prims)
    if cpu_lowering:
        for prim, rule in zip(prims, rules):
            if saved_rules[prim] is None:  # registered once and kept, as before
                mlir.register_lowering(prim, rule, platform="cpu")
    else:
        _set_cpu_rules({p: None for p in prims})
        _lowering_off.update(prims)
    saved_attrs = [(m, name, getattr(m, name)) for m, name, _ in patches]
    for m, name, value in patches:
        setattr(m, name, value)
    _machines.append(machine)
    fresh = machine != _DEFAULT or not cpu_lowering
    if fresh:
        jax.clear_caches()
    # The emulation lowers for the CPU only: on a machine whose default backend is an
    # accelerator, the block runs on the host's CPU devices.
    on_cpu = (jax.default_device(jax.devices("cpu")[0]) if jax.default_backend() != "cpu"
              else contextlib.nullcontext())
    try:
        with on_cpu:
            yield
    finally:
        _machines.pop()
        for m, name, value in saved_attrs:
            setattr(m, name, value)
        if not cpu_lowering:
            _lowering_off.subtract(prims)
        if not cpu_lowering or inside_off:  # an enclosing block had no CPU lowering
            _set_cpu_rules(saved_rules)
        if fresh:
            jax.clear_caches()


def _rule(fn):
    """A CPU lowering rule computing `fn(*operands, callbacks=..., **params)` in jax.numpy;
    `callbacks` says whether a host callback can be placed here (see `_callback_ok`)."""
    def rule(ctx, *args, **params):
        ok = _callback_ok(ctx.module_context.axis_context)
        return mlir.lower_fun(functools.partial(fn, callbacks=ok), multiple_results=True)(
            ctx, *args, **params)
    return rule


def _callback_ok(axis_context) -> bool:
    """Whether a failing host callback can stand for cuDNN's error here: only in a one-device
    program. With several devices (auto sharding runs the callback on one device, shard_map on
    each) the devices that do not fail wait for the others in their next collective, and the XLA
    CPU runtime aborts the whole process after its rendezvous timeout."""
    if isinstance(axis_context, sharding_impls.SPMDAxisContext):
        return axis_context.mesh.size == 1
    return getattr(axis_context, "num_devices", 1) == 1


def _fail_at_run_time(outputs, failing, message, callbacks):
    """`outputs`, unchanged, but the program raises `message` when `failing` (a traced bool)
    holds as it runs; where no callback can be placed, NaN outputs instead."""
    if not callbacks:
        return [o * jnp.where(failing, jnp.nan, 1.0).astype(o.dtype) for o in outputs]

    def check(failing):
        if bool(failing):
            raise RuntimeError(f"{EXECUTION_FAILED}: {message}")
        return np.zeros((), np.float32)

    zero = jax.pure_callback(check, jax.ShapeDtypeStruct((), jnp.float32), failing)
    return [o + zero.astype(o.dtype) for o in outputs]  # every output depends on the check


# --- LSTM ---------------------------------------------------------------------------------------
# `jax.experimental.rnn.lstm` is a custom_vjp over `rnn_fwd_p` / `rnn_bwd_p`, whose only lowerings
# are for CUDA and ROCm, and whose abstract evaluation asks jaxlib's GPU plugin for the
# reserve-space size. The "reserve space" here carries a fingerprint of the forward call (sums of
# x and w, and the batch size); the backward multiplies its results by NaN when handed a reserve
# space from a different call, so a wrapper that mixes up reserve spaces fails loudly.

def round_to_tf32(a):
    """float32 rounded to TF32 (10 mantissa bits; to nearest, ties away from zero)."""
    if a.dtype != jnp.float32:
        return a
    bits = lax.bitcast_convert_type(a, jnp.uint32)
    rounded = lax.bitcast_convert_type((bits + jnp.uint32(0x1000)) & jnp.uint32(0xFFFFE000),
                                       jnp.float32)
    return jnp.where(jnp.isfinite(a), rounded, a)


def _tf32_eval(jaxpr, consts, *args):
    """Evaluates `jaxpr` with every dot_general operand rounded to TF32, also inside the jit and
    scan equations (a scan is re-bound with its body rewritten alike, keeping its other params,
    which differ between JAX versions)."""
    env = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    for var, val in zip(jaxpr.constvars, consts):
        env[var] = val
    for var, val in zip(jaxpr.invars, args):
        env[var] = val
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        prim, params = eqn.primitive, eqn.params
        if prim is lax.dot_general_p:
            out = [prim.bind(*map(round_to_tf32, invals), **params)]
        elif prim.name in ("jit", "pjit", "closed_call", "core_call"):
            inner = params.get("jaxpr", params.get("call_jaxpr"))
            out = _tf32_eval(inner.jaxpr, inner.consts, *invals)
        elif prim.name == "scan":
            out = prim.bind(*invals, **dict(params, jaxpr=_tf32_closed(params["jaxpr"])))
        elif (any(isinstance(p, _JAXPR_TYPES) for p in params.values())
              and not prim.name.startswith(("scatter", "reduce"))):  # those hold no matmul
            raise NotImplementedError(f"TF32 emulation does not handle {prim.name}")
        else:
            out = prim.bind(*invals, **params)
            out = out if prim.multiple_results else [out]
        for var, val in zip(eqn.outvars, out):
            env[var] = val
    return [read(v) for v in jaxpr.outvars]


def _tf32_closed(closed):
    """`closed` (a closed jaxpr) with TF32 matmul operands, same signature."""
    return jax.make_jaxpr(lambda *a: _tf32_eval(closed.jaxpr, closed.consts, *a))(
        *closed.in_avals)


def _maybe_tf32(fn, allow_tf32):
    """`fn`, with TF32 matmul operands when `allow_tf32`, as cuDNN's default math mode."""
    if not allow_tf32:
        return fn

    def tf32(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        out = _tf32_eval(closed.jaxpr, closed.consts, *jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(shape), out)
    return tf32


def _reference(x, h0, c0, w, seq, input_size, hidden_size, num_layers, bidirectional):
    weights = jrnn.unpack_lstm_weights(w, input_size, hidden_size, num_layers, bidirectional)
    return jrnn.lstm_ref(x, h0, c0, *weights, seq, input_size, hidden_size, num_layers, 0.0,
                         bidirectional)


def _fingerprint(x, w):
    return jnp.stack([jnp.sum(x), jnp.sum(w), jnp.float32(x.shape[0])])


def _static(params):
    return (params["input_size"], params["hidden_size"], params["num_layers"],
            params["bidirectional"])


def _check_lstm_dtypes(named):
    """Refuses what jaxlib's cuDNN RNN lowering refuses or its kernels would misread (see the
    module docstring): `named` maps operand names to arrays; the first is `x` in the forward."""
    for i, (name, a) in enumerate(named.items()):
        dtype = jnp.dtype(a.dtype)
        if dtype == jnp.float32:
            continue
        if i == 0 and name == "x" and dtype not in (jnp.float64, jnp.complex64, jnp.complex128):
            raise ValueError(f"Unknown output type {dtype}")  # jaxlib's _rnn_fwd_lowering
        raise TypeError(f"cuDNN RNN (emulated): `{name}` is {dtype}; jaxlib's kernels describe "
                        "every buffer as CUDNN_DATA_FLOAT (jaxlib/gpu/rnn_kernels.cc)")


def _fwd(x, h0, c0, w, seq, *, callbacks, **params):
    assert params.get("dropout", 0.0) == 0.0, "portable_rnn never asks cuDNN for its own dropout"
    _check_lstm_dtypes(dict(x=x, h_0=h0, c_0=c0, weights=w))
    if jnp.dtype(seq.dtype) != jnp.int32:
        raise TypeError(f"cuDNN RNN (emulated): seq_lengths is {seq.dtype}, the kernels copy int32")
    tf32 = params.get("cudnn_allow_tf32", True)
    y, h, c = _maybe_tf32(lambda *a: _reference(*a, seq, *_static(params)), tf32)(x, h0, c0, w)
    outs = _fail_at_run_time([y, h, c, _fingerprint(x, w)], (seq.size > 0) & jnp.all(seq == 0),
                             "cudnnRNNForward with every sequence length 0", callbacks)
    return outs


def _bwd(dy, dh, dc, x, h0, c0, w, y, reserve, seq, *, callbacks, **params):
    _check_lstm_dtypes(dict(dy=dy, dh_n=dh, dc_n=dc, x=x, h_0=h0, c_0=c0, weights=w, y=y))
    tf32 = params.get("cudnn_allow_tf32", True)

    def grads(dy, dh, dc, x, h0, c0, w):
        _, vjp = jax.vjp(lambda *a: _reference(*a, seq, *_static(params)), x, h0, c0, w)
        return vjp((dy, dh, dc))

    out = _maybe_tf32(grads, tf32)(dy, dh, dc, x, h0, c0, w)
    same = jnp.all(jnp.abs(reserve - _fingerprint(x, w)) <= 1e-3 * (1 + jnp.abs(reserve)))
    out = [g * jnp.where(same, 1.0, jnp.nan).astype(g.dtype) for g in out]
    return _fail_at_run_time(out, jnp.any(seq == 0),
                             "cudnnRNNBackwardData with a sequence length 0", callbacks)


def _reserve_sizes(input_size, hidden_size, num_layers, batch_size, max_seq_length, dropout,
                   bidirectional, cudnn_allow_tf32):
    """Stand-in for jaxlib's `compute_rnn_workspace_reserve_space_sizes` (same 8 arguments)."""
    return 0, RESERVE


@contextlib.contextmanager
def emulated_cudnn(*, cpu_lowering: bool = True):
    """Within the block, `jax.experimental.rnn.lstm` (and its fwd/bwd) trace on a CPU jaxlib and,
    unless ``cpu_lowering=False``, lower to the strict emulation above."""
    prims = (jrnn.rnn_fwd_p, jrnn.rnn_bwd_p)
    gpu_rnn = types.SimpleNamespace(compute_rnn_workspace_reserve_space_sizes=_reserve_sizes)
    with _block(_machine(), prims, (_rule(_fwd), _rule(_bwd)), cpu_lowering,
                [(jrnn, "gpu_rnn", gpu_rnn)]):
        yield


# --- fused attention ----------------------------------------------------------------------------
# jax.nn.dot_product_attention(implementation="cudnn") checks the cuDNN version, then binds
# `_dot_product_attention_{fwd,bwd}_p_wrapper` (whose batchers raise for batch dims other than 0)
# which lower to `_dot_product_attention_{fwd,bwd}_p`. Those two get a CPU lowering: a plain
# float32 softmax attention written here (a row that only a bias hides averages all keys, as the
# arithmetic says; rows cuDNN's own masks leave empty, and padded query rows, are NaN: see the
# module docstring), so the real wrappers, batchers and custom_vjp run unchanged. Params are
# read by name: jax 0.12 adds `score_mod_name`/`score_mod_jaxpr` and appends `*score_mod_args`
# operands (empty without one).

def _refuse(q, k, v, bias, params, backward):
    """Raises as cuDNN would when building the plan (the lowering stands for compilation)."""
    m = _machine()
    cc, version = m.compute_capability, m.cudnn_version
    if m.fail_compile is not None:
        raise RuntimeError(m.fail_compile)
    if params.get("score_mod_jaxpr") is not None:  # jax 0.12's flex attention
        raise NotImplementedError("the cuDNN emulation has no score_mod (flex attention)")
    if m.cuda_runtime >= 13000:
        raise RuntimeError(f"{NO_PLANS}; CUDA runtime {m.cuda_runtime}")
    what = "backward" if backward else "forward"
    problems = []
    if cc < (8, 0):
        problems.append(f"compute capability {cc}: cuDNN SDPA requires Ampere (8.0) and above")
    if cc == (10, 3) and version < 91100:
        problems.append("compute capability 10.3 requires cuDNN >= 9.11")
    dtypes = {jnp.dtype(a.dtype) for a in (q, k, v)}
    if not dtypes <= {jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)} or len(dtypes) > 1:
        problems.append(f"q/k/v dtypes {sorted(map(str, dtypes))}: fused attention needs one of "
                        "float16/bfloat16")
    h_max = 256 if cc >= (9, 0) else 128
    for name, h in (("q/k", q.shape[-1]), ("v", v.shape[-1])):
        if h % 8 or h > h_max:
            problems.append(f"{name} head dim {h}: must be a multiple of 8 and <= {h_max} on "
                            f"compute capability {cc}")
        elif backward and h > 128 and version < 90500:
            problems.append(f"{name} head dim {h} > 128 in the backward needs cuDNN >= 9.5")
        elif backward and h > 128 and cc[0] == 10 and version < 92300:
            problems.append(f"{name} head dim {h} > 128 in the backward on compute capability "
                            f"{cc} needs cuDNN >= 9.23")
    if params.get("sliding_window_length") and version < 90200:
        problems.append("sliding window attention needs cuDNN >= 9.2")
    if params["variadic_args"][0] and jnp.dtype(bias.dtype) != jnp.dtype(q.dtype):
        problems.append(f"a {bias.dtype} bias with {q.dtype} q/k/v: the backend config has one "
                        "element type, the query's, and cuDNN gave NaN gradients for a float32 "
                        "bias with bfloat16 q/k/v (jax-ml/jax#32242)")
    T, S = q.shape[1], k.shape[1]
    if backward and params["variadic_args"][0] and (T % 2 or S % 2):
        problems.append(f"a bias with odd sequence lengths T={T}, S={S} in training")
    if problems:
        raise RuntimeError(f"cuDNN (emulated) has no execution plan for this attention {what}: "
                           + "; ".join(problems))


def _structure(B, T, S, q_len, kv_len, mask_type, sliding_window_length):
    """cuDNN's own masks: (B|1, 1, T, S) the keys its padding, causal and sliding-window masks
    leave each query, and (B|1, 1, T, 1) the query rows inside `q_seqlen`."""
    t, s = jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    allowed = jnp.ones((1, 1, T, S), bool)
    if mask_type in (fa.MaskType.CAUSAL, fa.MaskType.PADDING_CAUSAL):
        allowed &= s <= t
    if sliding_window_length is not None:
        allowed &= (s > t - sliding_window_length) & (s <= t)
    rows = jnp.ones((B, 1, T, 1), bool)
    if mask_type in (fa.MaskType.PADDING, fa.MaskType.PADDING_CAUSAL):
        allowed &= (s < kv_len[:, None, None, None])
        rows = t < q_len[:, None, None, None]
    return allowed, rows


def _attention(q, k, v, bias, q_len, kv_len, *, scale, variadic_args, mask_type,
               sliding_window_length):
    """(out, lse): NaN in the rows whose answer is unverified (see the module docstring)."""
    f32 = jnp.float32
    T, N, S, K = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    k, v = (jnp.repeat(a.astype(f32), N // K, axis=2) for a in (k, v))
    logits = jnp.einsum("btnh,bsnh->bnts", q.astype(f32), k) * scale
    if variadic_args[0]:
        logits = logits + bias.astype(f32)
    allowed, rows = _structure(q.shape[0], T, S, q_len, kv_len, mask_type,
                               sliding_window_length)
    unverified = ~rows | ~jnp.any(allowed, axis=-1, keepdims=True)  # (B|1, 1, T, 1)
    logits = jnp.where(allowed, logits, -1e30)
    # normalised after the exponentials, as a flash kernel does (exp(logits - lse) would lose
    # the sum's log against a large bias: every weight 1 in a row that a mask hides)
    top = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    e = jnp.exp(logits - top)
    total = jnp.sum(e, axis=-1, keepdims=True)
    p = e / total
    lse = (top + jnp.log(total))[..., 0]
    out = jnp.where(unverified, jnp.nan, jnp.einsum("bnts,bsnh->bnth", p, v))
    lse = jnp.where(unverified[..., 0], jnp.nan, lse)
    return out.transpose(0, 2, 1, 3).astype(q.dtype), lse


def _math_params(params):
    return {n: params.get(n) for n in ("scale", "variadic_args", "mask_type",
                                       "sliding_window_length")}


def _attention_fwd(q, k, v, bias, q_len, kv_len, *unused, callbacks, **params):
    assert params["layout"] == fa.AttentionLayout.BTNH.value and params["dropout_rate"] == 0.0
    _refuse(q, k, v, bias, params, backward=False)
    out, lse = _attention(q, k, v, bias, q_len, kv_len, **_math_params(params))
    return (out, lse) if params["is_training"] else (out,)  # stats: float32 (B, N, T)


def _attention_bwd(q, k, v, bias, q_len, kv_len, *rest, callbacks, **params):
    _refuse(q, k, v, bias, params, backward=True)
    d_out = rest[6]  # after q/kv offsets, page tables, stats, output; jax 0.12 appends more
    kw = _math_params(params)
    if params["variadic_args"][1]:
        f = lambda q, k, v, b: _attention(q, k, v, b, q_len, kv_len, **kw)[0]  # noqa: E731
        _, vjp = jax.vjp(f, q, k, v, bias)
    else:
        f = lambda q, k, v: _attention(q, k, v, bias, q_len, kv_len, **kw)[0]  # noqa: E731
        _, vjp = jax.vjp(f, q, k, v)
    grads = list(vjp(d_out))
    # Unverified rows (the forward's NaN rows, whose NaN the VJP above does not carry): their
    # query gradient is NaN; an empty row inside q_seqlen spreads NaN to its batch row's key,
    # value and bias gradients.
    allowed, rows = _structure(q.shape[0], q.shape[1], k.shape[1], q_len, kv_len,
                               params["mask_type"], params.get("sliding_window_length"))
    empty = rows & ~jnp.any(allowed, axis=-1, keepdims=True)  # (B|1, 1, T, 1)
    bad_q = jnp.transpose(~rows | empty, (0, 2, 1, 3))  # (B|1, T, 1, 1), as q (B, T, N, H)
    grads[0] = jnp.where(bad_q, jnp.nan, grads[0])
    spoilt = jnp.any(empty, axis=(1, 2, 3))  # per batch row
    for i in range(1, len(grads)):
        if grads[i].shape[0] == spoilt.shape[0]:
            row = spoilt.reshape((-1,) + (1,) * (grads[i].ndim - 1))
        else:  # a bias shared by the batch: any spoilt row spoils it
            row = jnp.any(spoilt)
        grads[i] = jnp.where(row, jnp.nan, grads[i])
    return grads


@contextlib.contextmanager
def emulated_cudnn_attention(*, cpu_lowering: bool = True, cudnn_version: int = 91000,
                             compute_capability: tuple[int, int] = (9, 0),
                             cuda_runtime: int = 12080, fail_compile: str | None = None):
    """Within the block, `jax.nn.dot_product_attention(implementation="cudnn")` traces on a CPU
    jaxlib as on a GPU with this cuDNN version (e.g. 91000 for 9.10.0), compute capability and
    CUDA runtime version (e.g. 13000 for 13.0), and, unless ``cpu_lowering=False``, lowers to the
    strict emulation above. ``fail_compile`` (a message) makes every lowering of the fused
    attention primitives raise it, as ``cuda_runtime >= 13000`` does with its own message."""
    machine = _Machine(cudnn_version, tuple(compute_capability), cuda_runtime, fail_compile)

    def at_least(capability: str) -> bool:
        return machine.compute_capability >= tuple(int(p) for p in capability.split("."))

    def equal(capability: str) -> bool:
        return machine.compute_capability == tuple(int(p) for p in capability.split("."))

    prims = (fa._dot_product_attention_fwd_p, fa._dot_product_attention_bwd_p)
    patches = [(fa, "check_cudnn_version", lambda: machine.cudnn_version),
               (fa, "check_compute_capability", at_least),
               (fa, "is_cuda_compute_capability_equal", equal)]
    with _block(machine, prims, (_rule(_attention_fwd), _rule(_attention_bwd)), cpu_lowering,
                patches):
        yield


# --- portable_rnn's own cuDNN call (the cudnn_ffi route) ----------------------------------------
# `portable_rnn._src.recurrent.routes.cudnn_ffi.call` binds `fwd_p` / `bwd_p`, whose only
# lowering is to
# the FFI targets of its C++ library (CUDA), and asks that library, while tracing, for a plan
# (buffer sizes, cuDNN's weight layout) and the device's facts. Here a stand-in `_FfiBackend`
# answers those questions, with a weight layout unlike portable_rnn's (pseudo-layers reversed,
# recurrent matrices first, gaps between pseudo-layers) so that the wrapper's rearranging is
# exercised, and the primitives get a CPU lowering computing an RNN written here from PyTorch's
# equations (no code shared with portable_rnn's scan path). As strict as cuDNN where that is
# known: a persistent algorithm with ragged lengths or with a projection is refused (cuDNN's
# documentation; PyTorch's get_algo never asks for them), and a length 0 fails at run time as
# for the jaxlib call above. The reserve space carries a fingerprint of the forward call.

from portable_rnn._src.recurrent.routes.cudnn_ffi import call as _ffi  # noqa: E402

FFI_H100 = _ffi.Device(9, 0, 132)  # the GPU the emulated library plans for by default
FFI_GAP = 3  # elements cuDNN's (emulated) weight space leaves after each pseudo-layer
_GATES = {0: 1, 1: 1, 2: 4, 3: 3}


def _ffi_blocks(config):
    """The emulated weight layout: ((pseudo, linear id, matrix off, size, bias off, size), ...),
    and the weight space's size in elements."""
    G, H, P = _GATES[config.mode], config.hidden_size, config.proj_size
    D = 2 if config.bidirectional else 1
    out = P or H
    rows, offset = {}, 0
    for p in reversed(range(config.num_layers * D)):
        in_size = config.input_size if p < D else D * out
        ids = list(range(G, 2 * G)) + list(range(G)) + ([2 * G] if P else [])
        for lin in ids:  # matrices: recurrent, input, projection
            size = P * H if lin == 2 * G else H * (out if lin >= G else in_size)
            rows[(p, lin)] = [p, lin, offset, size, -1, 0]
            offset += size
        for lin in range(2 * G):  # biases
            rows[(p, lin)][4:] = [offset, H]
            offset += H
        offset += FFI_GAP
    return tuple(tuple(rows[k]) for k in sorted(rows)), offset


class _FfiBackend(_ffi.Backend):
    """Stands for the native library: plans with the emulated layout, a pretend H100."""

    def __init__(self, device, refuse=None):
        self._device, self._refuse, self.plans = device, refuse, []

    def plan(self, config):
        if self._refuse is not None:
            raise _ffi.native.Unavailable(self._refuse)
        self.plans.append(config)
        blocks, size = _ffi_blocks(config)
        itemsize = 4 if config.dtype == 0 else 2
        reserve = 16 + 4 * config.batch * config.max_seq if config.training else 0
        return _ffi.Plan(workspace=0, reserve=reserve, weight_space=size * itemsize,
                         blocks=blocks)

    def device(self):
        return self._device


def _ffi_config(x, training, params):
    return _ffi.config_of(x, training, **params)


def _ffi_weights(w, config):
    """Per pseudo-layer: (W_ih (G*H, in), W_hh (G*H, out), b_ih, b_hh, W_hr or None), read from
    the emulated layout."""
    blocks, _ = _ffi_blocks(config)
    G, H, P = _GATES[config.mode], config.hidden_size, config.proj_size
    D = 2 if config.bidirectional else 1
    out = P or H
    by = {(p, lin): (m, ms, b, bs) for p, lin, m, ms, b, bs in blocks}
    layers = []
    for p in range(config.num_layers * D):
        in_size = config.input_size if p < D else D * out
        mat = lambda lin, cols, p=p: w[by[(p, lin)][0]:by[(p, lin)][0] + by[(p, lin)][1]].reshape(
            -1, cols)
        bias = lambda lin, p=p: w[by[(p, lin)][2]:by[(p, lin)][2] + H]
        layers.append((jnp.concatenate([mat(g, in_size) for g in range(G)]),
                       jnp.concatenate([mat(G + g, out) for g in range(G)]),
                       jnp.concatenate([bias(g) for g in range(G)]),
                       jnp.concatenate([bias(G + g) for g in range(G)]),
                       mat(2 * G, H) if P else None))
    return layers


def _reverse_within(a, lengths):
    """(T, B, F): each sequence reversed within its length, padding left in place."""
    T = a.shape[0]
    t = jnp.arange(T, dtype=lengths.dtype)[:, None]
    idx = jnp.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)
    return jnp.take_along_axis(a, idx[:, :, None], axis=0)


def _ffi_rnn(x, h0, c0, w, seq, config):
    """The RNN cuDNN computes: time-major x (T, B, I) -> (y, h_n, c_n), PyTorch's equations,
    float32 math, the output state rounded to the data type after every step."""
    f32, dtype = jnp.float32, x.dtype
    mode = config.mode
    D = 2 if config.bidirectional else 1
    hi = lax.Precision.HIGHEST

    def dot(a, b):
        return jnp.dot(a, b.T.astype(f32), precision=hi)

    weights = _ffi_weights(w, config)
    layer_in, hs, cs = x.astype(f32), [], []
    T = x.shape[0]
    for layer in range(config.num_layers):
        outs = []
        for d in range(D):
            p = layer * D + d
            W_ih, W_hh, b_ih, b_hh, W_hr = weights[p]
            xs = layer_in if d == 0 else _reverse_within(layer_in, seq)

            def step(carry, inputs, W_ih=W_ih, W_hh=W_hh, b_ih=b_ih, b_hh=b_hh, W_hr=W_hr):
                h, c = carry
                xt, t = inputs
                gi = dot(xt, W_ih) + b_ih.astype(f32)
                gh = dot(h, W_hh) + b_hh.astype(f32)
                if mode == 2:  # LSTM
                    i, f, g, o = jnp.split(gi + gh, 4, axis=-1)
                    c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                    h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
                    if W_hr is not None:
                        h_new = dot(h_new, W_hr)
                elif mode == 3:  # GRU
                    ir, iz, in_ = jnp.split(gi, 3, axis=-1)
                    hr, hz, hn = jnp.split(gh, 3, axis=-1)
                    r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
                    h_new = (1 - z) * jnp.tanh(in_ + r * hn) + z * h
                    c_new = c
                else:  # RNN: 0 relu, 1 tanh
                    pre = gi + gh
                    h_new = jnp.maximum(pre, 0) if mode == 0 else jnp.tanh(pre)
                    c_new = c
                h_new = h_new.astype(dtype).astype(f32)
                valid = (t < seq)[:, None]
                h, c = jnp.where(valid, h_new, h), jnp.where(valid, c_new, c)
                return (h, c), jnp.where(valid, h_new, 0.0)

            (h, c), ys = lax.scan(step, (h0[p].astype(f32), c0[p].astype(f32)),
                                  (xs, jnp.arange(T, dtype=seq.dtype)))
            outs.append(ys if d == 0 else _reverse_within(ys, seq))
            hs.append(h)
            cs.append(c)
        layer_in = jnp.concatenate(outs, axis=-1).astype(dtype).astype(f32)
    return (layer_in.astype(dtype), jnp.stack(hs).astype(h0.dtype),
            jnp.stack(cs).astype(c0.dtype))


def _ffi_refuse(config, ragged):
    algo = _ffi.ALGORITHMS[config.algo]
    if algo != "STANDARD" and ragged:
        raise RuntimeError(f"CUDNN_STATUS_NOT_SUPPORTED (emulated): {algo} with lengths that "
                           "vary across the batch")
    if algo != "STANDARD" and config.proj_size:
        raise RuntimeError(f"CUDNN_STATUS_NOT_SUPPORTED (emulated): {algo} with a projection")


def _ffi_fingerprint(x, w, size):
    f = jnp.stack([jnp.sum(x.astype(jnp.float32)), jnp.sum(w.astype(jnp.float32)),
                   jnp.float32(x.shape[1])])
    raw = lax.bitcast_convert_type(f, jnp.uint8).reshape(-1)
    return jnp.concatenate([raw, jnp.zeros((size - raw.size,), jnp.uint8)])


def _ffi_fwd(x, h0, c0, w, seq, *, callbacks, training, ragged, **params):
    config = _ffi_config(x, training, params)
    _ffi_refuse(config, ragged)
    tf32 = bool(params["allow_tf32"]) and x.dtype == jnp.float32
    y, h, c = _maybe_tf32(lambda x, h0, c0, w: _ffi_rnn(x, h0, c0, w, seq, config), tf32)(
        x, h0, c0, w)
    size = _ffi.plan(config).reserve
    reserve = _ffi_fingerprint(x, w, size) if training else jnp.zeros((0,), jnp.uint8)
    y, h, c = _fail_at_run_time([y, h, c], (seq.size > 0) & jnp.all(seq == 0),
                                "cudnnRNNForward with every sequence length 0", callbacks)
    return [y, h, c, reserve]


def _ffi_bwd(dy, dh, dc, x, h0, c0, w, y, reserve, seq, *, callbacks, ragged, **params):
    config = _ffi_config(x, True, params)
    _ffi_refuse(config, ragged)
    tf32 = bool(params["allow_tf32"]) and x.dtype == jnp.float32

    def grads(dy, dh, dc, x, h0, c0, w):
        _, vjp = jax.vjp(lambda *a: _ffi_rnn(*a, seq, config), x, h0, c0, w)
        return vjp((dy, dh, dc))

    out = _maybe_tf32(grads, tf32)(dy, dh, dc, x, h0, c0, w)
    same = jnp.all(reserve == _ffi_fingerprint(x, w, reserve.size))
    out = [g * jnp.where(same, 1.0, jnp.nan).astype(g.dtype) for g in out]
    out = _fail_at_run_time(out, jnp.any(seq == 0),
                            "cudnnRNNBackwardData_v8 with a sequence length 0", callbacks)
    return [*out, reserve]


@contextlib.contextmanager
def emulated_cudnn_ffi(*, cpu_lowering: bool = True,
                       device: _ffi.Device | None = FFI_H100,
                       refuse: str | None = None):
    """Within the block, portable_rnn's own cuDNN call traces on a CPU jaxlib, planned by
    `_FfiBackend` for `device` (`refuse`: every plan fails with that message, as cuDNN refusing
    a configuration), and, unless ``cpu_lowering=False``, lowers to the emulation above.
    Yields the backend (its ``plans`` lists the configurations asked for)."""
    backend = _FfiBackend(device, refuse)
    previous = _ffi.install(backend)
    try:
        with _block(_machine(), (_ffi.fwd_p, _ffi.bwd_p), (_rule(_ffi_fwd), _rule(_ffi_bwd)),
                    cpu_lowering, []):
            yield backend
    finally:
        _ffi.install(previous)

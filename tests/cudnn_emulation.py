"""Test-only CPU emulation of JAX's cuDNN primitives, LSTM and attention (never in the package).

JAX's cuDNN features are ordinary primitives whose only missing piece on a CPU is a lowering (and,
for the LSTM, a reserve-space size that jaxlib's GPU plugin computes while tracing). This module
gives them both, so JAX's own Python code (custom_vjp, batchers, partitioning rules) and
portable_rnn's wrappers on top of it run unchanged on a CPU. The emulation's math shares no code
with portable_rnn: the LSTM is `jax.experimental.rnn.lstm_ref`, attention is a plain float32
softmax written here.

It is as strict as the real thing where that is known (sources: jax-ml/jax#17966 and #32430;
`check_is_flash_attention` in JAX's fused_attention_stablehlo.py; NVIDIA cudnn-frontend's
sdpa_support_surface.h and release notes; NVIDIA/TransformerEngine#1591):

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
    try:
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


def _fwd(x, h0, c0, w, seq, *, callbacks, **params):
    assert params.get("dropout", 0.0) == 0.0, "portable_rnn never asks cuDNN for its own dropout"
    tf32 = params.get("cudnn_allow_tf32", True)
    y, h, c = _maybe_tf32(lambda *a: _reference(*a, seq, *_static(params)), tf32)(x, h0, c0, w)
    outs = _fail_at_run_time([y, h, c, _fingerprint(x, w)], (seq.size > 0) & jnp.all(seq == 0),
                             "cudnnRNNForward with every sequence length 0", callbacks)
    return outs


def _bwd(dy, dh, dc, x, h0, c0, w, y, reserve, seq, *, callbacks, **params):
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
# float32 softmax attention written here, with cuDNN's conventions (masked logits get a large
# negative number, so a fully masked row averages all keys; padded query rows are zero), so the
# real wrappers, batchers and custom_vjp run unchanged. Params are read by name: jax 0.12 adds
# `score_mod_name`/`score_mod_jaxpr` and appends `*score_mod_args` operands (empty without one).

def _refuse(q, k, v, params, backward):
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
    T, S = q.shape[1], k.shape[1]
    if backward and params["variadic_args"][0] and (T % 2 or S % 2):
        problems.append(f"a bias with odd sequence lengths T={T}, S={S} in training")
    if problems:
        raise RuntimeError(f"cuDNN (emulated) has no execution plan for this attention {what}: "
                           + "; ".join(problems))


def _attention(q, k, v, bias, q_len, kv_len, *, scale, variadic_args, mask_type,
               sliding_window_length):
    f32 = jnp.float32
    T, N, S, K = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    k, v = (jnp.repeat(a.astype(f32), N // K, axis=2) for a in (k, v))
    logits = jnp.einsum("btnh,bsnh->bnts", q.astype(f32), k) * scale
    if variadic_args[0]:
        logits = logits + bias.astype(f32)
    t, s = jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    allowed = jnp.ones((1, 1, T, S), bool)
    if mask_type in (fa.MaskType.CAUSAL, fa.MaskType.PADDING_CAUSAL):
        allowed &= s <= t
    if sliding_window_length is not None:
        allowed &= (s > t - sliding_window_length) & (s <= t)
    rows = jnp.ones((q.shape[0], 1, T, 1), bool)
    if mask_type in (fa.MaskType.PADDING, fa.MaskType.PADDING_CAUSAL):
        allowed &= (s < kv_len[:, None, None, None])
        rows = t < q_len[:, None, None, None]
    logits = jnp.where(allowed, logits, -1e30)
    lse = jax.nn.logsumexp(logits, axis=-1)
    p = jnp.exp(logits - lse[..., None])
    out = jnp.where(rows, jnp.einsum("bnts,bsnh->bnth", p, v), 0.0)
    return out.transpose(0, 2, 1, 3).astype(q.dtype), lse


def _math_params(params):
    return {n: params.get(n) for n in ("scale", "variadic_args", "mask_type",
                                       "sliding_window_length")}


def _attention_fwd(q, k, v, bias, q_len, kv_len, *unused, callbacks, **params):
    assert params["layout"] == fa.AttentionLayout.BTNH.value and params["dropout_rate"] == 0.0
    _refuse(q, k, v, params, backward=False)
    out, lse = _attention(q, k, v, bias, q_len, kv_len, **_math_params(params))
    return (out, lse) if params["is_training"] else (out,)  # stats: float32 (B, N, T)


def _attention_bwd(q, k, v, bias, q_len, kv_len, *rest, callbacks, **params):
    _refuse(q, k, v, params, backward=True)
    d_out = rest[6]  # after q/kv offsets, page tables, stats, output; jax 0.12 appends more
    kw = _math_params(params)
    if params["variadic_args"][1]:
        f = lambda q, k, v, b: _attention(q, k, v, b, q_len, kv_len, **kw)[0]  # noqa: E731
        _, vjp = jax.vjp(f, q, k, v, bias)
    else:
        f = lambda q, k, v: _attention(q, k, v, bias, q_len, kv_len, **kw)[0]  # noqa: E731
        _, vjp = jax.vjp(f, q, k, v)
    return list(vjp(d_out))


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

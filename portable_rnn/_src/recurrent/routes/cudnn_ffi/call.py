"""portable_rnn's own cuDNN RNN call: two JAX primitives lowered to the XLA FFI handlers of
``cudnn_rnn.cc``, and the wrapper that makes them a recurrent op (vmap, VJP, lengths, dropout).

On a CPU, the test-only emulation of ``tests/cudnn_emulation.py`` lowers the primitives to an
independent reference, so the wrapper's plumbing runs there; the C++ handlers build against
jaxlib's FFI headers and NVIDIA's cuDNN 9 headers. ``tests/test_gpu_cudnn_ffi.py`` and
``python -m portable_rnn selftest`` check them on a GPU.

The pieces:

- `backend`: the native library, built on first use (`core.native`) and loaded with ctypes;
  loading registers the handlers as the FFI targets ``portable_rnn_cudnn_rnn_fwd`` and
  ``portable_rnn_cudnn_rnn_bwd`` for CUDA. Its `Backend.plan` answers, while tracing, what
  cuDNN needs for a configuration (workspace and reserve-space bytes, cuDNN's weight layout:
  `cudnnGetRNNTempSpaceSizes`, `cudnnGetRNNWeightParams`); `Backend.device` gives the facts
  the algorithm choice reads. Tracing a call therefore needs the GPU machine, as jaxlib's own
  cuDNN LSTM does (it sizes its reserve space the same way).
- `fwd_p`, `bwd_p`: the primitives; operands time-major, as cuDNN's sequence-major layout. The
  backward's reserve-space operand is aliased to its last result: cuDNN writes to it.
- `algorithm`: the cuDNN algorithm per shape, PyTorch's `get_algo` rules
  (aten/src/ATen/native/cudnn/RNN.cpp): persistent kernels where PyTorch would use them, with
  one deviation: a training forward and its backward share one algorithm (the backward's
  stricter PERSIST_STATIC_SMALL_H limit), since the backward reads the forward's reserve space.
- `WeightLayout`: portable_rnn's flat weights (the cuDNN/PyTorch canonical order of
  ``layout``) rearranged into the layout cuDNN reports, and the weight gradient back; an
  identity (no op at all) where the two agree.
- `rnn`: the op on checked arguments: as the jaxlib cuDNN route (`routes.cudnn`), through
  the helper every fused route shares (`fused.op`: a vmapped call folds into the batch; its
  per-instance gradients come from the scan path's VJP), sequences of length 0 run one step
  and get the documented results, and dropout between layers is one call per layer with
  portable_rnn's masks.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import pathlib
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex_core
from jax.interpreters import mlir

from ....core import compat, native
from ....core.checks import precision_name
from ....core.sharding import vary_like
from ... import fused, layout
from ...driver import ScanConfig, layer_by_layer, rnn_scan

SOURCE = pathlib.Path(__file__).with_name("cudnn_rnn.cc")
FWD_TARGET = "portable_rnn_cudnn_rnn_fwd"
BWD_TARGET = "portable_rnn_cudnn_rnn_bwd"
# cudnnRNNMode_t by name (a family's `Family.cudnn_mode` gives its cells')
MODE_NAMES = {0: "RNN", 1: "RNN", 2: "LSTM", 3: "GRU"}
ALGORITHMS = ("STANDARD", "PERSIST_STATIC", "PERSIST_DYNAMIC", "PERSIST_STATIC_SMALL_H")
DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(jnp.bfloat16): 2}


# --- the algorithm ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Device:
    """What PyTorch's rules read of the GPU: compute capability and multiprocessor count (None
    when unknown: PERSIST_STATIC is then not considered on sm80+)."""

    major: int
    minor: int
    sms: int | None = None


def algorithm(mode: int, dtype, batch: int, steps: int, input_size: int, hidden_size: int,
              num_layers: int, bidirectional: bool, proj_size: int, ragged: bool,
              training: bool, device: Device | None, cudnn_version: int | None = None) -> str:
    """The cuDNN RNN algorithm for one call, by PyTorch's `get_algo` (RNN.cpp), with its
    `use_rnn_persist_small_h`, `use_persist_common_heuristics` and
    `use_persist_device_heuristics`: STANDARD with a projection or ragged lengths (persistent
    kernels reject lengths that vary across the batch); PERSIST_STATIC_SMALL_H for small hidden
    sizes on sm60+ (cuDNN >= 8.2.1); PERSIST_STATIC for float16 only, one unidirectional layer,
    H <= 1024 and H, I multiples of 128, on a GPU and batch size PyTorch lists. A training
    forward uses the backward's limits, so that forward and backward agree (PyTorch calls
    `get_algo` separately for each)."""
    if proj_size or ragged or device is None:
        return "STANDARD"
    name = MODE_NAMES[mode]
    if (cudnn_version is None or cudnn_version >= 8201) and device.major >= 6:
        limit = ({"RNN": 256, "LSTM": 128, "GRU": 128} if training
                 else {"RNN": 384, "LSTM": 192, "GRU": 192})[name]
        if hidden_size <= limit:
            return "PERSIST_STATIC_SMALL_H"
    if np.dtype(dtype) == np.float16:
        common = (num_layers == 1 and hidden_size <= 1024 and not bidirectional
                  and hidden_size % 128 == 0 and input_size % 128 == 0)
        if common and _persist_device(name, batch, steps, hidden_size, device):
            return "PERSIST_STATIC"
    return "STANDARD"


def _persist_device(name: str, batch: int, steps: int, hidden_size: int, device: Device) -> bool:
    if device.major == 7:
        if device.minor == 5:
            return False  # Turing
        return (((batch % 16 == 0 and batch not in (80, 112)) or batch == 8)
                and ((steps >= 40 and batch <= 128) or (steps >= 20 and batch <= 96)
                     or (steps >= 10 and batch <= 32)))
    if device.major >= 8 and device.sms is not None and device.sms >= 98:
        if device.minor == 6 or name == "GRU":  # sm_86; "persistent GRU ... is flakier"
            return False
        if name == "LSTM":
            return batch % 8 == 0 and batch <= 128
        return batch % 8 == 0 and batch <= 128 and (batch < 96 or hidden_size < 896)
    return False


# --- the native library -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Plan:
    """What cuDNN needs for one configuration (bytes), and where its weight space holds each
    matrix and bias: rows (pseudo-layer, linear layer id, matrix offset, matrix size, bias
    offset, bias size) in elements, -1 for an absent one."""

    workspace: int
    reserve: int
    weight_space: int
    blocks: tuple[tuple[int, int, int, int, int, int], ...]


@dataclasses.dataclass(frozen=True)
class Config:
    """One call as cuDNN sees it (the C++ `Config`, in its order)."""

    mode: int
    dtype: int
    input_size: int
    hidden_size: int
    proj_size: int
    num_layers: int
    bidirectional: int
    batch: int
    max_seq: int
    algo: int
    allow_tf32: int
    training: int


class Backend:
    """The native library as the wrapper uses it: the trace-time queries. The emulation of
    ``tests/cudnn_emulation.py`` installs its own (`install`)."""

    def __init__(self, cdll):
        self._lib = cdll
        self._lock = threading.Lock()

    def plan(self, config: Config) -> Plan:
        values = dataclasses.astuple(config)
        pseudo = config.num_layers * (2 if config.bidirectional else 1)
        n_out = 4 + pseudo * 9 * 6
        out = (ctypes.c_int64 * n_out)()
        error = ctypes.create_string_buffer(1024)
        with self._lock:
            failed = self._lib.PortableRnnCudnnRnnPlan((ctypes.c_int64 * 12)(*values), 12, out,
                                                       n_out, error, len(error))
        if failed:
            raise native.Unavailable(f"cuDNN refused {config}: "
                                     f"{error.value.decode(errors='replace')}")
        rows = tuple(tuple(out[4 + 6 * i:10 + 6 * i]) for i in range(out[3]))
        return Plan(out[0], out[1], out[2], rows)

    def device(self) -> Device | None:
        out = (ctypes.c_int64 * 3)()
        error = ctypes.create_string_buffer(512)
        if self._lib.PortableRnnCudnnRnnDevice(out, error, len(error)):
            return None
        return Device(int(out[0]), int(out[1]), int(out[2]))

    def versions(self) -> tuple[int, int, int]:
        """(cuDNN built against, cuDNN loaded, CUDA runtime built against)."""
        out = (ctypes.c_int64 * 3)()
        self._lib.PortableRnnCudnnRnnVersions(out)
        return int(out[0]), int(out[1]), int(out[2])


_backend: Backend | None = None
_failure: str | None = None  # why the library is unavailable, once a load failed
_load_lock = threading.Lock()


def load(path) -> Backend:
    """Loads a built library and registers its handlers as FFI targets for CUDA."""
    try:
        cdll = ctypes.CDLL(str(path))
    except OSError as e:
        raise native.Unavailable(f"the built library {path} does not load: {e}") from e
    for fn in ("PortableRnnCudnnRnnPlan", "PortableRnnCudnnRnnDevice"):
        getattr(cdll, fn).restype = ctypes.c_int
    for target, fn in ((FWD_TARGET, cdll.PortableRnnCudnnRnnForward),
                       (BWD_TARGET, cdll.PortableRnnCudnnRnnBackward)):
        try:
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(fn), platform="CUDA")
        except Exception as e:  # noqa: BLE001 - a jaxlib that cannot register says why
            raise native.Unavailable(f"registering the FFI target {target} for CUDA failed: "
                                     f"{e}") from e
    return Backend(cdll)


def backend() -> Backend:
    """The native library, built and loaded on first use; `native.Unavailable` says why not.

    Without jaxlib's CUDA plugin nothing is attempted: a program traced here could not run the
    call anyway."""
    global _backend, _failure
    with _load_lock:
        if _backend is not None:
            return _backend
        if _failure is not None:
            raise native.Unavailable(_failure)
        try:
            if compat.cuda_versions() is None:
                raise native.Unavailable("this jaxlib has no CUDA plugin (install jax[cuda12] "
                                         "or jax[cuda13])")
            _backend = load(native.build(SOURCE, "cudnn_rnn"))
        except native.Unavailable as e:
            _failure = str(e)
            raise
        return _backend


def failure() -> str | None:
    """Why the library is unavailable, if a load was tried and failed (nothing is built)."""
    return _failure


def loaded() -> bool:
    """Whether a backend is in place (the native library, or the tests' emulation)."""
    return _backend is not None


def install(new: Backend | None) -> Backend | None:
    """Puts `new` in place of the backend (None: none); returns the previous one."""
    global _backend
    old, _backend = _backend, new
    _plan.cache_clear()
    _device.cache_clear()
    return old


@functools.lru_cache(maxsize=4096)
def _plan(config: Config) -> Plan:
    return backend().plan(config)


@functools.lru_cache(maxsize=1)
def _device() -> Device | None:
    return backend().device()


def plan(config: Config) -> Plan:
    """`Backend.plan`, cached per configuration."""
    return _plan(config)


def device() -> Device | None:
    """The GPU the calls are planned for (the current device), or None where none is known."""
    try:
        return _device()
    except native.Unavailable:
        return None


# --- the weight layout --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WeightLayout:
    """portable_rnn's flat weights in cuDNN's weight space, and back.

    ``to_cudnn``: pieces ``(start, size)`` of the flat vector (start None: ``size`` zeros, a gap
    cuDNN leaves), concatenated in cuDNN's order; ``from_cudnn``: pieces of cuDNN's vector in
    the flat order. Both are one piece where the layouts agree.
    """

    to_cudnn: tuple[tuple[int | None, int], ...]
    from_cudnn: tuple[tuple[int, int], ...]
    size: int  # elements of cuDNN's weight space
    params: int  # elements of the flat vector

    @property
    def identity(self) -> bool:
        return self.to_cudnn == ((0, self.params),) and self.size == self.params

    def pack(self, w):
        if self.identity:
            return w
        return jnp.concatenate([jnp.zeros((n,), w.dtype) if s is None else w[s:s + n]
                                for s, n in self.to_cudnn])

    def unpack(self, dw):
        if self.identity:
            return dw
        return jnp.concatenate([dw[s:s + n] for s, n in self.from_cudnn])


def _merge(pieces):
    """Adjacent pieces (a, b, n) that continue each other in both a and b become one."""
    out = []
    for a, b, n in pieces:
        if out and out[-1][0] + out[-1][2] == a and out[-1][1] + out[-1][2] == b:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
        else:
            out.append((a, b, n))
    return out


def weight_layout(plan_: Plan, family, input_size, hidden_size, num_layers, bidirectional,
                  proj_size, itemsize) -> WeightLayout:
    """Matches every gate block of the flat layout (`layout.param_shapes`) with the matrix or
    bias cuDNN reports for it: linear layers 0..G-1 are the input matrices and biases (gates in
    the family's order, as cuDNN and PyTorch stack them), G..2G-1 the recurrent ones, 2G the
    LSTM's projection. Raises `native.Unavailable` where cuDNN's layout does not hold them."""
    G = family.gates
    shapes = layout.param_shapes(input_size, hidden_size, num_layers, bidirectional, family,
                                 proj_size)
    order = layout._flat_order(shapes)  # noqa: SLF001 - the layout module's own order
    offsets, start = {}, 0
    for p, name in order:
        offsets[(p, name)] = start
        start += int(np.prod(shapes[p][name]))
    params = start
    cudnn = {}
    for p, lin, m_off, m_size, b_off, b_size in plan_.blocks:
        if m_off >= 0:
            cudnn[(p, lin, "m")] = (m_off, m_size)
        if b_off >= 0:
            cudnn[(p, lin, "b")] = (b_off, b_size)
    pieces = []  # (cudnn offset, flat offset, size)
    for (p, name), flat in offsets.items():
        rows, cols = (shapes[p][name] + (1,))[:2]
        if name == "W_hr":
            blocks = [(2 * G, "m", 0, rows * cols)]
        else:
            base = G if name in ("W_hh", "b_hh") else 0
            kind = "m" if name.startswith("W") else "b"
            size = (rows // G) * cols
            blocks = [(base + g, kind, g * size, size) for g in range(G)]
        for lin, kind, within, size in blocks:
            found = cudnn.get((p, lin, kind))
            if found is None or found[1] != size:
                what = "matrix" if kind == "m" else "bias"
                raise native.Unavailable(
                    f"cuDNN's weight space holds no {what} of {size} elements for "
                    f"pseudo-layer {p}, linear layer {lin} ({name}); it reports {found}")
            pieces.append((found[0], flat + within, size))
    total = plan_.weight_space // itemsize
    to_cudnn, end = [], 0
    for c, f, n in _merge(sorted(pieces)):
        if c < end:
            raise native.Unavailable("cuDNN's weight space has overlapping blocks")
        if c > end:
            to_cudnn.append((None, c - end))
        to_cudnn.append((f, n))
        end = c + n
    if total < end:
        raise native.Unavailable(f"cuDNN's weight space ({total} elements) is smaller than the "
                                 f"blocks it reports ({end})")
    if total > end:
        to_cudnn.append((None, total - end))
    from_cudnn = [(c, n) for f, c, n in _merge(sorted((f, c, n) for c, f, n in pieces))]
    return WeightLayout(tuple(to_cudnn), tuple(from_cudnn), total, params)


# --- the primitives -----------------------------------------------------------------------------

fwd_p = jex_core.Primitive("portable_rnn_cudnn_rnn_fwd")
fwd_p.multiple_results = True
bwd_p = jex_core.Primitive("portable_rnn_cudnn_rnn_bwd")
bwd_p.multiple_results = True
ATTRIBUTES = ("mode", "input_size", "hidden_size", "proj_size", "num_layers", "bidirectional",
              "algo", "allow_tf32")


def config_of(x_aval, training: bool, *, mode, input_size, hidden_size, proj_size, num_layers,
              bidirectional, algo, allow_tf32, **_) -> Config:
    """The `Config` of a call on time-major `x` (T, B, I)."""
    steps, batch, _ = x_aval.shape
    return Config(mode, DTYPES[np.dtype(x_aval.dtype)], input_size, hidden_size, proj_size,
                  num_layers, int(bidirectional), batch, steps, algo, int(allow_tf32),
                  int(training))


def _fwd_abstract(x, h0, c0, w, seq, *, training, ragged, **params):
    del w, seq, ragged
    steps, batch, _ = x.shape
    D = 2 if params["bidirectional"] else 1
    out = params["proj_size"] or params["hidden_size"]
    reserve = plan(config_of(x, training, **params)).reserve if training else 0
    return (jax.core.ShapedArray((steps, batch, D * out), x.dtype),
            jax.core.ShapedArray(h0.shape, h0.dtype), jax.core.ShapedArray(c0.shape, c0.dtype),
            jax.core.ShapedArray((reserve,), np.uint8))


def _bwd_abstract(dy, dh, dc, x, h0, c0, w, y, reserve, seq, **params):
    del dy, dh, dc, y, seq
    return tuple(jax.core.ShapedArray(a.shape, a.dtype) for a in (x, h0, c0, w, reserve))


fwd_p.def_abstract_eval(_fwd_abstract)
bwd_p.def_abstract_eval(_bwd_abstract)
fwd_p.def_impl(compat.primitive_impl(fwd_p))
bwd_p.def_impl(compat.primitive_impl(bwd_p))


def _lowering(target, aliases=None):
    def rule(ctx, *operands, **params):
        attrs = {k: int(v) for k, v in params.items()}
        kwargs = {"operand_output_aliases": aliases} if aliases else {}
        return jax.ffi.ffi_lowering(target, **kwargs)(ctx, *operands, **attrs)
    return rule


mlir.register_lowering(fwd_p, _lowering(FWD_TARGET), platform="cuda")
mlir.register_lowering(bwd_p, _lowering(BWD_TARGET, {8: 4}), platform="cuda")


# --- the op -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Statics:
    """The static facts of one (possibly per-layer) call."""

    cell: Any  # the family's cell (the scan path's VJP under vmap uses it)
    mode: int
    input_size: int
    hidden_size: int
    proj_size: int
    num_layers: int
    bidirectional: bool
    precision: Any  # lax.Precision.HIGH (TF32 allowed) or HIGHEST
    ragged: bool
    device: Device | None
    cudnn_version: int | None

    @property
    def allow_tf32(self) -> bool:
        return self.precision != lax.Precision.HIGHEST

    def params(self, x_tm, training: bool) -> dict:
        """The primitives' parameters for time-major `x_tm`: the algorithm of `algorithm`, or
        STANDARD where cuDNN refuses a persistent one for this shape (the plan says so while
        tracing; a vmapped call runs at a folded batch size the decision did not see)."""
        steps, batch, _ = x_tm.shape
        algo = algorithm(self.mode, x_tm.dtype, batch, steps, self.input_size,
                         self.hidden_size, self.num_layers, self.bidirectional, self.proj_size,
                         self.ragged, training, self.device, self.cudnn_version)
        out = dict(mode=self.mode, input_size=self.input_size, hidden_size=self.hidden_size,
                   proj_size=self.proj_size, num_layers=self.num_layers,
                   bidirectional=int(self.bidirectional), algo=ALGORITHMS.index(algo),
                   allow_tf32=int(self.allow_tf32), ragged=int(self.ragged))
        if algo != "STANDARD":
            try:
                plan(config_of(x_tm, True, **out))
            except native.Unavailable:
                out["algo"] = ALGORITHMS.index("STANDARD")
        return out

    def layout(self, params: dict, x_tm) -> WeightLayout:
        return weight_layout(plan(config_of(x_tm, False, **params)), self.cell.family,
                             self.input_size, self.hidden_size, self.num_layers,
                             self.bidirectional, self.proj_size, np.dtype(x_tm.dtype).itemsize)


def _bind_fwd(s: Statics, training: bool, x, h0, c0, w, seq):
    x_tm = jnp.swapaxes(x, 0, 1)
    params = s.params(x_tm, training)
    w_c = s.layout(params, x_tm).pack(w)
    y, h, c, reserve = fwd_p.bind(x_tm, h0, c0, w_c, seq, training=int(training), **params)
    return jnp.swapaxes(y, 0, 1), h, c, reserve


def _bind_bwd(s: Statics, dy, dh, dc, x, h0, c0, w, y, reserve, seq):
    x_tm = jnp.swapaxes(x, 0, 1)
    params = s.params(x_tm, True)
    wl = s.layout(params, x_tm)
    dx, dh0, dc0, dw, _ = bwd_p.bind(jnp.swapaxes(dy, 0, 1), dh, dc, x_tm, h0, c0, wl.pack(w),
                                     jnp.swapaxes(y, 0, 1), reserve, seq, **params)
    return jnp.swapaxes(dx, 0, 1), dh0, dc0, wl.unpack(dw)


BATCH_AXES = (0, 1, 1, None, 0)  # x, h0, c0, w, seq: the batch axis of each (w: shared)
OUT_AXES = (0, 1, 1)  # y, h, c


@functools.cache
def _op(s: Statics):
    """The call of one `Statics` as an op that vmaps and differentiates (`fused.op`), as the
    jaxlib cuDNN route (`routes.cudnn`): folded under vmap; where weights differ per
    instance, the scan path's forward (one cuDNN call per instance under lax.map is unproven on
    a GPU); every vmapped backward, the scan path's VJP (one folded call cannot separate the
    instances' weight gradients)."""
    cell_state = len(s.cell.family.states) == 2  # (h, c): the LSTM's

    def scan(x, h0, c0, w, seq):
        """The scan path, for what one folded cuDNN call cannot serve under vmap."""
        states = (h0, c0) if cell_state else (h0,)
        config = ScanConfig(s.cell, s.input_size, s.hidden_size, s.num_layers,
                            s.bidirectional, precision=s.precision, proj_size=s.proj_size)
        y, finals = rnn_scan(config, x, states, w, seq)
        return y, finals[0], (finals[1] if cell_state else c0)

    # Inside shard_map the primitives' results carry no manual axes; every operand was made to
    # vary as the others (`fused.over_batch`), and so does every result.
    def infer(x, h0, c0, w, seq):
        return vary_like(x, *_bind_fwd(s, False, x, h0, c0, w, seq))[:3]

    def train(x, h0, c0, w, seq):
        y, h, c, reserve = vary_like(x, *_bind_fwd(s, True, x, h0, c0, w, seq))
        return (y, h, c), reserve

    def backward(reserve, args, outs, couts):
        x, h0, c0, w, seq = args
        return vary_like(x, *_bind_bwd(s, *couts, x, h0, c0, w, outs[0], reserve, seq))

    return fused.op(infer, train, backward, scan, BATCH_AXES, OUT_AXES, num_diff=4)


def _sharded_call(x, h0, c0, w, seq, s: Statics):
    """One call; a batch sharded over explicit mesh axes runs one call per shard
    (`fused.over_batch`), as the jaxlib cuDNN route does: XLA cannot partition a custom call it
    has no rule for."""
    return fused.over_batch(_op(s), (x, h0, c0, w, seq), BATCH_AXES, OUT_AXES)


def family_rejects(family) -> list[str]:
    """Why portable_rnn's cuDNN call cannot run a family's cells at all (empty when it can)."""
    if family.cudnn_mode is None:
        return [f"cuDNN has no {family.name} cell (no cudnnRNNMode_t computes it)"]
    return []


def mode_of(cell) -> int:
    """The cudnnRNNMode_t of a family's cell (`Family.cudnn_mode`); `native.Unavailable` for a
    family cuDNN has no mode for."""
    mode = cell.family.cudnn_mode
    if mode is None:
        raise native.Unavailable(family_rejects(cell.family)[0])
    if isinstance(mode, int):
        return mode
    attribute, modes = mode
    return modes[getattr(cell, attribute)]


def rnn(cell, x, states, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
        bidirectional, precision, dropout_rng=None, *, proj_size=0, device=None,
        cudnn_version=None):
    """The call on checked arguments the routing accepted: ``(y, final states)`` as the scan
    path returns them. Computes in `x`'s dtype (states and weights are cast to it, results cast
    back to each state's dtype)."""
    batch, steps, _ = x.shape
    dtype = x.dtype
    out_dtypes = tuple(s.dtype for s in states)
    cell_state = len(cell.family.states) == 2  # (h, c): the LSTM's
    h0 = states[0].astype(dtype)
    D = 2 if bidirectional else 1
    c0 = (states[1].astype(dtype) if cell_state
          else jnp.zeros((num_layers * D, batch, 0), dtype))
    weights = weights.astype(dtype)
    ragged = seq_lengths is not None
    seq = (jnp.clip(seq_lengths, 0, steps).astype(jnp.int32) if ragged
           else jnp.full((batch,), steps, jnp.int32))
    # cuDNN fails at run time on a length 0 (jax-ml/jax#17966): such sequences run one step,
    # and their results are replaced below.
    run_seq = jnp.maximum(seq, 1) if ragged else seq
    prec = cudnn_precision(precision)
    statics = functools.partial(Statics, cell, mode_of(cell), hidden_size=hidden_size,
                                proj_size=proj_size, bidirectional=bool(bidirectional),
                                precision=prec, ragged=ragged, device=device,
                                cudnn_version=cudnn_version)
    if dropout_rng is not None and dropout > 0 and num_layers > 1:
        def one_layer(layer, y, h, c):
            w = layout.layer_weights(weights, layer, input_size, hidden_size, num_layers,
                                     bidirectional, cell.family, proj_size)
            in_size = input_size if layer == 0 else D * (proj_size or hidden_size)
            return _sharded_call(y, h, c, w, run_seq, statics(input_size=in_size, num_layers=1))

        y, h_n, c_n = layer_by_layer(one_layer, x, h0, c0, num_layers, D, dropout_rng, dropout)
    else:
        y, h_n, c_n = _sharded_call(x, h0, c0, weights, run_seq,
                                    statics(input_size=input_size, num_layers=num_layers))
    if ragged:
        empty = (seq == 0)[None, :, None]
        h_n = jnp.where(empty, h0, h_n)
        c_n = jnp.where(empty, c0, c_n)
        valid = (jnp.arange(steps, dtype=jnp.int32)[None, :] < seq[:, None])[..., None]
        y = jnp.where(valid, y, jnp.zeros((), dtype))
    finals = (h_n, c_n) if cell_state else (h_n,)
    return y, tuple(f.astype(d) for f, d in zip(finals, out_dtypes))


def cudnn_precision(precision) -> lax.Precision:
    """HIGHEST (exact float32, cuDNN's FMA math) where `precision` asks for it, else HIGH (TF32
    allowed, cuDNN's default math)."""
    return lax.Precision.HIGHEST if precision_name(precision) == "HIGHEST" else lax.Precision.HIGH

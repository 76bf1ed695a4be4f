"""The ``cudnn_ffi`` route: portable_rnn's own cuDNN RNN call (`call`), for every family cuDNN
has (LSTM, GRU, the tanh and relu RNN).

Its rules are tested on a CPU through injected capabilities, its wrapper through the emulation
of ``tests/cudnn_emulation.py``. The automatic choice passes over it (`SKIP`): a route serves a
call automatically only where a benchmark shows it wins (``benchmarks/gpu.py`` measures this
one), and none does for it; ``implementation="cudnn_ffi"`` or ``policy(lstm="cudnn_ffi")``
(``gru=``, ``simple_rnn=``) asks for it.

Where a real machine is decided for (capabilities from the probe) and the route is asked for,
the native library is built (first use) and cuDNN is asked for the call's plan while deciding,
so that a refusal is a rejection reason and never an error after routing.
"""

from __future__ import annotations

import jax
import numpy as np

from ....core import compat, dispatch, native
from ....core.capabilities import Capabilities, cudnn_platform_rejects
from ....core.checks import precision_name
from ...api import checkpointing_rejects, heads_rejects
from . import call as ffi_call

NAME = "cudnn_ffi"
BFLOAT16_CUDNN = 91300  # cuDNN runs bfloat16 RNNs from 9.13 on (PyTorch PR 164411)
DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(jax.numpy.bfloat16))

SKIP = ("not measured on a GPU yet: the automatic choice keeps the scan path until "
        "benchmarks/gpu.py shows where portable_rnn's cuDNN call wins; "
        "implementation='cudnn_ffi' or policy(lstm='cudnn_ffi') (gru=, simple_rnn=) selects it",)


# Under jax.vmap, weights that differ per instance take the scan path (`call`): the decision is
# made per instance, inside the vmap, where this cannot be seen, so every decision says it.
PER_INSTANCE_WEIGHTS = ("under jax.vmap, weights that differ per instance run the scan path (one "
                        "cuDNN call per instance under lax.map is unproven on a GPU)")


def _wanted(call) -> bool:
    return NAME in (call.requested, call.preferred)


def device_facts(caps: Capabilities) -> ffi_call.Device | None:
    """The GPU an algorithm is chosen for: the one the loaded library plans on, else the
    capabilities' compute capability (multiprocessor count from the probed device, if any)."""
    if ffi_call.loaded():
        found = ffi_call.device()
        if found is not None:
            return found
    if caps.compute_capability is None:
        return None
    return ffi_call.Device(*caps.compute_capability,
                           getattr(caps.probe_device, "core_count", None))


def _call_configs(call):
    """(cell mode, per call: (input size, layers)): one call, or one per layer with dropout."""
    mode = ffi_call.mode_of(call.cell)
    D = 2 if call.bidirectional else 1
    if call.dropout > 0 and call.has_rng and call.num_layers > 1:
        out = call.proj_size or call.hidden_size
        return mode, [(call.input_size if layer == 0 else D * out, 1)
                      for layer in range(call.num_layers)]
    return mode, [(call.input_size, call.num_layers)]


def _plan_reasons(call, caps: Capabilities) -> list[str]:
    """On the machine itself, for a call that asks for the route: the library's build and
    cuDNN's plan for the call's shapes, each failure as a reason."""
    if caps.probe_device is None:  # a pretend machine: decided by the rules alone
        return []
    if not _wanted(call):  # the automatic choice skips the route: build nothing for it
        known = ffi_call.failure()
        return [f"portable_rnn's cuDNN call is unavailable here: {known}"] if known else []
    try:
        ffi_call.backend()
        mode, calls = _call_configs(call)
        x = np.dtype(call.dtypes["x"])
        for input_size, layers in calls:
            for training in (False, True):
                s = ffi_call.Statics(call.cell, mode, input_size, call.hidden_size,
                                     call.proj_size, layers, call.bidirectional,
                                     ffi_call.cudnn_precision(call.precision),
                                     call.seq_dtype is not None, device_facts(caps),
                                     caps.cudnn_version)
                aval = jax.ShapeDtypeStruct((call.steps, call.batch, input_size), x)
                params = s.params(aval, training)
                ffi_call.plan(ffi_call.config_of(aval, training, **params))
                s.layout(params, aval)
    except native.Unavailable as e:
        return [f"portable_rnn's cuDNN call is unavailable here: {e}"]
    return []


def rejects(call, caps: Capabilities) -> tuple[str, ...]:
    """Why portable_rnn's cuDNN call cannot serve a call (an empty tuple when it can)."""
    family = call.family
    if ffi_call.family_rejects(family):
        return tuple(ffi_call.family_rejects(family))
    reasons = cudnn_platform_rejects(caps, f"{family.cudnn_name} call of portable_rnn")
    reasons += heads_rejects(call, "cuDNN's RNN")
    x = np.dtype(call.dtypes["x"])
    for name, dtype in call.dtypes.items():
        if np.dtype(dtype) not in DTYPES:
            reasons.append(f"`{name}` is {dtype}: portable_rnn's cuDNN call runs float32, "
                           "float16 and bfloat16")
    if x == DTYPES[2] and caps.is_cuda_gpu:
        if caps.cudnn_version is not None and caps.cudnn_version < BFLOAT16_CUDNN:
            v = caps.cudnn_version
            reasons.append(f"`x` is bfloat16: cuDNN runs bfloat16 RNNs from cuDNN 9.13 on; this "
                           f"machine has cuDNN {v // 10000}.{v // 100 % 100}.{v % 100}")
        if caps.compute_capability is not None and caps.compute_capability < (8, 0):
            reasons.append("`x` is bfloat16: cuDNN's bfloat16 RNN needs compute capability 8.0 "
                           "or newer; this GPU has {}.{}".format(*caps.compute_capability))
    name = precision_name(call.precision)
    if name == "DEFAULT" and x == DTYPES[0]:
        reasons.append(f"precision={call.precision!r} (effective DEFAULT) asks for bfloat16 "
                       "matmuls of float32 inputs, which cuDNN's RNN does not offer (TF32 or "
                       "exact float32 only); pass bfloat16 inputs for bfloat16 matmuls")
    elif name == "algorithm":
        reasons.append(f"precision={call.precision!r}: dot algorithms are not understood by "
                       "cuDNN's RNN")
    if call.recurrent_dropout:
        reasons.append("recurrent_dropout_mask: cuDNN's RNN has no recurrent dropout (its "
                       "dropout acts between layers only)")
    if call.steps == 0:
        reasons.append("T=0: there are no time steps to run")
    if call.batch == 0:
        reasons.append("batch=0: there are no sequences to run")
    if not reasons:
        reasons += checkpointing_rejects(call, caps, "cuDNN's RNN")
    if not reasons:
        reasons += _plan_reasons(call, caps)
    return tuple(reasons)


def skips(call, caps: Capabilities) -> tuple[str, ...]:
    """The automatic choice passes over the route (no benchmark shows where it wins); asking for
    it selects it."""
    del call, caps
    return SKIP


def notes(call, caps: Capabilities) -> tuple[str, ...]:
    """How the route serves a call it accepted."""
    out = []
    x = np.dtype(call.dtypes["x"])
    cast = [f"`{n}`" for n, d in call.dtypes.items() if np.dtype(d) != x]
    if cast:
        out.append(f"{', '.join(cast)} cast to {x} (cuDNN takes one data type per call; the "
                   "results are cast back)")
    if x.itemsize == 2:
        out.append(f"{x}: tensor-op matmuls with float32 math precision (cuDNN's)")
    elif precision_name(call.precision) == "HIGHEST":
        out.append("exact float32 matmuls (precision HIGHEST)")
    else:
        out.append("TF32 matmuls allowed (precision HIGHEST disables them)")
    mode, calls = _call_configs(call)
    device = device_facts(caps)
    ragged = call.seq_dtype is not None
    input_size, layers = calls[0]
    def choose(training, device=device):
        return ffi_call.algorithm(mode, x, call.batch, call.steps, input_size, call.hidden_size,
                                  layers, call.bidirectional, call.proj_size, ragged, training,
                                  device, caps.cudnn_version)

    choice = [choose(False), choose(True)]
    unknown = ""
    if device is not None and device.sms is None and choice != [
            choose(t, ffi_call.Device(device.major, device.minor, 1 << 30)) for t in (False, True)]:
        unknown = " (multiprocessor count unknown: PERSIST_STATIC not considered)"
    out.append(f"cuDNN algorithm {choice[0]} for inference, {choice[1]} for training (PyTorch's "
               f"rules for this shape){unknown}")
    if not ragged:
        out.append("seq_lengths None: every length is T; no copy to the host, no "
                   "synchronisation")
    else:
        out.append("seq_lengths given: copied to the host with one stream synchronisation per "
                   "cuDNN call (cuDNN takes the lengths as a host array)")
        if call.seq_dtype != np.int32:
            out.append(f"seq_lengths {call.seq_dtype} cast to int32")
    if call.proj_size:
        out.append(f"proj_size={call.proj_size}: cuDNN's LSTM projection (the STANDARD algorithm "
                   "only)")
    if len(calls) > 1:
        out.append(f"dropout {call.dropout}: {len(calls)} single-layer cuDNN calls with "
                   "portable_rnn's masks between them (cuDNN's own dropout cannot use your key)")
    out.append(PER_INSTANCE_WEIGHTS)
    return tuple(out)


def _run(d, call, x, states, weights, seq_lengths, dropout_rng, rmask):
    del rmask  # rejected above
    if not ffi_call.loaded():  # asked for with hand-made capabilities: build here, or say why
        try:
            ffi_call.backend()
        except native.Unavailable as e:
            raise ValueError(f"implementation='cudnn_ffi' cannot run here: {e}") from e
    with jax.named_scope(f"portable_rnn.{call.family.name}.cudnn_ffi"):
        return ffi_call.rnn(call.cell, x, states, weights, seq_lengths, *call.statics,
                            dropout_rng, proj_size=call.proj_size,
                            device=device_facts(d.capabilities),
                            cudnn_version=d.capabilities.cudnn_version)


def _platforms() -> tuple[str, ...]:
    return (compat.lowering_platforms(ffi_call.fwd_p, ffi_call.bwd_p) if ffi_call.loaded()
            else ())


def _summary(family) -> str:
    return ("portable_rnn's own cuDNN call, built on first use" if family.cudnn_mode is not None
            else "always raises: cuDNN has no such cell")


ROUTE = dispatch.Route(NAME, rejects=rejects, notes=notes, run=_run, skips=skips,
                       platforms=_platforms, summary=_summary)

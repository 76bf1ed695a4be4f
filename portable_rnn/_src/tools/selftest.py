"""`python -m portable_rnn selftest`: every route this machine takes, against the portable path.

Each case runs twice under `jax.jit`, forward and gradient (`jax.value_and_grad` of a scalar
loss, w.r.t. every input and the weights): once as a user would call it (``implementation=None``,
the automatic route; the LSTM cases marked "cuDNN asked" under ``policy(lstm="cudnn")``, as a
user who opts into cuDNN, since the automatic choice takes the scan path, and those marked
"cudnn_ffi asked" under ``policy(<op>="cudnn_ffi")``, portable_rnn's own cuDNN call, and "pallas
asked" under ``policy(<op>="pallas")``, the Pallas TPU kernel) and once on
the portable reference (``"scan"`` for the recurrent ops, ``"xla"`` for attention). Where the
route is the portable path itself (every case on a CPU), that comparison is of a computation with
itself, so each case is also held to a float64 computation that shares no code with
portable_rnn: JAX's own `jax.experimental.rnn.lstm_ref` and `jax.nn.dot_product_attention`, and
for the other recurrent families a step loop of their published equations in plain `jax.numpy`
(each family's ``reference.py``, registered in the ops' ``float64``), run under
``jax.enable_x64`` on the same values. Every registered family gets its cases from its facts
(`family_cases`); `SPECIFIC_CASES` adds those about one family's own routes and options.
A case fails when any run raises, or when its outputs or
gradients differ from either reference's by more than the tolerance of its dtype. A case about
one route (``requires``) is skipped, with the route's first reason, where that route cannot serve
it (the cudnn_ffi cases without a GPU, or where the route cannot be built; the pallas cases
without a TPU).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import json
import math
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..attention.api import dot_product_attention, explain_attention
from ..core.capabilities import Capabilities, capabilities
from ..core.checks import first_line
from ..core.dispatch import policy
from ..recurrent.cell import hand_written_backward
from ..recurrent.families import FOLDERS
from ..recurrent.ops import OPS as RECURRENT_OPS
from .env import versions

# max |automatic - portable| / max |portable|, per output or gradient array. cuDNN may use TF32
# for float32 matmuls (10-bit mantissa, as JAX allows by default), and 16-bit paths round
# intermediate products differently (float16: 10-bit mantissa, bfloat16: 7-bit).
TOLERANCE = {"float32": 1e-2, "float16": 1e-2, "bfloat16": 5e-2}
ERROR_METRIC = ("max |automatic - portable| / max |portable| per array, largest over the arrays; "
                "likewise against the float64 reference")
# Where the default matmul precision multiplies float32 operands in fewer bits (a TPU: one
# bfloat16 pass, about 3 digits), the float32 cases run at this precision instead.
FLOAT32_PRECISION = {"tpu": "highest"}
REPEATS = 5  # timed fwd+bwd runs per route, interleaved, after compilation and one warmup run

# op: (function, its explain_*, the portable reference implementation)
OPS = {**{name: (op.run, op.explain, "scan") for name, op in RECURRENT_OPS.items()},
       "attention": (dot_product_attention, explain_attention, "xla")}


@dataclasses.dataclass(frozen=True)
class Case:
    """`apply(fn, *inputs)` calls `fn` (the op, implementation bound) as the case does."""

    name: str
    op: str
    dtype: str
    inputs: Callable[[], tuple]
    apply: Callable
    prefer: str | None = None  # the policy's preferred implementation for the routed run
    requires: str | None = None  # the route the case is about: skipped where it cannot serve


# --- the cases --------------------------------------------------------------------------------

ROUTE_CASES = ("cudnn_ffi", "pallas")  # routes whose cases are skipped where they cannot serve

def _recurrent_case(name, op, dtype="float32", *, lengths=None, layers=1, bidir=False,
                    dropout=0.0, vmap=0, prefer=None, proj=0, precision=None, B=8, T=32, I=64,
                    H=64, **options):
    """A case of the registered recurrent op `op`: its initial states from its family's
    (`Family.states`: the output state, of size ``proj or H``, first); `options` are the
    family's call options (``nonlinearity="relu"``)."""
    D = 2 if bidir else 1
    recurrent = RECURRENT_OPS[op]
    kw = {**options, **({"proj_size": proj} if proj else {}),
          **({"precision": precision} if precision is not None else {})}

    def inputs():
        states = len(recurrent.family.states)
        ks = jax.random.split(jax.random.key(0), 2 + states)
        x = jax.random.normal(ks[0], ((vmap,) if vmap else ()) + (B, T, I))
        s0 = [jax.random.normal(k, (layers * D, B, (proj or H) if i == 0 else H))
              for i, k in enumerate(ks[1:-1])]
        w = recurrent.init(ks[-1], I, H, layers, bidir, **({"proj_size": proj} if proj else {}))
        return tuple(a.astype(dtype) for a in (x, *s0, w))

    def apply(fn, x, *rest):
        rng = {"dropout_rng": jax.random.key(1)} if dropout else {}
        one = lambda x: fn(x, *rest, lengths, I, H, layers, dropout, bidir,  # noqa: E731
                           **rng, **kw)
        return jax.vmap(one)(x) if vmap else one(x)

    requires = prefer if prefer in ROUTE_CASES else None
    return Case(name, op, dtype, inputs, apply, prefer, requires)


def family_cases(op: str) -> list[Case]:
    """The cases every registered recurrent family gets, made from its facts: float32 and
    bfloat16 on the automatic route; both layouts of portable_rnn's cuDNN call where cuDNN has
    the cell (`Family.cudnn_mode`); and the Pallas TPU kernel where the cell has a hand-written
    backward step, which the kernel runs (its gate blocks split at multiples of 128 lanes:
    H = 128)."""
    cases = [_recurrent_case(f"{op} float32", op),
             _recurrent_case(f"{op} bfloat16", op, "bfloat16")]
    if RECURRENT_OPS[op].family.cudnn_mode is not None:
        cases += [_recurrent_case(f"{op} bidir L=2, cudnn_ffi asked", op, layers=2, bidir=True,
                                  prefer="cudnn_ffi"),
                  _recurrent_case(f"{op} bfloat16, cudnn_ffi asked", op, "bfloat16",
                                  prefer="cudnn_ffi")]
    if not hand_written_backward(FOLDERS[op].cell):
        return cases
    return cases + [
        _recurrent_case(f"{op} float32, pallas asked", op, prefer="pallas", H=128),
        _recurrent_case(f"{op} bidir L=2 bfloat16, pallas asked", op, "bfloat16", layers=2,
                        bidir=True, prefer="pallas", H=128)]


def _attention_case(name, dtype="bfloat16", *, causal=False, masked=False, vmap_heads=False,
                    B=2, T=128, N=4, K=None, H=64, prefer=None):
    K = K or N
    mask = np.random.default_rng(0).random((B, 1, T, T)) < 0.8 if masked else None

    def inputs():
        ks = jax.random.split(jax.random.key(0), 3)
        return (jax.random.normal(ks[0], (B, T, N, H), dtype),
                *(jax.random.normal(k, (B, T, K, H), dtype) for k in ks[1:]))

    def apply(fn, q, k, v):
        if not vmap_heads:
            return fn(q, k, v, mask=mask, is_causal=causal)
        # per head: (B, T, H) slices, called as one-head (B, T, 1, H) attention
        one = lambda q, k, v: fn(q[:, :, None], k[:, :, None], v[:, :, None],  # noqa: E731
                                 is_causal=causal)[:, :, 0]
        return jax.vmap(one, in_axes=2, out_axes=2)(q, k, v)

    return Case(name, "attention", dtype, inputs, apply, prefer, prefer)


# Cases about one family's own routes and options, beside those every family gets.
_RAGGED = np.array([32, 17, 0, 5, 32, 1, 31, 9])
SPECIFIC_CASES = [
    # the LSTM's cuDNN kernel in jaxlib, asked for (the automatic choice is the scan path)
    _recurrent_case("lstm float32, cuDNN asked", "lstm", prefer="cudnn"),
    _recurrent_case("lstm ragged, a length 0, cuDNN asked", "lstm", lengths=_RAGGED,
                    prefer="cudnn"),
    _recurrent_case("lstm bidir L=2 dropout, cuDNN asked", "lstm", layers=2, bidir=True,
                    dropout=0.25, prefer="cudnn"),
    _recurrent_case("lstm vmap over x, cuDNN asked", "lstm", vmap=3, prefer="cudnn"),
    _recurrent_case("lstm ragged, a length 0, cudnn_ffi asked", "lstm", lengths=_RAGGED,
                    prefer="cudnn_ffi"),
    _recurrent_case("lstm bidir L=2 dropout, cudnn_ffi asked", "lstm", layers=2, bidir=True,
                    dropout=0.25, prefer="cudnn_ffi"),
    _recurrent_case("lstm proj_size=32, cudnn_ffi asked", "lstm", proj=32, prefer="cudnn_ffi"),
    _recurrent_case("lstm vmap over x, cudnn_ffi asked", "lstm", vmap=3, prefer="cudnn_ffi"),
    # exact float32: TF32 rounding flips the sign of pre-activations near 0, and with it the
    # relu's gradient there, differently on each path
    _recurrent_case("rnn relu HIGHEST, cudnn_ffi asked", "simple_rnn", nonlinearity="relu",
                    precision=jax.lax.Precision.HIGHEST, prefer="cudnn_ffi"),
    _recurrent_case("lstm ragged, a length 0, bidir L=2 dropout, pallas asked", "lstm",
                    layers=2, bidir=True, dropout=0.25, lengths=_RAGGED, prefer="pallas",
                    H=128),
    _recurrent_case("lstm vmap over x, pallas asked", "lstm", vmap=3, prefer="pallas", H=128),
]

ATTENTION_CASES = [
    _attention_case("attention bfloat16"),
    _attention_case("attention float16", "float16"),
    _attention_case("attention float32", "float32"),
    _attention_case("attention causal", causal=True),
    _attention_case("attention boolean mask", masked=True),
    _attention_case("attention odd T=S=77", T=77),
    _attention_case("attention GQA N=8 K=2", N=8, K=2),
    _attention_case("attention vmap heads", vmap_heads=True),
    _attention_case("attention causal GQA, splash asked", causal=True, T=256, N=4, K=2, H=128,
                    prefer="splash"),
]


def default_cases() -> list[Case]:
    """Every registered recurrent family's cases (`family_cases`), then the cases about one
    family's own routes and options (`SPECIFIC_CASES`), then attention's."""
    return [c for op in RECURRENT_OPS for c in family_cases(op)] + SPECIFIC_CASES + (
        ATTENTION_CASES)


CASES = default_cases()


# --- running one case -------------------------------------------------------------------------

def _decision(case: Case, inputs):
    """The automatic route's decision: explain_* called with the op's own arguments, where the
    op runs (inside the case's vmap, if any). The reference path supplies the output shapes."""
    fn, explain, reference = OPS[case.op]
    found = []

    def spy(*args, **kwargs):
        found.append(explain(*args, **kwargs))
        return fn(*args, **kwargs, implementation=reference)

    jax.eval_shape(lambda *a: case.apply(spy, *a), *inputs)
    return found[0]


def _step(case: Case, implementation):
    """jit(value_and_grad) of sum(outputs * fixed cotangents); also returns the outputs."""
    fn = functools.partial(OPS[case.op][0], implementation=implementation)

    def loss(inputs, cotangents):
        outs = jax.tree.leaves(case.apply(fn, *inputs))
        terms = [jnp.vdot(o.astype(jnp.float32), c) for o, c in zip(outs, cotangents)]
        return jnp.sum(jnp.stack(terms)), outs

    return jax.jit(jax.value_and_grad(loss, has_aux=True))


# --- the float64 reference --------------------------------------------------------------------

def _attention_float64(q, k, v, mask=None, *, is_causal=False, implementation=None):
    """`jax.nn.dot_product_attention`, dense (every case here has a visible key per query)."""
    del implementation
    with jax.numpy_dtype_promotion("standard"):  # jax.nn relies on implicit promotion
        return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=is_causal,
                                            implementation="xla")


# op: its float64 reference (the recurrent families': each one's ``reference.py``)
FLOAT64 = {**{name: op.float64 for name, op in RECURRENT_OPS.items()},
           "attention": _attention_float64}


def _float64_run(case: Case, inputs, cotangents):
    """((loss, outputs), gradients) of the case's loss on `FLOAT64[case.op]`, in float64, on
    the host's CPU (an accelerator may compile float64 slowly, a TPU hardly at all)."""
    with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):
        f64 = jnp.float64

        def loss(inputs, cotangents):
            outs = jax.tree.leaves(case.apply(FLOAT64[case.op], *inputs))
            terms = [jnp.vdot(o.astype(f64), c) for o, c in zip(outs, cotangents)]
            return jnp.sum(jnp.stack(terms)), outs

        args = jax.tree.map(lambda a: jnp.asarray(np.asarray(a, np.float64)),
                            (inputs, cotangents))
        result = jax.jit(jax.value_and_grad(loss, has_aux=True))(*args)
        return jax.tree.map(np.asarray, result)


def _error(got, want) -> float:
    worst = 0.0
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.size:
            scale = max(float(np.max(np.abs(b))), np.finfo(np.float64).tiny)
            worst = max(worst, float(np.max(np.abs(a - b))) / scale, key=_nan_first)
    return worst


def _nan_first(v):
    return np.inf if np.isnan(v) else v


def _timed(step, args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(step(*args))
    return time.perf_counter() - start


def run_case(case: Case, repeats: int = REPEATS,
             pool: concurrent.futures.Executor | None = None) -> dict:
    """One case: route, both runs, errors, speed ratio. Never raises for the case's own failures.

    With `pool`, the float64 reference runs there (on the host's CPU) while the route compiles
    and runs (XLA compiles without holding Python's lock); the timed runs start once it is done.
    """
    reference = OPS[case.op][2]
    start = time.perf_counter()
    row = dict(case=case.name, op=case.op, dtype=case.dtype, route=None, reference=reference,
               status="failed", error=None, output_error=None, gradient_error=None,
               float64_error=None, tolerance=TOLERANCE[case.dtype], speedup=None,
               route_ms=None, reference_ms=None, seconds=None)
    stage = "inputs"
    try:
        with policy(**({case.op: case.prefer} if case.prefer else {})):
            inputs = case.inputs()
            stage = "explain"
            decision = _decision(case, inputs)
            row["route"] = decision.implementation
            if case.requires and row["route"] != case.requires:
                reasons = decision.rejected.get(case.requires, ())
                row["status"] = "skipped"
                row["error"] = (f"{case.requires} cannot serve it here: "
                                + (reasons[0] if reasons else "not chosen"))
                row["seconds"] = time.perf_counter() - start
                return row
            ref_fn = functools.partial(OPS[case.op][0], implementation=reference)
            shapes = jax.tree.leaves(jax.eval_shape(lambda *a: case.apply(ref_fn, *a), *inputs))
            rng = np.random.default_rng(1)
            cotangents = tuple(jnp.asarray(rng.standard_normal(s.shape), jnp.float32)
                               for s in shapes)
            args = (inputs, cotangents)
            float64 = None if pool is None else pool.submit(
                contextvars.copy_context().run, _float64_run, case, inputs, cotangents)
            steps, results = {}, {}
            for name, impl in (("route", None), ("reference", reference)):
                stage = (f"{row['route']} (automatic)" if impl is None
                         else f"{reference} (reference)")
                if impl is not None and row["route"] == reference:  # the same program
                    steps[name], results[name] = steps["route"], results["route"]
                    continue
                steps[name] = _step(case, impl)
                results[name] = jax.block_until_ready(steps[name](*args))  # compile, run
                jax.block_until_ready(steps[name](*args))  # warmup
            stage = "float64 reference"
            results["float64"] = (_float64_run(case, inputs, cotangents) if float64 is None
                                  else float64.result())
        stage = "timing"
        times = {name: [] for name in steps}
        for _ in range(repeats):
            for name, step in steps.items():
                times[name].append(_timed(step, args))
    except Exception as e:  # noqa: BLE001 - a failing route is what the self-test reports
        row["error"] = f"{stage}: {first_line(e)}"
        row["seconds"] = time.perf_counter() - start
        return row
    ((_, outs), grads), ((_, ref_outs), ref_grads) = results["route"], results["reference"]
    row["output_error"] = _error(outs, ref_outs)
    row["gradient_error"] = _error(grads, ref_grads)
    (_, f64_outs), f64_grads = results["float64"]
    row["float64_error"] = max(_error(outs, f64_outs), _error(grads, f64_grads), key=_nan_first)
    row["route_ms"], row["reference_ms"] = (1e3 * statistics.median(times[n]) for n in steps)
    row["speedup"] = row["reference_ms"] / row["route_ms"]
    row["seconds"] = time.perf_counter() - start
    worst = max(row["output_error"], row["gradient_error"], row["float64_error"], key=_nan_first)
    if worst <= row["tolerance"]:
        row["status"] = "ok"
    else:
        row["error"] = (f"error {worst:.3g} above the {case.dtype} tolerance "
                        f"{row['tolerance']:g}")
    return row


def run(capabilities: Capabilities | None = None, cases: list[Case] | None = None, *,
        repeats: int = REPEATS, on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Runs every case (default `CASES`); returns one row (a dict) per case.

    Args:
      capabilities: decide every route for these capabilities instead of the probed machine's
        (through `policy(capabilities=...)`), e.g. to pretend to be a GPU in tests.
      cases: the cases to run.
      repeats: timed runs per route.
      on_row: called with each row as soon as it is done (to print progress).
    """
    rows = []
    precision = FLOAT32_PRECISION.get(jax.default_backend())
    with policy(capabilities=capabilities), concurrent.futures.ThreadPoolExecutor(1) as pool:
        for case in CASES if cases is None else cases:
            with (jax.default_matmul_precision(precision) if precision and case.dtype == "float32"
                  else contextlib.nullcontext()):
                rows.append(run_case(case, repeats, pool))
            if on_row is not None:
                on_row(rows[-1])
    return rows


# --- the table --------------------------------------------------------------------------------

COLUMNS = (("case", 41), ("dtype", 9), ("route", 9), ("vs", 5), ("status", 7), ("out err", 9),
           ("grad err", 9), ("f64 err", 9), ("tol", 6), ("speedup", 8))


def header() -> str:
    return " ".join(f"{name:{width}s}" for name, width in COLUMNS).rstrip()


def format_row(row: dict) -> str:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    speedup = "-" if row["speedup"] is None else f"{row['speedup']:.2f}x"
    cells = (row["case"], row["dtype"], row["route"] or "?", row["reference"], row["status"],
             num(row["output_error"], ".2e"), num(row["gradient_error"], ".2e"),
             num(row["float64_error"], ".2e"), format(row["tolerance"], "g"), speedup)
    line = " ".join(f"{c:{w}s}" for c, (_, w) in zip(cells, COLUMNS)).rstrip()
    if row["error"]:
        error = row["error"] if len(row["error"]) <= 160 else row["error"][:157] + "..."
        line += f"\n    {error}"
    return line


def legend(repeats: int = REPEATS) -> list[str]:
    tolerances = ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items())
    precision = FLOAT32_PRECISION.get(jax.default_backend())
    return [f"errors: {ERROR_METRIC}; tolerances: {tolerances} (float32 covers TF32 on cuDNN)",
            *([f"float32 cases at jax_default_matmul_precision={precision!r}: this platform's "
               "default multiplies float32 operands in fewer bits"] if precision else []),
            "f64 err: against JAX's own lstm_ref and jax.nn.dot_product_attention, and a step "
            "loop of PyTorch's GRU/RNN equations, in float64 (no code of portable_rnn)",
            f"speedup: portable time / route time, median of {repeats} interleaved jit "
            "forward+backward runs"]


# --- the command ------------------------------------------------------------------------------

def command(json_path=None, repeats: int = REPEATS) -> int:
    """Runs the self-test, prints its table (and writes JSON); returns the exit code."""
    caps = capabilities()
    # Not dataclasses.asdict: it deep-copies the probe device (a jax Device), which cannot be.
    fields = {f.name: getattr(caps, f.name) for f in dataclasses.fields(caps)}
    fields["probe_device"] = None if caps.probe_device is None else str(caps.probe_device)
    env = dict(platform=jax.default_backend(), device_kind=jax.devices()[0].device_kind,
               jax=jax.__version__, versions=versions(),
               devices=[str(d) for d in jax.devices()], capabilities=fields,
               tolerances=TOLERANCE, error_metric=ERROR_METRIC, repeats=repeats,
               float32_precision=FLOAT32_PRECISION.get(jax.default_backend()))
    print(f"{'; '.join(env['versions'])}\ndevices: {jax.devices()}\ncapabilities: {caps}")
    print("\n".join(legend(repeats)) + "\n")
    print(header(), flush=True)
    start = time.perf_counter()
    rows = run(repeats=repeats, on_row=lambda row: print(format_row(row), flush=True))
    env["wall_s"] = round(time.perf_counter() - start, 1)
    failed = [r["case"] for r in rows if r["status"] == "failed"]
    skipped = [r["case"] for r in rows if r["status"] == "skipped"]
    ran = len(rows) - len(skipped)
    print(f"\n{ran - len(failed)}/{ran} ok in {env['wall_s']} s"
          + (f"; {len(skipped)} skipped (their route cannot serve them here)" if skipped else "")
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    if json_path:  # strict JSON: a NaN or infinite error is written as a string
        rows = [{k: str(v) if isinstance(v, float) and not math.isfinite(v) else v
                 for k, v in row.items()} for row in rows]
        with open(json_path, "w") as f:
            json.dump(dict(environment=env, rows=rows, ok=not failed), f, indent=1,
                      allow_nan=False)
    return 1 if failed else 0

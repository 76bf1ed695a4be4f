"""`python -m portable_rnn selftest`: every route this machine takes, against the portable path.

Each case runs twice under `jax.jit`, forward and gradient (`jax.value_and_grad` of a scalar
loss, w.r.t. every input and the weights): once as a user would call it (``implementation=None``,
the automatic route; the LSTM cases marked "cuDNN asked" under ``policy(lstm="cudnn")``, as a
user who opts into cuDNN, since the automatic choice takes the scan path) and once on the
portable reference (``"scan"`` for the LSTM, ``"xla"`` for attention). A case fails when either
run raises, or when its outputs or gradients differ from the reference's by more than the
tolerance of its dtype.
"""

from __future__ import annotations

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
from ..recurrent.lstm.api import explain_lstm, lstm
from ..recurrent.lstm.weights import init_lstm_weight
from .env import versions

# max |automatic - portable| / max |portable|, per output or gradient array. cuDNN may use TF32
# for float32 matmuls (10-bit mantissa, as JAX allows by default), and 16-bit paths round
# intermediate products differently (float16: 10-bit mantissa, bfloat16: 7-bit).
TOLERANCE = {"float32": 1e-2, "float16": 1e-2, "bfloat16": 5e-2}
ERROR_METRIC = "max |automatic - portable| / max |portable| per array, largest over the arrays"
REPEATS = 5  # timed fwd+bwd runs per route, interleaved, after compilation and one warmup run

# op: (function, its explain_*, the portable reference implementation)
OPS = {"lstm": (lstm, explain_lstm, "scan"),
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


# --- the cases --------------------------------------------------------------------------------

def _lstm_case(name, dtype="float32", *, lengths=None, layers=1, bidir=False, dropout=0.0,
               vmap=0, prefer=None, B=8, T=32, I=64, H=64):
    D = 2 if bidir else 1

    def inputs():
        ks = jax.random.split(jax.random.key(0), 4)
        x = jax.random.normal(ks[0], ((vmap,) if vmap else ()) + (B, T, I))
        h0, c0 = (jax.random.normal(k, (layers * D, B, H)) for k in ks[1:3])
        w = init_lstm_weight(ks[3], I, H, layers, bidir)
        return tuple(a.astype(dtype) for a in (x, h0, c0, w))

    def apply(fn, x, h0, c0, w):
        rng = jax.random.key(1) if dropout else None
        one = lambda x: fn(x, h0, c0, w, lengths, I, H, layers, dropout, bidir,  # noqa: E731
                           dropout_rng=rng)
        return jax.vmap(one)(x) if vmap else one(x)

    return Case(name, "lstm", dtype, inputs, apply, prefer)


def _attention_case(name, dtype="bfloat16", *, causal=False, masked=False, vmap_heads=False,
                    B=2, T=128, N=4, K=None, H=64):
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

    return Case(name, "attention", dtype, inputs, apply)


CASES = [
    _lstm_case("lstm float32"),
    _lstm_case("lstm bfloat16", "bfloat16"),
    _lstm_case("lstm float32, cuDNN asked", prefer="cudnn"),
    _lstm_case("lstm ragged, a length 0, cuDNN asked",
               lengths=np.array([32, 17, 0, 5, 32, 1, 31, 9]), prefer="cudnn"),
    _lstm_case("lstm bidir L=2 dropout, cuDNN asked", layers=2, bidir=True, dropout=0.25,
               prefer="cudnn"),
    _lstm_case("lstm vmap over x, cuDNN asked", vmap=3, prefer="cudnn"),
    _attention_case("attention bfloat16"),
    _attention_case("attention float16", "float16"),
    _attention_case("attention float32", "float32"),
    _attention_case("attention causal", causal=True),
    _attention_case("attention boolean mask", masked=True),
    _attention_case("attention odd T=S=77", T=77),
    _attention_case("attention GQA N=8 K=2", N=8, K=2),
    _attention_case("attention vmap heads", vmap_heads=True),
]


# --- running one case -------------------------------------------------------------------------

def _route(case: Case, inputs) -> str:
    """The automatic route: explain_* called with the op's own arguments, where the op runs
    (inside the case's vmap, if any). The reference path supplies the output shapes."""
    fn, explain, reference = OPS[case.op]
    found = []

    def spy(*args, **kwargs):
        found.append(explain(*args, **kwargs))
        return fn(*args, **kwargs, implementation=reference)

    jax.eval_shape(lambda *a: case.apply(spy, *a), *inputs)
    return found[0].implementation


def _step(case: Case, implementation):
    """jit(value_and_grad) of sum(outputs * fixed cotangents); also returns the outputs."""
    fn = functools.partial(OPS[case.op][0], implementation=implementation)

    def loss(inputs, cotangents):
        outs = jax.tree.leaves(case.apply(fn, *inputs))
        terms = [jnp.vdot(o.astype(jnp.float32), c) for o, c in zip(outs, cotangents)]
        return jnp.sum(jnp.stack(terms)), outs

    return jax.jit(jax.value_and_grad(loss, has_aux=True))


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


def run_case(case: Case, repeats: int = REPEATS) -> dict:
    """One case: route, both runs, errors, speed ratio. Never raises for the case's own failures."""
    reference = OPS[case.op][2]
    start = time.perf_counter()
    row = dict(case=case.name, op=case.op, dtype=case.dtype, route=None, reference=reference,
               status="failed", error=None, output_error=None, gradient_error=None,
               tolerance=TOLERANCE[case.dtype], speedup=None, route_ms=None, reference_ms=None,
               seconds=None)
    stage = "inputs"
    try:
        with policy(lstm=case.prefer):
            inputs = case.inputs()
            stage = "explain"
            row["route"] = _route(case, inputs)
            ref_fn = functools.partial(OPS[case.op][0], implementation=reference)
            shapes = jax.tree.leaves(jax.eval_shape(lambda *a: case.apply(ref_fn, *a), *inputs))
            rng = np.random.default_rng(1)
            cotangents = tuple(jnp.asarray(rng.standard_normal(s.shape), jnp.float32)
                               for s in shapes)
            args = (inputs, cotangents)
            steps, results = {}, {}
            for name, impl in (("route", None), ("reference", reference)):
                stage = (f"{row['route']} (automatic)" if impl is None
                         else f"{reference} (reference)")
                steps[name] = _step(case, impl)
                results[name] = jax.block_until_ready(steps[name](*args))  # compile, run
                jax.block_until_ready(steps[name](*args))  # warmup
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
    row["route_ms"], row["reference_ms"] = (1e3 * statistics.median(times[n]) for n in steps)
    row["speedup"] = row["reference_ms"] / row["route_ms"]
    row["seconds"] = time.perf_counter() - start
    worst = max(row["output_error"], row["gradient_error"], key=_nan_first)
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
    with policy(capabilities=capabilities):
        for case in CASES if cases is None else cases:
            rows.append(run_case(case, repeats))
            if on_row is not None:
                on_row(rows[-1])
    return rows


# --- the table --------------------------------------------------------------------------------

COLUMNS = (("case", 36), ("dtype", 9), ("route", 8), ("vs", 5), ("status", 7), ("out err", 9),
           ("grad err", 9), ("tol", 6), ("speedup", 8))


def header() -> str:
    return " ".join(f"{name:{width}s}" for name, width in COLUMNS).rstrip()


def format_row(row: dict) -> str:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    speedup = "-" if row["speedup"] is None else f"{row['speedup']:.2f}x"
    cells = (row["case"], row["dtype"], row["route"] or "?", row["reference"], row["status"],
             num(row["output_error"], ".2e"), num(row["gradient_error"], ".2e"),
             format(row["tolerance"], "g"), speedup)
    line = " ".join(f"{c:{w}s}" for c, (_, w) in zip(cells, COLUMNS)).rstrip()
    if row["error"]:
        error = row["error"] if len(row["error"]) <= 160 else row["error"][:157] + "..."
        line += f"\n    {error}"
    return line


def legend(repeats: int = REPEATS) -> list[str]:
    tolerances = ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items())
    return [f"errors: {ERROR_METRIC}; tolerances: {tolerances} (float32 covers TF32 on cuDNN)",
            f"speedup: portable time / route time, median of {repeats} interleaved jit "
            "forward+backward runs"]


# --- the command ------------------------------------------------------------------------------

def command(json_path=None, repeats: int = REPEATS) -> int:
    """Runs the self-test, prints its table (and writes JSON); returns the exit code."""
    caps = capabilities()
    # Not dataclasses.asdict: it deep-copies the probe device (a jax Device), which cannot be.
    fields = {f.name: getattr(caps, f.name) for f in dataclasses.fields(caps)}
    fields["probe_device"] = None if caps.probe_device is None else str(caps.probe_device)
    env = dict(versions=versions(), devices=[str(d) for d in jax.devices()],
               capabilities=fields, tolerances=TOLERANCE, error_metric=ERROR_METRIC,
               repeats=repeats)
    print(f"{'; '.join(env['versions'])}\ndevices: {jax.devices()}\ncapabilities: {caps}")
    print("\n".join(legend(repeats)) + "\n")
    print(header(), flush=True)
    start = time.perf_counter()
    rows = run(repeats=repeats, on_row=lambda row: print(format_row(row), flush=True))
    env["wall_s"] = round(time.perf_counter() - start, 1)
    failed = [r["case"] for r in rows if r["status"] != "ok"]
    print(f"\n{len(rows) - len(failed)}/{len(rows)} ok in {env['wall_s']} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    if json_path:  # strict JSON: a NaN or infinite error is written as a string
        rows = [{k: str(v) if isinstance(v, float) and not math.isfinite(v) else v
                 for k, v in row.items()} for row in rows]
        with open(json_path, "w") as f:
            json.dump(dict(environment=env, rows=rows, ok=not failed), f, indent=1,
                      allow_nan=False)
    return 1 if failed else 0

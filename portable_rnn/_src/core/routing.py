"""The routing model: every route's predicted forward and forward+backward time for a call on a
machine, and the automatic choice it makes.

One model serves every op and platform. An op group (``"recurrent"``, ``"attention"``)
registers a *basis* (`register_group`): the call's sizes as a plain dict (``shape``), and per
route a handful of cost terms that grow with the work a route does (call overhead, serial steps,
MXU tiles, bytes streamed, FLOPs, ...). A route's time is a non-negative combination of its
terms, one coefficient per term, route and pass (forward; forward+backward), fitted by
non-negative least squares on relative error (`fit`) to a measured grid: one JSON per device
kind in ``grids/`` (``benchmarks/routing_grid.py`` measures it; ``benchmarks/routing_fit.py``
checks the model on the grid's held-out shapes and installs it). Only the grid's ``fit`` rows
are fitted, so the held-out figures describe the model that ships.

The automatic choice (`choose`) takes, of the routes that serve a call, the one with the least
predicted forward+backward time. A route the grid has no times for is not ranked: it is taken
where it is the first route that serves the call (the model has nothing to say against it), and
passed over otherwise. A device kind with no grid gets its group's stated rule (`Group.rule`),
never another device's figures.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .capabilities import Capabilities

GRIDS = pathlib.Path(__file__).with_name("grids")
PASSES = ("fwd", "fwdbwd")
CRITERION = "fwdbwd"  # what the choice minimises: training runs both passes
REACH = 4.0  # the model decides calls up to this many times its largest fitted shape's size
SHORTEST = 1e-6  # ms: a prediction is never below it (an empty call's terms may all be 0)


def variant_name(route: str, **params) -> str:
    """A route's variant as the grid names it: ``splash@block=512``."""
    return route + "".join(f"@{k}={v}" for k, v in sorted(params.items()))


def parse_variant(name: str) -> tuple[str, dict[str, int]]:
    """``splash@block=512`` -> ``("splash", {"block": 512})``."""
    route, *parts = name.split("@")
    return route, {k: int(v) for k, v in (p.split("=") for p in parts)}


@dataclasses.dataclass(frozen=True)
class Group:
    """The routes of several ops that one model ranks (every recurrent family; attention).

    Attributes:
      name: ``"recurrent"`` or ``"attention"``.
      terms: the cost terms' names, in the order `basis` returns them.
      basis: ``(shape, route, params) -> terms``: a route variant's cost terms at a shape.
      shape: ``(call) -> dict``: an op's checked call as the sizes the grid records.
      variants: ``(route, shape) -> [params, ...]``: the variants of a route that serve a shape
        (``[{}]`` for a route without variants).
      rule: ``(shape, serving) -> (route, why)``: the stated choice for a device kind that has no
        grid, among the routes serving the call (in order of preference).
      size: ``(shape) -> size``: how large a call is (its work), to tell whether a grid covers
        it: the model is trusted up to `REACH` times the largest shape it was fitted on, and
        the stated rule decides beyond.
    """

    name: str
    terms: tuple[str, ...]
    basis: Callable[[Mapping[str, Any], str, Mapping[str, int]], Sequence[float]]
    shape: Callable[[Any], dict]
    variants: Callable[[str, Mapping[str, Any]], list[dict]]
    rule: Callable[[Mapping[str, Any], Sequence[str]], tuple[str, str]]
    size: Callable[[Mapping[str, Any]], float]


_GROUPS: dict[str, Group] = {}
_OPS: dict[str, str] = {}  # op -> group


def register_group(group: Group, *ops: str) -> None:
    """Registers `group` and the ops whose routes it ranks."""
    _GROUPS[group.name] = group
    for op in ops:
        _OPS[op] = group.name


def group_of(op: str) -> Group | None:
    name = _OPS.get(op)
    return None if name is None else _GROUPS[name]


# --- grids and fits ---------------------------------------------------------------------------

def slug(device_kind: str) -> str:
    """A device kind as a grid's file name: ``"TPU v5 lite"`` -> ``"tpu_v5_lite"``."""
    return re.sub(r"[^a-z0-9]+", "_", device_kind.lower()).strip("_")


def device_key(caps: Capabilities) -> str:
    """The grid a machine reads: its device kind; every CPU shares the ``cpu`` grid."""
    if caps.platform == "cpu" or not caps.device_kind:
        return caps.platform
    return slug(caps.device_kind)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||a x - b|| over x >= 0, its columns scaled to unit norm for the solver."""
    from scipy.optimize import nnls as solve

    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    x, _ = solve(a / norms, b, maxiter=50 * a.shape[1])
    return x / norms


@dataclasses.dataclass(frozen=True)
class Model:
    """One group's fitted model on one device kind.

    Attributes:
      device_kind: the device the grid was measured on.
      group: the op group.
      coefficients: ``(variant name, pass) -> coefficients`` of the group's terms (ms each).
      fitted: how many shapes were fitted.
      source: where the grid came from (the benchmark run).
      largest: the largest fitted shape's size (`Group.size`).
      dtypes: per variant, the dtypes of the shapes it was fitted on (``Group.shape``'s
        ``"dtype"``): a caller may trust the ranking of variants only at those
        (`measured_dtype`).
      families: the recurrent families of the fitted shapes (empty for a group without
        families): a fused route's ranking holds for those only (`unmeasured_family`).
      heads: whether a fitted shape has heads (a recurrent ``NH`` > 1; absent is 1): a fused
        route's ranking holds for calls with heads only then (`unmeasured_heads`).
    """

    device_kind: str
    group: str
    coefficients: Mapping[tuple[str, str], np.ndarray]
    fitted: int
    source: str
    largest: float = math.inf
    dtypes: Mapping[str, frozenset] = dataclasses.field(default_factory=dict)
    families: frozenset = frozenset()
    heads: bool = False

    def routes(self) -> set[str]:
        return {parse_variant(v)[0] for v, _ in self.coefficients}

    def predict(self, shape: Mapping[str, Any], variant: str) -> dict[str, float] | None:
        """The variant's predicted ms per pass at `shape`, or None where it was not fitted."""
        group = _GROUPS[self.group]
        route, params = parse_variant(variant)
        if (variant, CRITERION) not in self.coefficients:
            return None
        terms = np.asarray(group.basis(shape, route, params), np.float64)
        return {p: max(float(terms @ self.coefficients[(variant, p)]), SHORTEST) for p in PASSES
                if (variant, p) in self.coefficients}

    def pick(self, shape: Mapping[str, Any], variants: Iterable[str],
             criterion: str = CRITERION) -> str | None:
        """The variant of `variants` with the least predicted `criterion` time at `shape`;
        None where the model fitted none of them."""
        predicted = {}
        for v in variants:
            t = self.predict(shape, v)
            if t is not None:
                predicted[v] = t[criterion]
        return min(predicted, key=predicted.get) if predicted else None

    def best_variant(self, shape: Mapping[str, Any], route: str
                     ) -> tuple[str, dict[str, float]] | None:
        """The route's variant (of those that serve `shape`) predicted fastest, and its
        prediction; None where none was fitted."""
        group = _GROUPS[self.group]
        found = [(v, self.predict(shape, v)) for v in
                 (variant_name(route, **p) for p in group.variants(route, shape))]
        found = [(v, t) for v, t in found if t is not None]
        return min(found, key=lambda f: f[1][CRITERION]) if found else None

    def describe(self) -> str:
        return f"model fitted on {self.device_kind}, {self.fitted} shapes"


def rows_of(rows: Sequence[Mapping], group: str, split: str | None = "fit") -> list[Mapping]:
    """The measured rows of `group` (of one split, or all with None)."""
    return [r for r in rows if r.get("op") == group and r.get("ms")
            and (split is None or r.get("split") == split)]


def fit(rows: Sequence[Mapping], group: Group, device_kind: str, source: str = "") -> Model:
    """Fits every variant's coefficients, per pass, on `rows` (a grid's rows of `group`):
    non-negative least squares on the relative error of each measured time."""
    coefficients = {}
    variants = sorted({v for r in rows for v in r["ms"]})
    for variant in variants:
        route, params = parse_variant(variant)
        for p in PASSES:
            have = [r for r in rows if p in r["ms"].get(variant, {})]
            if len(have) < 2:
                continue
            a = np.array([group.basis(r, route, params) for r in have], np.float64)
            t = np.array([r["ms"][variant][p] for r in have], np.float64)
            coefficients[(variant, p)] = nnls(a / t[:, None], np.ones(len(t)))
    dtypes = {v: frozenset(r.get("dtype") for r in rows if v in r["ms"]) for v in variants}
    return Model(device_kind, group.name, coefficients, len(rows), source,
                 max(group.size(r) for r in rows), dtypes,
                 frozenset(r["family"] for r in rows if "family" in r),
                 any(r.get("NH", 1) > 1 for r in rows))


@functools.cache
def grid(key: str) -> dict | None:
    """The committed grid of device key `key` (`device_key`), or None."""
    path = GRIDS / f"{key}.json"
    if not path.exists():
        return None
    with open(path) as f:
        return json.load(f)


@functools.cache
def model(key: str, group: str) -> Model | None:
    """`group`'s model for device key `key`, fitted from its grid's ``fit`` rows, or None
    without a grid (or without rows of the group)."""
    found = grid(key)
    if found is None or group not in _GROUPS:
        return None
    rows = rows_of(found["rows"], group)
    if not rows:
        return None
    return fit(rows, _GROUPS[group], found["device_kind"], found.get("source", ""))


# --- the choice -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Choice:
    """The automatic choice among the routes that serve a call.

    Attributes:
      route: the route taken.
      passed_over: the serving routes not taken, each with why.
      note: how the choice was made, for the decision's notes.
      predictions: per route ranked, its best variant and predicted ms per pass.
    """

    route: str
    passed_over: Mapping[str, tuple[str, ...]]
    note: str
    predictions: Mapping[str, tuple[str, Mapping[str, float]]]


def _reaches(m: Model | None, group: Group, shape: Mapping[str, Any]) -> bool:
    """Whether model `m` decides a call of `shape`: it exists, and the call is at most `REACH`
    times the largest shape it was fitted on."""
    return m is not None and group.size(shape) <= REACH * m.largest


def _ms(t: float) -> str:
    return f"{t:.3g} ms"


def choose(op: str, call, caps: Capabilities, serving: Sequence[str]) -> Choice | None:
    """The route the automatic choice takes among `serving` (the op's routes that serve `call`
    on `caps`, in order of preference), or None where there is no choice to make (one route
    serves the call) or `op` has no routing group."""
    group = group_of(op)
    if group is None or len(serving) < 2:
        return None
    shape = group.shape(call)
    m = model(device_key(caps), group.name)
    where = caps.device_kind or caps.platform
    if not _reaches(m, group, shape):
        route, why = group.rule(shape, serving)
        if m is None:
            reason = f"no measured grid for {where}"
        else:
            reason = (f"the call is {group.size(shape) / m.largest:.3g}x the largest shape the "
                      f"routing model ({m.describe()}) was fitted on, beyond its reach")
        return Choice(route, {n: (f"{why} (the stated rule: {reason})",) for n in serving
                              if n != route}, f"{reason}: stated rule: {why}", {})
    predictions = {}
    for name in serving:
        found = m.best_variant(shape, name)
        if found is not None:
            predictions[name] = found
    first = serving[0]
    if first not in predictions:
        note = (f"routing model: {first} is not in the grid of {m.device_kind}; the first "
                "route that serves the call is taken")
        passed = {n: (f"{first} serves the call first and the routing model ({m.describe()}) "
                      "cannot rank it",) for n in serving if n != first}
        return Choice(first, passed, note, predictions)
    best = min(predictions, key=lambda n: predictions[n][1][CRITERION])
    t_best = predictions[best][1][CRITERION]
    passed = {}
    for name in serving:
        if name == best:
            continue
        if name not in predictions:
            passed[name] = (f"not in the grid of {m.device_kind}: the routing model cannot rank "
                            "it, and another route serves the call first",)
            continue
        t = predictions[name][1][CRITERION]
        passed[name] = (f"predicted {t / t_best:.2f}x {best}'s time forward+backward "
                        f"({_ms(t)} against {_ms(t_best)}; {m.describe()})",)
    others = [n for n in predictions if n != best]
    versus = ", ".join(f"{t_best / predictions[n][1][CRITERION]:.2f}x {n}'s time"
                       for n in others)
    variant = predictions[best][0]
    forward = predictions[best][1].get("fwd")
    note = (f"routing model ({m.describe()}): {variant} predicted {_ms(t_best)} "
            f"forward+backward" + (f", {_ms(forward)} forward" if forward is not None else "")
            + (f"; {versus}" if versus else ""))
    return Choice(best, passed, note, predictions)


def best_variant(op: str, call, caps: Capabilities, route: str
                 ) -> tuple[dict[str, int], dict[str, float], Model] | None:
    """The variant of `route` (its parameters) that the model of `caps`'s device predicts
    fastest for `call`, its prediction and the model; None without a model that fitted it or
    beyond its reach (`REACH`)."""
    group = group_of(op)
    if group is None:
        return None
    m = model(device_key(caps), group.name)
    shape = group.shape(call)
    if not _reaches(m, group, shape):
        return None
    found = m.best_variant(shape, route)
    if found is None:
        return None
    return parse_variant(found[0])[1], found[1], m


def unmeasured_family(family: str, caps: Capabilities) -> Model | None:
    """The routing model of `caps`'s device where it was fitted on other families' shapes than
    `family`'s (a recurrent op's name), else None."""
    group = group_of(family)
    m = None if group is None else model(device_key(caps), group.name)
    return m if m is not None and m.families and family not in m.families else None


def unmeasured_heads(op: str, caps: Capabilities) -> tuple[bool, Model | None]:
    """Whether the routing model of `caps`'s device (an op's group) was fitted on no shape
    with heads (or there is none), and the model (None without one)."""
    group = group_of(op)
    m = None if group is None else model(device_key(caps), group.name)
    return m is None or not m.heads, m


def measured_dtype(m: Model, variants: Sequence[str], dtype) -> bool:
    """Whether every one of `variants` was fitted on shapes of `dtype` in model `m`."""
    return all(str(np.dtype(dtype)) in m.dtypes.get(v, ()) for v in variants)


# --- the held-out check -----------------------------------------------------------------------

def evaluate(rows: Sequence[Mapping], m: Model, split: str | None = "held_out",
             criterion: str = CRITERION) -> list[dict]:
    """Per measured shape of `split` (every shape with None): the route (variant) the model picks
    among those measured there, its measured time over the best measured time, and the best."""
    out = []
    for r in rows_of(rows, m.group, split):
        measured = {v: t[criterion] for v, t in r["ms"].items() if criterion in t}
        if len(measured) < 2:
            continue
        pick = m.pick(r, measured, criterion)
        if pick is None:
            continue
        best = min(measured, key=measured.get)
        out.append(dict(shape={k: r[k] for k in r if k not in ("ms", "errors")}, pick=pick,
                        best=best, ratio=measured[pick] / measured[best]))
    return out


def summary(ratios: Sequence[float]) -> dict[str, float]:
    """min, median, 90th percentile and max of auto/best ratios, and the share within 1.05x."""
    if not ratios:
        return {"n": 0}
    a = np.sort(np.asarray(ratios, np.float64))
    return {"n": len(a), "min": float(a[0]), "median": float(np.median(a)),
            "p90": float(np.quantile(a, 0.9)), "max": float(a[-1]),
            "within_1.05": float(np.mean(a <= 1.05))}


def log_error(rows: Sequence[Mapping], m: Model, split: str | None = "held_out") -> float:
    """The median absolute log error of the model's predictions on `split` (every shape with
    None; every variant and pass measured)."""
    errors = []
    for r in rows_of(rows, m.group, split):
        for v, times in r["ms"].items():
            t = m.predict(r, v)
            if t is None:
                continue
            errors += [abs(math.log(t[p] / times[p])) for p in t if p in times and t[p] > 0]
    return float(np.median(errors)) if errors else float("nan")

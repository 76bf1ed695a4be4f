"""Routing: which route (implementation) serves a call, decided at trace time, and why.

Each op registers its routes here, in order of preference (`register`): one `Route` per
implementation, with the predicate returning the reasons it cannot serve a call (an empty tuple
when it can), its notes, the function that runs it and the platforms JAX can lower it for. The
same predicates produce the decision that runs and the `Decision` that `explain_*` returns, so
the explanation cannot drift from the behaviour. The dispatcher imports no op.

Static facts decide whether cuDNN *could* serve a call; which platform runs the program is not
known while tracing (a default device, inputs committed to a CPU, `jax.export` for several
platforms). A call routed automatically to a route that only some platforms can lower (cuDNN)
therefore carries one branch per platform (`jax.lax.platform_dependent`): that route where JAX
can lower it, a portable one elsewhere. Each lowering keeps only its own branch, so a program
for one platform holds one path.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import numbers
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from jax import lax

from . import checks, routing
from .capabilities import Capabilities
from .capabilities import capabilities as probe_capabilities

ON_FALLBACK = ("silent", "warn", "error")
# The share of a device's memory that a recurrent gradient's stash of every step may take before
# the automatic choice checkpoints segments (`policy(recurrent_memory_fraction=...)`).
MEMORY_FRACTION = 0.25


class FallbackWarning(UserWarning):
    """The preferred implementation could not serve a call; another one did."""


class FallbackError(RuntimeError):
    """Raised under ``policy(on_fallback="error")`` when the preferred path is rejected."""


@dataclasses.dataclass(frozen=True)
class Route:
    """One implementation of an op.

    Attributes:
      name: e.g. ``"scan"``, ``"cudnn"``, ``"chunked"``.
      rejects: ``(call, caps) -> reasons``: why the route cannot serve a call on a machine (an
        empty tuple when it can). ``call`` is the op's checked facts about the call.
      notes: ``(call, caps) -> notes``: how the route serves a call it accepted.
      run: ``(decision, call, *arrays) -> outputs``: runs the route, at trace time. None for a
        route that rejects every call (it names why, e.g. a cuDNN kernel JAX does not expose).
      skips: ``(call, caps) -> reasons`` why the automatic choice passes over the route although
        it could serve the call (a heuristic, ignored when the route is asked for), or None.
      claims: ``(call, caps) -> bool``: whether a policy in effect asks for the route for this
        call (``policy(lstm_low_precision="upcast")`` sends 16-bit LSTM calls to cuDNN): the
        automatic choice then takes it where it serves the call, as a preferred route, without
        ranking; None for a route no policy claims calls for.
      platforms: ``() -> platforms`` for which JAX can lower the route here (``("cuda",)`` for a
        cuDNN route on a CUDA jaxlib, ``()`` without the plugin; ``("tpu",)`` for a Pallas TPU
        kernel), or None when every platform can: an automatic choice of a route with
        `platforms` carries a portable branch for the others (`per_platform`).
      fn: the route's computation on the op's canonical operands (what `run` calls), for another
        route to reuse (the cuDNN attention route computes its gradients with a portable
        route's), or None.
      kernel: what a route with `platforms` calls, as its per-platform reasons name it
        (``"cuDNN"``, ``"Pallas TPU kernel"``).
      summary: ``(subject) -> text``: what the route is, for the op's docstring (`subject`: the
        family of a recurrent op), or None.
    """

    name: str
    rejects: Callable[[Any, Capabilities], tuple[str, ...]]
    notes: Callable[[Any, Capabilities], tuple[str, ...]]
    run: Callable[..., Any] | None
    skips: Callable[[Any, Capabilities], tuple[str, ...]] | None = None
    claims: Callable[[Any, Capabilities], bool] | None = None
    platforms: Callable[[], tuple[str, ...]] | None = None
    fn: Callable[..., Any] | None = None
    kernel: str = "cuDNN"
    summary: Callable[[Any], str] | None = None


_ROUTES: dict[str, dict[str, Route]] = {}


def register(op: str, *routes: Route) -> None:
    """Registers `op`'s routes in order of preference; the last one must serve every call."""
    _ROUTES[op] = {r.name: r for r in routes}


def routes(op: str) -> Mapping[str, Route]:
    """`op`'s routes by name, in order of preference."""
    return _ROUTES[op]


def implementations(op: str) -> tuple[str, ...]:
    """The names `op`'s ``implementation=`` (and its `policy` preference) accepts: its routes,
    in order of preference, the order the docs list them in."""
    return tuple(_ROUTES[op])


@dataclasses.dataclass(frozen=True)
class Decision:
    """Which implementation serves a call, and why the others do not.

    Attributes:
      op: ``"lstm"``, ``"gru"``, ``"simple_rnn"`` or ``"attention"``.
      implementation: the path that runs, e.g. ``"scan"`` or ``"cudnn"``.
      rejected: for every path tried before it, the reasons it cannot serve the call.
      notes: how the chosen path serves the call (casts, upcasts, per-layer calls, ...).
      requested: the implementation asked for (argument or policy), None when automatic.
      capabilities: the machine facts the decision was made for.
      platforms: when the program carries one path per lowering platform (an automatic route to
        cuDNN), the decision for each: keys ``"cuda"``, ``"cpu"`` and ``"default"`` (every other
        platform). Empty when one path serves every platform.
      predicted: for an automatic choice the routing model ranked (`routing.choose`), each
        ranked route's predicted milliseconds per pass (``"fwd"``, ``"fwdbwd"``); the notes say
        which model and grid. Empty otherwise.
      passed_over: the routes after the chosen one (in order of preference) that could serve
        the call too, each with why the automatic choice did not take it.
    """

    op: str
    implementation: str
    rejected: Mapping[str, tuple[str, ...]]
    notes: tuple[str, ...]
    requested: str | None
    capabilities: Capabilities
    platforms: Mapping[str, Decision] = dataclasses.field(default_factory=dict)
    predicted: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    passed_over: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def fell_back(self) -> bool:
        """True when the preferred (first tried) implementation was rejected."""
        return bool(self.rejected)

    def __str__(self) -> str:
        how = f"requested {self.requested!r}" if self.requested else "automatic"
        lines = [f"{self.op}: {self.implementation} ({how}; {self.capabilities})"]
        for note in self.notes:
            lines.append(f"  - {note}")
        for name, reasons in self.rejected.items():
            lines.append(f"  {name} rejected:")
            lines.extend(f"    - {r}" for r in reasons)
        for name, reasons in self.passed_over.items():
            lines.append(f"  {name} serves the call too, not taken:")
            lines.extend(f"    - {r}" for r in reasons)
        if self.platforms:
            lines.append("  per platform (each lowering keeps its own branch):")
            for platform, d in self.platforms.items():
                name = "other platforms" if platform == "default" else platform
                why = [r for rs in d.rejected.values() for r in rs][:1]
                lines.append(f"    {name}: {d.implementation}"
                             + (f" ({why[0]})" if d is not self and why else ""))
        return "\n".join(lines)


# An op's policy option (a knob of its routes, registered by its folder): name -> its values,
# the default first.
_OPTIONS: dict[str, tuple[str, ...]] = {}


def register_option(name: str, values: tuple[str, ...]) -> None:
    """Registers a policy option `policy` takes as a keyword, with its values (the default
    first); the policy in effect gives its value as the attribute `name`."""
    _OPTIONS[name] = tuple(values)


@dataclasses.dataclass(frozen=True)
class Policy:
    """The routing settings in effect (`policy`). Besides its fields, every registered op is an
    attribute, its preferred implementation (``policy.lstm``, ``policy.attention``: None for
    none), and so is every registered option, its value (``policy.lstm_low_precision``)."""

    on_fallback: str = "silent"
    capabilities: Capabilities | None = None
    checkify_lengths: bool = False
    remat_every: int | None = None
    recurrent_memory_fraction: float = MEMORY_FRACTION
    preferences: tuple[tuple[str, str], ...] = ()  # (op, implementation), sorted
    options: tuple[tuple[str, str], ...] = ()  # (registered option, value), sorted

    def __getattr__(self, name: str):  # called for the names that are not fields
        if name in _ROUTES:
            return dict(self.preferences).get(name)
        if name in _OPTIONS:
            return dict(self.options).get(name, _OPTIONS[name][0])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_POLICY: contextvars.ContextVar[Policy] = contextvars.ContextVar(
    "portable_rnn_policy", default=Policy())  # noqa: B039 - Policy is frozen
_WARNED: set = set()
_WARNED_LOCK = threading.Lock()


def policy(lstm: str | None = None, attention: str | None = None, *,
           on_fallback: str | None = None,
           capabilities: Capabilities | None = None,
           checkify_lengths: bool | None = None,
           remat_every: int | None = None,
           recurrent_memory_fraction: float | None = None,
           **settings: str | None) -> contextlib.AbstractContextManager[Policy]:
    """Sets routing preferences for calls traced inside the ``with`` block.

    Decisions are made when a function is traced: a policy changed around an already compiled
    function does not affect it until it is traced again.

    Args:
      lstm: preferred LSTM implementation, a name `portable_rnn.lstm` takes as
        ``implementation``; None keeps the enclosing setting (automatic by default). A
        preference falls back when it cannot serve a call; an explicit ``implementation=``
        argument raises instead.
      attention: preferred attention implementation, a name `portable_rnn.dot_product_attention`
        takes as ``implementation``.
      on_fallback: what happens when the preferred path is rejected: ``"silent"``, ``"warn"``
        (a `FallbackWarning` with the reasons, once per distinct decision) or ``"error"``
        (a `FallbackError`).
      capabilities: a `Capabilities` to use instead of probing the machine.
      checkify_lengths: True adds a `checkify.debug_check` for traced sequence lengths outside
        ``[0, T]``, reported under ``checkify.checkify(f, errors=checkify.user_checks)`` with the
        argument's name (traced lengths are clipped either way). Off by default: the check
        carries checkify's effect, which `jax.export`'s ``serialize()`` rejects.
      remat_every: segment checkpointing of the recurrent ops' gradients, every so many steps,
        for the calls that do not pass ``remat_every`` themselves (the layers', for one): the
        forward keeps each layer's state at the start of every segment and the backward runs
        each segment's forward again. None keeps the enclosing setting (automatic by default:
        only where the stash of every step would not fit, see below).
      recurrent_memory_fraction: the share of one device's memory (a float > 0; default 0.25)
        that a recurrent gradient's stash of every step may take before the automatic choice
        checkpoints segments (``remat_every=None``); ``float("inf")`` never does.
      **settings: by op name, every other op's preferred implementation, likewise (``gru=``:
        a name `portable_rnn.gru` takes as ``implementation``; ``simple_rnn=``); and the ops'
        registered options: ``lstm_low_precision``, for bfloat16/float16 LSTM calls (and
        ``precision=DEFAULT``) on a GPU: ``"scan"`` (default) computes in that precision on the
        pure-JAX path; ``"upcast"`` casts to float32 to use cuDNN and casts the results back.

    Returns:
      A context manager whose ``with`` block runs under the policy; it yields the `Policy` in
      effect inside the block. Unknown names raise here, before the block is entered.
    """
    preferences = {"lstm": lstm, "attention": attention}
    options = {}
    for name, value in settings.items():
        if name in _ROUTES:
            preferences[name] = value
        elif name in _OPTIONS:
            options[name] = value
        else:
            known = ["on_fallback", "capabilities", "checkify_lengths", "remat_every",
                     "recurrent_memory_fraction", *_OPTIONS]
            raise TypeError(
                f"policy() got an unexpected keyword argument {name!r}; it takes the ops "
                f"{', '.join(sorted(_ROUTES))} and the options {', '.join(known)}.")
    for op, value in preferences.items():
        checks.choice(op, value, implementations(op))
    checks.choice("on_fallback", on_fallback, ON_FALLBACK)
    for name, value in options.items():
        checks.choice(name, value, _OPTIONS[name])
    if capabilities is not None and not isinstance(capabilities, Capabilities):
        raise TypeError(f"`capabilities` must be a portable_rnn.Capabilities; "
                        f"got {type(capabilities).__name__}.")
    if checkify_lengths is not None and not isinstance(checkify_lengths, bool):
        raise TypeError(f"`checkify_lengths` must be None or a bool; got {checkify_lengths!r}.")
    if remat_every is not None:
        remat_every = checks.static_int("remat_every", remat_every, low=1)
    if recurrent_memory_fraction is not None:
        recurrent_memory_fraction = _memory_fraction(recurrent_memory_fraction)
    updates = {k: v for k, v in dict(
        on_fallback=on_fallback, capabilities=capabilities, checkify_lengths=checkify_lengths,
        remat_every=remat_every, recurrent_memory_fraction=recurrent_memory_fraction).items()
        if v is not None}
    return _policy_block(updates, {k: v for k, v in preferences.items() if v is not None},
                         {k: v for k, v in options.items() if v is not None})


def _memory_fraction(value) -> float:
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
            or not value > 0):
        raise ValueError("`recurrent_memory_fraction` must be a number > 0 (the share of a "
                         f"device's memory; float('inf') for no limit); got {value!r}.")
    return float(value)


@contextlib.contextmanager
def _policy_block(updates: Mapping[str, object], preferences: Mapping[str, str],
                  options: Mapping[str, str]) -> Iterator[Policy]:
    outer = _POLICY.get()
    token = _POLICY.set(dataclasses.replace(
        outer, **updates,
        preferences=tuple(sorted({**dict(outer.preferences), **preferences}.items())),
        options=tuple(sorted({**dict(outer.options), **options}.items()))))
    try:
        yield _POLICY.get()
    finally:
        _POLICY.reset(token)


def current_policy() -> Policy:
    return _POLICY.get()


def resolve_capabilities(capabilities: Capabilities | None) -> Capabilities:
    if capabilities is not None:
        if not isinstance(capabilities, Capabilities):
            raise TypeError(f"`capabilities` must be a portable_rnn.Capabilities; "
                            f"got {type(capabilities).__name__}.")
        return capabilities
    return _POLICY.get().capabilities or probe_capabilities()


def decide(op: str, call, caps: Capabilities, implementation: str | None,
           preferred: str | None, unavailable: Mapping[str, str] | None = None) -> Decision:
    """Picks the route that serves `call` on `caps`: the preferred one where it can, else the
    one the routing model predicts fastest among those that can (`routing.choose`).

    A route's `skips` (a policy of its own) pass over it unless it is preferred or the last one;
    a route a policy `claims` the call for is taken where it serves, as a preferred one;
    `unavailable` rejects routes by name, with the reason given. An explicit `implementation`
    that cannot serve the call raises one error with every reason. The decision's `rejected`
    lists the routes before the chosen one in order of preference (those that cannot serve the
    call, and those the routing model passed over), each with why; `passed_over` the routes
    after it that serve the call too.
    """
    table = routes(op)

    def rejects(route: Route) -> tuple[str, ...]:
        if unavailable and route.name in unavailable:
            return (unavailable[route.name],)
        return route.rejects(call, caps)

    if implementation is not None:
        route = table[implementation]
        reasons = rejects(route)
        if reasons:
            raise ValueError(f"implementation={implementation!r} cannot serve this {op} call:\n"
                             + "\n".join(f"  - {r}" for r in reasons))
        return Decision(op, implementation, {}, route.notes(call, caps), implementation, caps)
    order = tuple(table)
    candidates = order if preferred is None else (preferred,) + tuple(
        n for n in order if n != preferred)
    rejected, serving = {}, []
    for name in candidates:
        route = table[name]
        reasons = rejects(route)
        if not reasons and route.skips and name != preferred and name != order[-1]:
            reasons = route.skips(call, caps)
        if not reasons and (name == preferred or route.claims and route.claims(call, caps)):
            return Decision(op, name, rejected, route.notes(call, caps), preferred, caps)
        if reasons:
            rejected[name] = reasons
        else:
            serving.append(name)
    if not serving:
        raise AssertionError(f"no {op} implementation accepted the call: {rejected}")
    choice = routing.choose(op, call, caps, serving)
    name = serving[0] if choice is None else choice.route
    before = candidates[:candidates.index(name)]
    rejected = {n: r for n, r in rejected.items() if n in before}
    notes = table[name].notes(call, caps)
    if choice is None:
        return Decision(op, name, rejected, notes, preferred, caps)
    rejected.update({n: r for n, r in choice.passed_over.items() if n in before})
    return Decision(op, name, dict(sorted(rejected.items(), key=lambda i: before.index(i[0]))),
                    (*notes, choice.note), preferred, caps,
                    predicted={n: t for n, (_, t) in choice.predictions.items()},
                    passed_over={n: r for n, r in choice.passed_over.items() if n not in before})


def choose(op: str, call, caps: Capabilities, implementation: str | None,
           preferred: str | None) -> Decision:
    """`decide`, and for an automatic choice of a route that only some platforms can lower, the
    path each platform runs (`per_platform`)."""
    decision = decide(op, call, caps, implementation, preferred)
    route = routes(op)[decision.implementation]
    if implementation is None and route.platforms is not None:
        decision = per_platform(decision, route.platforms(), lambda c, why: decide(
            op, call, c, None, preferred, unavailable={route.name: why}), route.kernel)
    return decision


PORTABLE_PLATFORMS = {"cpu": Capabilities("cpu"), "default": Capabilities("other")}
# The lowering platform (`lax.platform_dependent`'s name) of a `Capabilities.platform`.
LOWERING = {"gpu": "cuda", "cuda": "cuda", "rocm": "rocm", "tpu": "tpu", "cpu": "cpu"}


def per_platform(decision: Decision, route_platforms: tuple[str, ...],
                 without_route: Callable[[Capabilities, str], Decision],
                 kernel: str = "cuDNN") -> Decision:
    """`decision` (an automatic route to a platform's kernel) with the path each lowering
    platform runs.

    `route_platforms`: where JAX can lower the kernel (``("cuda",)`` on a CUDA jaxlib, none
    without the CUDA plugin; ``("tpu",)`` for a Pallas TPU kernel). `without_route(caps, why)`
    decides the call for `caps` with the route rejected for reason `why`. The machine's own
    platform, the CPU and every other platform get a branch.
    """
    plan = {p: decision for p in route_platforms if p in LOWERING.values()}
    caps = decision.capabilities
    own = LOWERING.get(caps.platform)
    if own is not None and own not in plan and own != "cpu":
        plugin = "CUDA plugin" if own == "cuda" else f"{own} backend"
        plan[own] = without_route(caps, f"this jaxlib has no {plugin}, so a program traced "
                                        f"here cannot hold the {kernel} call")
    if "cpu" not in plan:
        plan["cpu"] = without_route(PORTABLE_PLATFORMS["cpu"], "a program lowered for the CPU "
                                    f"cannot call {kernel}")
    others = " or ".join(p.upper() if p != "cuda" else "CUDA" for p in plan if p != "cpu")
    plan["default"] = without_route(PORTABLE_PLATFORMS["default"], "a program lowered for a "
                                    f"platform other than {others} cannot call {kernel}")
    return dataclasses.replace(decision, platforms=plan)


def run(decision: Decision, call, *args):
    """Runs the route `decision` chose on the arrays `args`, or one branch per platform
    (`lax.platform_dependent`), each calling its route's ``run(decision, call, *args)``.

    Platforms whose decisions pick the same route with the same notes share one branch; with a
    single branch, no `platform_dependent` is emitted at all.
    """
    table = routes(decision.op)

    def branch(d: Decision) -> Callable:
        return lambda *arrays: table[d.implementation].run(d, call, *arrays)

    if not decision.platforms:
        return branch(decision)(*args)
    shared: dict[tuple, Callable] = {}
    fns = {}
    for platform, d in decision.platforms.items():
        key = (d.implementation, d.notes)
        if key not in shared:
            shared[key] = branch(d)
        fns[platform] = shared[key]
    if len(shared) == 1:
        return fns["default"](*args)
    default = fns.pop("default")
    return lax.platform_dependent(*args, default=default, **fns)


def report_fallback(decision: Decision) -> None:
    """Applies the policy's `on_fallback` to a decision whose preferred path was rejected."""
    if not decision.fell_back:
        return
    mode = _POLICY.get().on_fallback
    if mode == "error":
        raise FallbackError(f"preferred path rejected (policy on_fallback='error'):\n{decision}")
    if mode == "warn":
        key = (decision.op, decision.implementation, decision.capabilities,
               tuple((k, v) for k, v in decision.rejected.items()))
        with _WARNED_LOCK:
            if key in _WARNED:
                return
            _WARNED.add(key)
        _warn_at_caller(f"portable_rnn fell back:\n{decision}", FallbackWarning)


# The libraries between a user's call and a decision: their frames are never the call site.
_LIBRARIES = ("portable_rnn", "jax", "jaxlib", "flax", "keras", "equinox", "contextlib")


def _library_prefixes() -> tuple[str, ...]:
    prefixes = []
    for name in _LIBRARIES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            prefixes.append(path if name == "contextlib" else os.path.dirname(path) + os.sep)
    return tuple(prefixes)


def _warn_at_caller(message: str, category: type[Warning]) -> None:
    """Warns at the first frame outside `_LIBRARIES` (portable_rnn, JAX, Flax, Keras, ...): the
    user's call.

    A fixed ``stacklevel`` cannot find it: ``jax.jit`` tracing and the Flax and Keras layers put
    a varying number of library frames between the user's line and the decision.
    """
    prefixes = _library_prefixes()
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(prefixes):
        frame = frame.f_back
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__", "<string>"),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))

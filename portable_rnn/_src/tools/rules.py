"""The routing decisions for matrices of common calls, as plain-text tables (``python -m
portable_rnn``) and Markdown (the documentation's rule tables, `markdown_rule_tables`)."""

from __future__ import annotations

import itertools
import textwrap

import jax
import jax.numpy as jnp

from ..attention.api import explain_attention
from ..core.capabilities import Capabilities
from ..core.dispatch import policy
from ..recurrent.ops import OPS

WIDTH = 100  # the tables' width: a longer reason wraps onto the next lines
PRETEND_GPU = Capabilities("gpu", 90800, (9, 0), "NVIDIA H100 80GB HBM3 (pretend)")
# a TPU v5e's device kind: its decisions read the routing model of its measured grid
PRETEND_TPU = Capabilities("tpu", device_kind="TPU v5 lite")


def _merge_cases(cases: list[tuple[str, ...]]) -> list[tuple[frozenset, ...]]:
    """`cases` (one value per column) as few products of value sets as merging finds: two
    products that differ in one column at most are one product."""
    products = [tuple(frozenset([v]) for v in case) for case in cases]
    merged = True
    while merged:
        merged = False
        for i, j in itertools.combinations(range(len(products)), 2):
            a, b = products[i], products[j]
            if sum(x != y for x, y in zip(a, b)) <= 1:
                products[i] = tuple(x | y for x, y in zip(a, b))
                del products[j]
                merged = True
                break
    return products


def _cells(columns: tuple[str, ...], domains: tuple[tuple[str, ...], ...],
           rows: list[tuple[tuple[str, ...], str, str]],
           sep: str = ", ") -> tuple[list[str], list[list[str]]]:
    """The header and the cells of a decision table: rows ``(case, path, why)`` with the same path
    and why listed once, with every case they cover (``any`` for a column where they cover every
    value; the values joined by `sep`)."""
    groups: dict[tuple[str, str], list[tuple[str, ...]]] = {}
    for case, path, why in rows:
        groups.setdefault((path, why), []).append(case)
    cells = []
    for (path, why), cases in groups.items():
        for n, product in enumerate(_merge_cases(cases)):
            cells.append([sep.join(v for v in domain if v in values) if values != set(domain)
                          else "any" for values, domain in zip(product, domains)]
                         + [path, why if n == 0 else "(as above)"])
    return [*columns, "path", "why / how"], cells


def _table(columns: tuple[str, ...], domains: tuple[tuple[str, ...], ...],
           rows: list[tuple[tuple[str, ...], str, str]]) -> list[str]:
    """`_cells` as plain text lines; the why is wrapped, never cut."""
    header, cells = _cells(columns, domains, rows)
    widths = [max(len(c[k]) for c in [header, *cells]) for k in range(len(header) - 1)]
    indent = sum(w + 2 for w in widths)
    lines = []
    for c in [header, *cells]:
        lead = "".join(f"{v:{w}s}  " for v, w in zip(c, widths))
        lines.extend(textwrap.wrap(c[-1], WIDTH, initial_indent=lead,
                                   subsequent_indent=" " * indent, break_long_words=False,
                                   break_on_hyphens=False) or [lead.rstrip()])
    return lines


def markdown_table(columns: tuple[str, ...], domains: tuple[tuple[str, ...], ...],
                   rows: list[tuple[tuple[str, ...], str, str]]) -> list[str]:
    """`_cells` as a Markdown table (the documentation's rule tables); in a table of one column,
    whose cases may hold commas, the cases of a row are listed one per line."""
    header, cells = _cells(columns, domains, rows, "<br>" if len(columns) == 1 else ", ")

    def line(values):
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return [line(header), "|" + "---|" * len(header)] + [
        line([*c[:-2], f"`{c[-2]}`", c[-1]]) for c in cells]


Cases = tuple[tuple[str, ...], tuple[tuple[str, ...], ...], list[tuple[tuple[str, ...], str, str]]]


def recurrent_cases(caps: Capabilities, family: str = "lstm", B=32, T=128, I=256, H=256,
                    L=2) -> Cases:
    """The decisions of `family` (a registered family's name) for every case of
    dtype x dropout x ragged x vmapped: ``(columns, domains, rows)`` for `_table`."""
    S = jax.ShapeDtypeStruct
    n = OPS[family].num_params(I, H, L, False)
    explain = OPS[family].explain
    dtypes, dropouts = (jnp.float32, jnp.bfloat16, jnp.float16), (0.0, 0.1)
    rows = []
    for dtype, dropout, ragged, vmapped in itertools.product(
            dtypes, dropouts, (False, True), (False, True)):
        states = (S((L, B, H), dtype),) * len(OPS[family].family.states)
        args = (S((B, T, I), dtype), *states, S((n,), dtype),
                S((B,), jnp.int32) if ragged else None, I, H, L, dropout, False)
        rng = jax.random.key(0) if dropout else None
        if vmapped:  # decide as the vmapped call would: per instance, inside jax.vmap
            found = []

            def inside(x, args=args, rng=rng, found=found):
                found.append(explain(x, *args[1:], dropout_rng=rng, capabilities=caps))
                return x

            jax.eval_shape(jax.vmap(inside), jnp.zeros((2,) + args[0].shape, dtype))
            d = found[0]
        else:
            d = explain(*args, dropout_rng=rng, capabilities=caps)
        why = [r for rs in d.rejected.values() for r in rs][:1] + [
            n for n in d.notes if not n.startswith(("TF32", "seq_lengths None"))]
        if vmapped and d.implementation == "cudnn":
            why.append("vmap folded into the batch (backward: the scan path's VJP)")
        case = (jnp.dtype(dtype).name, str(dropout), "ragged" if ragged else "full",
                "yes" if vmapped else "no")
        rows.append((case, d.implementation, "; ".join(why) or "-"))
    domains = (tuple(jnp.dtype(t).name for t in dtypes), tuple(map(str, dropouts)),
               ("full", "ragged"), ("no", "yes"))
    return ("dtype", "dropout", "lengths", "vmapped"), domains, rows


def decision_table(caps: Capabilities, B=32, T=128, I=256, H=256, L=2) -> list[str]:
    """The LSTM's decisions for every case of dtype x dropout x ragged x vmapped, one row per
    decision."""
    return _table(*recurrent_cases(caps, "lstm", B, T, I, H, L))


def family_cases(caps: Capabilities, B=32, T=128, I=256, H=256, L=2) -> Cases:
    """Every registered family, and each with a projection (`Family.projection`) projected:
    one row each, float32."""
    S = jax.ShapeDtypeStruct
    x = S((B, T, I), jnp.float32)
    rows = []
    for name, op in OPS.items():
        for proj in (0, 64) if op.family.projection else (0,):
            kw = {"proj_size": proj} if proj else {}
            states = [S((L, B, proj or H), jnp.float32)] + [S((L, B, H), jnp.float32)] * (
                len(op.family.states) - 1)
            d = op.explain(x, *states, S((op.num_params(I, H, L, False, **kw),), jnp.float32),
                           None, I, H, L, 0.0, False, capabilities=caps, **kw)
            reasons = [r for rs in d.rejected.values() for r in rs if "platform is" not in r]
            case = f"{name} proj_size={proj}" if proj else name
            rows.append(((case,), d.implementation, "; ".join(reasons[:1]) or "-"))
    return ("call",), (tuple(case[0] for case, _, _ in rows),), rows


def family_table(caps: Capabilities, B=32, T=128, I=256, H=256, L=2) -> list[str]:
    """Every registered family (and the projected ones): one row each, float32."""
    return _table(*family_cases(caps, B, T, I, H, L))


def _why(d) -> str:
    return "; ".join([r for rs in d.rejected.values() for r in rs][:1] or list(d.notes[:1])
                     or ["-"])


def attention_cases(caps: Capabilities, B=4, N=8, H=64) -> Cases:
    """The decisions for every case of dtype x length x causal x mask."""
    S = jax.ShapeDtypeStruct
    dtypes, lengths = (jnp.float32, jnp.bfloat16), (128, 4096)
    rows = []
    for dtype, T, causal, masked in itertools.product(
            dtypes, lengths, (False, True), (False, True)):
        q = S((B, T, N, H), dtype)
        mask = S((B, 1, T, T), jnp.bool_) if masked else None
        d = explain_attention(q, q, q, mask=mask, is_causal=causal, capabilities=caps)
        case = (jnp.dtype(dtype).name, str(T), "yes" if causal else "no",
                "yes" if masked else "no")
        rows.append((case, d.implementation, _why(d)))
    domains = (tuple(jnp.dtype(t).name for t in dtypes), tuple(map(str, lengths)), ("no", "yes"),
               ("no", "yes"))
    return ("dtype", "T=S", "causal", "mask"), domains, rows


def attention_table(caps: Capabilities, B=4, N=8, H=64) -> list[str]:
    """The decisions for every case of dtype x length x causal x mask, one row per decision."""
    return _table(*attention_cases(caps, B, N, H))


def attention_shape_cases(caps: Capabilities, B=4, N=8) -> Cases:
    """bfloat16 attention for every case of head dim x length x window: where cuDNN serves the
    forward, the backward, or neither."""
    S = jax.ShapeDtypeStruct
    heads, lengths, windows = (64, 72, 256), (128, 77), (None, (64, 0), (64, 64))
    rows = []
    for H, T, window in itertools.product(heads, lengths, windows):
        q = S((B, T, N, H), jnp.bfloat16)
        d = explain_attention(q, q, q, is_causal=True, local_window_size=window,
                              capabilities=caps)
        reasons = [r for rs in d.rejected.values() for r in rs]
        backward = [n for n in d.notes if n.startswith("forward on cuDNN")]
        rows.append(((str(H), str(T), str(window)), d.implementation,
                     "; ".join(reasons[:1] or backward or list(d.notes[:1]) or ["-"])))
    domains = (tuple(map(str, heads)), tuple(map(str, lengths)), tuple(map(str, windows)))
    return ("head dim", "T=S", "window"), domains, rows


def _first_reason_or_notes(d) -> str:
    """The first rejection of the preferred path, then the chosen path's notes."""
    why = [r for rs in d.rejected.values() for r in rs][:1] + [
        n for n in d.notes if not n.startswith(("TF32", "seq_lengths None"))]
    return "; ".join(why) or "-"


def lstm_variant_cases(caps: Capabilities, B=32, T=128, I=256, H=256, L=2) -> Cases:
    """Float32 LSTM calls: the plain one, automatic and with cuDNN asked for; then, with cuDNN
    asked for (policy(lstm='cudnn')), calls that each differ from it in one argument or
    setting."""
    S = jax.ShapeDtypeStruct
    f32 = jnp.float32
    variants = (
        ("automatic", {}, {}, dict(lstm=None)),  # None: no preference
        ("policy(lstm='cudnn')", {}, {}, {}),
        ("precision=HIGHEST", {}, dict(precision=jax.lax.Precision.HIGHEST), {}),
        ("precision=DEFAULT", {}, dict(precision=jax.lax.Precision.DEFAULT), {}),
        ("precision=DEFAULT, policy(lstm_low_precision='upcast')", {},
         dict(precision=jax.lax.Precision.DEFAULT), dict(lstm_low_precision="upcast")),
        ("bfloat16, policy(lstm_low_precision='upcast')", dict(dtype=jnp.bfloat16), {},
         dict(lstm_low_precision="upcast")),
        ("precision=DotAlgorithmPreset.F32_F32_F32", {},
         dict(precision=jax.lax.DotAlgorithmPreset.F32_F32_F32), {}),
        ("T=0", dict(T=0), {}, {}),
        ("batch 0", dict(B=0), {}, {}),
        ("proj_size=64", dict(proj=64), {}, {}),
        ("recurrent_dropout_mask", dict(recurrent=True), {}, {}),
        ("seq_lengths uint8", dict(lengths=jnp.uint8), {}, {}),
    )
    rows = []
    for name, shape, kwargs, pol in variants:
        b, t, dtype = shape.get("B", B), shape.get("T", T), shape.get("dtype", f32)
        proj = shape.get("proj", 0)
        n = OPS["lstm"].num_params(I, H, L, False, proj)
        extra = dict(proj_size=proj) if proj else {}
        if shape.get("recurrent"):
            extra["recurrent_dropout_mask"] = S((L, b, H), f32)
        lengths = S((b,), shape["lengths"]) if "lengths" in shape else None
        with policy(**{"lstm": "cudnn", **pol}):
            d = OPS["lstm"].explain(S((b, t, I), dtype), S((L, b, proj or H), dtype),
                                    S((L, b, H), dtype), S((n,), dtype), lengths, I, H, L, 0.0,
                                    False, capabilities=caps, **kwargs, **extra)
        rows.append(((name,), d.implementation, _first_reason_or_notes(d)))
    return ("call",), (tuple(case[0] for case, _, _ in rows),), rows


def _model_note(d) -> list[str]:
    """The routing model's note of a decision it ranked (its predicted times and grid)."""
    return [d.notes[-1]] if d.predicted else []


def pallas_cases(caps: Capabilities, B=32, T=128, I=256, H=256, L=1) -> Cases:
    """bfloat16 calls of every family on a TPU: automatic, and with the Pallas kernel preferred
    (policy(<op>='pallas')) for every registered family, then calls that differ in one
    argument."""
    S = jax.ShapeDtypeStruct
    bf16 = jnp.bfloat16
    variants = (
        ("lstm, automatic", "lstm", {}, None),
        *((name, name, {}, "pallas") for name in OPS),
        ("lstm proj_size=64", "lstm", dict(proj=64), "pallas"),
        ("lstm H=200", "lstm", dict(H=200), "pallas"),
        ("lstm H=4096", "lstm", dict(H=4096), "pallas"),
        ("gru float32, precision=DotAlgorithmPreset.F32_F32_F32", "gru",
         dict(dtype=jnp.float32, precision=jax.lax.DotAlgorithmPreset.F32_F32_F32), "pallas"),
    )
    rows = []
    for name, op, shape, prefer in variants:
        h, proj, dtype = shape.get("H", H), shape.get("proj", 0), shape.get("dtype", bf16)
        kwargs = {k: v for k, v in shape.items() if k == "precision"}
        if proj:
            kwargs["proj_size"] = proj
        n = OPS[op].num_params(I, h, L, False, *((proj,) if proj else ()))
        states = [S((L, B, proj or h), dtype)] + [S((L, B, h), dtype)] * (
            len(OPS[op].family.states) - 1)
        with policy(**{op: prefer}):
            d = OPS[op].explain(S((B, T, I), dtype), *states, S((n,), dtype), None, I, h, L,
                                0.0, False, capabilities=caps, **kwargs)
        why = list(d.rejected.get("pallas", ()))
        rows.append(((name,), d.implementation, "; ".join(why[:1] or _model_note(d)
                                                          or list(d.notes[:1]))))
    return ("call",), (tuple(case[0] for case, _, _ in rows),), rows


# Machines that lift or impose one attention rule each (the H100 of PRETEND_GPU otherwise).
_T4 = Capabilities("gpu", 90800, (7, 5), "Tesla T4 (pretend)")
_CUDNN_91 = Capabilities("gpu", 90100, (9, 0), "NVIDIA H100 (pretend), cuDNN 9.1")
_SM103 = Capabilities("gpu", 91000, (10, 3), "NVIDIA B300 (pretend), cuDNN 9.10")


def attention_variant_cases(caps: Capabilities, B=4, T=1024, N=8, H=64) -> Cases:
    """Causal bfloat16 attention calls that each differ from a plain one in one argument, or in
    the machine (`caps` unless the case names one)."""
    S = jax.ShapeDtypeStruct
    bf16 = jnp.bfloat16
    variants = (
        ("plain", {}, None),
        ("float16", dict(dtype=jnp.float16), None),
        ("GQA: K=2 key/value heads", dict(K=2), None),
        ("padding mask (B, 1, 1, S)", dict(mask=S((B, 1, 1, T), jnp.bool_)), None),
        ("bias (1, N, T, S) bfloat16", dict(bias=S((1, N, T, T), bf16)), None),
        ("bias (1, N, T, S) float32", dict(bias=S((1, N, T, T), jnp.float32)), None),
        ("key_value_seq_lengths", dict(key_value_seq_lengths=S((B,), jnp.int32)), None),
        ("local_window_size=(128, 0)", dict(local_window_size=(128, 0)), None),
        ("local_window_size=(128, 0) with cuDNN 9.1", dict(local_window_size=(128, 0)),
         _CUDNN_91),
        ("a traced scale", dict(scale=S((), jnp.float32)), None),
        ("return_residual=True", dict(return_residual=True), None),
        ("precision=HIGHEST", dict(precision=jax.lax.Precision.HIGHEST), None),
        ("precision=DotAlgorithmPreset.F32_F32_F32",
         dict(precision=jax.lax.DotAlgorithmPreset.F32_F32_F32), None),
        ("compute capability 7.5 (T4)", {}, _T4),
        ("compute capability 10.3 with cuDNN 9.10", {}, _SM103),
    )
    rows = []
    for name, kwargs, machine in variants:
        kwargs = dict(kwargs)
        dtype, K = kwargs.pop("dtype", bf16), kwargs.pop("K", N)
        q, kv = S((B, T, N, H), dtype), S((B, T, K, H), dtype)
        d = explain_attention(q, kv, kv, is_causal=True, capabilities=machine or caps, **kwargs)
        reasons = [r for rs in d.rejected.values() for r in rs]
        rows.append(((name,), d.implementation, "; ".join(reasons[:1] or list(d.notes[:1]))))
    return ("call",), (tuple(case[0] for case, _, _ in rows),), rows


def attention_tpu_cases(caps: Capabilities, B=4, N=8, H=128) -> Cases:
    """Causal attention on a TPU: bfloat16 over lengths (the route the routing model predicts
    fastest, or beyond its grid's reach the stated rule), float32, and bfloat16 at T=S=2048
    with one argument changed."""
    S = jax.ShapeDtypeStruct
    bf16 = jnp.bfloat16
    variants = [(f"bfloat16 T=S={T}", dict(T=T)) for T in (256, 512, 1024, 2048, 8192, 32768)]
    variants += [
        ("float32 T=S=2048", dict(dtype=jnp.float32)),
        ("float32 T=S=1024", dict(dtype=jnp.float32, T=1024)),
        ("GQA: K=2 key/value heads", dict(K=2)),
        ("local_window_size=(512, 0)", dict(local_window_size=(512, 0))),
        ("key_value_seq_lengths", dict(key_value_seq_lengths=S((B,), jnp.int32))),
        ("padding mask (B, 1, 1, S)", dict(mask=S((B, 1, 1, 2048), jnp.bool_))),
        ("bias (1, N, T, S)", dict(bias=S((1, N, 2048, 2048), bf16))),
        ("head dim 64", dict(H=64)),
        ("T=S=2000", dict(T=2000)),
    ]
    rows = []
    for name, kwargs in variants:
        kwargs = dict(kwargs)
        dtype, K = kwargs.pop("dtype", bf16), kwargs.pop("K", N)
        T, h = kwargs.pop("T", 2048), kwargs.pop("H", H)
        q, kv = S((B, T, N, h), dtype), S((B, T, K, h), dtype)
        d = explain_attention(q, kv, kv, is_causal=True, capabilities=caps, **kwargs)
        reasons = [r for rs in d.rejected.values() for r in rs if "cuDNN" not in r]
        rows.append(((name,), d.implementation, "; ".join(reasons[:1] or _model_note(d)
                                                          or list(d.notes[:1]))))
    return ("call",), (tuple(case[0] for case, _, _ in rows),), rows


GPU_ONLY = (("a GPU (pretend H100, cuDNN 9.8, sm90)", PRETEND_GPU),)
TPU_ONLY = (("a TPU (pretend v5 lite)", PRETEND_TPU),)
MACHINES = GPU_ONLY + (("a CPU", Capabilities("cpu")),)
RULE_TABLES = (  # (title, shapes, cases, machines): the documentation's rule tables
    # one table per registered family
    *((op.family.class_name, "B=32 T=128 I=H=256 L=2",
       lambda c, name=name: recurrent_cases(c, name), MACHINES) for name, op in OPS.items()),
    ("LSTM: cuDNN asked for, one argument changed",
     "float32, B=32 T=128 I=H=256 L=2, under policy(lstm='cudnn') but for 'automatic'",
     lstm_variant_cases,
     GPU_ONLY),
    ("Every family, and the projected LSTM", "float32, B=32 T=128 I=H=256 L=2", family_cases,
     MACHINES),
    ("Recurrent family on a TPU: the Pallas kernel",
     "bfloat16, B=32 T=128 I=H=256 L=1, automatic or under policy(...='pallas')", pallas_cases,
     (("a TPU (pretend v5e)", PRETEND_TPU),)),
    ("Attention", "B=4 N=8 H=64", attention_cases, MACHINES),
    ("Attention: head dim, odd lengths, sliding window", "bfloat16, causal, B=4 N=8",
     attention_shape_cases, MACHINES),
    ("Attention: one argument or the machine changed", "bfloat16, causal, B=4 T=S=1024 N=8 H=64",
     attention_variant_cases, GPU_ONLY),
    ("Attention on a TPU", "causal, B=4 N=8 H=128, T=S=2048 unless named",
     attention_tpu_cases, TPU_ONLY),
)


def markdown_rule_tables(heading: str = "##") -> str:
    """The decision tables of every op as Markdown, for a pretend GPU (H100, cuDNN 9.8) and a
    CPU: the documentation's rule tables, generated from the same cases as the command's."""
    lines = []
    for title, shapes, cases, machines in RULE_TABLES:
        lines += [f"{heading} {title}", ""]
        for machine, caps in machines:
            lines += [f"On {machine}, {shapes}:", ""]
            with policy(capabilities=caps):
                lines += markdown_table(*cases(caps))
            lines.append("")
    return "\n".join(lines)

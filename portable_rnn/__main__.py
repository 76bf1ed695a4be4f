"""`python -m portable_rnn`: the environment, and the routing decisions for common calls.

Like ``python -m torch.utils.collect_env``: paste its output into bug reports.
``python -m portable_rnn selftest [--json PATH]`` runs every route this machine takes against the
portable path (see `portable_rnn._selftest`); its exit code is non-zero if any case fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import json
import math
import platform
import time

import jax
import jax.numpy as jnp

from . import __version__, _selftest
from ._attention import explain_attention
from ._capabilities import Capabilities, capabilities
from ._dispatch import policy
from ._lstm import explain_lstm
from ._recurrent import explain_gru, explain_simple_rnn
from ._weights import get_num_params_in_gru, get_num_params_in_lstm, get_num_params_in_simple_rnn

PRETEND_GPU = Capabilities("gpu", 90800, (9, 0), "NVIDIA H100 80GB HBM3 (pretend)")


def _versions() -> list[str]:
    lines = [f"portable_rnn {__version__}", f"python {platform.python_version()} "
             f"({platform.machine()})"]
    for name in ("jax", "jaxlib", "flax", "numpy"):
        try:
            lines.append(f"{name} {importlib.import_module(name).__version__}")
        except ImportError:
            lines.append(f"{name} not installed")
    return lines


def decision_table(caps: Capabilities, B=32, T=128, I=256, H=256, L=2) -> list[str]:
    """One row per case of dtype x dropout x ragged x vmapped."""
    S = jax.ShapeDtypeStruct
    n = get_num_params_in_lstm(I, H, L, False)
    rows = [f"{'dtype':9s} {'dropout':8s} {'lengths':8s} {'vmapped':8s} path   why / how"]
    for dtype, dropout, ragged, vmapped in itertools.product(
            (jnp.float32, jnp.bfloat16, jnp.float16), (0.0, 0.1), (False, True), (False, True)):
        args = (S((B, T, I), dtype), S((L, B, H), dtype), S((L, B, H), dtype), S((n,), dtype),
                S((B,), jnp.int32) if ragged else None, I, H, L, dropout, False)
        rng = jax.random.key(0) if dropout else None
        if vmapped:  # decide as the vmapped call would: per instance, inside jax.vmap
            found = []

            def inside(x, args=args, rng=rng, found=found):
                found.append(explain_lstm(x, *args[1:], dropout_rng=rng, capabilities=caps))
                return x

            jax.eval_shape(jax.vmap(inside), jnp.zeros((2,) + args[0].shape, dtype))
            d = found[0]
        else:
            d = explain_lstm(*args, dropout_rng=rng, capabilities=caps)
        why = [r for rs in d.rejected.values() for r in rs][:1] + [
            n for n in d.notes if not n.startswith(("TF32", "seq_lengths None"))]
        if vmapped and d.implementation == "cudnn":
            why.append("vmap folded into the batch (backward: one call per instance)")
        why = "; ".join(why) or "-"
        why = why if len(why) <= 100 else why[:97] + "..."
        rows.append(f"{jnp.dtype(dtype).name:9s} {dropout:<8} {'ragged' if ragged else 'full':8s} "
                    f"{'yes' if vmapped else 'no':8s} {d.implementation:6s} {why}")
    return rows


def family_table(caps: Capabilities, B=32, T=128, I=256, H=256, L=2) -> list[str]:
    """The GRU, simple RNN and projected LSTM: one row each, float32."""
    S = jax.ShapeDtypeStruct
    x, h = S((B, T, I), jnp.float32), S((L, B, H), jnp.float32)
    rows = [f"{'call':22s} path   why / how"]
    for name, d in (
            ("gru", explain_gru(x, h, S((get_num_params_in_gru(I, H, L, False),), jnp.float32),
                                None, I, H, L, 0.0, False, capabilities=caps)),
            ("simple_rnn", explain_simple_rnn(
                x, h, S((get_num_params_in_simple_rnn(I, H, L, False),), jnp.float32), None,
                I, H, L, 0.0, False, capabilities=caps)),
            ("lstm proj_size=64", explain_lstm(
                x, S((L, B, 64), jnp.float32), h,
                S((get_num_params_in_lstm(I, H, L, False, 64),), jnp.float32), None, I, H, L,
                0.0, False, capabilities=caps, proj_size=64))):
        reasons = [r for rs in d.rejected.values() for r in rs if "platform is" not in r]
        rows.append(f"{name:22s} {d.implementation:6s} {'; '.join(reasons[:1]) or '-'}")
    return rows


def _why(d) -> str:
    why = [r for rs in d.rejected.values() for r in rs][:1] or list(d.notes[:1]) or ["-"]
    text = "; ".join(why)
    return text if len(text) <= 100 else text[:97] + "..."


def attention_table(caps: Capabilities, B=4, N=8, H=64) -> list[str]:
    """One row per case of dtype x length x causal x mask."""
    S = jax.ShapeDtypeStruct
    rows = [f"{'dtype':9s} {'T=S':6s} {'causal':7s} {'mask':5s} {'path':8s} why / how"]
    for dtype, T, causal, masked in itertools.product(
            (jnp.float32, jnp.bfloat16), (128, 4096), (False, True), (False, True)):
        q = S((B, T, N, H), dtype)
        mask = S((B, 1, T, T), jnp.bool_) if masked else None
        d = explain_attention(q, q, q, mask=mask, is_causal=causal, capabilities=caps)
        rows.append(f"{jnp.dtype(dtype).name:9s} {T:<6d} {'yes' if causal else 'no':7s} "
                    f"{'yes' if masked else 'no':5s} {d.implementation:8s} {_why(d)}")
    return rows


def selftest(json_path=None, repeats: int = _selftest.REPEATS) -> int:
    """Runs the self-test, prints its table (and writes JSON); returns the exit code."""
    caps = capabilities()
    env = dict(versions=_versions(), devices=[str(d) for d in jax.devices()],
               capabilities=dataclasses.asdict(caps), tolerances=_selftest.TOLERANCE,
               error_metric=_selftest.ERROR_METRIC, repeats=repeats)
    print(f"{'; '.join(env['versions'])}\ndevices: {jax.devices()}\ncapabilities: {caps}")
    print("\n".join(_selftest.legend(repeats)) + "\n")
    print(_selftest.header(), flush=True)
    start = time.perf_counter()
    rows = _selftest.run(repeats=repeats,
                         on_row=lambda row: print(_selftest.format_row(row), flush=True))
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m portable_rnn", description=__doc__.splitlines()[0])
    p.add_argument("--pretend-gpu", action="store_true",
                   help="also show the decisions a GPU with cuDNN 9.8 (sm90) would make")
    commands = p.add_subparsers(dest="command")
    st = commands.add_parser("selftest", help="run every route this machine takes against the "
                             "portable path; exit code 1 if any case fails")
    st.add_argument("--json", metavar="PATH", help="also write the rows and environment as JSON")
    st.add_argument("--repeats", type=int, default=_selftest.REPEATS, metavar="N",
                    help=f"timed runs per route for the speed ratio (default {_selftest.REPEATS}; "
                    "1 for a quick correctness check)")
    args = p.parse_args(argv)
    if args.command == "selftest":
        if args.repeats < 1:
            p.error(f"--repeats must be >= 1; got {args.repeats}")
        return selftest(args.json, args.repeats)
    print("\n".join(_versions()))
    print(f"devices: {jax.devices()}")
    caps = capabilities()
    print(f"capabilities: {caps}")
    machines = [("this machine", caps)]
    if args.pretend_gpu or not caps.is_cuda_gpu:
        machines.append(("a pretend GPU", PRETEND_GPU))
    for title, c in machines:
        print(f"\nLSTM decisions on {title} ({c}), B=32 T=128 I=H=256 L=2:")
        with policy(capabilities=c):
            print("\n".join(decision_table(c)))
            print(f"\nGRU, simple RNN and projected LSTM decisions on {title}, float32:")
            print("\n".join(family_table(c)))
            print(f"\nAttention decisions on {title}, B=4 N=8 H=64:")
            print("\n".join(attention_table(c)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every registered recurrent family's public functions, and `dot_product_attention`, on this
machine's backend: the op and its gradient on each route the machine has, against the portable
path, and a digest of the lowered program, so that two checkouts (before and after a change to
how the functions are made or where the routes live) can be compared program for program.

    python -m benchmarks.registry_check OUT_DIR          # on a TPU or a CPU (about a minute)
    python -m benchmarks.registry_check OUT_DIR --quick  # tiny shapes: a smoke run
    python -m benchmarks.registry_check --compare A.json B.json

Per family, dtype (float32, bfloat16) and implementation (automatic, ``scan``, ``pallas`` on a
TPU): the decision, the forward+gradient (`jax.grad` under `jit`) run once, its largest
relative difference to the scan path's, and the SHA-256 of ``jax.jit(jax.grad(loss)).lower(...)
.as_text()``. It reads only the public API (``portable_rnn.<family>`` and
``init_<family>_weight`` for each name of ``portable_rnn.__all__`` that has both), so it runs
unchanged on older checkouts. A case that fails is recorded with its error and the run goes
on. Attention runs per dtype and route (automatic, ``xla``, ``chunked``, and on a TPU ``splash``
and ``flash``; causal, B2 T256 N4 D128), against ``xla``. Writes ``registry_check.json`` after
every case; ``--compare`` prints the cases whose digests differ between two such files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import jax
import jax.numpy as jnp

import portable_rnn

from ._harness import environment, max_rel_err, write_json

ATTENTION_ROUTES = ("xla", "chunked")
TPU_ATTENTION_ROUTES = ("splash", "flash")
ATTENTION_SHAPE = (2, 256, 4, 128)  # B, T, N, D (the Pallas kernels take D = 128)
SHAPE = (8, 16, 128, 128, 1)  # B, T, I, H, L: the Pallas kernel's H is a multiple of 128
QUICK = (2, 4, 3, 4, 1)


def families() -> list[str]:
    """The families of the public API: the names with an op and a weight initializer."""
    names = set(portable_rnn.__all__)
    return sorted(n for n in names if f"init_{n}_weight" in names)


def _states(name: str) -> int:
    """How many initial states the op takes (its positional arguments before ``weights``)."""
    import inspect

    params = list(inspect.signature(getattr(portable_rnn, name)).parameters)
    return params.index("weights") - 1


def case(name: str, dtype, implementation: str | None, shape=SHAPE) -> dict:
    B, T, I, H, L = shape
    op = getattr(portable_rnn, name)
    w = getattr(portable_rnn, f"init_{name}_weight")(jax.random.key(0), I, H, L, False)
    x = jax.random.normal(jax.random.key(1), (B, T, I), jnp.float32).astype(dtype)
    states = [jnp.zeros((L, B, H), dtype)] * _states(name)
    lengths = jnp.maximum(jnp.arange(T - B + 1, T + 1, dtype=jnp.int32), 0)  # ragged
    explain = getattr(portable_rnn, f"explain_{name}")

    def loss(w, x, impl):
        y, *_ = op(x, *states, w, lengths, I, H, L, 0.0, False, implementation=impl)
        return jnp.sum(y.astype(jnp.float32) ** 2)

    row = {"family": name, "dtype": jnp.dtype(dtype).name, "implementation": implementation}
    row["decision"] = explain(x, *states, w, lengths, I, H, L, 0.0, False,
                              implementation=implementation).implementation
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    row["hlo_sha256"] = hashlib.sha256(
        grad.lower(w, x, implementation).as_text().encode()).hexdigest()
    start = time.perf_counter()
    got = jax.block_until_ready(grad(w, x, implementation))
    row["first_call_s"] = round(time.perf_counter() - start, 3)
    want = jax.block_until_ready(grad(w, x, "scan"))
    row["max_rel_err_vs_scan"] = max(max_rel_err(g, r) for g, r in zip(got, want))
    return row


def attention_case(dtype, implementation: str | None, shape=ATTENTION_SHAPE) -> dict:
    B, T, N, D = shape
    q, k, v = (jax.random.normal(jax.random.key(i), (B, T, N, D), jnp.float32).astype(dtype)
               for i in range(3))

    def loss(q, k, v, impl):
        y = portable_rnn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        return jnp.sum(y.astype(jnp.float32) ** 2)

    row = {"family": "attention", "dtype": jnp.dtype(dtype).name,
           "implementation": implementation}
    row["decision"] = portable_rnn.explain_attention(
        q, k, v, is_causal=True, implementation=implementation).implementation
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)
    row["hlo_sha256"] = hashlib.sha256(
        grad.lower(q, k, v, implementation).as_text().encode()).hexdigest()
    start = time.perf_counter()
    got = jax.block_until_ready(grad(q, k, v, implementation))
    row["first_call_s"] = round(time.perf_counter() - start, 3)
    want = jax.block_until_ready(grad(q, k, v, "xla"))
    row["max_rel_err_vs_scan"] = max(max_rel_err(g, r) for g, r in zip(got, want))
    return row


def run(out_dir: str, shape=SHAPE) -> list[dict]:
    rows, path = [], os.path.join(out_dir, "registry_check.json")
    tpu = jax.default_backend() == "tpu"
    impls = [None, "scan"] + (["pallas"] if tpu else [])
    attention = [None, *ATTENTION_ROUTES, *(TPU_ATTENTION_ROUTES if tpu else ())]
    cases = [(name, impl) for name in families() for impl in impls]
    cases += [("attention", impl) for impl in attention]
    for name, impl in cases:
        for dtype in (jnp.float32, jnp.bfloat16):
            try:
                row = (attention_case(dtype, impl) if name == "attention" else
                       case(name, dtype, impl, shape))
            except Exception as e:  # recorded, and the run goes on
                row = {"family": name, "dtype": jnp.dtype(dtype).name,
                       "implementation": impl, "error": f"{type(e).__name__}: {e}"[:500]}
            rows.append(row)
            print(f"{name:11} {row['dtype']:9} {str(impl):7} "
                  f"{row.get('decision', '-'):8} "
                  f"err={row.get('max_rel_err_vs_scan', float('nan')):.2e} "
                  f"{row.get('hlo_sha256', row.get('error', ''))[:16]}")
            write_json(path, {"environment": environment(), "shape": list(shape),
                              "rows": rows})
    return rows


def compare(a_path: str, b_path: str) -> int:
    def keyed(path):
        with open(path) as f:
            return {(r["family"], r["dtype"], str(r["implementation"])): r
                    for r in json.load(f)["rows"]}
    a, b = keyed(a_path), keyed(b_path)
    differ = 0
    for key in sorted(set(a) | set(b)):
        ha, hb = a.get(key, {}).get("hlo_sha256"), b.get(key, {}).get("hlo_sha256")
        same = ha is not None and ha == hb
        differ += not same
        print(f"{' '.join(key):30} {'same' if same else 'DIFFERENT'}")
    print(f"{differ} case(s) differ")
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--compare", nargs=2, metavar=("A_JSON", "B_JSON"))
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a smoke run")
    args = parser.parse_args()
    if args.compare:
        raise SystemExit(1 if compare(*args.compare) else 0)
    if not args.out_dir:
        parser.error("OUT_DIR is required (or --compare A B)")
    run(args.out_dir, QUICK if args.quick else SHAPE)


if __name__ == "__main__":
    main()

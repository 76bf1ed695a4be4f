"""float32 attention on a TPU: the splash kernel against the dense path, at each precision.

    python -m benchmarks.attention_float32 OUT.json

Per shape and precision (the platform's DEFAULT, HIGHEST): the forward's largest error against
float64 softmax attention computed on the host, and the forward and forward+backward times of
`implementation="splash"` and `implementation="xla"` (interleaved rounds, medians). A case that
fails is recorded with its error. On a TPU only (the splash route needs one).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import portable_rnn

from ._harness import block, environment, interleaved, write_json

SHAPES = ((2, 1024, 4, 128, True), (4, 2048, 8, 128, False))  # B, T, N, H, causal


def float64_attention(q, k, v, causal: bool) -> np.ndarray:
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    T, S, H = q.shape[1], k.shape[1], q.shape[3]
    s = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(H)
    if causal:
        s = np.where(np.tril(np.ones((T, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bnts,bsnh->btnh", p / p.sum(-1, keepdims=True), v)


def case(B: int, T: int, N: int, H: int, causal: bool, precision: str, rounds: int) -> dict:
    """One shape at one precision: both routes' errors and times."""
    q, k, v = (jax.random.normal(key, (B, T, N, H), jnp.float32)
               for key in jax.random.split(jax.random.key(0), 3))
    want = float64_attention(q, k, v, causal)
    fns, errors = {}, {}
    for impl in ("splash", "xla"):
        def f(q, k, v, impl=impl):
            return portable_rnn.dot_product_attention(q, k, v, is_causal=causal,
                                                      precision=precision, implementation=impl)

        fwd = jax.jit(f)
        fwdbwd = jax.jit(jax.grad(lambda *a, f=f: jnp.sum(f(*a) ** 2), (0, 1, 2)))
        errors[impl] = float(np.max(np.abs(np.asarray(fwd(q, k, v)) - want)))
        fns[f"{impl} fwd"] = lambda fn=fwd: block(fn(q, k, v))
        fns[f"{impl} fwd+bwd"] = lambda fn=fwdbwd: block(fn(q, k, v))
    return dict(B=B, T=T, N=N, H=H, causal=causal, precision=precision, max_error=errors,
                ms=interleaved(fns, rounds))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    rows = []
    for shape in SHAPES:
        for precision in ("default", "highest"):
            try:
                rows.append(case(*shape, precision, args.rounds))
            except Exception as e:  # recorded: a shape that fails does not stop the others
                rows.append(dict(zip(("B", "T", "N", "H", "causal"), shape),
                                 precision=precision, error=f"{type(e).__name__}: {e}"[:2000]))
            print(rows[-1], flush=True)
    write_json(args.out, {"benchmark": "attention_float32", "environment": environment(),
                          "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

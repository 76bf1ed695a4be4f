"""The classic GRU (`portable_rnn.classic_gru`, Keras' ``GRU(reset_after=False)``) against the
GRU (`portable_rnn.gru`, the same sizes) and Keras' own ``GRU(reset_after=False)`` layer (its step
loop on the JAX backend), forward+backward.

    python -m benchmarks.classic_gru OUT_DIR            # on a CPU or a TPU (a few minutes)
    python -m benchmarks.classic_gru OUT_DIR --quick    # a smoke run, tiny shapes
    python -m benchmarks.classic_gru OUT_DIR --shape 16,64,32,64   # one shape B,T,I,H

Per shape and dtype: the gradient of a fixed loss of the outputs with respect to the inputs and
the weights (`jax.grad` under `jit`), for each implementation; first the classic GRU's outputs
are checked against Keras' on the same weights (max relative error), then the three are timed in
interleaved rounds (medians) and their ratios to the classic GRU's time reported. The classic
GRU has no hand-written backward step (JAX differentiates its step), the GRU has one: their
ratio is what the autodiff path costs this cell. Writes ``classic_gru.json``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import portable_rnn  # noqa: E402

from ._harness import environment, interleaved, max_rel_err, write_json  # noqa: E402

# (B, T, I, H)
CASES = [(16, 128, 64, 128), (64, 64, 128, 256)]
QUICK = [(2, 6, 3, 4)]
DTYPES = ("float32", "bfloat16")


def _keras_grad(w, I, H, dtype):
    """Keras' ``GRU(reset_after=False)`` holding the flat weights `w`: (the jitted gradient of
    the loss with respect to x and its trainable variables, its variables, its forward)."""
    import keras

    layer = keras.layers.GRU(H, reset_after=False, return_sequences=True,
                             dtype="mixed_bfloat16" if dtype == jnp.bfloat16 else "float32")
    layer.build((None, None, I))
    (arrays,) = portable_rnn.classic_gru_weights_to_keras(w, I, H, 1, False)
    layer.set_weights(arrays)
    trainable = [v.value for v in layer.trainable_variables]
    other = [v.value for v in layer.non_trainable_variables]

    def forward(trainable, x):
        return layer.stateless_call(trainable, other, x)[0]

    def loss(trainable, x, cot):
        return jnp.sum(forward(trainable, x).astype(jnp.float32) * cot)

    return jax.jit(jax.grad(loss, (0, 1))), trainable, jax.jit(forward)


def measure_case(case, dtype, rounds) -> dict:
    B, T, I, H = case
    k = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(k[0], (B, T, I), jnp.float32).astype(dtype)
    h0 = jnp.zeros((1, B, H), dtype)
    cot = jax.random.normal(k[1], (B, T, H), jnp.float32)
    w_classic = portable_rnn.init_classic_gru_weight(k[2], I, H, 1, False)
    w_gru = portable_rnn.init_gru_weight(k[3], I, H, 1, False)

    def op_grad(op):
        def loss(x, w):
            y, _ = op(x, h0, w, None, I, H, 1, 0.0, False)
            return jnp.sum(y.astype(jnp.float32) * cot)
        return jax.jit(jax.grad(loss, (0, 1)))

    classic, gru = op_grad(portable_rnn.classic_gru), op_grad(portable_rnn.gru)
    keras_grad, trainable, keras_forward = _keras_grad(w_classic, I, H, dtype)
    ours = portable_rnn.classic_gru(x, h0, w_classic, None, I, H, 1, 0.0, False)[0]
    err = max_rel_err(ours.astype(jnp.float32), keras_forward(trainable, x).astype(jnp.float32))
    fns = {"classic_gru": lambda: jax.block_until_ready(classic(x, w_classic)),
           "gru": lambda: jax.block_until_ready(gru(x, w_gru)),
           "keras_gru_reset_after_false": lambda: jax.block_until_ready(
               keras_grad(trainable, x, cot))}
    times = interleaved(fns, rounds)
    base = times["classic_gru"]["median_ms"]
    return {"case": f"B{B} T{T} I{I} H{H}", "dtype": str(jnp.dtype(dtype)),
            "max_rel_err_vs_keras": err, "times": times,
            "ratio_to_classic_gru": {n: t["median_ms"] / base for n, t in times.items()}}


def run(out_dir, quick, rounds, dtypes, shapes=None) -> dict:
    rows, errors = [], []
    path = os.path.join(out_dir, "classic_gru.json")
    for case in shapes or (QUICK if quick else CASES):
        for dtype in dtypes:
            label = f"{case} {dtype}"
            print(f"classic_gru {label}", flush=True)
            try:
                row = measure_case(case, jnp.dtype(dtype), rounds)
            except Exception as e:  # noqa: BLE001 - a failing case is recorded, run goes on
                errors.append({"case": label, "error": f"{type(e).__name__}: {e}"[:2000]})
                print(f"  FAILED {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            rows.append(row)
            ratios = ", ".join(f"{n} {r:.2f}x" for n, r in row["ratio_to_classic_gru"].items())
            print(f"  {row['times']['classic_gru']['median_ms']:.3f} ms; {ratios}; "
                  f"max rel. error vs Keras {row['max_rel_err_vs_keras']:.1e}", flush=True)
            write_json(path, {"family": "classic_gru", "environment": environment(),
                              "rows": rows, "errors": errors})
    payload = {"family": "classic_gru", "environment": environment(), "rows": rows,
               "errors": errors}
    write_json(path, payload)
    return payload


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="where classic_gru.json goes")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (any backend)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--shape", help="one shape B,T,I,H instead of the default ones")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 11)
    shapes = [tuple(int(n) for n in args.shape.split(","))] if args.shape else None
    payload = run(args.out_dir, args.quick, rounds, tuple(args.dtypes.split(",")), shapes)
    if payload["errors"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

# ruff: noqa: E402
import sys

sys.path.insert(0, "tests")
import jax

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_default_matmul_precision", "highest")
import test_low_precision as t

c = {
    "dtype": "bfloat16",
    "B": 1,
    "T": 64,
    "S": 64,
    "N": 1,
    "K": 1,
    "H": 8,
    "is_causal": False,
    "window": (0, 0),
    "bias": None,
    "mask": None,
    "q_len": None,
    "kv_len": None,
    "seed": 0,
}
c2 = dict(c, T=256, S=256, N=4, K=2, H=64, window=(3, 1), seed=5)
for case in (c, c2):
    for impl in ("xla",):
        try:
            t._attention_check(case, impl)
            print(sys.argv[1], case["T"], impl, "ok", flush=True)
        except AssertionError as e:
            print(sys.argv[1], case["T"], impl, "FAIL", str(e).splitlines()[0], flush=True)

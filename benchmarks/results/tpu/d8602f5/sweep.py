"""The splash route's float64 check (tests/test_attention_tpu.py) on two pinned and N drawn
cases, printing each case's errors in bfloat16 ulps instead of asserting: python sweep.py N."""

# ruff: noqa: E402
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, "tests")
import test_attention_tpu as t
from hypothesis import HealthCheck, given, settings

import references

worst = {}
cur = {}


def rec(got, want, dtype, ulps, what, floor=1.0, scale=None, terms=None):
    e = references.ulp_error(got, want, dtype, floor, scale, terms)
    cur[what] = e
    worst[what] = max(worst.get(what, 0), e)


t.assert_ulps = rec


@settings(
    max_examples=int(sys.argv[1]),
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(t.splash_cases())
def sweep(c):
    cur.clear()
    t.float64_check(c, "splash")
    print(c, {k: round(v, 2) for k, v in cur.items()}, flush=True)


c0 = t.case(B=2, N=4, K=2, q_len=[0, 40], seed=5828)
c1 = t.case(B=2, N=4, K=2, kv_len=[116, 75], seed=3162)
for c in (c0, c1):
    cur.clear()
    t.float64_check(c, "splash")
    print("pinned", {k: round(v, 2) for k, v in cur.items()}, flush=True)
sweep()
print("worst", {k: round(v, 2) for k, v in worst.items()})

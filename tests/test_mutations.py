"""The deliberate bugs of `tests/mutation` still apply: each snippet occurs exactly once in its
file, and the tests named to catch each one exist and run in CI: in a tier CI runs
(`tests/tiers.py`), not all of them in a file that only a GPU runs. (Running them is
`python -m tests.mutation`, docs/development.md, which also names the tier that catches each;
this keeps the set from rotting silently when code moves.)"""

import pathlib

import pytest
import tiers
from mutation import MUTATIONS
from mutation.__main__ import catching_tier

pytestmark = pytest.mark.cpu  # about the mutation runner's snippets

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_names_are_unique():
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_the_snippet_occurs_once_and_the_named_tests_exist(mutation):
    path = ROOT / "portable_rnn" / mutation.target
    assert path.is_file(), f"{mutation.name}: {path} is gone (moved?): update its target"
    count = path.read_text().count(mutation.old)
    assert count == 1, f"{mutation.name}: its snippet occurs {count} times in {path}"
    assert mutation.new != mutation.old
    for test in mutation.tests:
        file, _, name = test.partition("::")
        assert (ROOT / file).is_file(), f"{mutation.name}: no {file}"
        if name:
            assert f"def {name}(" in (ROOT / file).read_text(), f"{mutation.name}: no {test}"


GPU_ONLY = "pytestmark = pytest.mark.gpu"


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_the_named_tests_run_in_a_tier_ci_runs(mutation):
    reps = tiers.representatives()
    own = tiers.own_files(reps)
    for test in mutation.tests:
        tier, _ = tiers.tier_of(test, {}, False, reps, own)
        assert tier in tiers.CI_TIERS, f"{mutation.name}: {test} is in tier {tier}"
    files = {test.partition("::")[0] for test in mutation.tests}
    assert not all(GPU_ONLY in (ROOT / f).read_text() for f in files), (
        f"{mutation.name}: its tests run only on a CUDA GPU, which CI lacks")


def test_the_runner_names_the_catching_tier():
    assert catching_tier({}) == "none"
    assert catching_tier({"a": "full", "b": "default,tpu"}) == "default+tpu"
    assert catching_tier({"a": "full"}) == "full"
    assert catching_tier({"a": "full,tpu"}) == "full+tpu"

"""The deliberate bugs of `tests/mutation` still apply: each snippet occurs exactly once in its
file, and the tests named to catch each one exist. (Running them is `python -m tests.mutation`,
docs/development.md; this keeps the set from rotting silently when code moves.)"""

import pathlib

import pytest
from mutation import MUTATIONS

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

"""The suite's tiers (`tests/tiers.py`): the files and tests they name exist, each registered
family has a representative of its own shared code path, and the option's meaning."""

import pathlib

import pytest
import tiers

from portable_rnn._src.recurrent.families import FOLDERS

pytestmark = pytest.mark.cpu  # about the suite's own configuration

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted(tiers.FULL_FILES | tiers.UNNARROWED_FILES
                                        | tiers.TPU_FILES))
def test_named_files_exist(path):
    assert (ROOT / path).is_file(), f"tests/tiers.py names {path}, which is gone: update it"


@pytest.mark.parametrize("test", sorted(tiers.FULL_TESTS))
def test_named_tests_exist(test):
    path, function = tiers.path_and_function(test)
    assert f"def {function}(" in (ROOT / path).read_text(), f"tests/tiers.py names {test}"


def test_each_family_is_represented_by_a_family_of_its_shared_path():
    reps = tiers.representatives()
    assert set(reps) == set(FOLDERS)
    for name, rep in reps.items():
        assert reps[rep] == rep
        assert tiers.shared_path(FOLDERS[name]) == tiers.shared_path(FOLDERS[rep])
    paths = {tiers.shared_path(FOLDERS[rep]) for rep in set(reps.values())}
    assert len(paths) == len(set(reps.values())), "two representatives of one path"


def test_tier_of_narrows_registry_parameters_but_not_the_families_own_files():
    reps = tiers.representatives()
    own = tiers.own_files(reps)
    others = sorted(name for name, rep in reps.items() if rep != name)
    if not others:
        pytest.skip("every family is its own path's representative")
    other = others[0]
    narrowed = tiers.tier_of("tests/test_x.py::test_y[a]", {"family": other}, False, reps, own)
    assert narrowed[0] == tiers.FULL and reps[other] in narrowed[1]
    assert tiers.tier_of("tests/test_x.py::test_y[a]", {"family": reps[other]}, False, reps,
                         own)[0] == tiers.DEFAULT
    for path in [*tiers.UNNARROWED_FILES, *own]:
        assert tiers.tier_of(f"{path}::test_y[a]", {"family": other}, False, reps,
                             own)[0] == tiers.DEFAULT
    assert tiers.tier_of("tests/test_x.py::test_y", {}, True, reps, own)[0] == tiers.FULL
    for path in tiers.FULL_FILES:
        assert tiers.tier_of(f"{path}::test_y", {}, False, reps, own)[0] == tiers.FULL


def test_argument_checks_of_a_represented_family_run_in_the_full_tier():
    """The argument checks name their family in the target (``"init_mgu_weight"``,
    ``"linen.SLSTM(call)"``): a represented family's run in the full tier, its own file and
    its structure tests in the default tier; the representatives' in the default tier."""
    reps = tiers.representatives()
    own = tiers.own_files(reps)
    others = sorted(name for name, rep in reps.items() if rep != name)
    if not others:
        pytest.skip("every family is its own path's representative")

    def tier(family):
        cls = FOLDERS[family].family.class_name
        return {target: tiers.tier_of("tests/test_bad_input.py::test_bad_input[x]",
                                      {"target": target, "kind": "sizes"}, False, reps, own)[0]
                for target in (family, f"explain_{family}", f"init_{family}_weight",
                               f"linen.{cls}(call)", f"equinox.{cls}(config)")}

    for family in others:
        assert set(tier(family).values()) == {tiers.FULL}, (family, tier(family))
        for path in {*tiers.UNNARROWED_FILES, f"tests/test_{family}.py"} & {
                *tiers.UNNARROWED_FILES, *own}:
            assert tiers.tier_of(f"{path}::test_y[a]", {"family": family}, False, reps,
                                 own)[0] == tiers.DEFAULT, path
    for family in set(reps.values()):
        assert set(tier(family).values()) == {tiers.DEFAULT}, (family, tier(family))
    # a docstring's example is narrowed by the object it documents
    other = others[0]
    cls = FOLDERS[other].family.class_name
    assert tiers.tier_of(f"portable_rnn/linen.py::portable_rnn.linen.{cls}", {}, False, reps,
                         own)[0] == tiers.FULL
    assert tiers.tier_of("portable_rnn/linen.py::portable_rnn.linen.LSTM", {}, False, reps,
                         own)[0] == tiers.DEFAULT
    # the longest name wins: the classic GRU's targets are not read as the GRU's
    assert tiers.named_families("init_classic_gru_weight", reps) == ["classic_gru"]
    assert tiers.named_families("linen.SimpleRNN(call)", reps) == ["simple_rnn"]


def test_the_chosen_tier(monkeypatch):
    monkeypatch.delenv(tiers.ENV, raising=False)
    assert tiers.chosen(None, True) == tiers.DEFAULT  # the README's command
    assert tiers.chosen(None, False) == tiers.ALL  # named files or tests
    assert tiers.chosen("full", True) == tiers.FULL
    monkeypatch.setenv(tiers.ENV, "tpu")
    assert tiers.chosen(None, True) == tiers.TPU
    assert tiers.chosen("default", False) == tiers.DEFAULT
    monkeypatch.setenv(tiers.ENV, "fast")
    with pytest.raises(ValueError, match="must be one of"):
        tiers.chosen(None, True)


def test_selection():
    assert tiers.selected(tiers.ALL, tiers.FULL, False, False)
    assert tiers.selected(tiers.DEFAULT, tiers.DEFAULT, True, False)
    assert not tiers.selected(tiers.DEFAULT, tiers.FULL, False, False)
    assert tiers.selected(tiers.TPU, tiers.FULL, True, False)
    assert not tiers.selected(tiers.TPU, tiers.DEFAULT, True, True)  # runs on the host anyway
    assert not tiers.selected(tiers.TPU, tiers.DEFAULT, False, False)
    assert set(tiers.CI_TIERS) == {tiers.DEFAULT, tiers.FULL}

"""The suite's tiers: which tests the README's command runs, which CI adds, which the TPU runs.

Every test is in one of two CPU tiers, assigned here (by `tests/conftest.py`, at collection), so
that no test file needs a marker of its own:

- ``default``: the README's test command (``python -m pytest -n auto``). Every test file but the
  ones of `FULL_FILES`; registry-parametrized tests for one representative family per shared
  code path (`representatives`), the families' own files (``tests/test_<family>.py``) and the
  registry's structure tests for every family (`UNNARROWED_FILES`).
- ``full``: what CI runs beyond the default tier (``--tier full``): the other families'
  cases of the registry-parametrized tests, the tests marked ``slow``, the tests of
  `FULL_TESTS` and the files of `FULL_FILES` (the project's tooling, long end-to-end runs).

CI (`.ci/run`) runs both, so every test runs in CI. On top of them, the ``tpu`` tier: the tests
of `TPU_FILES` not marked ``cpu`` (the Pallas kernels, the splash attention route, the 16-bit
and float32 precision a TPU computes differently), which run in both CPU tiers too (interpreted
there) and which a TPU machine runs compiled for the chip (`--tier tpu`, docs/development.md,
"The TPU tier").

The tier is chosen with ``--tier`` or the ``PORTABLE_RNN_TIER`` environment variable:
``default``, ``full``, ``all`` (both) or ``tpu``. Without either, a run without file arguments
(the README's command) runs the default tier, and a run of named files or tests runs all of
their tests.
"""

from __future__ import annotations

import os
import re

DEFAULT, FULL, TPU, ALL = "default", "full", "tpu", "all"
CHOICES = (DEFAULT, FULL, ALL, TPU)
CI_TIERS = (DEFAULT, FULL)  # `.ci/run` runs both
ENV = "PORTABLE_RNN_TIER"

# Whole files in the full tier, each with quicker default-tier tests on the portable paths they
# build on: the project's own tooling; the platform-specific routes run on a CPU (the cuDNN
# emulation, other platforms' options, XLA:CPU's products, the TPU's Pallas kernels in
# interpret mode: the TPU tier runs those compiled on the chip); the ported upstream suites.
FULL_FILES = frozenset({
    # the project's tooling: the benchmarks' quick runs, the mutation runner's data, the
    # documentation's code blocks (CI's docs build renders the pages), the stubs' type checks,
    # the examples end to end
    "tests/test_benchmarks.py",
    "tests/test_mutations.py",
    "tests/test_docs.py",
    "tests/test_stubs.py",
    "tests/test_examples.py",
    # the test inputs' draws, bit for bit jax.random's (a test's inputs need not be)
    "tests/test_draws.py",
    # the cuDNN routes, emulated on a CPU
    "tests/test_cudnn_ffi.py",
    "tests/test_cudnn_route.py",
    "tests/test_gpu_routes.py",
    "tests/test_attention_cudnn.py",
    "tests/test_emulation_strict.py",
    "tests/test_platforms.py",
    "tests/test_platform_options.py",
    # XLA:CPU's own products
    "tests/test_cpu_products.py",
    # the TPU's Pallas kernels and splash attention, interpreted (the TPU tier compiles them)
    "tests/test_pallas_route.py",
    "tests/test_attention_tpu.py",
    # Flax's, JAX's and jax.nn's own tests ported
    "tests/test_upstream_attention.py",
    "tests/test_parity.py",
    # Flax attention's sown weights (the layer itself: test_flax_layers.py), and the 8-device
    # sharding (the same paths on one device everywhere else)
    "tests/test_sow_weights.py",
    "tests/test_sharding.py",
})

# Single tests (file::function, every parametrization) in the full tier: long ones whose code
# path a quicker default-tier test also runs.
FULL_TESTS = frozenset({
    # 16-bit attention against float64 on every route; the default tier's
    # test_equivalence_matrix.py::test_attention_paths_equal_jax_nn runs the same routes
    "tests/test_low_precision.py::test_attention_16_bit_equals_float64_softmax_attention",
    # the cuDNN routes, emulated (their own files are in the full tier)
    "tests/test_equivalence_matrix.py::test_attention_cudnn_route_equals_xla",
    "tests/test_equivalence_matrix.py::test_lstm_cudnn_route_equals_scan",
    # the batch (and heads) sharded over CPU devices, as tests/test_sharding.py (a full-tier
    # file); the default tier runs the same paths on one device: test_equivalence_matrix.py's
    # test_lstm_equals_lstm_ref, test_family_gradients_equal_autodiff_of_a_loop and
    # test_attention_paths_equal_jax_nn (outputs and gradients)
    "tests/test_equivalence_matrix.py::test_lstm_sharded_equals_unsharded",
    "tests/test_equivalence_matrix.py::test_family_sharded_equals_unsharded",
    "tests/test_equivalence_matrix.py::test_attention_sharded_equals_unsharded",
    "tests/test_low_precision.py::test_cudnn_attention_route_16_bit_equals_float64_softmax_attention",
    # fresh interpreters importing Keras (the layers' own tests import it in-process)
    "tests/test_keras_layers.py::test_importing_the_layers_defaults_keras_to_jax",
    "tests/test_keras_layers.py::test_layer_modules_load_on_first_attribute_access",
    # finite differences of the autodiff path (the default tier holds it to autodiff of a loop)
    "tests/test_autodiff_backward.py::test_autodiff_path_is_exact_in_float64_against_finite_differences",
    # the hand-written backward against autodiff at float32, drawn over every kind (the
    # default tier runs it per kind at float64: test_hand_written_backward_equals_autodiff_float64)
    "tests/test_autodiff_backward.py::test_hand_written_backward_equals_autodiff_float32",
    # the MGU against a float64 loop of Flax's equations (the default tier: against Flax's
    # MGUCell itself, test_equals_flax_mgu_cell_forward_and_gradients, and the float64 loop)
    "tests/test_mgu.py::test_equals_the_float64_loop_of_flaxs_equations",
    # the Equinox layers against Equinox's cells under scan with gradients (the default tier:
    # test_configurations.py's equinox configurations against the float64 reference)
    "tests/test_equinox_layers.py::test_matches_equinox_cells_under_scan_with_gradients",
})

# Files whose family-parametrized tests run every family in the default tier: the registry's
# structure tests (cheap, and what a new family's folder must hold). The argument checks
# (`test_bad_input.py`) are narrowed like the rest: the checks are the shared ones
# (`recurrent.api.check_args`) under each family's names, and a family's own options are
# checked in its own file.
UNNARROWED_FILES = frozenset({"tests/test_cell_folders.py"})

# The chip tier: files whose tests (but the ones marked `cpu`) exercise what a TPU computes
# differently from a CPU.
TPU_FILES = frozenset({
    "tests/test_attention_tpu.py",
    "tests/test_pallas_route.py",
    "tests/test_low_precision.py",
})

# Test kinds of `family_helpers` (a family with an option) -> their family.
KIND_FAMILY = {"rnn_tanh": "simple_rnn", "rnn_relu": "simple_rnn", "lstm_proj": "lstm"}


def shared_path(folder) -> tuple[bool, bool, bool]:
    """The generic code a family's cell takes (`recurrent/cell.py`'s protocol): whether it
    computes its own recurrent products (then JAX differentiates its forward), whether it has
    the hand-written backward part, and whether that part shares one gradient between the
    input projection and the recurrent product (`shared_dz`)."""
    from portable_rnn._src.recurrent import cell

    fam = folder.family
    c = folder.make_cell(**{o: fam.layer_options[o] for o in fam.call_options
                            if o in fam.layer_options})
    hand_written = cell.hand_written_backward(c)
    return cell.own_products(c), hand_written, bool(hand_written and c.shared_dz)


def representatives() -> dict[str, str]:
    """Each registered family -> the family that represents its shared code path in the default
    tier: the first of the registry's order with the same `shared_path`."""
    from portable_rnn._src.recurrent.families import FOLDERS

    first: dict[tuple, str] = {}
    return {name: first.setdefault(shared_path(folder), name) for name, folder in FOLDERS.items()}


def own_files(families) -> frozenset[str]:
    """The families' own test files, ``tests/test_<family>.py`` (where one exists)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return frozenset(f"tests/test_{name}.py" for name in families
                     if os.path.exists(os.path.join(here, f"test_{name}.py")))


def class_family() -> dict[str, str]:
    """The layers' class names (and Keras layer names that one family alone claims) -> their
    family, as test parameters name them."""
    from portable_rnn._src.recurrent.families import FAMILIES

    keras = [f.keras_layer for f in FAMILIES.values()]
    out = {f.class_name: f.name for f in FAMILIES.values()}
    out.update({f.keras_layer: f.name for f in FAMILIES.values()
                if f.keras_layer and keras.count(f.keras_layer) == 1})
    return out


def path_and_function(nodeid: str) -> tuple[str, str]:
    """``("tests/test_x.py", "test_y")`` from a node id (parameters and classes dropped)."""
    path, _, rest = nodeid.partition("::")
    return path, rest.split("::")[-1].split("[")[0]


def named_families(name: str, reps) -> list[str]:
    """The families a parameter value names: itself, where it is a family, a test kind or a
    layer class; else the family, kind and class names it holds between separators, longest
    first (``"init_classic_gru_weight"``: the classic GRU, not the GRU; ``"linen.SLSTM(call)"``)."""
    names = {**class_family(), **KIND_FAMILY, **{f: f for f in reps}}
    if name in names:
        return [names[name]]
    out = []
    for n in sorted(names, key=len, reverse=True):
        pattern = rf"(?<![0-9A-Za-z]){re.escape(n)}(?![0-9A-Za-z])"
        if re.search(pattern, name):
            out.append(names[n])
            name = re.sub(pattern, " ", name)
    return out


def non_representative_family(params, reps) -> str | None:
    """The first family a parameter value names (`named_families`) that is not its path's
    representative, or None."""
    for value in params.values():
        name = getattr(value, "name", value) if not isinstance(value, str) else value
        if not isinstance(name, str):
            continue
        for family in named_families(name, reps):
            if reps.get(family, family) != family:
                return family
    return None


def tier_of(nodeid: str, params, slow: bool, reps, own) -> tuple[str, str]:
    """(tier, why) of one test: `params` its parametrization (a dict), `slow` whether it is
    marked slow, `reps` from `representatives`, `own` from `own_files`."""
    path, function = path_and_function(nodeid)
    if path in FULL_FILES:
        return FULL, "tooling or end-to-end file"
    if f"{path}::{function}" in FULL_TESTS:
        return FULL, "long test, its path run by a quicker one"
    if slow:
        return FULL, "marked slow"
    if not path.startswith("tests/"):  # a docstring's example: narrowed by what it documents
        params = {**params, "doctest": function}
    if path not in UNNARROWED_FILES and path not in own:
        family = non_representative_family(params, reps)
        if family is not None:
            return FULL, f"{family}: its path is represented by {reps[family]}"
    return DEFAULT, ""


def chosen(option: str | None, from_testpaths: bool) -> str:
    """The tier a run selects: `--tier`, else $PORTABLE_RNN_TIER, else the default tier for a
    run of the configured test paths and every tier for a run of named files or tests."""
    tier = option or os.environ.get(ENV) or (DEFAULT if from_testpaths else ALL)
    if tier not in CHOICES:
        raise ValueError(f"the test tier must be one of {CHOICES} (--tier or ${ENV}); "
                         f"got {tier!r}")
    return tier


def selected(tier: str, item_tier: str, tpu: bool, cpu: bool) -> bool:
    """Whether a test of `item_tier` (marked tpu, cpu as given) runs in a run of `tier`."""
    if tier == ALL:
        return True
    if tier == TPU:
        return tpu and not cpu
    return item_tier == tier

"""The layers' default initialisation against its documented distribution, weight by weight.

Documented (`portable_rnn/_src/layers/docs.py`, the families' ``projection_init``, the
``init_<family>_weight`` functions): every ``W_ih``, ``W_hh``, ``b_ih``, ``b_hh`` and ``W_hr`` of
the Flax Linen, Flax NNX and Equinox layers, and the flat vector of the functional
``init_<family>_weight``, is drawn from PyTorch's ``U(-1/sqrt(H), 1/sqrt(H))``. The Keras layers
are Keras' own classes (their constructor, weights and config are ``keras.layers.<Layer>``'s):
their documented defaults are Keras', ``glorot_uniform`` kernels (``U(-l, l)``,
``l = sqrt(6 / (fan_in + fan_out))``), ``orthogonal`` recurrent kernels, ``zeros`` biases and,
with ``unit_forget_bias`` (the LSTM), ones for the forget gate's bias.

Each family comes from the registry (`FAMILIES`), each layer class from its framework's module
by the family's class name, at H = 256 with 2 layers, both directions (every kind of weight:
the second layer's ``W_ih`` reads D*H features) and, where the family has one, a projection.

The checks of an array that should be ``U(-b, b)``, n values (n >= H = 256), fixed seeds so
that each run draws the same values:

- every value within ``[-b, b]``;
- Kolmogorov-Smirnov against ``U(-b, b)`` (`scipy.stats.kstest`, SciPy being a dependency of
  JAX): p-value above ``ALPHA`` = 1e-4, the false-alarm rate per array for independent uniform
  draws (about 200 arrays: an expected 0.02 false alarms; with the fixed seeds a pass is
  deterministic);
- the mean within 5 standard errors of 0 (``5 * b / sqrt(3 n)``) and the variance within 5
  standard errors of ``b**2 / 3`` (the sample variance of a uniform has standard error
  ``b**2 * sqrt(4 / 45 / n)``);
- no two arrays of one layer equal (each drawn from its own key).

A bug that initialises every bias to zero, or draws with the bound of I instead of H, fails the
first three (`tests/mutation`, ``layer-biases-initialised-to-zero``).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import importlib  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import stats  # noqa: E402

import portable_rnn  # noqa: E402
from portable_rnn._src.recurrent import layout  # noqa: E402
from portable_rnn._src.recurrent.families import FAMILIES  # noqa: E402

pytestmark = pytest.mark.cpu  # initialisers: the same draws on every platform

H, I, L = 256, 3, 2
P = H // 4  # the projection size, for a family with one
ALPHA = 1e-4
SIGMAS = 5.0
FAMILY_NAMES = sorted(FAMILIES)


def options(fam):
    """The layer's keyword options: a projection where the family has one."""
    return {"proj_size": P} if fam.projection else {}


def check_uniform(name, a, bound):
    """`a` drawn from U(-bound, bound): bounds, Kolmogorov-Smirnov, mean and variance."""
    values = np.asarray(a, np.float64).ravel()
    n = values.size
    assert n >= 256, f"{name}: {n} values are too few for the statistics"
    assert np.all(np.abs(values) <= bound), (
        f"{name}: values outside [-{bound:.4g}, {bound:.4g}]: {np.abs(values).max():.4g}")
    ks = stats.kstest(values, stats.uniform(loc=-bound, scale=2 * bound).cdf)
    assert ks.pvalue > ALPHA, (f"{name}: not U(-{bound:.4g}, {bound:.4g}): Kolmogorov-Smirnov "
                               f"D={ks.statistic:.4f}, p={ks.pvalue:.2g} (n={n})")
    mean_se = bound / np.sqrt(3 * n)
    assert abs(values.mean()) <= SIGMAS * mean_se, (
        f"{name}: mean {values.mean():.4g}, more than {SIGMAS} standard errors "
        f"({mean_se:.3g}) from 0")
    var, var_se = bound**2 / 3, bound**2 * np.sqrt(4 / 45 / n)
    assert abs(values.var() - var) <= SIGMAS * var_se, (
        f"{name}: variance {values.var():.4g}, more than {SIGMAS} standard errors ({var_se:.3g})"
        f" from {var:.4g}")


def check_distinct(arrays):
    """No two arrays of the same shape hold the same values (each has its own key)."""
    seen = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        for other, b in seen.items():
            assert a.shape != b.shape or not np.array_equal(a, b), f"{name} equals {other}"
        seen[name] = a


def flatten(tree, prefix=""):
    """``{"layer_0/forward/W_ih": array, ...}`` from a nested dict of arrays (or NNX Params)."""
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if hasattr(value, "items"):
            out.update(flatten(value, path + "/"))
        else:
            out[path] = getattr(value, "value", value)
    return out


def expected_names(fam):
    """The weight names every layer and direction holds, from the layout."""
    shapes = layout.param_shapes(I, H, L, True, fam, P if fam.projection else 0)
    return [sorted(s) for s in shapes]


def check_tree(fam, arrays):
    """Every weight of the 2-layer bidirectional tree drawn from U(-1/sqrt(H), 1/sqrt(H))."""
    names = expected_names(fam)
    assert len(arrays) == sum(len(n) for n in names), sorted(arrays)
    for name, a in sorted(arrays.items()):
        check_uniform(f"{fam.name} {name}", a, 1 / np.sqrt(H))
    check_distinct(arrays)


def linen_params(fam):
    linen = importlib.import_module("portable_rnn.linen")
    layer = getattr(linen, fam.class_name)(H, L, bidirectional=True, **options(fam))
    variables = layer.lazy_init(jax.random.key(0), jax.ShapeDtypeStruct((1, 1, I), jnp.float32))
    return flatten(variables["params"])


def nnx_params(fam):
    from flax import nnx

    pnnx = importlib.import_module("portable_rnn.nnx")
    layer = getattr(pnnx, fam.class_name)(I, H, L, bidirectional=True, rngs=nnx.Rngs(0),
                                          **options(fam))
    return flatten(nnx.to_pure_dict(nnx.state(layer, nnx.Param)))


def equinox_params(fam):
    pytest.importorskip("equinox", reason="needs equinox (the equinox extra)")
    peqx = importlib.import_module("portable_rnn.equinox")
    layer = getattr(peqx, fam.class_name)(I, H, L, bidirectional=True, key=jax.random.key(0),
                                          **options(fam))
    return flatten(layer.params)


def functional_params(fam):
    init = getattr(portable_rnn, f"init_{fam.name}_weight")
    w = init(jax.random.key(0), I, H, L, True, **options(fam))
    groups = layout.unpack(w, I, H, L, True, fam, P if fam.projection else 0)
    return {f"pseudo-layer {p}/{name}": a for name, group in groups.items()
            for p, a in group.items()}


FRAMEWORKS = {"linen": linen_params, "nnx": nnx_params, "equinox": equinox_params,
              "functional": functional_params}


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_every_weight_is_drawn_from_pytorchs_uniform(framework, family):
    check_tree(FAMILIES[family], FRAMEWORKS[framework](FAMILIES[family]))


def test_the_checks_reject_a_zero_bias_and_a_wrong_bound():
    """The checks themselves: zeros, the bound of I instead of H and a half-width draw fail."""
    bound = 1 / np.sqrt(H)
    draw = lambda b, n=4 * H: jax.random.uniform(jax.random.key(1), (n,), minval=-b, maxval=b)  # noqa: E731
    check_uniform("right", draw(bound), bound)
    with pytest.raises(AssertionError, match="not U"):
        check_uniform("zeros", np.zeros(4 * H), bound)
    with pytest.raises(AssertionError, match="outside"):
        check_uniform("bound of I", draw(1 / np.sqrt(I)), bound)
    with pytest.raises(AssertionError, match="not U"):
        check_uniform("half width", draw(bound / 2), bound)
    with pytest.raises(AssertionError, match="equals"):
        check_distinct({"a": draw(bound), "b": draw(bound)})


# --- Keras: Keras' own documented defaults --------------------------------------------------------

KERAS_FAMILIES = sorted(name for name, fam in FAMILIES.items() if fam.keras_layer)


def keras_layer(fam, bidirectional):
    keras = pytest.importorskip("keras", reason="needs keras>=3 (the test extra)")
    if keras.backend.backend() != "jax":
        pytest.skip(f"keras was imported with the {keras.backend.backend()} backend")
    pkeras = importlib.import_module("portable_rnn.keras")
    keras.utils.set_random_seed(0)
    layer = getattr(pkeras, fam.keras_layer)(H, **fam.keras_config)
    if bidirectional:
        layer = pkeras.Bidirectional(layer)
    layer.build((None, None, I))
    return layer


def initializer_name(config, key):
    value = config[key]
    return value["class_name"] if isinstance(value, dict) else value


@pytest.mark.parametrize("bidirectional", [False, True], ids=["layer", "Bidirectional"])
@pytest.mark.parametrize("family", KERAS_FAMILIES)
def test_keras_weights_follow_keras_documented_defaults(family, bidirectional):
    fam = FAMILIES[family]
    layer = keras_layer(fam, bidirectional)
    layers = [layer.forward_layer, layer.backward_layer] if bidirectional else [layer]
    arrays = {}
    for sub in layers:
        config = sub.get_config()
        assert initializer_name(config, "kernel_initializer") in ("GlorotUniform",
                                                                  "glorot_uniform")
        assert initializer_name(config, "recurrent_initializer") in (
            "Orthogonal", "orthogonal", "OrthogonalInitializer")  # the last: Keras 3.0
        assert initializer_name(config, "bias_initializer") in ("Zeros", "zeros")
        weights = {w.path.split("/")[-1]: np.asarray(w.value) for w in sub.weights}
        assert sorted(weights) == ["bias", "kernel", "recurrent_kernel"], sorted(weights)
        kernel, recurrent, bias = weights["kernel"], weights["recurrent_kernel"], weights["bias"]
        G = fam.gates
        assert kernel.shape == (I, G * H) and recurrent.shape == (H, G * H)
        # glorot_uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)).
        check_uniform(f"{sub.name} kernel", kernel, np.sqrt(6 / (I + G * H)))
        # orthogonal: the (H, G*H) matrix has orthonormal rows.
        np.testing.assert_allclose(recurrent @ recurrent.T, np.eye(H), atol=1e-4,
                                   err_msg=f"{sub.name} recurrent_kernel is not orthogonal")
        # zeros; with unit_forget_bias, ones for the forget gate (Keras' gate order i, f, c, o).
        expected = np.zeros_like(bias)
        if config.get("unit_forget_bias"):
            expected[..., H:2 * H] = 1
        np.testing.assert_array_equal(bias, expected, err_msg=f"{sub.name} bias")
        arrays.update({f"{sub.name}/{k}": v for k, v in weights.items() if k != "bias"})
    check_distinct(arrays)

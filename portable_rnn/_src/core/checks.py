"""Argument checks shared by the public functions; each error names the argument, expected and got.

Checks read only shapes and dtypes, so they run at trace time and accept `jax.ShapeDtypeStruct`s.
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import checkify


def own_rank_promotion(fn):
    """Runs `fn` with implicit rank promotion allowed, whatever ``jax_numpy_rank_promotion`` says.

    portable_rnn broadcasts on purpose (a bias over the batch, a gate vector over the rows); the
    user's ``"raise"`` or ``"warn"`` is about their own code, as for `jax.experimental.rnn.lstm_ref`
    and `jax.nn.dot_product_attention`. Decorates the public functions and every custom backward
    pass (traced later, outside the public call).
    """
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.numpy_rank_promotion("allow"):
            return fn(*args, **kwargs)
    return wrapped


def shape_dtype(name: str, a) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of an array, a NumPy array or a `jax.ShapeDtypeStruct`."""
    try:
        return tuple(a.shape), np.dtype(a.dtype)
    except (AttributeError, TypeError):
        raise TypeError(f"`{name}` must be an array; got {type(a).__name__}.") from None


def array(name: str, a) -> jax.Array:
    """`a` as a JAX array (arrays, NumPy arrays, nested lists of numbers); names it otherwise."""
    if a is None:
        raise TypeError(f"`{name}` must be an array; got None.")
    try:
        return jnp.asarray(a)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be an array; got {type(a).__name__} {a!r:.80}.") from None


def prng_key(name: str, key) -> None:
    """A single PRNG key: a typed key of shape () or a raw uint32 key (`jax.random.PRNGKey`)."""
    try:
        shape, dtype = tuple(key.shape), key.dtype
    except AttributeError:
        raise TypeError(f"`{name}` must be a PRNG key (e.g. `jax.random.key(0)`); got "
                        f"{type(key).__name__} {key!r:.80}.") from None
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if shape:
            raise ValueError(f"`{name}` must be a single PRNG key (shape ()); got a key array of "
                             f"shape {shape}.")
    elif np.dtype(dtype) != np.uint32 or len(shape) != 1:
        raise TypeError(f"`{name}` must be a PRNG key (e.g. `jax.random.key(0)`, or a raw uint32 "
                        f"key from `jax.random.PRNGKey`); got a {np.dtype(dtype)} array of shape "
                        f"{shape}.")


def static_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"`{name}` must be a static Python int, not a traced value; mark it "
                        "static (e.g. `jax.jit(..., static_argnames=...)`).")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"`{name}` must be an integer >= {low}; got {value!r}.")
    return int(value)


def static_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be a Python bool; got {value!r}.")
    return bool(value)


def rate(name: str, value) -> float:
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"`{name}` must be a static Python float, not a traced value.")
    if isinstance(value, (bool, np.bool_)):  # jax.experimental.rnn passes `dropout=False`
        value = float(value)
    if not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1]; got {value!r}.")
    return float(value)


def floating(name: str, dtype: np.dtype, complex_too: bool = False) -> None:
    if jax.numpy.issubdtype(dtype, jax.numpy.floating) or (
            complex_too and jax.numpy.issubdtype(dtype, jax.numpy.complexfloating)):
        return
    raise TypeError(f"`{name}` must have a floating dtype (float32, bfloat16, float16, "
                    f"float64){' or a complex one' if complex_too else ''}; got {dtype}.")


def expect_shape(name: str, shape, expected, legend: str) -> None:
    if tuple(shape) != tuple(expected):
        raise ValueError(f"`{name}` must have shape {legend}={tuple(expected)}; "
                         f"got {tuple(shape)}.")


def state_shape(name: str, shape, expected, legend: str, *, x_name: str, batch, steps: int,
                size_name: str) -> None:
    """`expect_shape` for an initial state (L*D, *batch, size) of an input (*batch, T, I), with a
    hint at the likely cause when the shapes point at one: a time-major input, a wrong size."""
    shape, expected, batch = tuple(shape), tuple(expected), tuple(batch)
    if shape == expected:
        return
    hints = []
    if len(shape) == len(expected) - 1 and shape == expected[1:]:
        hints.append("it lacks the leading num_layers * num_directions axis"
                     + (f" (e.g. `{name}[None]`)" if expected[0] == 1 else ""))
    elif len(shape) == len(expected):
        if shape[1:-1] != batch and shape[1:-1] == (steps,):
            hints.append(f"its batch size {steps} is the length of `{x_name}`'s time axis: "
                         f"`{x_name}` looks time-major, (time, batch, features); pass it "
                         f"batch-major, (batch, time, features), e.g. "
                         f"`jnp.swapaxes({x_name}, 0, 1)`")
        if shape[-1] != expected[-1]:
            hints.append(f"its last axis is {shape[-1]}, not {size_name}={expected[-1]}: check "
                         f"`{size_name}`")
        if shape[0] != expected[0]:
            hints.append(f"its first axis is {shape[0]}, not num_layers * num_directions="
                         f"{expected[0]}: check `num_layers` and `bidirectional`")
    hint = "".join(f"; {h}" for h in hints)
    raise ValueError(f"`{name}` must have shape {legend}={expected}; got {shape}{hint}.")


def _one_precision(value) -> bool:
    if value is None or isinstance(value, (lax.Precision, lax.DotAlgorithm,
                                           lax.DotAlgorithmPreset)):
        return True
    if isinstance(value, str):
        try:
            lax.Precision(value)
        except (ValueError, KeyError):
            return False
        return True
    return False


def precision(value) -> None:
    ok = _one_precision(value) or (isinstance(value, tuple) and len(value) == 2
                                   and all(isinstance(v, (lax.Precision, str)) and
                                           _one_precision(v) for v in value))
    if not ok:
        raise ValueError("`precision` must be None, a `jax.lax.Precision` (or its name, e.g. "
                         f"'highest'), a pair of them, or a dot algorithm; got {value!r}.")


def asks_other_products(precision, algorithm) -> bool:
    """Whether `precision` (None: ``jax_default_matmul_precision``) asks 16-bit operands for other
    products than exact ones accumulated in float32, `algorithm` (a ``lax.DotAlgorithmPreset``).

    Every `lax.Precision` gives 16-bit operands those products (a precision chooses how float32
    operands are rounded), and so do the ``DEFAULT`` preset and `algorithm` itself; any other dot
    algorithm asks for products a fused 16-bit kernel does not compute.
    """
    if precision is None:
        precision = jax.config.jax_default_matmul_precision
    plain = isinstance(precision, tuple) and not isinstance(precision, lax.DotAlgorithm)
    for value in precision if plain else (precision,):
        if isinstance(value, str):
            try:
                value = lax.Precision(value)
            except ValueError:  # a dot algorithm's name, as jax_default_matmul_precision
                value = getattr(lax.DotAlgorithmPreset, value, value)
        if not (value is None or isinstance(value, lax.Precision) or value in (
                lax.DotAlgorithmPreset.DEFAULT, algorithm)):
            return True
    return False


def precision_text(value) -> str | None:
    """A precision as a decision states it: ``'HIGHEST'``, ``'(HIGHEST, DEFAULT)'``,
    ``'DotAlgorithmPreset.BF16_BF16_F32'``; for None, JAX's ``jax_default_matmul_precision``
    when it is set (``"'highest' (jax_default_matmul_precision)"``), else None."""
    if value is None:
        default = jax.config.jax_default_matmul_precision
        return None if default is None else f"{default!r} (jax_default_matmul_precision)"
    if isinstance(value, lax.DotAlgorithm):
        return "DotAlgorithm(" + ", ".join(
            f"{k}={getattr(v, '__name__', v)}" for k, v in value._asdict().items()) + ")"
    if isinstance(value, tuple):
        return "(" + ", ".join(precision_text(v) for v in value) + ")"
    if isinstance(value, str):
        value = lax.Precision(value)
    if isinstance(value, lax.Precision):
        return value.name
    if isinstance(value, lax.DotAlgorithmPreset):
        return f"DotAlgorithmPreset.{value.name}"
    return repr(value)


def choice(name: str, value, valid: tuple[str, ...], none: str = "") -> None:
    """`value` is None or one of the names `valid`; `none` says what None means, if anything."""
    if value is not None and not (isinstance(value, str) and value in valid):
        options = ", ".join(repr(v) for v in valid)
        raise ValueError(f"`{name}` must be {f'None ({none}) or ' if none else ''}one of "
                         f"{options}; got {value!r}.")


def implementation(value, valid: tuple[str, ...]) -> None:
    choice("implementation", value, valid, none="automatic")


def seq_lengths(value, batch: int, steps: int, name: str = "seq_lengths", axis: str = "T",
                check: bool = False):
    """Checks sequence lengths; returns int32 lengths (or None for "all full").

    `check_seq_lengths`, then `int32_lengths`.
    """
    if value is None:
        return None
    check_seq_lengths(value, batch, steps, name, axis)
    return int32_lengths(value, steps, name, axis, check)


def check_seq_lengths(value, batch: int, steps: int, name: str = "seq_lengths",
                      axis: str = "T") -> None:
    """Checks sequence lengths (an array, a `jax.ShapeDtypeStruct` or None) without computing
    anything: an integer dtype, shape (batch,), and concrete values in [0, T]."""
    if value is None:
        return
    shape, dtype = shape_dtype(name, value)
    if not jax.numpy.issubdtype(dtype, jax.numpy.integer):
        raise TypeError(f"`{name}` must have an integer dtype; got {dtype}.")
    expect_shape(name, shape, (batch,), "(batch,)")
    if not isinstance(value, (jax.ShapeDtypeStruct, jax.core.Tracer)):
        concrete = np.asarray(value)
        bad = (concrete < 0) | (concrete > steps)
        if bad.any():
            raise ValueError(f"`{name}` must lie in [0, {axis}={steps}]; got "
                             f"{concrete[bad].tolist()[:5]} at batch indices "
                             f"{np.flatnonzero(bad).tolist()[:5]}.")


def int32_lengths(value, steps: int, name: str = "seq_lengths", axis: str = "T",
                  check: bool = False):
    """Lengths that `check_seq_lengths` accepted as int32 lengths (None stays None).

    Traced values are clipped to [0, T] (a length above T means "the whole sequence", a
    negative one means "empty"). With `check` (the policy's ``checkify_lengths``), a
    `checkify.debug_check` reports out-of-range traced values, naming the argument, when the
    caller runs under ``checkify.checkify``.
    """
    if value is None or isinstance(value, jax.ShapeDtypeStruct):
        return value
    dtype = np.dtype(value.dtype)
    value = jnp.asarray(value)
    traced = isinstance(value, jax.core.Tracer)
    if dtype == np.int32 and not traced:
        return value
    # The upper bound in the lengths' own dtype: T itself may not fit (uint8 lengths, T > 255).
    clipped = jnp.clip(value, 0, min(steps, np.iinfo(dtype).max))
    if traced and check:
        checkify.debug_check(jnp.all(clipped == value), f"`{name}` must lie in [0, {axis}="
                             f"{steps}]; got {{}}.", value)
    return value if dtype == np.int32 else clipped.astype(np.int32)


def first_line(e: BaseException) -> str:
    """``"TypeName: first line of the message"``, for reports that must stay one line."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def precision_name(precision) -> str | None:
    """'DEFAULT', 'HIGH', 'HIGHEST', 'algorithm' or None, after JAX's global default applies
    (a tuple: its first element decides, as `jax.experimental.rnn`)."""
    if precision is None:
        precision = jax.config.jax_default_matmul_precision
        if precision is None:
            return None
    if isinstance(precision, tuple):
        precision = precision[0]
    if isinstance(precision, str):
        try:
            precision = lax.Precision(precision)
        except ValueError:  # a dot-algorithm name as the global default
            return "algorithm"
    if isinstance(precision, lax.Precision):
        return precision.name
    return "algorithm"

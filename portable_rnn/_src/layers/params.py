"""The recurrent layers' readable parameter tree and call, shared by `linen`, `nnx` and (for the
weights) `keras` (no Flax, no Keras).

    {"layer_0": {"forward": {"W_ih": (G*H, I), "W_hh": (G*H, S), "b_ih": (G*H,), "b_hh": (G*H,),
                             "W_hr": (P, H)},      # only an LSTM with proj_size=P > 0
                 "reverse": {...}},                # when bidirectional
     "layer_1": {...}, ...}                        # layers past the first read D*S features

Matrices and biases are PyTorch's: ``G`` gates stacked as LSTM i, f, g, o (G=4), GRU r, z, n
(G=3) or one block for the simple RNN (G=1); ``S`` is ``P`` for a projected LSTM, else ``H``.
"Layer 1 reverse, recurrent kernel" is ``params["layer_1"]["reverse"]["W_hh"]``. The call packs
the tree into the flat cuDNN vector of `portable_rnn.lstm` / `gru` / `simple_rnn`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import checks, dispatch
from ..recurrent.cell import HEADS, Family, accumulation_dtype
from ..recurrent.convert import TORCH_NAMES, flax_layout, torch_layout
from ..recurrent.families import FAMILIES, family
from ..recurrent.layout import NAMES, check_heads, pack, param_shapes, unpack
from ..recurrent.ops import OPS

DIRECTIONS = ("forward", "reverse")


@dataclasses.dataclass(frozen=True)
class Config:
    """A layer's static configuration: its attributes other than the initialisers."""

    family: str
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    implementation: str | None = None
    # The family's `Family.layer_options` but the initialisers, as (name, value) pairs in the
    # family's order (`make` completes them with the family's defaults).
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def make(cls, family_name: str, *shared, **options) -> Config:
        """A `Config` of the shared attributes (positional, in field order) and the family's
        options by keyword; those not given take the family's defaults."""
        defaults = {k: v for k, v in family(family_name).layer_options.items()
                    if not k.endswith("_init")}
        unknown = set(options) - set(defaults)
        if unknown:
            raise TypeError(f"the {family_name} family has no layer option {sorted(unknown)}.")
        return cls(family_name, *shared, options=tuple({**defaults, **options}.items()))

    def option(self, name: str) -> Any:
        """The value of the family's layer option `name`."""
        return dict(self.options)[name]

    @property
    def proj_size(self) -> int:
        """The projection size P (0: none; a family with `Family.projection` has the option)."""
        return dict(self.options).get("proj_size", 0)

    @property
    def num_heads(self) -> int:
        """The heads NH of a block-diagonal ``W_hh`` (1: dense; a family with `HEADS` has the
        option)."""
        return dict(self.options).get(HEADS, 1)

    @property
    def facts(self) -> Family:
        return family(self.family)

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def layer_name(self) -> str:
        """The layer classes' name (``"GRU"``, `Family.class_name`), for messages."""
        return self.facts.class_name

    @property
    def out_size(self) -> int:
        """The size of each direction's output and hidden state: P for a projected LSTM, else H."""
        return self.proj_size or self.hidden_size

    def describe(self, input_size: int | None = None) -> str:
        """``"a GRU with input_size=4, hidden_size=6, ..."``, for error messages."""
        name = self.layer_name
        sizes = [] if input_size is None else [f"input_size={input_size}"]
        sizes += [f"hidden_size={self.hidden_size}", f"num_layers={self.num_layers}",
                  f"bidirectional={self.bidirectional}"]
        if self.proj_size:
            sizes.append(f"proj_size={self.proj_size}")
        if self.num_heads != 1:
            sizes.append(f"num_heads={self.num_heads}")
        return f"{self.facts.article} {name} with {', '.join(sizes)}"

    def shapes(self, input_size: int) -> list[dict[str, tuple[int, ...]]]:
        """Per pseudo-layer (``2 * layer + direction``), each parameter's shape."""
        return param_shapes(input_size, self.hidden_size, self.num_layers, self.bidirectional,
                            self.facts, self.proj_size, self.num_heads)


def config_of(layer) -> Config:
    """The `Config` of a layer whose attributes hold it: ``_FAMILY``, the shared attributes and
    the family's ``layer_options`` (but the initialisers)."""
    options = {k: getattr(layer, k) for k in family(layer._FAMILY).layer_options
               if not k.endswith("_init")}
    return Config.make(layer._FAMILY, layer.hidden_size, layer.num_layers, layer.bidirectional,
                       layer.dropout, layer.dtype, layer.param_dtype, layer.precision,
                       layer.implementation, **options)


def make_layers(namespace: dict[str, Any], base: Callable[[Family], type],
                doc: Callable[[Family], str],
                fields: Callable[[Family], dict[str, Any]] = lambda fam: {},
                families=None, suffix: str = "") -> list[str]:
    """Makes a layer module's classes into its `namespace` (its globals), one per family of
    `families` (default: every registered family), named by `Family.class_name` and `suffix`
    (``"Cell"`` for the step cells): a subclass of ``base(family)`` with ``_FAMILY``, the class
    attributes ``fields(family)`` and the docstring ``doc(family)``. Returns their names,
    sorted."""
    names = []
    for fam in families or [op.family for op in OPS.values()]:
        name = fam.class_name + suffix
        body = {"__module__": namespace["__name__"], "__qualname__": name, "_FAMILY": fam.name,
                "__doc__": doc(fam), **fields(fam)}
        namespace[name] = type(name, (base(fam),), body)
        names.append(name)
    return sorted(names)


def cell_config(cell) -> Config:
    """The `Config` of a step cell (``_FAMILY``, ``features``, the shared attributes and the
    family's options as attributes): one layer, one direction."""
    options = {k: getattr(cell, k) for k in family(cell._FAMILY).layer_options
               if not k.endswith("_init")}
    return Config.make(cell._FAMILY, cell.features, 1, False, 0.0, cell.dtype, cell.param_dtype,
                       cell.precision, cell.implementation, **options)


def cell_options(family_name: str, options: Mapping[str, Any], layer: str) -> dict[str, Any]:
    """`options` (keyword arguments) completed with the family's defaults; unknown ones raise."""
    valid = family(family_name).layer_options
    for name in options:
        if name not in valid:
            owner = next((f.keras_layer or f.name for f in FAMILIES.values()
                          if name in f.layer_options), None)
            hint = f" (only {owner} has it)" if owner else ""
            listed = ", ".join(f"`{v}`" for v in valid) or "none"
            raise TypeError(f"`{name}` is not an argument of {layer}{hint}; its keyword options "
                            f"beyond the shared ones: {listed}.")
    return {**valid, **options}


def check_config(cfg: Config) -> None:
    """Validates a layer's attributes (before any parameter is created)."""
    checks.static_int("hidden_size", cfg.hidden_size)
    checks.static_int("num_layers", cfg.num_layers)
    checks.static_bool("bidirectional", cfg.bidirectional)
    checks.rate("dropout", cfg.dropout)
    if cfg.dtype is not None:
        checks.floating("dtype", np.dtype(cfg.dtype))
    checks.floating("param_dtype", np.dtype(cfg.param_dtype))
    checks.implementation(cfg.implementation, dispatch.implementations(cfg.family))
    proj_size = checks.static_int("proj_size", cfg.proj_size, low=0)
    if proj_size >= cfg.hidden_size:
        raise ValueError(f"`proj_size` must be smaller than `hidden_size`={cfg.hidden_size} (as "
                         f"in PyTorch nn.LSTM); got {proj_size}.")
    for name, check in OPS[cfg.family].option_checks:
        check(cfg.option(name))
    if HEADS in cfg.facts.layer_options:
        check_heads(cfg.hidden_size, cfg.num_heads, proj_size)


def uniform_init(hidden_size: int):
    """PyTorch's and jax.experimental.rnn's default: U(-1/sqrt(H), 1/sqrt(H))."""
    bound = 1.0 / np.sqrt(hidden_size)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, jnp.float32, -bound, bound).astype(dtype)
    return init


def initializers(kernel_init: Callable | None, recurrent_kernel_init: Callable | None,
                 bias_init: Callable | None, projection_init: Callable | None = None):
    """The name -> initialiser (or None: the default) map `init_layer` takes."""
    return dict(W_ih=kernel_init, W_hh=recurrent_kernel_init, b_ih=bias_init, b_hh=bias_init,
                W_hr=projection_init)


def init_layer(key, layer: int, input_size: int, cfg: Config, inits: Mapping[str, Any]):
    """One layer's ``{direction: {name: array}}``; `inits` maps names to initialisers or None."""
    shapes = cfg.shapes(input_size)
    default = uniform_init(cfg.hidden_size)
    out = {}
    for d, direction in enumerate(DIRECTIONS[:cfg.num_directions]):
        s = shapes[layer * cfg.num_directions + d]
        keys = jax.random.split(jax.random.fold_in(key, d), len(s))
        out[direction] = {n: (inits.get(n) or default)(k, s[n], cfg.param_dtype)
                          for n, k in zip(s, keys)}
    return out


def _path(layer: int, direction: str, name: str | None = None) -> str:
    return f"layer_{layer}/{direction}" + (f"/{name}" if name else "")


def _family_hint(shape, expected, cfg: Config) -> str:
    """Names the family a mismatched gate dimension belongs to, if it is another one's."""
    if len(shape) != len(expected) or not shape or shape[1:] != expected[1:]:
        return ""
    others = [f"{other.article} {other.class_name}'s" for other in FAMILIES.values()
              if other is not cfg.facts and shape[0] == other.gates * cfg.hidden_size]
    return f"; that is {' or '.join(others)} shape" if others else ""


def check_tree(params, input_size: int, cfg: Config, what: str = "params") -> None:
    """Checks that `params` holds exactly the tree of `cfg` (names and shapes)."""
    if not isinstance(params, Mapping):
        raise TypeError(f"`{what}` must be a parameter dict ({{'layer_0': {{'forward': ...}}}}); "
                        f"got {type(params).__name__}.")
    shapes = cfg.shapes(input_size)
    expected_layers = [f"layer_{l}" for l in range(cfg.num_layers)]
    if sorted(params) != sorted(expected_layers):
        raise ValueError(f"`{what}` must have the keys {expected_layers} ({cfg.describe()}); got "
                         f"{sorted(params)}.")
    for p, s in enumerate(shapes):
        layer, d = divmod(p, cfg.num_directions)
        node = params[f"layer_{layer}"]
        directions = list(DIRECTIONS[:cfg.num_directions])
        if not isinstance(node, Mapping) or sorted(node) != directions:
            got = sorted(node) if isinstance(node, Mapping) else type(node).__name__
            raise ValueError(f"`{what}['layer_{layer}']` must have the keys {directions} "
                             f"({cfg.describe()}); got {got}.")
        arrays = node[DIRECTIONS[d]]
        names = [n for n in NAMES if n in s]
        got = sorted(arrays) if isinstance(arrays, Mapping) else type(arrays).__name__
        if not isinstance(arrays, Mapping) or sorted(arrays) != sorted(names):
            hint = ""
            if isinstance(arrays, Mapping) and "W_hr" in arrays and "W_hr" not in names:
                hint = (f"; `W_hr` is an LSTM projection: set proj_size="
                        f"{np.shape(arrays['W_hr'])[0]}")
            elif "W_hr" in names:
                hint = "; proj_size > 0 needs a `W_hr` (P, H) per direction"
            raise ValueError(f"`{what}` at `{_path(layer, DIRECTIONS[d])}` must have the keys "
                             f"{names} ({cfg.describe()}); got {got}{hint}.")
        for n in names:
            shape = tuple(np.shape(arrays[n]))
            if shape != s[n]:
                raise ValueError(
                    f"`{_path(layer, DIRECTIONS[d], n)}` must have shape {s[n]}; got {shape} "
                    f"(expected for {cfg.describe(input_size)}{_family_hint(shape, s[n], cfg)}).")


def to_flat(params, input_size: int, cfg: Config):
    """The flat cuDNN weight vector from the tree (checked against `cfg` first)."""
    check_tree(params, input_size, cfg)
    names = cfg.shapes(input_size)[0]
    groups = {n: [params[f"layer_{l}"][d][n] for l in range(cfg.num_layers)
                  for d in DIRECTIONS[:cfg.num_directions]] for n in names}
    return pack(groups, input_size, cfg.hidden_size, cfg.num_layers, cfg.bidirectional,
                cfg.facts, cfg.proj_size, cfg.num_heads)


def _from_groups(groups: Mapping[str, Any], sizes, name: str, dtype=None):
    """The tree from ``{name: per-pseudo-layer arrays (a list or dict; biases may be None)}``."""
    input_size, hidden_size, num_layers, bidirectional, proj_size = sizes
    shapes = param_shapes(input_size, hidden_size, num_layers, bidirectional, family(name),
                          proj_size)
    num_directions = 2 if bidirectional else 1
    out: dict[str, Any] = {}
    for p, s in enumerate(shapes):
        layer, d = divmod(p, num_directions)
        arrays = {}
        for n in (n for n in NAMES if n in s):
            g = groups.get(n)
            a = None if g is None else g[p]
            a = jnp.zeros(s[n], jnp.float32) if a is None else jnp.asarray(np.asarray(a))
            arrays[n] = a if dtype is None else a.astype(dtype)
        out.setdefault(f"layer_{layer}", {})[DIRECTIONS[d]] = arrays
    return out


def from_flat(weights, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool,
              name: str, proj_size: int = 0, dtype=None):
    """The tree from a flat cuDNN weight vector (the inverse of `to_flat`)."""
    groups = unpack(jnp.asarray(weights), input_size, hidden_size, num_layers, bidirectional,
                    family(name), proj_size)
    sizes = (input_size, hidden_size, num_layers, bidirectional, proj_size)
    return _from_groups(groups, sizes, name, dtype)


def from_torch(state_dict, prefix: str, name: str, dtype=None):
    """(tree, sizes) from a PyTorch ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` state_dict;
    sizes = (I, H, L, bidirectional, proj_size)."""
    groups, sizes = torch_layout(state_dict, prefix, family(name))
    return _from_groups(groups, sizes, name, dtype), sizes


def from_flax(params, name: str, dtype=None, shared_cell: bool | None = None):
    """(tree, sizes) from Flax ``nn.RNN`` params of the family's cell; sizes as `from_torch`."""
    groups, sizes = flax_layout(params, family(name), shared_cell=shared_cell)
    return _from_groups(groups, sizes, name, dtype), sizes


_LAYER_KEY = re.compile(r"layer_(\d+)")


def to_torch(params, prefix: str = "", name: str | None = None) -> dict[str, np.ndarray]:
    """A PyTorch state_dict (NumPy arrays) from the tree, in PyTorch's key order; with the
    family's `name`, a ValueError first where PyTorch has no such module (its state_dict would
    load into another function)."""
    if name is not None:
        family(name).peer("torch_module", "PyTorch")
    if not isinstance(params, Mapping):
        raise TypeError(f"`params` must be a parameter dict ({{'layer_0': ...}}); got "
                        f"{type(params).__name__}.")
    layers = {}
    for key in params:
        m = _LAYER_KEY.fullmatch(str(key))
        if m is None:
            raise ValueError(f"`params` must have keys 'layer_0', 'layer_1', ...; got {key!r}.")
        layers[int(m.group(1))] = params[key]
    out = {}
    for layer in sorted(layers):
        for direction in (d for d in DIRECTIONS if d in layers[layer]):
            arrays = layers[layer][direction]
            suffix = f"_l{layer}{'_reverse' if direction == 'reverse' else ''}"
            for n in (n for n in NAMES if n in arrays):
                out[f"{prefix}{TORCH_NAMES[n]}{suffix}"] = np.array(arrays[n])  # writable
    return out


def check_inputs(inputs, input_size: int | None, dtype, param_dtype, name: str = "inputs"):
    """`inputs` as an array of shape (..., T, I) with I = `input_size` (when known); `name` is
    the argument's name in the caller's signature, for the messages.

    Without a `dtype`, integer and boolean inputs are promoted to `param_dtype`, as Flax's
    ``nn.RNN`` cells do (``promote_dtype`` with the kernels).
    """
    inputs = checks.array(name, inputs)
    if inputs.ndim < 2:
        raise ValueError(f"`{name}` must have shape (..., T, I) (rank >= 2); got {inputs.shape}.")
    if dtype is None and (jnp.issubdtype(inputs.dtype, jnp.integer)
                          or inputs.dtype == jnp.bool_):
        inputs = inputs.astype(param_dtype)
    if dtype is None:
        checks.floating(name, inputs.dtype)
    if input_size is not None and inputs.shape[-1] != input_size:
        raise ValueError(f"`{name}` must have input_size={input_size} features in its last axis "
                         f"(the size the layer's parameters were made for); got shape "
                         f"{inputs.shape}.")
    return inputs


def _describe_carry(carry) -> str:
    if isinstance(carry, (tuple, list)):
        return f"a {type(carry).__name__} of length {len(carry)}"
    if hasattr(carry, "shape"):
        return f"an array of shape {carry.shape}"
    return type(carry).__name__


def state_layout(cfg: Config, dtype) -> list[tuple[int, np.dtype]]:
    """Each state's size and default dtype, in the family's order: for a tuple (the LSTM's
    (h, c)) the output state (S wide) in the computation `dtype` and the others (H wide) in
    float32 for 16-bit; one state, H wide, in float32 for 16-bit (the state the loop carries)."""
    n, acc = len(cfg.facts.states), accumulation_dtype(dtype)
    if n == 1:
        return [(cfg.hidden_size, acc)]
    return [(cfg.out_size, np.dtype(dtype))] + [(cfg.hidden_size, acc)] * (n - 1)


def _initial_state(initial_carry, cfg: Config, batch, steps: int, B: int, dtype,
                   names=("inputs", "initial_carry")):
    """The functional call's initial states, each (L*D, B, size), from the layer's carry;
    `names`: the caller's names of the inputs and of the carry, for the messages."""
    x_name, carry_name = names
    LD = cfg.num_layers * cfg.num_directions
    H = cfg.hidden_size
    legend = "(num_layers * num_directions, *batch, {})"
    parts = [s.removesuffix("_0") for s in cfg.facts.states]
    if initial_carry is None:
        return tuple(jnp.zeros((LD, B, size), dt) for size, dt in state_layout(cfg, dtype))
    if len(parts) > 1:  # a tuple (the LSTM's (h, c))
        if not isinstance(initial_carry, (tuple, list)) or len(initial_carry) != len(parts):
            what = "a pair" if len(parts) == 2 else "a tuple"
            raise TypeError(f"`{carry_name}` must be {what} ({', '.join(parts)}) of arrays; "
                            f"got {_describe_carry(initial_carry)}.")
        sizes = [size for size, _ in state_layout(cfg, dtype)]
        size_names = ("proj_size" if cfg.proj_size else "hidden_size",) + (
            "hidden_size",) * (len(parts) - 1)
        states = [(f"{carry_name}[{i}]", a, size, name) for i, (a, size, name) in enumerate(
            zip(initial_carry, sizes, size_names))]
    else:
        if isinstance(initial_carry, (tuple, list)):
            raise TypeError(f"`{carry_name}` must be one array h (the carry of a "
                            f"{cfg.layer_name}; an LSTM's is a pair (h, c)); got "
                            f"{_describe_carry(initial_carry)}.")
        states = [(carry_name, initial_carry, H, "hidden_size")]
    out = []
    for name, a, size, size_name in states:
        a = checks.array(name, a)
        checks.state_shape(name, a.shape, (LD,) + batch + (size,), legend.format(size_name),
                            x_name=x_name, batch=batch, steps=steps, size_name=size_name)
        out.append(a.reshape(LD, B, size))
    return tuple(out)


def input_size_of(params) -> int | None:
    """The input size a tree was made for (``layer_0/forward/W_ih``'s columns), if it has one."""
    layer_0 = params.get("layer_0") if isinstance(params, Mapping) else None
    forward = layer_0.get("forward") if isinstance(layer_0, Mapping) else None
    if isinstance(forward, Mapping) and len(np.shape(forward.get("W_ih"))) == 2:
        return np.shape(forward["W_ih"])[1]
    return None


def apply(params, inputs, seq_lengths, initial_carry, cfg: Config, *, dropout_rng, return_carry,
          names=("inputs", "initial_carry")):
    """The layers' call: any leading batch dims, optional carry, flat weights built here;
    `names`: the caller's names of the inputs and of the carry, for the messages."""
    input_size = input_size_of(params)
    inputs = check_inputs(inputs, input_size, cfg.dtype, cfg.param_dtype, names[0])
    shape = inputs.shape
    batch, (steps, input_size) = shape[:-2], shape[-2:]
    B = int(np.prod(batch, dtype=np.int64))
    dtype = np.dtype(cfg.dtype) if cfg.dtype is not None else inputs.dtype
    x = inputs.reshape((B, steps, input_size)).astype(dtype)
    state0 = _initial_state(initial_carry, cfg, batch, steps, B, dtype, names)
    if seq_lengths is not None:
        lengths_shape, _ = checks.shape_dtype("seq_lengths", seq_lengths)
        checks.expect_shape("seq_lengths", lengths_shape, batch, "(*batch,)")
        seq_lengths = jnp.reshape(seq_lengths, (B,))
    weights = to_flat(params, input_size, cfg)
    args = (weights, seq_lengths, input_size, cfg.hidden_size, cfg.num_layers,
            cfg.dropout if dropout_rng is not None else 0.0, cfg.bidirectional, cfg.precision)
    kw = dict(dropout_rng=dropout_rng, implementation=cfg.implementation,
              **{name: cfg.option(name) for name in cfg.facts.call_options})
    y, *states = OPS[cfg.family].run(x, *state0, *args, **kw)
    y = y.reshape(batch + (steps, y.shape[-1]))
    if not return_carry:
        return y
    LD = cfg.num_layers * cfg.num_directions
    carry = tuple(s.reshape((LD,) + batch + (s.shape[-1],)) for s in states)
    return y, (carry if len(carry) > 1 else carry[0])


# --- the step cells: one step of a one-layer, one-direction layer ------------------------------

def cell_order(cfg: Config) -> tuple[int, ...]:
    """The step cell's carry as indices into the family's states (`Family.flax_carry`)."""
    return cfg.facts.flax_carry or tuple(range(len(cfg.facts.states)))


def cell_carry(cfg: Config, batch: tuple[int, ...], dtype, init=None, key=None):
    """A step cell's initial carry for inputs of batch shape `batch` and computation dtype
    `dtype`: each state (*batch, size), in the cell's order, by ``init(key, shape, dtype)``
    (zeros by default), in the dtypes of the layers' default carry (the output state in `dtype`
    and the others wide for a tuple; one state wide)."""
    layout = state_layout(cfg, dtype)
    n = len(layout)
    keys = [None] * n if key is None else list(jax.random.split(key, n))
    states = [jnp.zeros(batch + (size,), dt) if init is None
              else jnp.asarray(init(k, batch + (size,), dt), dt)
              for (size, dt), k in zip(layout, keys)]
    ordered = tuple(states[i] for i in cell_order(cfg))
    return ordered if n > 1 else ordered[0]


def cell_step(params: Mapping[str, Any], carry, inputs, cfg: Config):
    """One step of a step cell: `params` one direction's arrays (a layer's
    ``layer_0/forward``), `carry` the states in the cell's order, each (*batch, size), `inputs`
    (*batch, I). Returns ``(carry, output)``: the one-layer layer's call on one step."""
    inputs = checks.array("inputs", inputs)
    if inputs.ndim < 1:
        raise ValueError(f"`inputs` must have shape (..., I) (rank >= 1); got {inputs.shape}.")
    order = cell_order(cfg)
    n = len(order)
    if n > 1 and (not isinstance(carry, (tuple, list)) or len(carry) != n):
        parts = ", ".join(cfg.facts.states[i].removesuffix("_0") for i in order)
        raise TypeError(f"`carry` must be a tuple ({parts}) of arrays (the cell's "
                        f"`initialize_carry`); got {_describe_carry(carry)}.")
    given = tuple(carry) if n > 1 else (carry,)
    sizes = [size for size, _ in state_layout(cfg, inputs.dtype)]
    states: list[Any] = [None] * n
    for k, (i, state) in enumerate(zip(order, given)):
        name = f"carry[{k}]" if n > 1 else "carry"
        state = checks.array(name, state)
        expected = inputs.shape[:-1] + (sizes[i],)
        if state.shape != expected:
            raise ValueError(f"`{name}` ({cfg.facts.states[i].removesuffix('_0')}) must have "
                             f"shape (*batch, {sizes[i]}) = {expected} for `inputs` of shape "
                             f"{inputs.shape}; got {state.shape}.")
        states[i] = state[None]
    y, new = apply({"layer_0": {"forward": params}}, inputs[..., None, :], None,
                   tuple(states) if n > 1 else states[0], cfg, dropout_rng=None,
                   return_carry=True, names=("inputs", "carry"))
    new = new if n > 1 else (new,)
    out = tuple(new[i][0] for i in order)
    return (out if n > 1 else out[0]), y[..., 0, :]

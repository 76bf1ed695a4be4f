"""Every use of JAX internals, and every workaround for a difference between JAX releases, in
one place, with what it needs and since which version.

portable_rnn supports jax 0.10.2 to 0.12.x. Public API is used wherever it exists; each function
below wraps one private detail or one difference between releases and says why it is needed. A
change in a new JAX release should need a change here only.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import types

import jax
import jax.numpy as jnp
from jax.experimental import rnn as jrnn


def cuda_versions() -> types.ModuleType | None:
    """jaxlib's CUDA plugin version module (`cudnn_get_version`, `cuda_runtime_get_version`).

    `jax._src.lib.cuda_versions` (jax 0.10 to 0.12): None on a jaxlib without a CUDA plugin.
    """
    try:
        from jax._src.lib import cuda_versions as module
    except ImportError:
        return None
    return module


def cudnn_version() -> int | None:
    """cuDNN version as jaxlib reports it (e.g. 91000 for 9.10.0), or None."""
    module = cuda_versions()
    try:
        return None if module is None else int(module.cudnn_get_version())
    except Exception:  # noqa: BLE001 - a broken CUDA install means "no cuDNN", not a crash
        return None


def cuda_runtime_version() -> int | None:
    """CUDA runtime version as jaxlib reports it (e.g. 13000 for 13.0), or None."""
    module = cuda_versions()
    try:
        return None if module is None else int(module.cuda_runtime_get_version())
    except Exception:  # noqa: BLE001 - as above
        return None


def lowering_platforms(*primitives) -> tuple[str, ...]:
    """The platforms for which JAX holds a lowering of every primitive in `primitives`.

    `jax._src.interpreters.mlir._platform_specific_lowerings` (a dict platform -> primitive ->
    rule; jax 0.10 to 0.12). A CPU jaxlib registers the CUDA lowerings of JAX's cuDNN primitives
    too, so this alone does not say that a CUDA program can be built: see the `*_traceable`
    checks. ROCm is left out: its kernels (MIOpen) differ from cuDNN's.
    """
    try:
        from jax._src.interpreters import mlir
        table = mlir._platform_specific_lowerings
    except (ImportError, AttributeError):  # an unknown JAX: assume the standard CUDA lowering
        return ("cuda",)
    return tuple(p for p, rules in table.items()
                 if p != "rocm" and all(prim in rules for prim in primitives))


def primitive_impl(primitive):
    """The eager implementation of a primitive of portable_rnn's (compiled and run alone, as
    JAX runs its own outside `jit`): `jax._src.dispatch.apply_primitive` (jax 0.10 to 0.12; the
    public `jax.extend` API has no such helper)."""
    from jax._src import dispatch

    return functools.partial(dispatch.apply_primitive, primitive)


def cudnn_lstm_primitives() -> tuple:
    """`jax.experimental.rnn`'s `rnn_fwd_p` and `rnn_bwd_p` (public module, private names)."""
    return jrnn.rnn_fwd_p, jrnn.rnn_bwd_p


def cudnn_lstm_traceable() -> bool:
    """Whether `jax.experimental.rnn.lstm` can be traced here: its abstract evaluation sizes the
    reserve space with `gpu_rnn.compute_rnn_workspace_reserve_space_sizes`, which only a jaxlib
    with the CUDA plugin has (jax 0.10 to 0.12)."""
    return hasattr(getattr(jrnn, "gpu_rnn", None), "compute_rnn_workspace_reserve_space_sizes")


def cudnn_attention_module() -> types.ModuleType:
    """`jax._src.cudnn.fused_attention_stablehlo` (jax 0.10 to 0.12): JAX's cuDNN attention."""
    from jax._src.cudnn import fused_attention_stablehlo
    return fused_attention_stablehlo


def cudnn_attention_primitives() -> tuple:
    """The fused-attention forward and backward primitives that lower to the cuDNN calls."""
    fa = cudnn_attention_module()
    return fa._dot_product_attention_fwd_p, fa._dot_product_attention_bwd_p


def cudnn_attention_traceable() -> bool:
    """Whether `jax.nn.dot_product_attention(implementation="cudnn")` can be traced here: it
    first asks `check_cudnn_version()`, which raises without a CUDA plugin."""
    try:
        cudnn_attention_module().check_cudnn_version()
    except Exception:  # noqa: BLE001 - RuntimeError("cuDNN is not detected.") and friends
        return False
    return True


def cudnn_lstm_platforms() -> tuple[str, ...]:
    """The platforms for which a program holding the cuDNN LSTM call can be built here."""
    return lowering_platforms(*cudnn_lstm_primitives()) if cudnn_lstm_traceable() else ()


def cudnn_attention_platforms() -> tuple[str, ...]:
    """The platforms for which a program holding cuDNN fused attention can be built here."""
    return (lowering_platforms(*cudnn_attention_primitives()) if cudnn_attention_traceable()
            else ())


def varying_axes(a) -> frozenset:
    """The manual mesh axes `a` varies over inside `jax.shard_map` (empty outside it).

    Reads the private aval attribute `mat.varying` (`ManualAxisType`, jax 0.10 to 0.12); JAX
    has no public accessor for it.
    """
    mat = getattr(jax.typeof(a), "mat", None)
    return frozenset(mat.varying) if mat is not None else frozenset()


def zeros_like(a, dtype=None):
    """`jnp.zeros_like(a, dtype)`, typed with `a`'s sharding over explicit mesh axes.

    From jax 0.11 on, an array created under `jit` outside a mesh context (`jax.set_mesh`) is
    typed as replicated even when `a` is sharded over explicit axes (jax 0.10 kept `a`'s
    sharding); a scan or loop carry built from it then fails to type-check against the
    sharded values written into it. Resharding restores the type; XLA creates the zeros
    sharded either way. A no-op where `a`'s type carries no sharded axis (auto axes,
    `shard_map`, no mesh).
    """
    out = jnp.zeros_like(a, dtype)
    sharding = jax.typeof(a).sharding
    if jax.typeof(out).sharding == sharding or all(s is None for s in sharding.spec):
        return out
    return jax.sharding.reshard(out, sharding)


def cudnn_lstm_fwd(x, h0, c0, w, seq_lengths, input_size, hidden_size, num_layers, dropout,
                   bidirectional, precision):
    """`jax.experimental.rnn.lstm_fwd`: the forward half of `jax.experimental.rnn.lstm`'s
    custom VJP, binding the cuDNN `rnn_fwd` primitive; ``((y, h_n, c_n), residuals)`` whose
    last element is cuDNN's reserve space.

    Not in that module's documented API; the same signature and residuals in jax 0.10 to 0.12.
    """
    return jrnn.lstm_fwd(x, h0, c0, w, seq_lengths, input_size, hidden_size, num_layers,
                         dropout, bidirectional, precision)


def cudnn_lstm_bwd(input_size, hidden_size, num_layers, dropout, bidirectional, precision,
                   residuals, gradients):
    """`jax.experimental.rnn.lstm_bwd`: the backward half (the cuDNN `rnn_bwd` primitive);
    residuals ``(x, h_0, c_0, w, seq_lengths, y, reserve)``, gradients ``(dy, dh_n, dc_n)``;
    returns ``(dx, dh_0, dc_0, dw, zeros like seq_lengths)``.

    Not in that module's documented API; the same signature in jax 0.10 to 0.12.
    """
    return jrnn.lstm_bwd(input_size, hidden_size, num_layers, dropout, bidirectional, precision,
                         residuals, gradients)


def pallas() -> tuple[types.ModuleType, types.ModuleType]:
    """`jax.experimental.pallas` and its TPU module (public, experimental: jax 0.10 to 0.12)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    return pl, pltpu


def tpu_compiler_params(**kwargs):
    """Mosaic's compiler parameters (``dimension_semantics``, ``vmem_limit_bytes``):
    `pltpu.CompilerParams` (jax 0.6 on), `pltpu.TPUCompilerParams` before it."""
    _, pltpu = pallas()
    cls = getattr(pltpu, "CompilerParams", None) or pltpu.TPUCompilerParams
    return cls(**kwargs)


def traced_with_constants(fn, *example_args):
    """``(evaluate, consts, out_tree)``: `fn` traced once on `example_args` (arrays or
    `jax.ShapeDtypeStruct`s), its constants hoisted out, and ``evaluate(consts, *args)``
    running the traced function on other constant values (flat outputs).

    A Pallas kernel may not capture array constants (a NumPy gate vector in a cell's step):
    they become kernel inputs. `jax.extend.core.ClosedJaxpr` and `jaxpr_as_fun` (jax 0.10 to
    0.12).
    """
    from jax.extend import core as jex_core

    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    jaxpr = closed.jaxpr

    def evaluate(consts, *args):
        return jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(jaxpr, list(consts)))(
            *jax.tree.leaves(args))

    return evaluate, [jnp.asarray(c) for c in closed.consts], jax.tree.structure(shapes)


def kernel_out_shape(shape, dtype, like) -> jax.ShapeDtypeStruct:
    """A `pallas_call` result's type, varying over the manual mesh axes `like` varies over:
    inside `jax.shard_map` (with its default ``check_vma=True``) Pallas asks for it. The aval's
    private `mat` (`ManualAxisType`) handed to `ShapeDtypeStruct(manual_axis_type=...)` (jax
    0.10 to 0.12)."""
    mat = getattr(jax.typeof(like), "mat", None)
    if mat is None:
        return jax.ShapeDtypeStruct(shape, dtype)
    try:
        return jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=mat)
    except TypeError:  # a JAX that names it otherwise: Pallas then asks for nothing or `vma`
        try:
            return jax.ShapeDtypeStruct(shape, dtype, vma=frozenset(mat.varying))
        except TypeError:
            return jax.ShapeDtypeStruct(shape, dtype)


def _pallas_tpu_op(name: str, names: tuple[str, ...]) -> types.ModuleType | None:
    """`jax.experimental.pallas.ops.tpu.<name>`, or None where this JAX lacks it, its Pallas TPU
    lowering, or one of `names` (public modules whose API is marked experimental)."""
    try:
        from jax._src.pallas.mosaic import lowering  # noqa: F401 - the TPU lowering itself
        module = importlib.import_module(f"jax.experimental.pallas.ops.tpu.{name}")
    except Exception:  # noqa: BLE001 - any failure means: no Pallas TPU kernel here
        return None
    return module if all(hasattr(module, n) for n in names) else None


def splash_attention_module() -> types.ModuleType | None:
    """`jax.experimental.pallas.ops.tpu.splash_attention` (JAX's Pallas TPU splash attention:
    `make_splash_mha`, `make_splash_mqa`, `BlockSizes`, `SegmentIds`, the mask classes; the same
    names in jax 0.10 to 0.12), or None where this JAX lacks it or its Pallas TPU lowering."""
    return _pallas_tpu_op("splash_attention", (
        "make_splash_mha", "make_splash_mqa", "BlockSizes", "SegmentIds", "MultiHeadMask",
        "CausalMask", "LocalMask", "FullMask"))


def pallas_tpu_platforms() -> tuple[str, ...]:
    """The platforms for which a program holding JAX's Pallas TPU splash attention kernel can be
    built here: ``("tpu",)`` where the kernel and the Pallas TPU (Mosaic) lowering import, which
    a CPU jaxlib has too (a program for a TPU can be exported from a CPU)."""
    return ("tpu",) if splash_attention_module() is not None else ()


def make_splash_attention(num_heads: int, mask, block_q: int, block_kv: int, *, mqa: bool,
                          interpret: bool, soft_cap: float | None = None):
    """A splash attention kernel for `num_heads` query heads sharing one static `mask` (a
    `splash_attention.Mask` of shape (T, S)), with `block_q` x `block_kv` blocks in the forward
    and both backward kernels, on one device. Its call takes ``(q, k, v, segment_ids=...)``
    unbatched: q (heads, T, H), k and v (heads, S, H), or (S, H) for `mqa`. `soft_cap` is the
    kernel's ``attn_logits_soft_cap`` (``cap * tanh(logits / cap)`` of the logits it computes,
    before its masks); None leaves the logits uncapped.

    `make_splash_mha`/`make_splash_mqa` take ``head_shards``, ``q_seq_shards``, ``interpret``
    and ``attn_logits_soft_cap`` as keywords in jax 0.10 to 0.12.
    """
    sa = splash_attention_module()
    make = sa.make_splash_mqa if mqa else sa.make_splash_mha
    # The kernel holds its mask's block tables as arrays: concrete ones, so that one kernel
    # (cached per shape) serves every trace.
    with jax.ensure_compile_time_eval():
        return make(sa.MultiHeadMask([mask] * num_heads),
                    block_sizes=splash_block_sizes(block_q, block_kv), head_shards=1,
                    q_seq_shards=1, interpret=interpret, attn_logits_soft_cap=soft_cap)


def splash_block_sizes(block_q: int, block_kv: int):
    """The splash kernel's `BlockSizes` with `block_q` x `block_kv` blocks in the forward and
    both backward kernels (dq and dk/dv apart), each computed whole."""
    return splash_attention_module().BlockSizes(
        block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv, block_q_dkv=block_q,
        block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv, block_q_dq=block_q,
        block_kv_dq=block_kv)


def splash_skipping(kernel, keep):
    """`kernel` (from `make_splash_attention`) made to skip, besides the blocks its static mask
    hides, every (query block, key block) pair where `keep` (bool (T / block_q, S / block_kv), a
    traced array) is False: such a block is neither computed nor, where the steps before it
    fetched another, copied in.

    The kernel is a pytree of three `MaskInfo` tuples (forward, dq, dk/dv; jax 0.10 to 0.12), each
    with `block_mask` (0: skip the step, 1: a partial block, 2: a full block) and `data_next` (the
    block the step fetches), both (heads or 1, rows, steps) arrays that the kernels read at run
    time. In the forward and dq tables step (h, i, j) is query block i against key block
    ``data_next[h, i, j]``; in the dk/dv table it is query block ``data_next[h, i, j]`` against key
    block j, its grid running over the query blocks in the middle axis. A skipped step fetches
    what the last computed step of its run fetched, so the pipeline copies nothing for it.
    """

    def skipping(info, dkv: bool):
        if info is None or info.block_mask is None:
            return info
        data_next = jnp.asarray(info.data_next)
        nxt = data_next.astype(jnp.int32)
        axis = 1 if dkv else 2  # the axis a run of steps goes along
        index = functools.partial(jax.lax.broadcasted_iota, jnp.int32, nxt.shape)
        kept = keep[nxt, index(2)] if dkv else keep[index(1), nxt]
        block_mask = jnp.where(kept, info.block_mask, 0).astype(info.block_mask.dtype)
        runs = block_mask > 0
        last = jax.lax.cummax(jnp.where(runs, index(axis), -1), axis=axis)
        first = jnp.argmax(runs, axis=axis, keepdims=True)
        source = jnp.where(last >= 0, last, first)
        return info._replace(block_mask=block_mask,
                             data_next=jnp.take_along_axis(data_next, source, axis=axis))

    (fwd, dq, dkv), kwargs = kernel.tree_flatten()
    return type(kernel).tree_unflatten(
        kwargs, (skipping(fwd, False), skipping(dq, False), skipping(dkv, True)))


def jax_nn_attention_parameters() -> frozenset[str]:
    """The keyword names `jax.nn.dot_product_attention` takes in this JAX, the only way
    portable_rnn calls JAX's cuDNN attention. jax 0.10 to 0.12 take ``bias``, ``mask``,
    ``scale``, ``is_causal``, the two sequence lengths, ``local_window_size``,
    ``implementation`` and ``return_residual``: no segment ids, no logits soft cap and no
    causal offset."""
    import inspect

    return frozenset(inspect.signature(jax.nn.dot_product_attention).parameters)


def flash_attention_module() -> types.ModuleType | None:
    """`jax.experimental.pallas.ops.tpu.flash_attention` (JAX's Pallas TPU flash attention:
    `flash_attention(q, k, v, ab, segment_ids, *, causal, sm_scale, block_sizes)`,
    `BlockSizes`, `SegmentIds`; the same in jax 0.10 to 0.12), or None where this JAX lacks it
    or its Pallas TPU lowering."""
    return _pallas_tpu_op("flash_attention", ("flash_attention", "BlockSizes", "SegmentIds"))


# JAX's Pallas TPU kernels are imported with the package, not inside the first call that asks
# whether they serve it: importing the Mosaic lowering adds a value to JAX's tracing context
# (jax 0.12), so an import while a jitted function traces made `jax.jit` trace it again at its
# next call.
splash_attention_module()
flash_attention_module()


@contextlib.contextmanager
def pallas_interpret_mode():
    """A context in which every `pallas_call` traced inside it runs in Pallas's interpret mode
    (the HLO interpreter of ``pallas_call(..., interpret=True)``), for a kernel whose API takes
    no ``interpret=`` (JAX's flash attention). `jax._src.config.
    pallas_tpu_interpret_mode_context_manager` (jax 0.10 to 0.12) is what `pallas_call` reads
    (``interpret = that value or interpret``); the public
    `jax.experimental.pallas.tpu.force_tpu_interpret_mode` sets it to the TPU interpreter, whose
    host callbacks `vmap` of a `lax.platform_dependent` and `jax.export` cannot take, so it is
    set to True here."""
    from jax._src import config

    switch = getattr(config, "pallas_tpu_interpret_mode_context_manager", None)
    if switch is None:  # a JAX without it: the public TPU interpreter (no vmap, no export)
        from jax.experimental.pallas import tpu as pltpu

        with pltpu.force_tpu_interpret_mode():
            yield
        return
    prev = switch.swap_local(True)
    try:
        yield
    finally:
        switch.set_local(prev)

"""The ``scan`` route: the `lax.scan` driver (`driver.rnn_scan`) in pure JAX, for every family
on every backend. It serves every call; its platform-dependent options (16-bit products, the
stacks' dtype, where the input projection runs) come from the platform's `Profile` and, on a
CPU, from the routing model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...core import dispatch, routing
from ...core.capabilities import Capabilities
from ...core.profile import profile
from .. import cost
from ..api import Call, checkpointing
from ..driver import rnn_scan


def scan_matmul_dtype(dtype, caps: Capabilities):
    """float16 matmul operands go to the backend as float32 where the platform's profile says
    so (XLA:CPU has no float16 dot and would convert the weights in every step itself; the
    products are the same: exact in float32)."""
    return (np.dtype(np.float32) if profile(caps).f16_products_in_f32 and dtype == np.float16
            else None)


def native_products(dtype, caps: Capabilities) -> bool:
    """Whether the driver hands XLA bfloat16 operands for bfloat16 x bfloat16 = float32
    products, each fenced, with per-step values stacked in float32 (`Profile.bf16_products`;
    on CPUs XLA multiplies them natively, faster than the same products with the operands
    converted to float32 where the CPU has bfloat16 instructions)."""
    return profile(caps).bf16_products and dtype == jnp.bfloat16


def project_in_loop(cell, x, caps: Capabilities, call: Call | None = None
                    ) -> tuple[bool, str | None]:
    """Whether the scan driver runs the input projection per step inside the loop, and how that
    was decided (None where the platform's profile does not allow it: one GEMM before the loop).

    Where the profile allows it (`Profile.project_in_loop`, a CPU), the routing model ranks the
    scan route's two variants (``scan@in_loop=0``, ``scan@in_loop=1``: `recurrent.cost`) where
    its grid timed both at the call's dtype and the call is within its reach; elsewhere (no
    grid, another dtype such as float16, no `call` to rank) the cell's stated rule decides
    (``project_in_loop`` of the cell protocol).
    """
    if not profile(caps).project_in_loop:
        return False, None
    why = "no measured grid ranks the call"
    if call is not None:
        found = routing.best_variant(call.family.name, call, caps, "scan")
        names = [routing.variant_name("scan", in_loop=v) for v in cost.IN_LOOP]
        m = routing.model(routing.device_key(caps), "recurrent")
        if m is not None and not routing.measured_dtype(m, names, x.dtype):
            why = f"the routing model's grid ({m.describe()}) measured no {np.dtype(x.dtype)}"
        elif found is None and m is not None and set(names) <= {v for v, _ in m.coefficients}:
            why = f"the call is beyond the routing model's reach ({m.describe()})"
        elif found is not None and "in_loop" in found[0]:
            params, predicted, m = found
            inside = bool(params["in_loop"])
            other = m.predict(cost.shape(call), names[not inside])
            t = predicted[routing.CRITERION]
            versus = ("" if other is None else
                      f", {t / other[routing.CRITERION]:.2f}x the time with it "
                      + ("before the loop" if inside else "inside"))
            where = "inside the loop" if inside else "before the loop (one GEMM)"
            return inside, (f"input projection {where}: routing model ({m.describe()}): "
                            f"predicted {t:.3g} ms forward+backward{versus}")
    inside = bool(cell.project_in_loop(x.shape[0], x.dtype))
    where = "inside the loop" if inside else "before the loop (one GEMM)"
    return inside, (f"input projection {where}: the {cell.family.name} cell's stated rule "
                    f"(project_in_loop): {why}")


def scan_options(cell, x, caps: Capabilities, call: Call | None = None) -> dict:
    """The scan driver's platform-dependent static options (`rnn_scan` keywords), from the
    platform's `Profile`: the 16-bit products above, the stacks' dtype, and the input projection
    per step inside the loop where the routing model, or else the cell, says it is faster
    (`project_in_loop`)."""
    prof = profile(caps)
    return {"matmul_dtype": scan_matmul_dtype(x.dtype, caps),
            "fence_products": native_products(x.dtype, caps),
            "stack_dtype": (np.dtype(np.float32) if prof.wide_stacks and x.dtype.itemsize == 2
                            else None),
            "project_in_loop": project_in_loop(cell, x, caps, call)[0]}


RECURRENT_DROPOUT_NOTE = ("recurrent_dropout_mask: the recurrent product reads h * mask (the "
                          "carry keeps h)")


def scan_notes(dtypes, seq_dtype, dropout, has_rng, num_layers, caps, state,
               recurrent_dropout=False) -> tuple[str, ...]:
    out = [RECURRENT_DROPOUT_NOTE] if recurrent_dropout else []
    low = sorted({str(d) for d in dtypes.values() if d.itemsize == 2})
    if low:
        out.append(f"{'/'.join(low)}: matmuls accumulate in float32, {state} in float32")
    if scan_matmul_dtype(dtypes["x"], caps) is not None:
        out.append("CPU: float16 matmul operands multiplied as float32 (exact products; "
                   "XLA:CPU has no float16 dot)")
    if native_products(dtypes["x"], caps):
        out.append("CPU: bfloat16 x bfloat16 = float32 products (XLA:CPU's native dot; "
                   "exact products)")
    if seq_dtype is not None and seq_dtype != np.int32:
        out.append(f"seq_lengths {seq_dtype} cast to int32")
    if dropout > 0 and has_rng and num_layers > 1:
        out.append(f"dropout {dropout} between layers from dropout_rng")
    return tuple(out)



# --- the route ---------------------------------------------------------------------------------

def _notes(call: Call, caps: Capabilities) -> tuple[str, ...]:
    x = jax.ShapeDtypeStruct((call.batch, call.steps, call.input_size), call.dtypes["x"])
    in_loop = project_in_loop(call.cell, x, caps, call)[1]
    remat = checkpointing(call, caps).note
    return ((f"CPU: {in_loop}",) if in_loop else ()) + scan_notes(
        call.dtypes, call.seq_dtype, call.dropout, call.has_rng, call.num_layers, caps,
        call.family.wide_state, recurrent_dropout=call.recurrent_dropout) + (
        (remat,) if remat else ())


def _run(d, call: Call, x, states, weights, seq_lengths, dropout_rng, rmask):
    with jax.named_scope(f"portable_rnn.{call.family.name}.scan"):
        options = scan_options(call.cell, x, d.capabilities, call)
        every = checkpointing(call, d.capabilities).every
        config = call.scan_config(**options, **({} if every is None else
                                                {"remat_every": every}))
        return rnn_scan(config, x, states, weights, seq_lengths, dropout_rng, rmask)


ROUTE = dispatch.Route("scan", rejects=lambda call, caps: (), notes=_notes, run=_run,
                       summary=lambda family: "pure JAX, every backend")

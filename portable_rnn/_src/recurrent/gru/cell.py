"""The GRU cell for the recurrent driver (`recurrent.driver`): PyTorch's (and cuDNN's) equations.

Gates r, z, n::

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
    z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
    h' = (1 - z) * n + z * h

The reset gate multiplies ``W_hn h + b_hn`` (Keras' ``reset_after=True``). As in the LSTM, the r and
z rows of every weight and bias are pre-scaled by 1/2, so one ``tanh`` serves both sigmoids. The
state ``h`` is kept in the accumulation dtype (it is carried through ``z * h``, not only multiplied
by ``W_hh``), and rounded to the compute dtype for the matmul and the outputs.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..cell import gate_vector, recurrent_kernel
from .family import FAMILY

_SCALE = (0.5, 0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class GRUCell:
    family = FAMILY
    shared_dz = False
    dz_inplace = 0  # dzx overwrites q

    def project_in_loop(self, batch, dtype):
        return True  # the stated rule where no grid ranks the variants: inside the loop

    def state_dtypes(self, dtype, acc):
        return (acc,)

    def prepare(self, w, dtype, acc, mm_dtype):
        hidden = w["W_ih"].shape[0] // 3
        scale = gate_vector(_SCALE, hidden, np.float32)

        def scaled_t(a):  # (3H, n) -> (n, 3H), r/z rows halved
            return (a * scale[:, None].astype(a.dtype)).T.astype(dtype).astype(mm_dtype)

        params = {"b_ih": w["b_ih"].astype(acc) * scale.astype(acc),
                  "b_hh": w["b_hh"].astype(acc) * scale.astype(acc)}
        return scaled_t(w["W_ih"]), recurrent_kernel(w["W_hh"], dtype, mm_dtype, _SCALE), params

    def step(self, zx, zh, state, p, mm):
        (h,) = state
        hidden = h.shape[-1]
        a = zx + p["b_ih"]
        b = zh + p["b_hh"]
        t = jnp.tanh(a[:, :2 * hidden] + b[:, :2 * hidden])
        rz = t * 0.5 + 0.5
        r, z = jnp.split(rz, 2, axis=-1)
        hn = b[:, 2 * hidden:]
        n = jnp.tanh(a[:, 2 * hidden:] + r * hn)
        # For the backward, what does not depend on the incoming gradient (unused, and removed
        # by XLA, without one): dzx = q * dh (per gate block), with dn = dh * q_n the gradient of
        # n's pre-activation; the backward writes dzx over q (`dz_inplace`).
        q_n = (1 - z) * (1 - n * n)
        dt = (1 - t * t) * 0.5
        q = jnp.concatenate([q_n * hn * dt[:, :hidden], (h - n) * dt[:, hidden:], q_n], axis=-1)
        return (n + z * (h - n),), (q, rz)

    def saved(self, prev, new, aux):
        return aux  # q, [r, z]

    def step_bwd(self, saved, dstate, p, mm, write):
        q, rz = saved
        (dh,) = dstate
        hidden = dh.shape[-1]
        dzx = write(q * jnp.concatenate([dh, dh, dh], axis=-1))  # [d r, d z, dn] pre-activation
        r, z = rz[:, :hidden], rz[:, hidden:]
        dnr = dzx[:, 2 * hidden:].astype(r.dtype) * r
        # dzh in dzx's dtype (its stack's: 16 bits where per-step values are stacked as they
        # are); the driver rounds it to the recurrent kernel's dtype for the product either way
        dzh = jnp.concatenate([dzx[:, :2 * hidden], dnr.astype(dzx.dtype)], axis=-1)
        return dzx, dzh, (dh * z,), (dnr,)

    def dzh_pieces(self, dzx, emits):
        # dzh = [drz, dn * r]: its r and z blocks are dzx's, its n block is emitted
        return dzx[..., :2 * dzx.shape[-1] // 3], emits[0]

    def param_grads(self, dzx, dzh, emits, saved, p, mm):
        # from dzx and dn * r (not from dzh, which the driver need not materialise)
        db_ih = jnp.sum(dzx, axis=(0, 1), dtype=p["b_ih"].dtype)
        db_hn = jnp.sum(emits[0], axis=(0, 1), dtype=p["b_hh"].dtype)
        return {"b_ih": db_ih,
                "b_hh": jnp.concatenate([db_ih[:2 * db_hn.shape[0]], db_hn]).astype(
                    p["b_hh"].dtype)}

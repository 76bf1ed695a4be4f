"""The MGU cell for the recurrent driver (`recurrent.driver`): Flax's ``nn.MGUCell`` equations.

Gates f, n::

    f = sigmoid(W_if x + b_if + W_hf h + b_hf)
    n = tanh(W_in x + b_in + f * (W_hn h + b_hn))     (reset_gate=True, Flax's default)
    n = tanh(W_in x + b_in + W_hn h + b_hn)           (reset_gate=False)
    h' = (1 - f) * n + f * h

The forget gate plays both of the GRU's r and z. As in the GRU, the f rows of every weight and
bias are pre-scaled by 1/2, so that one ``tanh`` serves the sigmoid; the state ``h`` is kept in
the accumulation dtype and rounded to the compute dtype for the matmul and the outputs. Without
the reset gate the recurrent bias sums into the input bias and the two products share their
gradient (``shared_dz``).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..cell import gate_vector, recurrent_kernel
from .family import FAMILY

_SCALE = (0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class MGUCell:
    reset_gate: bool = True

    family = FAMILY
    dz_inplace = 0  # dzx overwrites q

    @property
    def shared_dz(self):
        return not self.reset_gate  # with it, n's block of dzh is dn * f

    def project_in_loop(self, batch, dtype):
        return True  # the stated rule where no grid ranks the variants: the GRU's, inside the loop

    def state_dtypes(self, dtype, acc):
        return (acc,)

    def prepare(self, w, dtype, acc, mm_dtype):
        hidden = w["W_ih"].shape[0] // 2
        scale = gate_vector(_SCALE, hidden, np.float32)

        def scaled_t(a):  # (2H, n) -> (n, 2H), f rows halved
            return (a * scale[:, None].astype(a.dtype)).T.astype(dtype).astype(mm_dtype)

        b_ih = w["b_ih"].astype(acc) * scale.astype(acc)
        b_hh = w["b_hh"].astype(acc) * scale.astype(acc)
        params = {"b_ih": b_ih, "b_hh": b_hh} if self.reset_gate else {"bias": b_ih + b_hh}
        return scaled_t(w["W_ih"]), recurrent_kernel(w["W_hh"], dtype, mm_dtype, _SCALE), params

    def step(self, zx, zh, state, p, mm):
        (h,) = state
        hidden = h.shape[-1]
        if self.reset_gate:
            a, b = zx + p["b_ih"], zh + p["b_hh"]
        else:
            a, b = zx + p["bias"], zh
        t = jnp.tanh(a[:, :hidden] + b[:, :hidden])
        f = t * 0.5 + 0.5
        hn = b[:, hidden:]
        n = jnp.tanh(a[:, hidden:] + (f * hn if self.reset_gate else hn))
        # For the backward, what does not depend on the incoming gradient (unused, and removed
        # by XLA, without one): dzx = q * dh (per gate block), with dn = dh * q_n the gradient of
        # n's pre-activation; f's gradient gathers the blend's (h - n) and, through the reset,
        # dn * hn. The backward writes dzx over q (`dz_inplace`).
        q_n = (1 - f) * (1 - n * n)
        dt = (1 - t * t) * 0.5
        q_f = ((h - n) + q_n * hn if self.reset_gate else h - n) * dt
        return (n + f * (h - n),), (jnp.concatenate([q_f, q_n], axis=-1), f)

    def saved(self, prev, new, aux):
        return aux  # q, f

    def step_bwd(self, saved, dstate, p, mm, write):
        q, f = saved
        (dh,) = dstate
        hidden = dh.shape[-1]
        dzx = write(q * jnp.concatenate([dh, dh], axis=-1))  # [d f, d n] pre-activation
        if not self.reset_gate:
            return dzx, dzx, (dh * f,), ()
        dnf = dzx[:, hidden:].astype(f.dtype) * f
        # dzh in dzx's dtype (its stack's), as the GRU's
        dzh = jnp.concatenate([dzx[:, :hidden], dnf.astype(dzx.dtype)], axis=-1)
        return dzx, dzh, (dh * f,), (dnf,)

    def dzh_pieces(self, dzx, emits):
        # dzh = [df, dn * f]: its f block is dzx's, its n block is emitted
        return dzx[..., :dzx.shape[-1] // 2], emits[0]

    def param_grads(self, dzx, dzh, emits, saved, p, mm):
        if not self.reset_gate:
            return {"bias": jnp.sum(dzx, axis=(0, 1), dtype=p["bias"].dtype)}
        db_ih = jnp.sum(dzx, axis=(0, 1), dtype=p["b_ih"].dtype)
        db_hn = jnp.sum(emits[0], axis=(0, 1), dtype=p["b_hh"].dtype)
        return {"b_ih": db_ih,
                "b_hh": jnp.concatenate([db_ih[:db_hn.shape[0]], db_hn]).astype(
                    p["b_hh"].dtype)}

"""The simple (Elman) RNN cell for the recurrent driver (`recurrent.driver`), as PyTorch ``nn.RNN``.

``h' = act(W_ih x + b_ih + W_hh h + b_hh)`` with ``act`` tanh or relu. The state is kept in the
accumulation dtype, so the derivative of the activation is taken from the unrounded value.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from ..cell import recurrent_kernel
from .family import FAMILY

NONLINEARITIES = ("tanh", "relu")


@dataclasses.dataclass(frozen=True)
class SimpleRNNCell:
    nonlinearity: str = "tanh"

    family = FAMILY
    shared_dz = True
    dz_inplace = None

    def project_in_loop(self, batch, dtype):
        return batch >= 8  # measured on XLA:CPU: slower below

    def state_dtypes(self, dtype, acc):
        return (acc,)

    def prepare(self, w, dtype, acc, mm_dtype):
        def t(a):
            return a.T.astype(dtype).astype(mm_dtype)
        return t(w["W_ih"]), recurrent_kernel(w["W_hh"], dtype, mm_dtype), {
            "bias": w["b_ih"].astype(acc) + w["b_hh"].astype(acc)}

    def step(self, zx, zh, state, p, mm):
        pre = zx + zh + p["bias"]
        h = jnp.tanh(pre) if self.nonlinearity == "tanh" else jnp.maximum(pre, 0)
        return (h,), ()

    def saved(self, prev, new, aux):
        return new  # (h,)

    def step_bwd(self, saved, dstate, p, mm, write):
        (h,), (dh,) = saved, dstate
        dz = dh * (1 - h * h) if self.nonlinearity == "tanh" else jnp.where(h > 0, dh, 0)
        dz = write(dz)
        return dz, dz, (None,), ()

    def param_grads(self, dzx, dzh, emits, saved, p, mm):
        return {"bias": jnp.sum(dzx, axis=(0, 1), dtype=p["bias"].dtype)}

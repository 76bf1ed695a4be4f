"""The sLSTM cell for the recurrent driver (`recurrent.driver`): FlashRNN's sLSTM equations.

From the pre-activations ``a = zx + zh + b`` (gates i, f, z, o; ``b = b_ih + b_hh``) and the
states h, c, n, m::

    lf = log(sigmoid(a_f)) + m
    m' = a_i                      where n == 0 (no step taken yet)
    m' = max(a_i, lf)             elsewhere
    i  = exp(a_i - m'),  f = exp(lf - m')
    c' = f * c + i * tanh(a_z)
    u  = f * n + i,      n' = max(u, 1)
    h' = sigmoid(a_o) * c' / n'

The stabilizer ``m`` keeps both exponentials at most 1 (``exp(a_i)`` alone overflows float32
from ``a_i > 88``); ``c`` and ``n`` are the unstabilized memory and normalizer scaled by
``exp(-m)``. The test ``n == 0`` is made per unit, as FlashRNN's CUDA and Triton kernels make it;
its vanilla PyTorch backend tests the whole batch at once (``torch.all(n == 0)``), which is the
same wherever the initial ``n`` is zero everywhere or nowhere (FlashRNN's default initial states
are zeros, and after a step ``n >= 1``). State: ``h`` in the compute dtype (a matmul operand and
the output), ``c``, ``n``, ``m`` in the accumulation dtype (float32 for 16-bit inputs).

Backward: JAX's derivative of the forward above, the stabilizer included (its max and the
normalizer's clamp split the gradient in half at a tie, as `jnp.maximum` and `torch.maximum`
do; a sequence's first step from ``n == 0`` is such a tie, ``u = 1``), rearranged so that
nothing cancels: with ``s`` the share of ``m'``'s gradient that reaches ``a_i`` (1 where
``n == 0`` or ``a_i > lf``, 0 where ``a_i < lf``, 1/2 at a tie) and ``k`` the clamp's
(``u > 1``: 1, ``u < 1``: 0, a tie: 1/2), the gradients of ``a_i`` and ``lf`` add up to ``dm'``
(shifting both shifts ``m'`` alone), and each is written from the other's side::

    dc_t = dc' + dh' * sigmoid(a_o) / n'          du = k * (dn' - dh' * h' / n')
    X    = dc_t * ((1 - s) * i * tanh(a_z) - s * f * c) + du * ((1 - s) * i - s * f * n)
    da_i = X + s * dm',     dlf = (1 - s) * dm' - X,     da_f = dlf * sigmoid(-a_f)
    da_z = dc_t * i * (1 - tanh(a_z)^2),                 da_o = dh' * h' * sigmoid(-a_o)
    dc = dc_t * f,          dn = du * f,                 dm = dlf

(autodiff forms ``da_i = d(i) * i + s * (dm' - d(i) * i - d(f) * f)``, whose ``d(i) * i`` cancels
where ``s = 1``; and ``1 - sigmoid(a_f)``, which loses the saturated forget gate's digits, is
``sigmoid(-a_f)`` here). The forward computes the factors that do not depend on the incoming
gradient (``q`` and the per-unit factors below), so that the backward step is a few
multiply-adds and the recurrent matmul, as the LSTM's.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..cell import recurrent_kernel
from .family import FAMILY


def _max(a, b):
    """``max(a, b)`` written as selects, with `jnp.maximum`'s derivative (a tie split in half)
    but not its rule, which reads the equality ``a == max(a, b)``: XLA:CPU at the test suite's
    fast-compile flags (jaxlib 0.10.2) evaluated that one wrongly inside the driver's masked
    loop, so that JAX's derivative of this step (`ForwardOnly`) went wrong."""
    return jnp.where(a > b, a, jnp.where(a < b, b, (a + b) * 0.5))


def _share(a, b):
    """The derivative of `_max` with respect to ``a``: 1, 0, or 1/2 at a tie."""
    return jnp.where(a > b, 1.0, jnp.where(a < b, 0.0, 0.5)).astype(a.dtype)


@dataclasses.dataclass(frozen=True)
class SLSTMCell:
    family = FAMILY
    shared_dz = True  # every gate reads zx + zh
    dz_inplace = 0  # dzx overwrites q

    def project_in_loop(self, batch, dtype):
        # The stated rule where no measured grid ranks the scan route's variants: the LSTM's
        # (four gate blocks alike), inside the loop from batch 8 except in float16
        return batch >= 8 and np.dtype(dtype) != np.float16

    def state_dtypes(self, dtype, acc):
        return (dtype, acc, acc, acc)

    def prepare(self, w, dtype, acc, mm_dtype):
        def t(a):  # (4H, n) -> (n, 4H)
            return a.T.astype(dtype).astype(mm_dtype)

        return t(w["W_ih"]), recurrent_kernel(w["W_hh"], dtype, mm_dtype), {
            "bias": w["b_ih"].astype(acc) + w["b_hh"].astype(acc)}

    def step(self, zx, zh, state, p, mm):
        h, c, n, m = state
        a_i, a_f, a_z, a_o = jnp.split(zx + zh + p["bias"], 4, axis=-1)
        lf = jax.nn.log_sigmoid(a_f) + m
        first = n == 0
        m_new = jnp.where(first, a_i, _max(a_i, lf))
        # exp(a_i - m') is 1 where m' = a_i; written as 1 on a first step, whose clamp below
        # then ties exactly (u = 1) however XLA compiles it (XLA:CPU at the test suite's
        # fast-compile flags made it 1 ulp off there: the tie's half of dn went to nothing)
        i = jnp.where(first, 1.0, jnp.exp(a_i - m_new))
        f = jnp.exp(lf - m_new)
        z = jnp.tanh(a_z)
        o = jax.nn.sigmoid(a_o)
        c_new = f * c + i * z
        u = f * n + i
        n_new = _max(u, jnp.ones_like(u))
        h_new = o * c_new / n_new
        # For the backward (unused, and removed by XLA, without one); see the module's
        # docstring. dzx = [X + s dm', ((1 - s) dm' - X) sigmoid(-a_f), dc_t qz, dh' qo] with
        # X = dc_t P + du Q, q = [P, Q, qz, qo]; the backward writes dzx over q (`dz_inplace`).
        s = jnp.where(first, jnp.ones_like(a_i), _share(a_i, lf))
        k = _share(u, jnp.ones_like(u))
        q = jnp.concatenate([(1 - s) * i * z - s * f * c, (1 - s) * i - s * f * n,
                             i * (1 - z * z), h_new * jax.nn.sigmoid(-a_o)], axis=-1)
        aux = (q, o / n_new, k * h_new / n_new, k, s, jax.nn.sigmoid(-a_f), f)
        return (h_new.astype(h.dtype), c_new, n_new, m_new), aux

    def saved(self, prev, new, aux):
        return aux

    def step_bwd(self, saved, dstate, p, mm, write):
        q, r, kw, k, s, sig_neg_f, f = saved
        dh, dc, dn, dm = dstate
        hidden = dh.shape[-1]
        dc_t = dc + dh * r
        du = k * dn - kw * dh
        x = dc_t * q[:, :hidden] + du * q[:, hidden:2 * hidden]
        dlf = (1 - s) * dm - x
        dzx = write(jnp.concatenate([x + s * dm, dlf * sig_neg_f,
                                     dc_t * q[:, 2 * hidden:3 * hidden],
                                     dh * q[:, 3 * hidden:]], axis=-1))
        return dzx, dzx, (None, dc_t * f, du * f, dlf), ()

    def param_grads(self, dzx, dzh, emits, saved, p, mm):
        return {"bias": jnp.sum(dzx, axis=(0, 1), dtype=p["bias"].dtype)}

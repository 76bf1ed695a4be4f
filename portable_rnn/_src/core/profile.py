"""The portable paths' platform-dependent options, one `Profile` per platform.

The pure-JAX paths compute the same math everywhere; how they hand it to a backend differs where
a backend runs one way faster or lacks an operation. Every such option is a field here, so a
path asks its profile instead of testing the platform's name.
"""

from __future__ import annotations

import dataclasses

from .capabilities import Capabilities


@dataclasses.dataclass(frozen=True)
class Profile:
    """How the portable paths run on one platform.

    Attributes:
      platform: the platform's name, as `Capabilities.platform`.
      bf16_products: the recurrent driver hands XLA bfloat16 operands for bfloat16 x bfloat16 =
        float32 products, each behind an optimization barrier (XLA:CPU multiplies them natively
        only in the layouts its YNNPACK fusion takes; the barrier keeps the driver's layouts).
      f16_products_in_f32: float16 matmul operands go to the backend as float32 (XLA:CPU has no
        float16 dot; the products are the same, exact in float32).
      wide_stacks: 16-bit per-step values are stacked over the loop in float32 (XLA:CPU copies a
        whole 16-bit stack on every step instead of updating it in place).
      project_in_loop: the input projection may run per step inside the loop: the routing model
        ranks the scan route's two variants where the platform's grid timed them, the cell's
        stated rule decides elsewhere (`recurrent.api.project_in_loop`).
      upcast_attention: attention's 16-bit operands are multiplied as float32 (XLA:CPU lacks a
        16-bit x 16-bit = float32 dot in some layouts; the products are exact).
    """

    platform: str
    bf16_products: bool = False
    f16_products_in_f32: bool = False
    wide_stacks: bool = False
    project_in_loop: bool = False
    upcast_attention: bool = False


PROFILES: dict[str, Profile] = {
    "cpu": Profile("cpu", bf16_products=True, f16_products_in_f32=True, wide_stacks=True,
                   project_in_loop=True, upcast_attention=True),
}


def profile(caps: Capabilities) -> Profile:
    """The profile of the platform `caps` describes (the defaults for one without its own)."""
    found = PROFILES.get(caps.platform)
    return found if found is not None else Profile(caps.platform)

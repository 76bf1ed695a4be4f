"""Where the Pallas TPU recurrent kernel was measured faster than the scan path: the automatic
choice on a TPU takes the kernel only for a shape class listed here with a ratio below 1.

Written by ``python benchmarks/tpu_recurrent_kernel.py --table-from RESULTS.json`` from the
benchmark's JSON (do not edit by hand). Keys: (family, dtype, batch class, hidden size) with the
batch class the next power of two of B; values: the kernel's fwd+bwd time over the scan path's
(median of interleaved runs) and the device it was measured on.
"""

from __future__ import annotations

SOURCE = 'tpu_recurrent_kernel.json (2026-12-06 08:35:34)'

TABLE: dict[tuple[str, str, int, int], tuple[float, str]] = {
    ('gru', 'bfloat16', 8, 256): (0.705, 'TPU v5 lite'),
    ('gru', 'bfloat16', 16, 512): (0.177, 'TPU v5 lite'),
    ('gru', 'bfloat16', 32, 1024): (0.574, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 8, 256): (0.763, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 16, 512): (0.462, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 32, 1024): (0.627, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 256, 1024): (0.788, 'TPU v5 lite'),
}

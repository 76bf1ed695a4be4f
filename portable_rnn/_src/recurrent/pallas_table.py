"""Where the Pallas TPU recurrent kernel was measured faster than the scan path: the automatic
choice on a TPU takes the kernel only for a shape class listed here with a ratio below 1.

Written by ``python -m benchmarks.tpu_recurrent_kernel --table-from RESULTS.json [...]`` from
the benchmark's JSON, a later run's shape classes replacing an earlier's (do not edit by hand).
Keys: (family, dtype, batch class, hidden size) with the batch class the next power of two of B;
values: the kernel's fwd+bwd time over the scan path's
(median of interleaved runs) and the device it was measured on.
"""

from __future__ import annotations

SOURCE = (
    'benchmarks/results/tpu/1812262/tpu_recurrent_kernel.json (2026-12-06 12:42:15)',
    'benchmarks/results/tpu/82054a0/tpu_recurrent_kernel.json (2026-12-06 15:00:07)',
)

TABLE: dict[tuple[str, str, int, int], tuple[float, str]] = {
    ('gru', 'bfloat16', 8, 256): (0.641, 'TPU v5 lite'),
    ('gru', 'bfloat16', 16, 512): (0.176, 'TPU v5 lite'),
    ('gru', 'bfloat16', 32, 256): (0.896, 'TPU v5 lite'),
    ('gru', 'bfloat16', 32, 1024): (0.513, 'TPU v5 lite'),
    ('gru', 'bfloat16', 256, 1024): (0.724, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 8, 256): (0.738, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 16, 512): (0.442, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 32, 256): (1.007, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 32, 1024): (0.558, 'TPU v5 lite'),
    ('lstm', 'bfloat16', 256, 1024): (0.789, 'TPU v5 lite'),
}

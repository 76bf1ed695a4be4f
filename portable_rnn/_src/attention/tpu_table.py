"""Measured attention timings on TPUs: which implementation wins at which shape, and the splash
kernel's best block size there.

Written by ``python -m benchmarks.tpu_attention --table-from RESULTS.json``; the rows seeded by
hand come from the same benchmark's first run. Each row is one shape on one chip, bfloat16,
forward and backward under `jit`, the median of interleaved rounds in milliseconds per
implementation (``splash``/``flash``: JAX's Pallas kernels at their best block size; ``chunked``
and ``xla``: portable_rnn's paths), and the splash block size that gave its time (queries and
keys alike). A missing implementation was not measured (or failed) at that shape.
"""

MEASURED = (
    dict(device='TPU v5 lite', B=16, T=256, S=256, N=8, K=8, H=128, causal=True, window=None,
         ms={'splash': 1.297, 'chunked': 1.065, 'xla': 1.016}, splash_block=256),
    dict(device='TPU v5 lite', B=4, T=2048, S=2048, N=8, K=8, H=128, causal=False, window=None,
         ms={'splash': 3.54, 'flash': 3.78, 'chunked': 4.54, 'xla': 7.58}, splash_block=512),
    dict(device='TPU v5 lite', B=4, T=2048, S=2048, N=8, K=8, H=128, causal=True, window=None,
         ms={'splash': 2.74, 'flash': 3.3, 'chunked': 4.28, 'xla': 7.42}, splash_block=512),
    dict(device='TPU v5 lite', B=4, T=2048, S=2048, N=32, K=8, H=128, causal=True, window=None,
         ms={'splash': 8.772, 'chunked': 13.632, 'xla': 27.266}, splash_block=1024),
    dict(device='TPU v5 lite', B=2, T=8192, S=8192, N=8, K=8, H=128, causal=True, window=None,
         ms={'splash': 10.7, 'flash': 12.4, 'chunked': 19.8}, splash_block=1024),
    dict(device='TPU v5 lite', B=2, T=8192, S=8192, N=8, K=8, H=128, causal=True,
         window=(1024, 0), ms={'splash': 5.422, 'chunked': 8.379}, splash_block=512),
)

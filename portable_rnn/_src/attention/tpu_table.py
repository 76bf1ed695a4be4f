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
         ms={'splash': 1.245, 'chunked': 1.073, 'xla': 0.989}, splash_block=256),
    dict(device='TPU v5 lite', B=4, T=2048, S=2048, N=8, K=8, H=128, causal=False, window=None,
         ms={'splash': 3.222, 'flash': 3.798, 'chunked': 4.366, 'xla': 7.52},
         splash_block=1024),
    dict(device='TPU v5 lite', B=4, T=2048, S=2048, N=8, K=8, H=128, causal=True, window=None,
         ms={'splash': 2.836, 'flash': 3.359, 'chunked': 4.411, 'xla': 7.522},
         splash_block=1024),
    dict(device='TPU v5 lite', B=4, T=2048, S=2048, N=32, K=8, H=128, causal=True, window=None,
         ms={'splash': 8.826, 'chunked': 13.608, 'xla': 27.415}, splash_block=1024),
    dict(device='TPU v5 lite', B=2, T=8192, S=8192, N=8, K=8, H=128, causal=True, window=None,
         ms={'splash': 11.091, 'flash': 12.789, 'chunked': 19.783}, splash_block=1024),
    dict(device='TPU v5 lite', B=2, T=8192, S=8192, N=8, K=8, H=128, causal=True,
         window=(1024, 0), ms={'splash': 6.5, 'chunked': 9.459}, splash_block=512),
    dict(device='TPU v5 lite', B=2, T=32768, S=32768, N=8, K=8, H=128, causal=True,
         window=None, ms={'splash': 134.028, 'chunked': 278.643}, splash_block=1024),
)

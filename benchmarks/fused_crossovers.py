"""Where "auto" should start emulating now that small products run the fused kernel: level IV
(as shipped) against cuBLAS SGEMM (strided-batched for stacks) around the crossovers of
``auto.CROSSOVERS`` (min_dim, large_min_dim, stack_min_dim), in one run.

    python benchmarks/fused_crossovers.py      (GPU only; prints one line a shape)
"""

from __future__ import annotations

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/fused_crossovers.py")

import cupy as cp

from mixpert.bench.gemm import measure_calls, method_fn, summary
from mixpert.testdata import gemmul8 as phi_matrix

SHAPES = (  # (pairs, m, k, n)
    (1, 2048, 2048, 2048), (1, 2304, 2304, 2304), (1, 2560, 2560, 2560), (1, 2816, 2816, 2816),
    (1, 3072, 3072, 3072), (1, 2048, 8192, 2048), (1, 2048, 16384, 2048), (1, 1024, 16384, 1024),
    (256, 512, 512, 512), (64, 768, 768, 768), (32, 1024, 1024, 1024), (512, 256, 256, 256),
    # tall and wide outputs with one small side, where the fused kernel also runs
    (1, 131072, 1024, 1024), (1, 32768, 1024, 1024), (1, 16384, 2048, 2048),
    (1, 2048, 2048, 16384), (1, 1024, 4096, 16384), (1, 8192, 2304, 2304), (1, 16384, 1024, 2048),
)  # fmt: skip

for seed, (count, m, k, n) in enumerate(SHAPES):
    rng = cp.random.default_rng(seed)
    lead = (count,) if count > 1 else ()
    a, b = phi_matrix(cp, rng, (*lead, m, k), 0.5), phi_matrix(cp, rng, (*lead, k, n), 0.5)
    calls = {name: method_fn(cp, name, a, b) for name in ("sgemm", "IV", "T6", "auto")}
    print(summary(f"{count}x{m}x{k}x{n}", measure_calls(cp, calls, a, b, 2.0 * count * m * k * n)))

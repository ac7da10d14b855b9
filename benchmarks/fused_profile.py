"""One level-IV product each way at n (default 8192), for Nsight Compute: the fused kernel
(MIXPERT_FUSED=always) and the class-sum pipeline (cuBLAS INT8 GEMMs and the combine).

    ncu --kernel-name regex:'fused_int8|i8|imma|combine' python benchmarks/fused_profile.py
"""

from __future__ import annotations

import sys

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/fused_profile.py")

import cupy as cp

import mixpert
from mixpert.runtime.cuda import fused

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
rng = cp.random.default_rng(0)
a, b = (rng.standard_normal((n, n), dtype=cp.float32) for _ in range(2))
for to in ("always", "0"):
    with fused.switched(to):
        mixpert.matmul(a, b, level="IV")
cp.cuda.Device().synchronize()

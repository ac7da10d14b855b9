"""Where the time of one emulated call goes: stage by stage, beside a plain INT8 GEMM ceiling.

python benchmarks/profile_stages.py [n ...]      (GPU only)
"""

from __future__ import annotations

import sys

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/profile_stages.py")

import cupy as cp

from mixpert.bench.gemm import breakdown
from mixpert.runtime.cuda import packs, sliced
from mixpert.timing import gpu_median_seconds as median_seconds


def int8_ceiling_ms(n: int) -> float:
    """One n^3 INT8 GEMM, contiguous TN operands, random digits."""
    rng = cp.random.default_rng(0)
    kexp = cp.zeros(n + 1, dtype=cp.int32)
    a = packs.pack_int8(rng.standard_normal((n, n), dtype=cp.float32), kexp, packs.A_SIDE, 1, False)
    b = packs.pack_int8(rng.standard_normal((n, n), dtype=cp.float32), kexp, packs.B_SIDE, 1, True)
    out = cp.empty((n, n), dtype=cp.int32)
    return median_seconds(lambda: sliced.gemm_tn(a, 0, b, 0, a.k_pad, out), 2.0 * n**3) * 1e3


def main(sizes: list[int]) -> None:
    for n in sizes:
        ceiling = int8_ceiling_ms(n)
        print(f"n = {n}: one INT8 GEMM {ceiling:.3f} ms = {2 * n**3 / ceiling / 1e9:.0f} TOPS")
        sgemm_a = cp.random.default_rng(1).standard_normal((n, n), dtype=cp.float32)
        sgemm = median_seconds(lambda a=sgemm_a: a @ a, 2.0 * n**3) * 1e3
        print(f"  SGEMM {sgemm:.3f} ms")
        for level in ("IV", "V"):
            for stage, ms in breakdown(n, level).items():
                print(f"  {level} {stage:32s} {ms:9.3f} ms  ({ms / ceiling:.2f} INT8 GEMMs)")
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [8192, 16384])

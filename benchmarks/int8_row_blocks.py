"""Why ``cuda.sliced.gemm_tn`` runs wide outputs as 4096-row blocks: one INT8 GEMM timed whole,
blocked.

On the H100 of 2026-11-22 cuBLAS's own choice ran 16384^3 at 780 TOPS, four 4096-row GEMMs at
1640 TOPS (12288: 1323 vs 1456; 8192: equal). Clocks stayed at 1920-1980 MHz: not power.

    python benchmarks/int8_row_blocks.py [n ...]      (GPU only)
"""

from __future__ import annotations

import sys

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/int8_row_blocks.py")

import cupy as cp

from mixpert.runtime import workspace
from mixpert.runtime.cuda import packs, sliced
from mixpert.timing import gpu_median_seconds as median_seconds


def int8_tops(n: int, row_block: int) -> float:
    x = cp.random.default_rng(0).standard_normal((n, n), dtype=cp.float32)
    kexp = cp.zeros(n + 1, dtype=cp.int32)  # no equilibration: the GEMM alone is timed
    a = packs.pack_int8(x, kexp, packs.A_SIDE, 1, reversed_slots=False)
    b = packs.pack_int8(x, kexp, packs.B_SIDE, 1, reversed_slots=True)
    out = cp.empty((n, n), dtype=cp.int32)
    saved = workspace.GEMM_ROW_BLOCK, workspace.GEMM_ROW_BLOCK_MIN_N
    workspace.GEMM_ROW_BLOCK, workspace.GEMM_ROW_BLOCK_MIN_N = row_block, 0  # blocks at any n
    try:
        seconds = median_seconds(lambda: sliced.gemm_tn(a, 0, b, 0, a.k_pad, out), 2.0 * n**3)
    finally:
        workspace.GEMM_ROW_BLOCK, workspace.GEMM_ROW_BLOCK_MIN_N = saved
    return 2.0 * n**3 / seconds / 1e12


if __name__ == "__main__":
    for n in [int(x) for x in sys.argv[1:]] or [8192, 12288, 16384]:
        whole, blocked = int8_tops(n, n), int8_tops(n, 4096)
        print(f"n = {n}: one GEMM {whole:.0f} TOPS, 4096-row blocks {blocked:.0f} TOPS")

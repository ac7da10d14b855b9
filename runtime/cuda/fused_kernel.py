"""The fused INT8 kernel in Triton: per output tile, every slice product of a level on the INT8
tensor cores (wgmma on Hopper, mma.sync on Ampere), the class sums S_g in INT32 registers, and
``combine``'s formula in the epilogue, writing float32. Imported only where Triton is installed
(``fused``); Triton's compiler turns it into a cubin that CuPy launches.

The operands are the packs of ``packs`` (lines, slots, k_pad), k contiguous for both, as the
INT8 tensor cores want them (line stride ``ld``); B's slices are stored in reverse, slice j in
slot B_SLOTS - 1 - j. A level here is a triangle: A slices 0..A_SLICES-1, B slices
0..B_SLICES-1, pairs (i, j) with i + j <= MAX_SUM (every INT8 rung of the ladder). The k loop
needs no blocking: the caller keeps k_pad within ``combine.int32_k_block``, where no class sum
can leave INT32.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

# combine.OVERFLOW_THRESHOLD (float32 rounds |v| >= it to inf) and FLT_MAX
OVERFLOW_THRESHOLD = tl.constexpr(2.0**128 - 2.0**103)
FLT_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def _pow2(e):
    """2^e as a float64 built from its bits (device.cuh's pow2): exact for -1022 <= e <= 1023."""
    return ((e.to(tl.int64) + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _lines(ptr, first, line_count, ld, slot, k_pad, BL: tl.constexpr, BK: tl.constexpr):
    """Pointers to a [BL, BK] tile at k = 0 of slot ``slot`` of lines first.. of a pack, lines
    past the end clamped to the last (their results are never stored)."""
    line = tl.minimum(first + tl.arange(0, BL), line_count - 1).to(tl.int64)
    return ptr + line[:, None] * ld + slot * k_pad + tl.arange(0, BK)[None, :]


@triton.jit
def _weighted(acc, sums, g: tl.constexpr, W0: tl.constexpr, STEP: tl.constexpr):
    """acc + S_g 2^-(W0 + STEP g): the product is exact, so an FMA gives the same bits."""
    return acc + sums.to(tl.float64) * _pow2(tl.full([], -(W0 + STEP * g), tl.int32))


@triton.jit
def fused_int8(
    a_ptr, b_ptr, a_exp, b_exp, c_ptr, m, n, k_pad, ld_a, ld_b, k_slack,
    A_SLICES: tl.constexpr, B_SLICES: tl.constexpr, B_SLOTS: tl.constexpr, MAX_SUM: tl.constexpr,
    W0: tl.constexpr, STEP: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """C[z] = combine(S_g) for pair z = program_id(1) of a stack (one matrix: z = 0)."""
    z = tl.program_id(1).to(tl.int64)
    tiles_m = tl.cdiv(m, BM)
    tiles_n = tl.cdiv(n, BN)
    # Grouped order: GROUP_M row tiles share B's column tiles while they are in L2.
    pid = tl.program_id(0)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % (GROUP_M * tiles_n)) % rows_in_group
    tile_n = (pid % (GROUP_M * tiles_n)) // rows_in_group
    row0, col0 = tile_m * BM, tile_n * BN

    acc0 = tl.zeros([BM, BN], dtype=tl.int32)
    acc1 = tl.zeros([BM, BN], dtype=tl.int32)
    acc2 = tl.zeros([BM, BN], dtype=tl.int32)
    acc3 = tl.zeros([BM, BN], dtype=tl.int32)
    a_base = a_ptr + z * m * ld_a  # the pair's first lines
    b_base = b_ptr + z * n * ld_b
    pa0 = _lines(a_base, row0, m, ld_a, 0, k_pad, BM, BK)
    pa1 = _lines(a_base, row0, m, ld_a, 1, k_pad, BM, BK)
    pa2 = _lines(a_base, row0, m, ld_a, 2, k_pad, BM, BK)
    pa3 = _lines(a_base, row0, m, ld_a, 3, k_pad, BM, BK)
    pb0 = _lines(b_base, col0, n, ld_b, B_SLOTS - 1, k_pad, BN, BK)
    pb1 = _lines(b_base, col0, n, ld_b, B_SLOTS - 2, k_pad, BN, BK)
    pb2 = _lines(b_base, col0, n, ld_b, B_SLOTS - 3, k_pad, BN, BK)
    pb3 = _lines(b_base, col0, n, ld_b, B_SLOTS - 4, k_pad, BN, BK)
    for k0 in range(0, k_pad, BK):
        # A's slices as [BM, BK] and B's as [BK, BN]; k past k_pad reads as zero digits
        inside = tl.arange(0, BK)[None, :] < k_pad - k0
        a0 = tl.load(pa0, mask=inside, other=0)
        b0 = tl.trans(tl.load(pb0, mask=inside, other=0))
        acc0 = tl.dot(a0, b0, acc0, out_dtype=tl.int32)
        if B_SLICES > 1:
            b1 = tl.trans(tl.load(pb1, mask=inside, other=0))
            if MAX_SUM >= 1:
                acc1 = tl.dot(a0, b1, acc1, out_dtype=tl.int32)
        if A_SLICES > 1:
            a1 = tl.load(pa1, mask=inside, other=0)
            if MAX_SUM >= 1:
                acc1 = tl.dot(a1, b0, acc1, out_dtype=tl.int32)
            if B_SLICES > 1 and MAX_SUM >= 2:
                acc2 = tl.dot(a1, b1, acc2, out_dtype=tl.int32)
        if B_SLICES > 2 and MAX_SUM >= 2:
            b2 = tl.trans(tl.load(pb2, mask=inside, other=0))
            acc2 = tl.dot(a0, b2, acc2, out_dtype=tl.int32)
            if A_SLICES > 1 and MAX_SUM >= 3:
                acc3 = tl.dot(a1, b2, acc3, out_dtype=tl.int32)
        if A_SLICES > 2 and MAX_SUM >= 2:
            a2 = tl.load(pa2, mask=inside, other=0)
            acc2 = tl.dot(a2, b0, acc2, out_dtype=tl.int32)
            if B_SLICES > 1 and MAX_SUM >= 3:
                acc3 = tl.dot(a2, b1, acc3, out_dtype=tl.int32)
        if B_SLICES > 3 and MAX_SUM >= 3:
            b3 = tl.trans(tl.load(pb3, mask=inside, other=0))
            acc3 = tl.dot(a0, b3, acc3, out_dtype=tl.int32)
        if A_SLICES > 3 and MAX_SUM >= 3:
            a3 = tl.load(pa3, mask=inside, other=0)
            acc3 = tl.dot(a3, b0, acc3, out_dtype=tl.int32)
        pa0, pa1, pa2, pa3 = pa0 + BK, pa1 + BK, pa2 + BK, pa3 + BK
        pb0, pb1, pb2, pb3 = pb0 + BK, pb1 + BK, pb2 + BK, pb3 + BK

    # combine.combine: smallest weight first, in float64, then the exact scaling and rounding
    value = tl.zeros([BM, BN], dtype=tl.float64)
    if MAX_SUM >= 3:
        value = _weighted(value, acc3, 3, W0, STEP)
    if MAX_SUM >= 2:
        value = _weighted(value, acc2, 2, W0, STEP)
    if MAX_SUM >= 1:
        value = _weighted(value, acc1, 1, W0, STEP)
    value = _weighted(value, acc0, 0, W0, STEP)
    rows = row0 + tl.arange(0, BM)
    cols = col0 + tl.arange(0, BN)
    row_in, col_in = rows < m, cols < n
    ea = tl.load(a_exp + z * m + rows, mask=row_in, other=0)
    eb = tl.load(b_exp + z * n + cols, mask=col_in, other=0)
    scale = ea[:, None] + eb[None, :]
    value = value * _pow2(scale)
    out = _round_to_float(value)
    near = tl.abs(value) >= OVERFLOW_THRESHOLD
    within = near & (tl.abs(value) - k_slack * _pow2(scale) < OVERFLOW_THRESHOLD)
    flt_max = tl.where(value < 0, -FLT_MAX, FLT_MAX).to(tl.float32)
    out = tl.where(within, flt_max, out)
    c_lines = z * m * n + rows[:, None].to(tl.int64) * n + cols[None, :]
    tl.store(c_ptr + c_lines, out, mask=row_in[:, None] & col_in[None, :])


@triton.jit
def _round_to_float(d):
    """float64 -> float32, nearest even, subnormal results kept (device.cuh's round_to_float)."""
    tiny = tl.abs(d) < 1.1754943508222875e-38  # 2^-126
    fraction = libdevice.rint(tl.abs(d) * 7.1362384635297994e44).to(tl.int32)  # * 2^149
    sign = tl.where(d < 0, -2147483648, 0).to(tl.int32)
    subnormal = (sign | fraction).to(tl.float32, bitcast=True)
    return tl.where(tiny, subnormal, d.to(tl.float32))

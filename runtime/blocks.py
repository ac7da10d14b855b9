"""Level IV-blocks: level IV's slices and pairs, with one scale per block of k (the CPU model).

Level IV scales each row of A and column of B by one power of two over all of k, which a GPU
kernel can only know after reading the whole line: so its operands are packed into memory and
read back, which a memory-bound product (tall A times a thin B, TSM2R's case) cannot afford.
IV-blocks scales each (row of A, block of ``BLOCK_K`` k-steps) and each (block, column of B) by
its own power of two instead, so a kernel can slice A in registers as it streams it, once:

* per block, the scale exponents are ``packer.scale_exponents`` of the block's part of the line,
  and the digits are ``packer.slice_rows`` of it (NaN and Inf pack as 0; their lines are
  recomputed, ``bypass``);
* per block, the exact class sums S_g = sum over pairs (i, j) with i + j = g of a_i b_j^T make
  one integer T = sum_g S_g 2^(8 (G - g)) (G the top class; |T| < 2^45, exact in float64),
  worth 2^(ea + eb - pair_exponent(G)); the GPU sums two classes at a time in int32
  (``class_pairs``, ``check_int32``) and joins them in float64 with exact fused multiply-adds;
* each block's term T 2^(ea + eb - pair_exponent(G)) (exact) is added into a float64 total per
  output entry, blocks in k order (one rounding per block: a fused multiply-add on the GPU),
  and the total is rounded once to float32, saturating as ``combine.saturate`` does where it
  would overflow by less than the level's error bound, k ``overflow_slack`` 2^(ta + tb) (ta, tb:
  the line's largest block exponents; each block's error is below BLOCK_K slack 2^(ea + eb)).

Lines whose range the block scales cannot resolve (``bypass.unresolved``'s rule, each entry
measured against its own block's scale) are recomputed exactly, as at level IV: the level keeps
SGEMM's componentwise bound. Measured on the CPU at n = 1024 (benchmarks/block_scaled_accuracy.py,
blocks of 32 to 128): 2.1e-7 to 2.8e-7 on phi = 0.5 data, below level IV's 3.8e-7, and 3.1e-7 to
4.9e-7 at phi = 1, where IV gives 9.0e-7; on an H100 at 65536 x 4096 x n (phi = 0.5), 2.4e-7
against cuBLAS SGEMM's 1.1e-6 (benchmarks/results/<gpu>/skinny.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import bypass, packer
from .combine import INT32_LIMIT, overflow_slack, saturate
from .levels import Level

BLOCK_K = 64  # k-steps per scale block: two k-steps of the GPU's m16n8k32 INT8 MMA
LEVEL = "IV-blocks"  # the level of this kind (the GPU kernel is built for its slices and pairs)


def class_pairs(level: Level) -> tuple[tuple[int, ...], ...]:
    """The weight classes, two at a time (the last alone when their count is odd): each tuple's
    class sums are combined into one integer before they meet the float64 total."""
    groups = level.groups
    return tuple(groups[g : g + 2] for g in range(0, len(groups), 2))


def class_bound(level: Level, group: int, block: int = BLOCK_K) -> int:
    """The largest |S_g| one block's class sum can reach."""
    return block * sum(
        packer.digit_bound(i) * packer.digit_bound(j) for i, j in level.pairs if i + j == group
    )


def check_int32(level: Level, block: int = BLOCK_K) -> None:
    """ValueError when a combined class pair could overflow the GPU's int32 accumulators (a
    block's T, below 2^(8 G) times S_0's bound, is then far inside float64's 2^53)."""
    for pair in class_pairs(level):
        top = sum(class_bound(level, g, block) << (packer.LATER_SLICE_BITS * (len(pair) - 1 - t))
                  for t, g in enumerate(pair))  # fmt: skip
        if top > INT32_LIMIT:
            raise ValueError(
                f"level {level.name!r}: classes {pair} of a block of {block} k-steps can reach "
                f"{top}, beyond int32"
            )


def _blocks(a: np.ndarray, b: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """Per block of k, in order: A's lines (m, block) and B's (n, block), NaN/Inf as 0, and
    their scale exponents (int64)."""
    a0 = np.where(np.isfinite(a), a, np.float32(0))
    b0 = np.where(np.isfinite(b), b, np.float32(0))
    for start in range(0, a.shape[1], BLOCK_K):
        rows = a0[:, start : start + BLOCK_K]
        cols = np.ascontiguousarray(b0[start : start + BLOCK_K].T)
        ea = packer.scale_exponents(rows, axis=1).astype(np.int64)
        eb = packer.scale_exponents(cols, axis=1).astype(np.int64)
        yield rows, cols, ea, eb


def blocks_product(a: np.ndarray, b: np.ndarray, level: Level) -> np.ndarray:
    """a @ b at ``level`` (kind "blocks") for float32 matrices with m, k, n > 0: the module
    docstring's arithmetic, including the unresolved lines (NaN/Inf lines are the caller's:
    ``cpu.product_at_level`` recomputes them, as for every emulated level)."""
    m, k = a.shape
    n = b.shape[1]
    total = np.zeros((m, n), dtype=np.float64)
    row_top = np.full(m, np.iinfo(np.int64).min)  # the largest block exponent of each line
    col_top = np.full(n, np.iinfo(np.int64).min)
    deep = _DeepCounts(level, m, n, k)
    with np.errstate(over="ignore"):
        for rows, cols, ea, eb in _blocks(a, b):
            row_top, col_top = np.maximum(row_top, ea), np.maximum(col_top, eb)
            deep.add(rows, cols, ea, eb)
            da = packer.slice_rows(rows, ea, level.a_slices).astype(np.float64)
            db = packer.slice_rows(cols, eb, level.b_slices).astype(np.float64)
            sums = {g: np.zeros((m, n)) for g in level.groups}
            for i, j in level.pairs:  # integers far below 2^53: exact in any order
                sums[i + j] += da[i] @ db[j].T
            top = max(level.groups)
            block = sum(sums[g] * 2.0 ** (packer.LATER_SLICE_BITS * (top - g)) for g in sums)
            scale = ea[:, None] + eb[None, :] - packer.pair_exponent(top)
            total += block * np.ldexp(1.0, scale)  # the term is exact; the sum rounds once
    c = saturate(total, row_top[:, None] + col_top[None, :], k * overflow_slack(level))
    rows_out, cols_out = deep.unresolved()
    bypass.recompute_lines(c, a, b, np.flatnonzero(rows_out), np.flatnonzero(cols_out))
    return c


class _DeepCounts:
    """Per line, its entries deeper below their own block's scale than ``bypass.deep_binades``
    allows for the product's k; a line with more than k / DEEP_FRACTION is unresolved (none at
    a level that bypasses no line)."""

    def __init__(self, level: Level, m: int, n: int, k: int) -> None:
        self.on, self.k = level.bypass_wide, k
        self.bits = packer.fraction_bits(level.a_slices)
        self.rows, self.cols = np.zeros(m, dtype=np.int64), np.zeros(n, dtype=np.int64)

    def add(self, rows: np.ndarray, cols: np.ndarray, ea: np.ndarray, eb: np.ndarray) -> None:
        if self.on:
            self.rows += bypass.deep_counts(rows.astype(np.float64), ea, self.bits, self.k)
            self.cols += bypass.deep_counts(cols.astype(np.float64), eb, self.bits, self.k)

    def unresolved(self) -> tuple[np.ndarray, np.ndarray]:
        limit = bypass.DEEP_FRACTION
        return self.rows * limit > self.k, self.cols * limit > self.k


def block_deep_counts(lines: Any, level: Level, k: int) -> Any:
    """Per row of ``lines`` (float64 holding float32 values; NumPy or CuPy, whose arrays these
    NumPy calls dispatch to), its entries deeper below their own block's scale than
    ``bypass.deep_binades`` allows for a product of this k, NaN and Inf read as 0:
    ``_DeepCounts``' rule for whole lines (the GPU's count for inspection)."""
    finite = np.where(np.isfinite(lines), lines, 0.0)
    pad = -lines.shape[1] % BLOCK_K
    if pad:
        finite = np.pad(finite, ((0, 0), (0, pad)))
    per_block = finite.reshape(len(finite), -1, BLOCK_K)
    exponents = packer.scale_exponents(per_block, axis=2)
    bits = packer.fraction_bits(level.a_slices)
    return bypass.deep_counts(per_block, exponents, bits, k).sum(axis=1)


def unresolved_lines(a: np.ndarray, b: np.ndarray, level: Level) -> tuple[int, int]:
    """(rows of A, columns of B) ``blocks_product`` recomputes as unresolved."""
    (m, k), n = a.shape, b.shape[1]
    if 0 in (m, k, n):
        return 0, 0
    deep = _DeepCounts(level, m, n, k)
    for block in _blocks(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False)):
        deep.add(*block)
    rows, cols = deep.unresolved()
    return int(rows.sum()), int(cols.sum())

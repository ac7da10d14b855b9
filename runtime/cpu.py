"""The exact CPU backend: the oracle every other backend is checked against.

INT8 slice products are computed exactly with float32 BLAS on integer-valued blocks: every digit
product is an integer of at most 2^14, and k is cut into blocks of at most FLOAT32_K_BLOCK, so
every partial sum of a block stays within 2^24 and no operation in any summation order rounds;
the blocks' products are summed into float64 class sums, which stay below 2^53
(``float64_k_block``). The exact class sums then go through ``combine.combine``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import blocks, bypass, equilibrate, fp16split, ordered, pack_reuse, packer, workspace
from .combine import combine, overflow_slack
from .levels import Kind, Level, get_level

TF32_DROPPED_BITS = 13  # float32 keeps 23 mantissa bits, TF32 10
# k-steps whose digit products (|d| <= 128: at most 2^14 each) sum exactly in float32 (to at
# most 2^24) in any order: each pair's block product runs as SGEMM, twice DGEMM's rate on a CPU
FLOAT32_K_BLOCK = 2**24 // 128**2
STACK_BLOCK_BYTES = 64 << 20  # temporaries of one group of stacked pairs (int8_product_stack)


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (10-bit mantissa), nearest-even; NaN/Inf unchanged."""
    bits = x.view(np.uint32)
    keep_odd = (bits >> TF32_DROPPED_BITS) & 1
    half = np.uint32((1 << (TF32_DROPPED_BITS - 1)) - 1)
    rounded = (bits + half + keep_odd) & np.uint32(~((1 << TF32_DROPPED_BITS) - 1) & 0xFFFFFFFF)
    return np.where(np.isfinite(x), rounded.view(np.float32), x)


def exact_class_sums(
    a_digits: np.ndarray, b_digits: np.ndarray, level: Level, k_block: int | None = None
) -> dict[int, np.ndarray]:
    """S_g for each weight class g: exact integer sums (as float64) of a_i @ b_j^T, i + j = g,
    k cut into blocks of at most ``k_block`` and FLOAT32_K_BLOCK (exact in any blocking): each
    pair's block product in float32, its integers exact, summed into the classes in float64.
    Digits of stacks, (slices, ..., m, k) and (slices, ..., n, k), give stacked sums
    (..., m, n)."""
    k = a_digits.shape[-1]
    shape = (*a_digits.shape[1:-1], b_digits.shape[-2])
    block = min(FLOAT32_K_BLOCK, k_block or k or 1)
    sums = {g: np.zeros(shape, dtype=np.float64) for g in level.groups}
    for start in range(0, k, block):
        stop = min(start + block, k)
        a_f32 = a_digits[..., start:stop].astype(np.float32)
        b_f32 = b_digits[..., start:stop].astype(np.float32)
        for i, j in level.pairs:  # exact: integers to 2^24 a block, below 2^53 in all
            sums[i + j] += a_f32[i] @ np.swapaxes(b_f32[j], -1, -2)
    return sums


def int8_product(
    a: np.ndarray, b: np.ndarray, level: Level, keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING
) -> np.ndarray:
    """Equilibrate, slice B whole (in column blocks), then A in row blocks: each block's digits,
    exact class sums (k blocks) and combine; then the unresolved lines (``bypass``) are
    recomputed. Blocks change no bit (sums are exact); they keep the workspace near the
    operands' and output's bytes (``workspace``). An operand kept across products (``keep``,
    ``pack_reuse``) is sliced once (A in row blocks) and its slices reused while its exponents
    hold."""
    m, k = a.shape
    n = b.shape[1]
    kept_a, kept_b = (kept.on("cpu") for kept in keep)
    budget = workspace.block_budget(m, k, n)
    workspace.check_fits(level, m, k, n, workspace.cpu_bytes(level, m, k, n),
                         workspace.available_host_bytes(), "host")  # fmt: skip
    f = equilibrate.exponents_from_tops(
        kept_a.tops(lambda: equilibrate.column_tops(a)),
        kept_b.tops(lambda: equilibrate.row_tops(b)),
    )
    col_exp, b_digits, wide_cols = kept_b.pack(
        level.name, f, lambda: _sliced_columns(b, f, level, budget)
    )
    rows = workspace.rows_per_block(k, n, budget, len(level.groups))
    whole_a = None if kept_a.slot is None else kept_a.pack(
        level.name, f, lambda: _sliced_row_blocks(a, f, level, rows)
    )  # fmt: skip
    k_slack = k * overflow_slack(level)
    # (a k-block's float32 copies of the row block's and B's digits fit the budget)
    k_block = max(16, budget // (4 * max(level.a_slices, level.b_slices) * (rows + n)))
    out = np.empty((m, n), dtype=np.float32)
    wide_rows = np.zeros(m, dtype=bool)
    for r0 in range(0, m, rows):
        block = slice(r0, r0 + rows)
        if whole_a is None:
            row_exp, a_digits, wide_rows[block] = _sliced_rows(a[block], f, level)
        else:
            row_exp, a_digits = whole_a[0][block], whole_a[1][:, block]
            wide_rows[block] = whole_a[2][block]
        sums = exact_class_sums(a_digits, b_digits, level, k_block)
        out[block] = combine(sums, row_exp, col_exp, k_slack)
    bypass.recompute_lines(out, a, b, np.flatnonzero(wide_rows), np.flatnonzero(wide_cols))
    return out


Sliced = tuple[np.ndarray, np.ndarray, np.ndarray]  # (exponents, digits, unresolved lines)


def _sliced_rows(a: np.ndarray, f: np.ndarray, level: Level) -> Sliced:
    """Rows of A rebalanced by ``f``: scale exponents, digits (slices, rows, k), unresolved."""
    rows = equilibrate.rebalance_a(a, f)
    exponents = packer.scale_exponents(rows, axis=1)
    digits = packer.slice_rows(rows, exponents, level.a_slices)
    return exponents, digits, _unresolved(rows, exponents, level, "a")


def _sliced_row_blocks(a: np.ndarray, f: np.ndarray, level: Level, rows: int) -> Sliced:
    """``_sliced_rows`` of all of A, ``rows`` at a time (one block's float64 workspace)."""
    m, k = a.shape
    exponents = np.empty(m, dtype=np.int32)
    digits = np.empty((level.a_slices, m, k), dtype=np.int8)
    unresolved = np.zeros(m, dtype=bool)
    for r0 in range(0, m, rows):
        block = slice(r0, r0 + rows)
        exponents[block], digits[:, block], unresolved[block] = _sliced_rows(a[block], f, level)
    return exponents, digits, unresolved


def _sliced_columns(b: np.ndarray, f: np.ndarray, level: Level, budget: int) -> Sliced:
    """B's columns, as ``_sliced_rows`` (digits (slices, n, k)), in blocks of columns."""
    k, n = b.shape
    exponents = np.empty(n, dtype=np.int32)
    digits = np.empty((level.b_slices, n, k), dtype=np.int8)
    unresolved = np.zeros(n, dtype=bool)
    cols = max(1, budget // (workspace.FLOAT64_TEMPORARIES * k))
    for c0 in range(0, n, cols):
        block = slice(c0, c0 + cols)
        columns = equilibrate.rebalance_b(b[:, block], f)
        exponents[block] = packer.scale_exponents(columns, axis=0)
        digits[:, block] = packer.slice_columns(columns, exponents[block], level.b_slices)
        unresolved[block] = _unresolved(columns.T, exponents[block], level, "b")
    return exponents, digits, unresolved


def int8_product_stack(a: np.ndarray, b: np.ndarray, level: Level) -> np.ndarray:
    """``product_at_level`` at an INT8 level for each pair of two stacks of one length,
    (s, m, k) and (s, k, n) float32, with whole-stack NumPy operations instead of one call per
    pair (the same steps per pair, so the same bits as ``product_at_level`` on each), a few pairs
    at a time to keep the workspace near the operands' and output's bytes."""
    s, m, k = a.shape
    n = b.shape[2]
    out = np.empty((s, m, n), dtype=np.float32)
    if 0 in (s, m, k, n):
        out[...] = 0
        return out
    per_pair = workspace.FLOAT64_TEMPORARIES * (m * k + k * n) + 8 * len(level.groups) * m * n
    step = max(1, STACK_BLOCK_BYTES // per_pair)
    k_slack = k * overflow_slack(level)
    for p0 in range(0, s, step):
        x, y = a[p0 : p0 + step], b[p0 : p0 + step]
        f = equilibrate.k_exponents(x, y)
        rx, ry = equilibrate.rebalance_a(x, f), equilibrate.rebalance_b(y, f)
        row_exp = packer.scale_exponents(rx, axis=-1)
        col_exp = packer.scale_exponents(ry, axis=-2)
        sums = exact_class_sums(
            packer.slice_rows(rx, row_exp, level.a_slices),
            packer.slice_columns(ry, col_exp, level.b_slices),
            level,
        )
        c = out[p0 : p0 + step]
        c[...] = combine(sums, row_exp, col_exp, k_slack)
        rows, cols = bypass.nonfinite_masks(np, x, y)  # lines to recompute: NaN/Inf, or
        rows |= _unresolved(rx, row_exp, level, "a")  # unresolved
        cols |= _unresolved(np.swapaxes(ry, -1, -2), col_exp, level, "b")
        for i in np.flatnonzero(rows.any(axis=-1) | cols.any(axis=-1)):
            bypass.recompute_lines(
                c[i], x[i], y[i], np.flatnonzero(rows[i]), np.flatnonzero(cols[i])
            )
    return out


def unresolved_lines(a: np.ndarray, b: np.ndarray, level: Level) -> tuple[int, int]:
    """(rows of A, columns of B) that ``int8_product`` (or ``blocks``) recomputes as unresolved
    lines."""
    if level.kind == "blocks":
        return blocks.unresolved_lines(a, b, level)
    if not level.bypass_wide or 0 in (*a.shape, b.shape[1]):
        return 0, 0
    a, b = a.astype(np.float32, copy=False), b.astype(np.float32, copy=False)
    ra, rb = equilibrate.rebalance(a, b, equilibrate.k_exponents(a, b))
    rows = _unresolved(ra, packer.scale_exponents(ra, axis=1), level, "a")
    cols = _unresolved(rb.T, packer.scale_exponents(rb, axis=0), level, "b")
    return int(rows.sum()), int(cols.sum())


def _unresolved(lines: np.ndarray, exponents: np.ndarray, level: Level, side: str) -> np.ndarray:
    """``bypass.unresolved`` for rebalanced lines of A (``side`` "a") or B ("b") along the
    last axis (k); no line at a level that bypasses none."""
    if not level.bypass_wide:
        return np.zeros(lines.shape[:-1], dtype=bool)
    slices = level.a_slices if side == "a" else level.b_slices
    return bypass.unresolved(lines, exponents, packer.fraction_bits(slices), lines.shape[-1])


def fp16_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The FP16 path with exact FP16 operands and float64 accumulation (GPUs accumulate in FP32)."""
    a, b = equilibrate.rebalance(a, b, equilibrate.k_exponents(a, b))
    row_exp = packer.binade_exponents(a, axis=1)
    col_exp = packer.binade_exponents(b, axis=0)
    a_hi, a_lo = fp16split.split_rows(a, row_exp)
    b_hi, b_lo = fp16split.split_rows(np.ascontiguousarray(b.T), col_exp)
    a_hi, a_lo, b_hi, b_lo = (p.astype(np.float64) for p in (a_hi, a_lo, b_hi, b_lo))
    hh = a_hi @ b_hi.T
    cross = a_hi @ b_lo.T + a_lo @ b_hi.T
    k_slack = a.shape[1] * overflow_slack(get_level("fp16"))
    return fp16split.combine_parts(hh, cross, row_exp, col_exp, k_slack)


def fp32_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b)


def tf32_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TF32 inputs (rounded here), float32 products and sums (the BLAS's)."""
    return np.matmul(round_to_tf32(a), round_to_tf32(b))


def fp64_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float64 product rounded once to float32; NaN as the canonical quiet NaN (as on the GPU)."""
    product = a.astype(np.float64) @ b.astype(np.float64)
    with np.errstate(over="ignore"):
        return np.where(np.isnan(product), np.float32(np.nan), product.astype(np.float32))


# Level kind -> a @ b for float32 matrices with finite entries and m, k, n > 0.
PRODUCTS: dict[Kind, Callable[[np.ndarray, np.ndarray, Level], np.ndarray]] = {
    "int8": int8_product,
    "blocks": blocks.blocks_product,
    "fp16": lambda a, b, level: fp16_product(a, b),
    "tf32": lambda a, b, level: tf32_product(a, b),
    "fp32": lambda a, b, level: fp32_product(a, b),
    "fp64": lambda a, b, level: fp64_product(a, b),
    "ordered": lambda a, b, level: ordered.ordered_product(a, b),
}


def product_at_level(
    a: np.ndarray, b: np.ndarray, level: Level, keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING
) -> np.ndarray:
    """The CPU backend's entry: a @ b at ``level`` (not "auto") for 2-D float NumPy arrays.

    Operands are rounded to float32; empty dimensions give zeros. Emulated levels pack NaN and
    Inf as 0 and then recompute the lines holding them (``bypass``); native ones see them.
    Levels of kind "int8" keep the packs of the operands ``keep`` names (``pack_reuse``).
    """
    product = PRODUCTS.get(level.kind)
    if product is None:
        raise ValueError(f"level {level.name!r} (kind {level.kind}) has no CPU implementation")
    a = a.astype(np.float32, copy=False)
    b = b.astype(np.float32, copy=False)
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return np.zeros((m, n), dtype=np.float32)
    if not level.emulated:
        return product(a, b, level)
    c = int8_product(a, b, level, keep) if level.kind == "int8" else product(a, b, level)
    bypass.recompute_lines(c, a, b, *bypass.nonfinite_lines(np, a, b))
    return c

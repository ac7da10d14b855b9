"""The operands of the sliced levels on their way to the tensor cores: one read of each operand
for its tops (``OperandTops``: the maxima along its k-indices, for the k-exponents, and along its
lines), the k-exponents (``equilibrate``), and the packers (``packer``, ``fp16split``): each
line's scale, NaN/Inf or unresolved flag (``bypass``) and digits.

Layout: a packed operand is (lines, slots, k_pad), one row of A or one column of B per line, the
line's slices side by side along k (k contiguous: the TN layout IMMA wants). B's slices are
stored in reverse order, so the slices (i, g - i) of one weight class g are two contiguous spans
and one GEMM over K = count * k_pad sums the whole class (``sliced.int8_class_sums``). The
kernels are the pack module's (``build``; kernels/packs.cuh).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import cupy as cp
import numpy as np

from .. import bypass
from ..levels import Level
from ..packer import fraction_bits
from . import build
from .geometry import (
    COLUMN_TILE_K,
    MAX_GRID_YZ,
    STRIP_LANE_COLUMNS,
    batch_chunks,
    chunk_length,
)
from .launch import NULL, forked, joined, multiprocessors

K_ALIGN = 16  # k padded with zero digits: 16-byte aligned spans for the IMMA kernels
PACK_THREADS = 256  # the most threads of a one-line-per-block pack kernel (``_line_threads``)
# k-exponents of equilibrate.k_exponents: A's columns are scaled by 2^-f (sign -1), B's rows by
# 2^f (sign +1).
A_SIDE, B_SIDE = -1, 1
STRIP_ROWS = 128  # the most rows per block of ``strip_max_bits``: 2048 blocks at n = 8192
STRIP_MIN_ROWS = 8  # ... and the fewest: one per warp of the block
STRIP_BLOCKS_PER_SM = 4  # blocks it aims for, so small operands still spread over every SM
STRIP_WIDTH = 32 * STRIP_LANE_COLUMNS  # ... and columns
STRIP_GRID_Y = MAX_GRID_YZ  # strips of columns side by side (the blocks take more in turn)
COLUMN_BLOCKS = 4096  # blocks B's column packing aims for (1024-8192 measured alike)


def padded(k: int) -> int:
    return max(K_ALIGN, -(-k // K_ALIGN) * K_ALIGN)


def rows_contiguous(x: cp.ndarray) -> bool:
    """Unit stride along each row and a positive whole-element stride between rows."""
    return x.strides[1] == x.itemsize and x.strides[0] % x.itemsize == 0 and x.strides[0] > 0


def unit_inner(x: cp.ndarray) -> cp.ndarray:
    """``x`` itself when its rows are contiguous (any row stride), else a C-contiguous copy."""
    return x if rows_contiguous(x) else cp.ascontiguousarray(x)


def packable_b(b: cp.ndarray) -> cp.ndarray:
    """B itself when its rows or its columns are contiguous, else a C-contiguous copy: B's tops
    and its pack then read it in place (a B such as b[:, ::2] was copied by each)."""
    return b if rows_contiguous(b) or rows_contiguous(b.T) else cp.ascontiguousarray(b)


class PackedOperand:
    """An operand's lines packed for the tensor cores, with their scales and NaN/Inf flags;
    a stack's matrices one after another (``batch`` of them, ``count // batch`` lines each).
    ``flagged`` (one int32 on the device): how many lines the pack kernels flagged, NaN/Inf or
    unresolved, for the whole pack (not a ``part``), so "auto" reads one number per operand and
    the bypass skips every tile where both counts are 0.
    """

    def __init__(self, count: int, slots: int, k_pad: int, dtype: Any, batch: int = 1) -> None:
        self.data = cp.empty((count, slots, k_pad), dtype=dtype)
        self.exponents = cp.empty(count, dtype=cp.int32)
        flags = cp.zeros(count + 1, dtype=cp.int32)  # one allocation, one memset
        self.nonfinite, self.flagged = flags[:count], flags[count:]
        self.k_pad = k_pad
        self.slots = slots
        self.batch = batch
        # per line, != 0 where it holds a NaN/Inf: its tops' ``bad``, where the caller had them
        # (then "auto" tells unresolved lines from NaN/Inf ones without reading the operand)
        self.nan_inf: cp.ndarray | None = None

    def span(self, first_slot: int) -> int:
        """Device pointer to slot ``first_slot`` of line 0."""
        return self.data.data.ptr + first_slot * self.k_pad * self.data.itemsize

    @property
    def ld(self) -> int:
        return self.slots * self.k_pad

    @property
    def lines(self) -> int:
        """Lines of one matrix of the stack."""
        return self.data.shape[0] // self.batch

    def part(self, first: int, count: int, batch: int = 1) -> PackedOperand:
        """Lines ``first`` .. ``first + count`` (``batch`` matrices' worth) as a pack of their
        own: a view, no copy."""
        view = copy.copy(self)
        view.data = self.data[first : first + count]
        view.exponents = self.exponents[first : first + count]
        view.nonfinite = self.nonfinite[first : first + count]
        if self.nan_inf is not None:
            view.nan_inf = self.nan_inf[first : first + count]
        view.batch = batch
        return view


def _line_threads(k: int) -> int:
    """Threads of a one-line-per-block kernel: a warp per 512 entries, up to PACK_THREADS. Short
    lines (stacks of small matrices) get small blocks, so many lines are packed at once."""
    return min(PACK_THREADS, 32 * max(1, -(-k // 512)))


def _launch_pack(
    kernel: str, lines: cp.ndarray, packed: PackedOperand, *extra: Any, tail: tuple[Any, ...] = ()
) -> None:
    count, k = lines.shape
    if count == 0:
        return
    fn = build.pack_module().get_function(kernel)
    stride = np.int64(lines.strides[0] // lines.itemsize)
    fn(
        (count,),
        (_line_threads(k),),
        (
            lines,
            stride,
            np.int32(k),
            np.int32(packed.k_pad),
            *extra,
            packed.data,
            packed.exponents,
            packed.nonfinite,
            *tail,
        ),
    )


@dataclasses.dataclass(frozen=True)
class OperandTops:
    """One read of an operand (``strip_max_bits``): its half of ``equilibrate.k_exponents``,
    ``k`` (s, k), the largest finite |entry| along each k-index as float32 bits, and from the
    same read each line's (row of A, column of B; s * lines), ``lines``, with ``bad`` != 0
    where the line holds a NaN/Inf. Where no k-index moves, ``lines`` are the packers' scales,
    so the packers need not read the operand for them (``pack_int8``, ``pack_int8_columns``):
    at n = 8192 on an H100 B was read three times for its pack before, twice now."""

    k: cp.ndarray
    lines: cp.ndarray
    bad: cp.ndarray


def _strip_maxima(x: cp.ndarray, lines_along_rows: bool) -> OperandTops:
    """``OperandTops`` of a stack ``x`` (s, rows, cols) with contiguous rows whose lines are its
    rows (``lines_along_rows``: A's rows, B^T's rows; k-indices are the columns) or its
    columns (a row-major B; k-indices are the rows)."""
    count, rows, cols = x.shape
    k, lines = (cols, rows) if lines_along_rows else (rows, cols)
    tops = _tops_in(cp.zeros(_tops_size(count, k, lines), dtype=cp.uint32), count, k, lines)
    if rows and cols:
        _launch_strips(x, lines_along_rows, tops, _strip_grid(x), _NO_EXPONENTS)
    return tops


def _tops_size(count: int, k: int, lines: int) -> int:
    return count * (k + 2 * lines)


def _tops_in(out: cp.ndarray, count: int, k: int, lines: int) -> OperandTops:
    """``OperandTops`` as views of the zeroed uint32 ``out`` (``_tops_size`` entries)."""
    k_top = out[: count * k]
    line_top, line_bad = out[count * k : _tops_size(count, k, lines)].reshape(2, count * lines)
    return OperandTops(k_top.reshape(count, k), line_top, line_bad)


def _strip_grid(x: cp.ndarray) -> tuple[int, int, int]:
    """(blocks of rows, strips, rows per block) of ``strip_max_bits`` over a stack ``x``: a
    launch's grid is (blocks of rows, strips, matrices)."""
    count, rows, cols = x.shape
    strips = min(-(-cols // STRIP_WIDTH), STRIP_GRID_Y)
    per_block = strip_rows(rows, strips * count)
    return -(-rows // per_block), strips, per_block


# strip_max_bits' k-exponents step (packs.cuh, KExponentsStep): arrivals, blocks a pair, the
# two operands' k-tops, the exponents and k; null pointers for none.
_NO_EXPONENTS = (NULL, np.uint32(0), NULL, NULL, NULL, np.int32(0))


def _launch_strips(
    x: cp.ndarray,
    lines_along_rows: bool,
    tops: OperandTops,
    grid: tuple[int, int, int],
    exponents: tuple[Any, ...],
) -> None:
    """``strip_max_bits`` over the stack ``x`` (rows and columns > 0) into the zeroed ``tops``,
    with its k-exponents step ``exponents``."""
    count, rows, cols = x.shape
    row_blocks, strips, per_block = grid
    if lines_along_rows:
        col_top, col_bad, row_top, row_bad = tops.k, NULL, tops.lines, tops.bad
    else:
        col_top, col_bad, row_top, row_bad = tops.lines, tops.bad, tops.k, NULL
    item = x.itemsize
    for first in batch_chunks(count):
        build.pack_module().get_function("strip_max_bits")(
            (row_blocks, strips, chunk_length(first, count)),
            (32, 8),
            (x, np.int64(x.strides[1] // item), np.int32(rows), np.int32(cols),
             np.int32(per_block), np.int64(x.strides[0] // item), np.int32(first),
             col_top, col_bad, row_top, row_bad, *exponents),
        )  # fmt: skip


def strip_rows(rows: int, strips: int) -> int:
    """Rows per block of ``strip_max_bits`` over ``strips`` strips of columns (of all matrices
    of a stack): STRIP_ROWS, or fewer (a multiple of STRIP_MIN_ROWS) where that leaves SMs idle
    (at n = 1024, 128 rows a block made 32 blocks: benchmarks/results/NVIDIA-H200/
    replay-stages.md). Any value gives the same maxima."""
    wanted = STRIP_BLOCKS_PER_SM * multiprocessors(cp.cuda.Device().id)
    row_blocks = -(-wanted // max(1, strips))
    per_block = -(-rows // row_blocks)
    per_block = -(-per_block // STRIP_MIN_ROWS) * STRIP_MIN_ROWS
    return max(STRIP_MIN_ROWS, min(STRIP_ROWS, per_block))


def a_tops(a_rows: cp.ndarray) -> OperandTops:
    """A's tops: ``a_rows`` (m, k) or a stack (s, m, k), rows contiguous."""
    return _strip_maxima(*_a_strips(a_rows))


def b_tops(b: cp.ndarray) -> OperandTops:
    """B's tops: a C-contiguous stack (s, k, n), or B (k, n) either way."""
    return _strip_maxima(*_b_strips(b))


def _a_strips(a_rows: cp.ndarray) -> tuple[cp.ndarray, bool]:
    """The stack ``strip_max_bits`` reads for A's tops, and whether its lines are its rows."""
    return (a_rows if a_rows.ndim == 3 else a_rows[None]), True


def _b_strips(b: cp.ndarray) -> tuple[cp.ndarray, bool]:
    """... and for B's: B itself (lines: its columns) or B^T (lines: its rows)."""
    if b.ndim == 3 or rows_contiguous(b):
        return (b if b.ndim == 3 else b[None]), False
    return unit_inner(b.T)[None], True


def k_exponents(a_rows: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """``equilibrate.k_exponents`` on the GPU: ``a_rows`` is A with contiguous rows, ``b`` is B
    (either layout); one read of each, no host synchronisation. Entry k (one past the
    exponents) is 1 when any k-index moves or is dropped. Stacks (s, m, k) @ (s, k, n), both
    C-contiguous: one row of k + 1 entries per pair."""
    return tops_and_exponents(a_rows, b)[2]


def tops_and_exponents(
    a_rows: cp.ndarray, b: cp.ndarray, side: cp.cuda.Stream | None = None
) -> tuple[OperandTops, OperandTops, cp.ndarray]:
    """Both operands' tops (one read of each) and their product's k-exponents, (k + 1,) for
    matrices, (s, k + 1) for stacks (``k_exponents``): the last block of the two tops'
    launches computes them, so they take no launch of their own. ``side``: a stream B's
    launch runs on beside A's, joined before this returns."""
    (a3, _), (b3, b_along_rows) = _a_strips(a_rows), _b_strips(b)
    count, m, k = a3.shape
    n = b3.shape[1] if b_along_rows else b3.shape[2]
    if not (m and n and k):  # a launch with no blocks would never arrive
        a_top, b_top = _strip_maxima(a3, True), _strip_maxima(b3, b_along_rows)
        f = exponents_from_tops(a_top.k, b_top.k)
    else:
        a_size, b_size = _tops_size(count, k, m), _tops_size(count, k, n)
        # both tops, the exponents and each pair's arrivals: one allocation, one memset
        out = cp.zeros(a_size + b_size + count * (k + 2), dtype=cp.uint32)
        a_top = _tops_in(out[:a_size], count, k, m)
        b_top = _tops_in(out[a_size : a_size + b_size], count, k, n)
        arrivals = out[a_size + b_size : a_size + b_size + count]
        f = out[a_size + b_size + count :].view(cp.int32).reshape(count, k + 1)
        a_grid, b_grid = _strip_grid(a3), _strip_grid(b3)
        blocks = a_grid[0] * a_grid[1] + b_grid[0] * b_grid[1]
        exponents = (arrivals, np.uint32(blocks), a_top.k, b_top.k, f, np.int32(k))
        with forked(side):
            _launch_strips(b3, b_along_rows, b_top, b_grid, exponents)
        _launch_strips(a3, True, a_top, a_grid, exponents)
        joined(side)
    return a_top, b_top, f if a_rows.ndim == 3 else f[0]


def exponents_from_tops(a_top: cp.ndarray, b_top: cp.ndarray) -> cp.ndarray:
    """``equilibrate.exponents_from_tops``, (s, k + 1): entry k says whether any moves."""
    count, k = a_top.shape
    f = cp.zeros((count, k + 1), dtype=cp.int32)
    if k:
        for first in batch_chunks(count):
            build.pack_module().get_function("k_exponents")(
                (-(-k // 256), chunk_length(first, count)), (256,),
                (a_top, b_top, np.int32(k), np.int32(first), f),
            )  # fmt: skip
    return f


def deep_argument(slices: int, k: int, bypass_wide: bool) -> np.int32:
    """The packers' ``deep`` argument: ``bypass.deep_binades``, or NO_BYPASS."""
    if not bypass_wide:
        return np.int32(bypass.NO_BYPASS)
    return np.int32(bypass.deep_binades(fraction_bits(slices), k))


def _line_tops(tops: OperandTops | None) -> tuple[Any, Any]:
    """The packers' line_top and line_bad arguments: ``tops``' lines, or null pointers."""
    return (NULL, NULL) if tops is None else (tops.lines, tops.bad)


def pack_int8(
    lines: cp.ndarray,
    kexp: cp.ndarray,
    side: int,
    slices: int,
    reversed_slots: bool,
    bypass_wide: bool = False,
    batch: int = 1,
    tops: OperandTops | None = None,
) -> PackedOperand:
    """``packer.slice_rows`` on the GPU: digits of each rebalanced row of ``lines`` (rows
    contiguous, k along them); ``side``: A_SIDE for A's rows, B_SIDE for B's columns. The
    ``nonfinite`` flags also mark unresolved lines when ``bypass_wide`` (``bypass``). A stack:
    ``batch`` matrices' lines one after another, ``kexp`` (batch, k + 1). ``tops``: the
    lines' ``OperandTops`` (one pass over ``lines`` instead of two where no k-index moves)."""
    count, k = lines.shape
    packed = PackedOperand(count, slices, padded(k), cp.int8, batch)
    _launch_pack(
        "pack_int8", lines, packed, kexp, np.int32(max(1, count // batch)), np.int32(side),
        np.int32(slices), np.int32(reversed_slots), deep_argument(slices, k, bypass_wide),
        *_line_tops(tops), tail=(packed.flagged,),
    )  # fmt: skip
    return packed


def pack_int8_columns(
    x: cp.ndarray,
    kexp: cp.ndarray,
    slices: int,
    reversed_slots: bool,
    bypass_wide: bool = False,
    tops: OperandTops | None = None,
) -> PackedOperand:
    """``packer.slice_columns`` on the GPU, reading a row-major (k, n) B in place; a stack
    (s, k, n) of them with ``kexp`` (s, k + 1). Two launches (column maxima, then digits and,
    by each strip's last block, flags) over strips of 32 columns and chunks of k, so any n
    fills the GPU; the first reads nothing where ``tops`` (B's ``OperandTops``) hold and no
    k-index moves. On an H100 (IV, ms, n = 2048 / 4096 / 8192 / 16384): 0.085 / 0.18 / 0.52 /
    1.84, against 0.17 / 0.33 / 0.72 / 1.99 for a block per strip and all of k, one launch
    (both before ``tops``)."""
    x3 = x if x.ndim == 3 else x[None]
    count, k, n = x3.shape
    packed = PackedOperand(count * n, slices, padded(k), cp.int8, count)
    if n == 0:
        return packed
    tiles = -(-n // 32)
    lines = count * n
    # column maxima (float64 bits), deep counts and each strip's arrivals: one memset
    scratch = cp.zeros(3 * lines + count * tiles, dtype=cp.int32)
    column_top = scratch[: 2 * lines].view(cp.uint64)
    deep_counts, arrivals = scratch[2 * lines : 3 * lines], scratch[3 * lines :]
    item = x3.itemsize
    row_stride, batch_stride = np.int64(x3.strides[1] // item), np.int64(x3.strides[0] // item)
    chunk = column_chunk(tiles * count, packed.k_pad)
    chunks = min(-(-packed.k_pad // chunk), MAX_GRID_YZ)
    deep = deep_argument(slices, k, bypass_wide)
    module = build.pack_module()
    for first in batch_chunks(count):
        grid, batch0 = (tiles, chunks, chunk_length(first, count)), np.int32(first)
        module.get_function("column_tops")(
            grid, (32, 8),
            (x3, row_stride, np.int32(k), np.int32(n), kexp, np.int32(chunk), batch_stride,
             batch0, *_line_tops(tops), column_top, packed.nonfinite),
        )  # fmt: skip
        module.get_function("pack_int8_column_chunks")(
            grid, (32, 8),
            (x3, row_stride, np.int32(k), np.int32(n), np.int32(packed.k_pad), kexp,
             np.int32(chunk), np.int32(slices), np.int32(reversed_slots), deep, batch_stride,
             batch0, column_top, packed.data, packed.exponents, deep_counts, arrivals,
             packed.nonfinite, packed.flagged),
        )  # fmt: skip
    return packed


def column_chunk(tiles: int, k_pad: int) -> int:
    """k-indices per block of ``pack_int8_columns`` for ``tiles`` strips of 32 columns: enough
    chunks for COLUMN_BLOCKS blocks, whole shared tiles (COLUMN_TILE_K) each."""
    chunks = max(1, COLUMN_BLOCKS // tiles)
    return -(-k_pad // (COLUMN_TILE_K * chunks)) * COLUMN_TILE_K


def pack_a(
    a_rows: cp.ndarray, kexp: cp.ndarray, level: Level, tops: OperandTops | None = None
) -> PackedOperand:
    """A's rows, slots in order."""
    wide = level.bypass_wide
    return pack_int8(a_rows, kexp, A_SIDE, level.a_slices, False, bypass_wide=wide, tops=tops)


def pack_b(
    b: cp.ndarray, kexp: cp.ndarray, level: Level, tops: OperandTops | None = None
) -> PackedOperand:
    """B's columns, reversed slots: straight from a row-major B, else from B^T's rows."""
    slices, wide = level.b_slices, level.bypass_wide
    if rows_contiguous(b):
        return pack_int8_columns(b, kexp, slices, True, bypass_wide=wide, tops=tops)
    return pack_int8(unit_inner(b.T), kexp, B_SIDE, slices, True, bypass_wide=wide, tops=tops)


def pack_fp16(
    lines: cp.ndarray, kexp: cp.ndarray, side: int, reversed_slots: bool
) -> PackedOperand:
    packed = PackedOperand(lines.shape[0], 2, padded(lines.shape[1]), cp.float16)
    _launch_pack(
        "pack_fp16",
        lines,
        packed,
        kexp,
        np.int32(side),
        np.int32(reversed_slots),
        tail=(packed.flagged,),
    )
    return packed

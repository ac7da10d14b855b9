"""The CUDA backend: INT8 (and FP16) slice products on tensor cores through CuPy and cuBLAS.

One call of an INT8 level is these steps, with no host synchronisation (level IV-blocks has its
own path: ``cuda_blocks``):

1. ``a_tops`` and ``b_tops``, one read of each operand: the k-exponents' maxima and the lines'
   (``OperandTops``); then ``pack_int8`` for A's rows and B's columns: scales, NaN/Inf flags
   and INT8 digits in the (lines, slices, k_pad) layout of ``cuda_kernels`` (k contiguous: the
   TN layout IMMA wants);
2. per block of A's rows (``_sum_blocking``: the class sums stay within the workspace budget)
   and weight class g, one cublasGemmEx INT8 x INT8 -> INT32 over K = count * k_pad whose two
   operands are contiguous spans of the packed lines (no copies): the class's pairs are summed
   by the GEMM itself, exactly, since ``int32_k_block`` bounds K;
3. (only when k exceeds that bound) k is cut into blocks and each block's INT32 class sums are
   added exactly into float64 ones;
4. ``combine_*``: the formula of ``combine`` in one elementwise kernel, NaN/Inf lines included,
   per block of rows.

Everything runs on the caller's current stream.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np

from .. import bypass, fp16split, pack_reuse, workspace
from ..combine import int32_k_block, overflow_slack
from ..cuda_kernels import COLUMN_TILE_K, STRIP_LANE_COLUMNS
from ..levels import LEVELS, Kind, Level
from ..packer import fraction_bits, pair_exponent
from . import build, tn_gemm
from .convert import ACCUMULATE, as_float32, conversion
from .fp32_ordered import ordered_product, thin_fits  # noqa: F401  (thin_fits: the dispatcher's)
from .geometry import MAX_GRID_YZ, batch_chunks, chunk_length
from .launch import flag_counts, free_bytes
from .native import (  # noqa: F401  (contiguous_sgemm_stack: the dispatcher's)
    contiguous_sgemm_stack,
    fp64_product,
    native_gemm,
    sgemm_stack,
    tf32_product,
)
from .tn_gemm import CUDA_R_32F

K_ALIGN = 16  # k padded with zero digits: 16-byte aligned spans for the IMMA kernels
# k-steps the FP16 path lets the tensor cores sum in FP32 (see fp16_product). Measured on the
# H100 (benchmarks/results/NVIDIA-H100-80GB-HBM3/fp16-k-blocks.md, n = 4096 / 8192): the error
# grows with the block, 6.5e-7 at 512 (0.71 / 0.85x SGEMM), 1.3e-6 at 1024 (1.10 / 1.38x),
# 2.5e-6 at 2048, 9.7e-6 unblocked at n = 8192 (3.3x); SGEMM 1.1e-6 / 1.6e-6. 1024 keeps the
# level near SGEMM's error and still faster; level IV is both more accurate and faster there.
FP16_K_BLOCK = 1024
# "auto"'s fallback check waits for the packs' flag counts once the GEMMs of this many weight
# classes are queued (3 of level IV's 8 products), so the GPU has work while the host waits.
# On an H100, one class or two measured alike at n = 3072-8192; where the check falls back to
# SGEMM, the queued GEMMs are wasted: +7% of SGEMM's time at n = 3072, +3% at 8192.
CLASSES_BEFORE_ASKING = 2
PACK_THREADS = 256
COMBINE_THREADS = 256
BYPASS_TILE = 64  # output rows and columns per block of the bypass_lines kernel


_FLOAT32 = np.dtype(np.float32)


def _padded(k: int) -> int:
    return max(K_ALIGN, -(-k // K_ALIGN) * K_ALIGN)


def _rows_contiguous(x: cp.ndarray) -> bool:
    """Unit stride along each row and a positive whole-element stride between rows."""
    return x.strides[1] == x.itemsize and x.strides[0] % x.itemsize == 0 and x.strides[0] > 0


def _unit_inner(x: cp.ndarray) -> cp.ndarray:
    """``x`` itself when its rows are contiguous (any row stride), else a C-contiguous copy."""
    return x if _rows_contiguous(x) else cp.ascontiguousarray(x)


def _packable_b(b: cp.ndarray) -> cp.ndarray:
    """B itself when its rows or its columns are contiguous, else a C-contiguous copy: B's tops
    and its pack then read it in place (a B such as b[:, ::2] was copied by each)."""
    return b if _rows_contiguous(b) or _rows_contiguous(b.T) else cp.ascontiguousarray(b)


class PackedOperand:
    """An operand's lines packed for the tensor cores, with their scales and NaN/Inf flags;
    a stack's matrices one after another (``batch`` of them, ``count // batch`` lines each).
    ``flagged`` (one int32 on the device): how many lines the INT8 pack kernels flagged, NaN/Inf
    or unresolved, for the whole pack (not a ``part``), so "auto" reads one number per operand.
    """

    def __init__(self, count: int, slots: int, k_pad: int, dtype: Any, batch: int = 1) -> None:
        self.data = cp.empty((count, slots, k_pad), dtype=dtype)
        self.exponents = cp.empty(count, dtype=cp.int32)
        flags = cp.zeros(count + 1, dtype=cp.int32)  # one allocation, one memset
        self.nonfinite, self.flagged = flags[:count], flags[count:]
        self.k_pad = k_pad
        self.slots = slots
        self.batch = batch

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


# k-exponents of equilibrate.k_exponents: A's columns are scaled by 2^-f (sign -1), B's rows by
# 2^f (sign +1).
A_SIDE, B_SIDE = -1, 1
STRIP_ROWS = 128  # rows per block of ``strip_max_bits``: 2048 blocks at n = 8192
STRIP_WIDTH = 32 * STRIP_LANE_COLUMNS  # ... and columns
STRIP_GRID_Y = MAX_GRID_YZ  # strips of columns side by side (the blocks take more in turn)
_NULL = np.uint64(0)  # a null pointer argument


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
    out = cp.zeros(count * (k + 2 * lines), dtype=cp.uint32)  # one allocation, one memset
    k_top = out[: count * k]
    line_top, line_bad = out[count * k :].reshape(2, count * lines)
    if rows and cols:
        if lines_along_rows:
            col_top, col_bad, row_top, row_bad = k_top, _NULL, line_top, line_bad
        else:
            col_top, col_bad, row_top, row_bad = line_top, line_bad, k_top, _NULL
        item = x.itemsize
        for first in batch_chunks(count):
            build.pack_module().get_function("strip_max_bits")(
                (-(-rows // STRIP_ROWS), min(-(-cols // STRIP_WIDTH), STRIP_GRID_Y),
                 chunk_length(first, count)),
                (32, 8),
                (x, np.int64(x.strides[1] // item), np.int32(rows), np.int32(cols),
                 np.int32(STRIP_ROWS), np.int64(x.strides[0] // item), np.int32(first),
                 col_top, col_bad, row_top, row_bad),
            )  # fmt: skip
    return OperandTops(k_top.reshape(count, k), line_top, line_bad)


def a_tops(a_rows: cp.ndarray) -> OperandTops:
    """A's tops: ``a_rows`` (m, k) or a stack (s, m, k), rows contiguous."""
    return _strip_maxima(a_rows if a_rows.ndim == 3 else a_rows[None], lines_along_rows=True)


def b_tops(b: cp.ndarray) -> OperandTops:
    """B's tops: a C-contiguous stack (s, k, n), or B (k, n) either way."""
    if b.ndim == 3 or _rows_contiguous(b):
        return _strip_maxima(b if b.ndim == 3 else b[None], lines_along_rows=False)
    return _strip_maxima(_unit_inner(b.T)[None], lines_along_rows=True)


def k_exponents(a_rows: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """``equilibrate.k_exponents`` on the GPU: ``a_rows`` is A with contiguous rows, ``b`` is B
    (either layout); one read of each, no host synchronisation. Entry k (one past the
    exponents) is 1 when any k-index moves or is dropped. Stacks (s, m, k) @ (s, k, n), both
    C-contiguous: one row of k + 1 entries per pair."""
    f = exponents_from_tops(a_tops(a_rows).k, b_tops(b).k)
    return f if a_rows.ndim == 3 else f[0]


def _tops_and_exponents(
    a_rows: cp.ndarray, b: cp.ndarray
) -> tuple[OperandTops, OperandTops, cp.ndarray]:
    """Both matrices' tops (one read of each) and their product's k-exponents."""
    a_top, b_top = a_tops(a_rows), b_tops(b)
    return a_top, b_top, exponents_from_tops(a_top.k, b_top.k)[0]


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


def unresolved_lines(a: Any, b: Any, level: Level) -> tuple[int, int]:
    """``cpu.unresolved_lines`` from the pack kernels' own flags (one pack of each operand),
    NaN/Inf lines left out; brings two numbers to the host (level IV-blocks: counted from the
    entries' bits, ``cuda_blocks.unresolved_lines``)."""
    if not level.bypass_wide or 0 in (*a.shape, b.shape[1]):
        return 0, 0
    a, b = as_float32(cp.asarray(a)), as_float32(cp.asarray(b))
    if level.kind == "blocks":
        return _blocks_module().unresolved_lines(a, b, level)
    a_rows, b = _unit_inner(a), _packable_b(b)
    a_top, b_top, kexp = _tops_and_exponents(a_rows, b)  # as int8_product packs them
    packs = _pack_a(a_rows, kexp, level, a_top), _pack_b(b, kexp, level, b_top)
    return _unresolved_counts(a, b, *packs)


def rebalanced_k(a: Any, b: Any) -> int:
    """k-indices ``k_exponents`` moves or drops (brings one number to the host)."""
    f = k_exponents(_unit_inner(as_float32(cp.asarray(a))), as_float32(cp.asarray(b)))
    return int(cp.count_nonzero(f[:-1]))


def _deep(slices: int, k: int, bypass_wide: bool) -> np.int32:
    """The packers' ``deep`` argument: ``bypass.deep_binades``, or NO_BYPASS."""
    if not bypass_wide:
        return np.int32(bypass.NO_BYPASS)
    return np.int32(bypass.deep_binades(fraction_bits(slices), k))


def _line_tops(tops: OperandTops | None) -> tuple[Any, Any]:
    """The packers' line_top and line_bad arguments: ``tops``' lines, or null pointers."""
    return (_NULL, _NULL) if tops is None else (tops.lines, tops.bad)


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
    packed = PackedOperand(count, slices, _padded(k), cp.int8, batch)
    _launch_pack(
        "pack_int8", lines, packed, kexp, np.int32(max(1, count // batch)), np.int32(side),
        np.int32(slices), np.int32(reversed_slots), _deep(slices, k, bypass_wide),
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
    (s, k, n) of them with ``kexp`` (s, k + 1). Three launches (column maxima, digits, flags)
    over strips of 32 columns and chunks of k, so any n fills the GPU; the first reads nothing
    where ``tops`` (B's ``OperandTops``) hold and no k-index moves. On an H100 (IV, ms, n =
    2048 / 4096 / 8192 / 16384): 0.085 / 0.18 / 0.52 / 1.84, against 0.17 / 0.33 / 0.72 / 1.99
    for a block per strip and all of k, one launch (both before ``tops``)."""
    x3 = x if x.ndim == 3 else x[None]
    count, k, n = x3.shape
    packed = PackedOperand(count * n, slices, _padded(k), cp.int8, count)
    if n == 0:
        return packed
    column_top = cp.zeros(count * n, dtype=cp.uint64)
    deep_counts = cp.zeros(count * n, dtype=cp.int32)
    item = x3.itemsize
    row_stride, batch_stride = np.int64(x3.strides[1] // item), np.int64(x3.strides[0] // item)
    tiles = -(-n // 32)
    chunk = column_chunk(tiles * count, packed.k_pad)
    chunks = min(-(-packed.k_pad // chunk), MAX_GRID_YZ)
    deep = _deep(slices, k, bypass_wide)
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
             batch0, column_top, packed.data, packed.exponents, deep_counts),
        )  # fmt: skip
    lines = count * n
    module.get_function("finish_columns")(
        (-(-lines // 256),),
        (256,),
        (deep_counts, np.int64(lines), np.int32(k), packed.nonfinite, packed.flagged),
    )
    return packed


COLUMN_BLOCKS = 4096  # blocks B's column packing aims for (1024-8192 measured alike)


def column_chunk(tiles: int, k_pad: int) -> int:
    """k-indices per block of ``pack_int8_columns`` for ``tiles`` strips of 32 columns: enough
    chunks for COLUMN_BLOCKS blocks, whole shared tiles (COLUMN_TILE_K) each."""
    chunks = max(1, COLUMN_BLOCKS // tiles)
    return -(-k_pad // (COLUMN_TILE_K * chunks)) * COLUMN_TILE_K


def _pack_b(
    b: cp.ndarray, kexp: cp.ndarray, level: Level, tops: OperandTops | None = None
) -> PackedOperand:
    """B's columns, reversed slots: straight from a row-major B, else from B^T's rows."""
    slices, wide = level.b_slices, level.bypass_wide
    if _rows_contiguous(b):
        return pack_int8_columns(b, kexp, slices, True, bypass_wide=wide, tops=tops)
    return pack_int8(_unit_inner(b.T), kexp, B_SIDE, slices, True, bypass_wide=wide, tops=tops)


def pack_fp16(
    lines: cp.ndarray, kexp: cp.ndarray, side: int, reversed_slots: bool
) -> PackedOperand:
    packed = PackedOperand(lines.shape[0], 2, _padded(lines.shape[1]), cp.float16)
    _launch_pack("pack_fp16", lines, packed, kexp, np.int32(side), np.int32(reversed_slots))
    return packed


def gemm_tn(
    a: PackedOperand,
    a_slot: int,
    b: PackedOperand,
    b_slot: int,
    depth: int,
    out: cp.ndarray,
    k_offset: int = 0,
    accumulate: bool = False,
) -> None:
    """out (m, n) = A_span @ B_span^T over ``depth`` packed columns (``tn_gemm``).

    cuBLAS is column-major: the row-major (m, n) output is its (n, m) matrix
    B_span (n x depth, transposed) times A_span^T, both operands k-contiguous ("TN").
    Outputs run as blocks of rows: INT8 ones as ``workspace.gemm_row_block`` says (at m = n =
    16384 cuBLAS's own choice ran at 780 TOPS on an H100, four 4096-row GEMMs at 1640:
    benchmarks/int8_row_blocks.py), FP16 ones in blocks of ``workspace.GEMM_ROW_BLOCK`` rows.
    A stack (``out`` (s, m, n), s > 1) is one strided-batched GEMM over its pairs.
    """
    types = tn_gemm.INT8 if a.data.dtype == cp.int8 else tn_gemm.FP16
    offset = k_offset * a.data.itemsize
    a_span, b_span = a.span(a_slot) + offset, b.span(b_slot) + offset
    m, n = out.shape[-2:]
    if out.ndim == 3 and out.shape[0] > 1:
        count = out.shape[0]
        shape = tn_gemm.Gemm(n, m, depth, b.ld, a.ld, count, n * b.ld, m * a.ld, m * n)
        tn_gemm.gemm(shape, b_span, a_span, out.data.ptr, accumulate, types)
        return
    int8 = types is tn_gemm.INT8
    block = workspace.gemm_row_block(n) if int8 else workspace.GEMM_ROW_BLOCK
    for first in range(0, m, block):
        rows = min(block, m - first)
        a_rows = a_span + first * a.ld * a.data.itemsize
        out_rows = out.data.ptr + first * n * out.itemsize
        shape = tn_gemm.Gemm(n, rows, depth, b.ld, a.ld)
        tn_gemm.gemm(shape, b_span, a_rows, out_rows, accumulate, types)


def class_spans(level: Level, g: int) -> tuple[int, int, int]:
    """(first A slot, first B slot, pair count) of weight class g in the packed layouts (a
    class's slices are consecutive: ``levels.check_level``)."""
    slots = [i for i, j in level.pairs if i + j == g]
    first_i = min(slots)
    # B is stored reversed: slice j sits in slot b_slices - 1 - j; j = g - i falls as i rises.
    return first_i, level.b_slices - 1 - (g - first_i), len(slots)


def int8_class_sums(
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    level: Level,
    buffer: cp.ndarray | None = None,
    proceed: Callable[[], bool] | None = None,
) -> cp.ndarray | None:
    """Exact class sums S_g, (groups, s, m, n) for a stack of s pairs (1 for two matrices):
    int32 when k fits one block, else float64; on the front of the flat ``buffer`` if given
    (of that type and at least that size). ``proceed`` is asked once the GEMMs of the first
    CLASSES_BEFORE_ASKING weight classes are queued (the GPU busy with them while the host
    waits on something): False stops there, with None."""
    go_on = proceed or (lambda: True)
    ask_after = min(CLASSES_BEFORE_ASKING, len(level.groups)) - 1  # the class to ask after
    s, m, n = a_pack.batch, a_pack.lines, b_pack.lines
    shape = (len(level.groups), s, m, n)
    block = int32_k_block(level)
    k_pad = a_pack.k_pad
    if k_pad <= block:
        sums = _shaped(buffer, shape, cp.int32)
        for g in level.groups:
            a_slot, b_slot, count = class_spans(level, g)
            gemm_tn(a_pack, a_slot, b_pack, b_slot, count * k_pad, sums[g])
            if g == ask_after and not go_on():
                return None
        return sums
    # Long k: per pair and per k-block into INT32 (each within the bound), then exactly into
    # float64 (|S_g| < 2^53 by combine.float64_k_block).
    sums = _shaped(buffer, shape, cp.float64)
    sums.fill(0)
    scratch = cp.empty((s, m, n), dtype=cp.int32)
    block -= block % K_ALIGN
    for start in range(0, k_pad, block):
        depth = min(block, k_pad - start)
        for g in level.groups:
            for index, (i, j) in enumerate(p for p in level.pairs if p[0] + p[1] == g):
                b_slot = level.b_slices - 1 - j
                gemm_tn(a_pack, i, b_pack, b_slot, depth, scratch, start, accumulate=index > 0)
            if start == 0 and g == ask_after and not go_on():
                return None
            sums[g] += scratch
    return sums


def _shaped(buffer: cp.ndarray | None, shape: tuple[int, ...], dtype: Any) -> cp.ndarray:
    """A C-contiguous ``shape`` array: the front of the flat ``buffer``, or a new one."""
    if buffer is None:
        return cp.empty(shape, dtype=dtype)
    return buffer[: math.prod(shape)].reshape(shape)


def _combine(
    kernel: str,
    sums: cp.ndarray,
    w0: int,
    step: int,
    exp_offset: int,
    slack: float,
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    a: cp.ndarray,
    b: cp.ndarray,
    out: cp.ndarray | None = None,
) -> cp.ndarray:
    """The combine kernel; ``slack``: ``combine.overflow_slack`` of the level. ``a`` and ``b``
    are the product's operands, or two stacks of s pairs (then C is (s, m, n)); C goes into
    ``out`` (C-contiguous) if given."""
    stack = a.ndim == 3
    a3, b3 = (a, b) if stack else (a[None], b[None])
    count, m, k = a3.shape
    n = b3.shape[2]
    c = cp.empty((count, m, n), dtype=cp.float32) if out is None else out.reshape(count, m, n)
    # four entries per thread where the vector loads are aligned (H100, n = 8192: 0.83 -> 0.55 ms)
    aligned = all(x.data.ptr % 16 == 0 for x in (sums, c, b_pack.exponents))
    vec = 4 if n % 4 == 0 and aligned else 1
    if vec == 4:
        kernel = kernel.replace("combine_", "combine4_")
    grid = (min(-(-n // (vec * COMBINE_THREADS)), 1024), min(m, MAX_GRID_YZ))
    for first in batch_chunks(count):
        build.combine_module().get_function(kernel)(
            (*grid, chunk_length(first, count)),
            (COMBINE_THREADS,),
            (sums, np.int32(sums.shape[0]), np.int64(count * m * n), np.int32(w0),
             np.int32(step), np.int32(exp_offset),
             np.float64(k * slack),  # the same double as the CPU's k_slack
             a_pack.exponents, b_pack.exponents, a_pack.nonfinite, b_pack.nonfinite,
             np.int32(m), np.int32(n), np.int32(first), c),
        )  # fmt: skip
    _bypass_lines(a_pack, b_pack, a3, b3, c)
    return c if stack else c[0]


def _bypass_lines(
    a_pack: PackedOperand, b_pack: PackedOperand, a: cp.ndarray, b: cp.ndarray, c: cp.ndarray
) -> None:
    """``bypass.recompute_lines`` for the flagged rows and columns of each pair of the stacks
    ``a`` (s, m, k) and ``b`` (s, k, n) (no host synchronisation: tiles without a flagged line
    return at once)."""
    (count, m, k), n = a.shape, b.shape[2]
    a_s, b_s = (tuple(np.int64(x // a.itemsize) for x in y.strides) for y in (a, b))
    rows = min(-(-m // BYPASS_TILE), MAX_GRID_YZ)
    for first in batch_chunks(count):
        build.combine_module().get_function("bypass_lines")(
            (-(-n // BYPASS_TILE), rows, chunk_length(first, count)), (16, 16),
            (a_pack.nonfinite, b_pack.nonfinite, a, a_s[1], a_s[2], a_s[0], b, b_s[1], b_s[2],
             b_s[0], np.int32(m), np.int32(n), np.int32(k), np.int32(first), c),
        )  # fmt: skip


def _combine_int8(
    sums: cp.ndarray,
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    a: cp.ndarray,
    b: cp.ndarray,
    level: Level,
    out: cp.ndarray | None = None,
) -> cp.ndarray:
    kernel = "combine_int32" if sums.dtype == cp.int32 else "combine_float64"
    step = pair_exponent(1) - pair_exponent(0)
    slack = overflow_slack(level)
    return _combine(kernel, sums, pair_exponent(0), step, 0, slack, a_pack, b_pack, a, b, out)


def _pack_a(
    a_rows: cp.ndarray, kexp: cp.ndarray, level: Level, tops: OperandTops | None = None
) -> PackedOperand:
    """A's rows, slots in order."""
    wide = level.bypass_wide
    return pack_int8(a_rows, kexp, A_SIDE, level.a_slices, False, bypass_wide=wide, tops=tops)


@dataclasses.dataclass
class _Block:
    """One block of an INT8 product: rows of A (or pairs of two stacks), their packs and the
    part of C they make."""

    a_pack: PackedOperand
    b_pack: PackedOperand
    a: cp.ndarray
    b: cp.ndarray
    c: cp.ndarray


def _sum_blocking(level: Level, m: int, k: int, n: int, count: int = 1) -> tuple[int, int]:
    """(units per block, bytes of the class-sum buffer) of an INT8 product: units are A's rows
    (up to the GEMMs' own row block, ``workspace.gemm_row_block``), or the pairs of a stack
    of ``count``."""
    long_k = _padded(k) > int32_k_block(level)
    return workspace.sum_blocking(level, m, k, n, count, long_k, workspace.gemm_row_block(n))


def _sums_and_combine(
    blocks: list[_Block], level: Level, proceed: Callable[[], bool] | None = None
) -> bool:
    """Each block's class sums, then its combine, in one buffer the blocks share; False when
    ``proceed`` (``int8_class_sums``', first block) stopped it. (Combining a block on a side
    stream beside the next block's GEMMs measured within noise on an H100, -1.9% to +0.7% at
    n = 8192 and 16384: the GEMMs leave no SM idle for it.)"""
    buffer = None
    for index, block in enumerate(blocks):
        ask = proceed if index == 0 else None
        sums = int8_class_sums(block.a_pack, block.b_pack, level, buffer, ask)
        if sums is None:
            return False
        if buffer is None:  # the first block is the largest
            buffer = sums.reshape(-1)
        _combine_int8(sums, block.a_pack, block.b_pack, block.a, block.b, level, block.c)
    return True


def int8_product(
    a: cp.ndarray,
    b: cp.ndarray,
    level: Level,
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    native_when_bypassed: bool = False,
    on_native: Callable[[], None] | None = None,
) -> cp.ndarray:
    """One INT8 product; the operands ``keep`` names reuse their tops and packs (``pack_reuse``):
    a kept operand is not read at all while its pack holds, nor copied when not row-major.
    Class sums and combine run in blocks of A's rows (``_sum_blocking``). With
    ``native_when_bypassed`` (level "auto"), cuBLAS SGEMM where more than
    ``bypass.AUTO_EXACT_SHARE`` of C would be recomputed exactly (``on_native`` is called when
    it runs). The host learns the packs' flag counts through an asynchronous copy and waits
    for that copy alone, with the first CLASSES_BEFORE_ASKING classes' GEMMs already queued:
    waiting for the whole stream left the GPU idle while the host launched the rest (0.3-0.47
    ms a call on an H100 at n = 3072-8192)."""
    kept_a, kept_b = (kept.on("cuda") for kept in keep)
    a_rows = functools.cache(functools.partial(_unit_inner, a))  # copied once, if at all
    b_lines = functools.cache(functools.partial(_packable_b, b))  # ... and B likewise
    a_top = kept_a.tops(lambda: a_tops(a_rows()))
    b_top = kept_b.tops(lambda: b_tops(b_lines()))
    kexp = exponents_from_tops(a_top.k, b_top.k)[0]
    a_pack = kept_a.pack(level.name, kexp, lambda: _pack_a(a_rows(), kexp, level, a_top))
    b_pack = kept_b.pack(level.name, kexp, lambda: _pack_b(b_lines(), kexp, level, b_top))
    read_counts = flag_counts(a_pack.flagged, b_pack.flagged) if native_when_bypassed else None
    (m, k), n = a.shape, b.shape[1]
    c = cp.empty((m, n), dtype=cp.float32)
    rows = _sum_blocking(level, m, k, n)[0]
    blocks = [
        _Block(a_pack.part(first, last - first), b_pack, a[first:last], b, c[first:last])
        for first in range(0, m, rows)
        for last in [min(m, first + rows)]
    ]

    def proceed() -> bool:  # asked with the first classes' GEMMs queued
        return read_counts is None or not _mostly_exact(a, b, a_pack, b_pack, read_counts())

    try:
        if _sums_and_combine(blocks, level, proceed):
            return c
    finally:
        if read_counts is not None:  # (its copy lands before the pinned buffer can be reused)
            read_counts()
    if on_native is not None:
        on_native()
    return native_gemm(a, b, CUDA_R_32F)


def _mostly_exact(
    a: cp.ndarray,
    b: cp.ndarray,
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    flag_counts: tuple[int, int],
) -> bool:
    """Whether the unresolved lines of this product cover more than AUTO_EXACT_SHARE of C.
    The packs' flag counts (NaN/Inf or unresolved lines) come first; only where they alone pass
    the share are NaN/Inf lines told apart (one pass over A and B, synchronising)."""
    m, n = a_pack.lines, b_pack.lines
    if bypass.exact_share(*flag_counts, m, n) <= bypass.AUTO_EXACT_SHARE:
        return False
    return bypass.exact_share(*_unresolved_counts(a, b, a_pack, b_pack), m, n) > (
        bypass.AUTO_EXACT_SHARE
    )


def _unresolved_counts(
    a: cp.ndarray, b: cp.ndarray, a_pack: PackedOperand, b_pack: PackedOperand
) -> tuple[int, int]:
    """(rows, columns) the packs flag that hold no NaN/Inf: the unresolved ones."""
    rows = (a_pack.nonfinite != 0) & cp.isfinite(a).all(axis=1)
    cols = (b_pack.nonfinite != 0) & cp.isfinite(b).all(axis=0)
    return int(rows.sum()), int(cols.sum())


def int8_product_stack(a: cp.ndarray, b: cp.ndarray, level: Level) -> cp.ndarray:
    """``int8_product`` of each pair of two float32 stacks (s, m, k) and (s, k, n) with m, k,
    n > 0, in a few launches for the whole stack: k-exponents, one pack of each operand, one
    strided-batched INT8 GEMM per weight class (per k block when k is long), one combine and
    one bypass launch (per block of pairs when the class sums would not fit at once). Each pair
    gets ``int8_product``'s bits (the same kernels, per pair)."""
    if a.shape[0] == 1:  # one pair: blocks of its rows, as a matrix product
        return int8_product(a[0], b[0], level)[None]
    a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
    count, m, k = a.shape
    n = b.shape[2]
    a_top, b_top = a_tops(a), b_tops(b)
    kexp = exponents_from_tops(a_top.k, b_top.k)
    wide = level.bypass_wide
    a_pack = pack_int8(
        a.reshape(count * m, k), kexp, A_SIDE, level.a_slices, False, wide, count, a_top
    )
    b_pack = pack_int8_columns(b, kexp, level.b_slices, True, wide, b_top)
    c = cp.empty((count, m, n), dtype=cp.float32)
    pairs = _sum_blocking(level, m, k, n, count)[0]
    blocks = [
        _Block(
            a_pack.part(first * m, (last - first) * m, last - first),
            b_pack.part(first * n, (last - first) * n, last - first),
            a[first:last],
            b[first:last],
            c[first:last],
        )
        for first in range(0, count, pairs)
        for last in [min(count, first + pairs)]
    ]
    _sums_and_combine(blocks, level)
    return c


def staged_product(a: cp.ndarray, b: cp.ndarray, level: Level) -> dict[str, Any]:
    """The stages of ``int8_product`` as separate calls, for a time breakdown."""
    a_rows, b = _unit_inner(a), _packable_b(b)
    a_top, b_top, kexp = _tops_and_exponents(a_rows, b)
    a_pack, b_pack = _pack_a(a_rows, kexp, level, a_top), _pack_b(b, kexp, level, b_top)
    sums = int8_class_sums(a_pack, b_pack, level)
    stages: dict[str, Any] = {
        "k-exponents": lambda: _tops_and_exponents(a_rows, b),
        "pack A": lambda: _pack_a(a_rows, kexp, level, a_top),
        "pack B": lambda: _pack_b(b, kexp, level, b_top),
        "INT8 products": lambda: int8_class_sums(a_pack, b_pack, level),
        "combine": lambda: _combine_int8(sums, a_pack, b_pack, a, b, level),
    }
    for g in level.groups:
        a_slot, b_slot, count = class_spans(level, g)
        stages[f"  class {g}: K = {count} k"] = (
            lambda a_slot=a_slot, b_slot=b_slot, count=count, g=g: gemm_tn(
                a_pack, a_slot, b_pack, b_slot, count * a_pack.k_pad, sums[g]
            )
        )
    return stages


def fp16_product(a: cp.ndarray, b: cp.ndarray, k_block: int | None = None) -> cp.ndarray:
    """``fp16split``: hh and the two cross products. The tensor cores accumulate in FP32, so k
    runs in blocks of ``k_block`` (default ``FP16_K_BLOCK``; LE-GEMM's blockwise accumulation):
    each block's FP32 sums are added exactly into float64 ones."""
    m, n = a.shape[0], b.shape[1]
    a_rows = _unit_inner(a)
    kexp = k_exponents(a_rows, b)
    a_pack = pack_fp16(a_rows, kexp, A_SIDE, reversed_slots=False)  # slots (hi, lo)
    b_pack = pack_fp16(_unit_inner(b.T), kexp, B_SIDE, reversed_slots=True)  # slots (lo, hi)
    k_pad = a_pack.k_pad
    block = k_block or FP16_K_BLOCK
    slack = overflow_slack(LEVELS["fp16"])
    offsets = (0, fp16split.LO_SHIFT, -fp16split.SCALE_BACK, slack, a_pack, b_pack, a, b)
    if k_pad <= block:
        sums = cp.empty((2, m, n), dtype=cp.float32)
        gemm_tn(a_pack, 0, b_pack, 1, k_pad, sums[0])  # hi_a hi_b
        gemm_tn(a_pack, 0, b_pack, 0, 2 * k_pad, sums[1])  # hi_a lo_b + lo_a hi_b, one GEMM
        return _combine("combine_float32", sums, *offsets)
    block -= block % K_ALIGN
    total = cp.zeros((2, m, n), dtype=cp.float64)
    part = cp.empty((2, m, n), dtype=cp.float32)
    add = conversion(ACCUMULATE, "mixpert_accumulate")
    for start in range(0, k_pad, block):
        depth = min(block, k_pad - start)
        gemm_tn(a_pack, 0, b_pack, 1, depth, part[0], start)  # hi_a hi_b
        gemm_tn(a_pack, 0, b_pack, 0, depth, part[1], start)  # hi_a lo_b
        gemm_tn(a_pack, 1, b_pack, 1, depth, part[1], start, accumulate=True)  # + lo_a hi_b
        add(part, total)
    return _combine("combine_float64", total, *offsets)


# Level kind -> a @ b for float32 CuPy matrices with m, k, n > 0.
PRODUCTS: dict[Kind, Callable[[cp.ndarray, cp.ndarray, Level], cp.ndarray]] = {
    "int8": int8_product,
    "blocks": lambda a, b, level: _blocks_module().blocks_product(a, b, level),
    "fp16": lambda a, b, level: fp16_product(a, b),
    "tf32": lambda a, b, level: tf32_product(a, b),
    "fp32": lambda a, b, level: cp.matmul(a, b),
    "fp64": lambda a, b, level: fp64_product(a, b),
    "ordered": lambda a, b, level: ordered_product(a, b),
}
# ... and for two stacks (s, m, k), (s, k, n) in one call; the other kinds run pair by pair.
STACK_PRODUCTS: dict[Kind, Callable[[cp.ndarray, cp.ndarray, Level], cp.ndarray]] = {
    "int8": int8_product_stack,
    "tf32": lambda a, b, level: tf32_product(a, b),
    "fp32": lambda a, b, level: sgemm_stack(a, b),
    "fp64": lambda a, b, level: fp64_product(a, b),
    "ordered": lambda a, b, level: ordered_product(a, b),
}


def blocks_supported() -> bool:
    """Whether the current GPU runs level IV-blocks's kernels (INT8 mma.sync)."""
    return _blocks_module().supported(cp.cuda.Device().id)


@functools.cache
def _blocks_module() -> Any:
    """``cuda_blocks`` (imported on first use: it builds on this module)."""
    from .. import cuda_blocks

    return cuda_blocks


def matmul(
    a: Any,
    b: Any,
    level: Level,
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    native_when_bypassed: bool = False,
    on_native: Callable[[], None] | None = None,
) -> Any:
    """The CUDA backend's entry: a @ b at ``level`` (not "auto") for 2-D float arrays.

    CuPy in, CuPy out; NumPy in, copied over and back. Operands are rounded to float32; empty
    dimensions give zeros. NaN/Inf lines are handled inside the combine kernels (IV-blocks: its
    bypass kernels). Levels of kind "int8" keep the packs of the operands ``keep`` names
    (``pack_reuse``; IV-blocks packs nothing to keep); ``native_when_bypassed``:
    ``int8_product``'s and ``cuda_blocks.blocks_product``'s fallback of level "auto".
    """
    product = PRODUCTS.get(level.kind)
    if product is None:
        raise ValueError(f"level {level.name!r} (kind {level.kind}) has no CUDA implementation")
    host = not (isinstance(a, cp.ndarray) or isinstance(b, cp.ndarray))
    a, b = as_float32(cp.asarray(a)), as_float32(cp.asarray(b))
    m, k = a.shape
    n = b.shape[1]
    empty = m == 0 or n == 0 or k == 0
    if not empty:
        _check_workspace(level, m, k, n)
    if empty:
        c = cp.zeros((m, n), dtype=cp.float32)
    elif level.kind == "int8":
        c = int8_product(a, b, level, keep, native_when_bypassed, on_native)
    elif level.kind == "blocks":
        c = _blocks_module().blocks_product(a, b, level, native_when_bypassed, on_native)
    else:
        c = product(a, b, level)
    return cp.asnumpy(c) if host else c


def _check_workspace(level: Level, m: int, k: int, n: int, count: int = 1) -> None:
    """MemoryError before allocating when ``count`` products' workspace cannot fit."""
    if level.emulated and level.kind != "blocks":  # (IV-blocks checks its own operands)
        needed = workspace_bytes(level, m, k, n, count)
        workspace.check_fits(level, count * m, k, n, needed, free_bytes(), "GPU")


def workspace_bytes(level: Level, m: int, k: int, n: int, count: int = 1) -> int:
    """The most device memory ``count`` (m x k) @ (k x n) products at an emulated ``level``
    allocate at once (``workspace.gpu_bytes``)."""
    block = int32_k_block(level) if level.kind == "int8" else FP16_K_BLOCK
    sums = _sum_blocking(level, m, k, n, count)[1] if level.kind == "int8" else None
    return workspace.gpu_bytes(level, m, k, n, _padded(k), _padded(k) > block, count, sums)


def matmul_stack(a: Any, b: Any, level: Level) -> Any:
    """``matmul`` of each pair of two stacks (s, m, k) and (s, k, n), as one stack: the whole
    stack in a few launches where the level's kind has a stack product, else pair by pair."""
    a_dev, b_dev = isinstance(a, cp.ndarray), isinstance(b, cp.ndarray)
    host = not (a_dev or b_dev)
    if not (a_dev and b_dev and a.dtype == _FLOAT32 and b.dtype == _FLOAT32):
        a, b = as_float32(cp.asarray(a)), as_float32(cp.asarray(b))
    count, m, k = a.shape
    n = b.shape[2]
    if 0 in (count, m, k, n):
        c = cp.zeros((count, m, n), dtype=cp.float32)
    elif level.kind in STACK_PRODUCTS:
        _check_workspace(level, m, k, n, count)
        c = STACK_PRODUCTS[level.kind](a, b, level)
    else:
        c = cp.stack([matmul(a[i], b[i], level) for i in range(count)])
    return cp.asnumpy(c) if host else c

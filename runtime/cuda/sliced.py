"""The sliced levels' products on the GPU: INT8 (and FP16) slice products on the tensor cores
through cuBLAS, from the operands' packs (``packs``).

One call of an INT8 level is these steps, with no host synchronisation (level IV-blocks has its
own path: ``iv_blocks``; where ``fused.serves`` says so, one fused kernel does steps 2-4, the
bypass aside):

1. ``a_tops`` and ``b_tops``, one read of each operand: the k-exponents' maxima and the lines'
   (``OperandTops``); then ``pack_int8`` for A's rows and B's columns: scales, NaN/Inf flags
   and INT8 digits in the (lines, slices, k_pad) layout of ``packs`` (k contiguous: the TN
   layout IMMA wants);
2. per block of A's rows (``sum_blocking``: the class sums stay within the workspace budget)
   and weight class g, one cublasGemmEx INT8 x INT8 -> INT32 over K = count * k_pad whose two
   operands are contiguous spans of the packed lines (no copies): the class's pairs are summed
   by the GEMM itself, exactly, since ``int32_k_block`` bounds K;
3. (only when k exceeds that bound) k is cut into blocks and each block's INT32 class sums are
   added exactly into float64 ones;
4. ``combine_*``: the formula of ``combine`` in one elementwise kernel, NaN/Inf lines included,
   per block of rows; then ``bypass_lines`` recomputes the flagged lines in order.

Under level "auto", ``int8_product`` falls back to a float32 GEMM where the route's
``auto.Fallback`` says so of the lines to recompute exactly (``auto_fallback``: decided on the
GPU where graphs take conditional nodes, else on the host). Everything runs on the caller's
current stream.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cupy as cp
import numpy as np

from .. import fp16split, pack_reuse, workspace
from ..combine import int32_k_block, overflow_slack
from ..levels import LEVELS, Level
from ..packer import pair_exponent
from . import auto_fallback, build, conditional, fused, tn_gemm
from .convert import ACCUMULATE, conversion
from .geometry import MAX_GRID_YZ, batch_chunks, chunk_length
from .launch import flag_counts, forked, joined
from .packs import (
    A_SIDE,
    B_SIDE,
    K_ALIGN,
    PackedOperand,
    a_tops,
    b_tops,
    exponents_from_tops,
    k_exponents,
    pack_a,
    pack_b,
    pack_fp16,
    pack_int8,
    pack_int8_columns,
    packable_b,
    padded,
    tops_and_exponents,
    unit_inner,
)

if TYPE_CHECKING:  # (the rule comes with the route: this module never asks auto)
    from ..auto import Fallback

# k-steps the FP16 path lets the tensor cores sum in FP32 (see fp16_product): the error grows
# with the block; 1024 keeps the level near SGEMM's error and still faster than SGEMM (level IV
# is both more accurate and faster there). Figures in
# benchmarks/results/NVIDIA-H100-80GB-HBM3/fp16-k-blocks.md.
FP16_K_BLOCK = 1024
# "auto"'s fallback check waits for the packs' flag counts once the GEMMs of this many weight
# classes are queued (3 of level IV's 8 products), so the GPU has work while the host waits;
# fewer queued GEMMs are wasted where it falls back to SGEMM (one class or two measured alike).
# Figures in benchmarks/results/NVIDIA-H100-80GB-HBM3/cuda-launch-constants.txt.
CLASSES_BEFORE_ASKING = 2
COMBINE_THREADS = 256
BYPASS_TILE = 64  # output rows and columns per block of the bypass_lines kernel


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
    return at once, and every tile where the packs flagged none)."""
    (count, m, k), n = a.shape, b.shape[2]
    a_s, b_s = (tuple(np.int64(x // a.itemsize) for x in y.strides) for y in (a, b))
    rows = min(-(-m // BYPASS_TILE), MAX_GRID_YZ)
    for first in batch_chunks(count):
        build.combine_module().get_function("bypass_lines")(
            (-(-n // BYPASS_TILE), rows, chunk_length(first, count)), (16, 16),
            (a_pack.nonfinite, b_pack.nonfinite, a_pack.flagged, b_pack.flagged, a, a_s[1],
             a_s[2], a_s[0], b, b_s[1], b_s[2], b_s[0], np.int32(m), np.int32(n), np.int32(k),
             np.int32(first), c),
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


@dataclasses.dataclass
class _Block:
    """One block of an INT8 product: rows of A (or pairs of two stacks), their packs and the
    part of C they make."""

    a_pack: PackedOperand
    b_pack: PackedOperand
    a: cp.ndarray
    b: cp.ndarray
    c: cp.ndarray


def sum_blocking(level: Level, m: int, k: int, n: int, count: int = 1) -> tuple[int, int]:
    """(units per block, bytes of the class-sum buffer) of an INT8 product: units are A's rows
    (up to the GEMMs' own row block, ``workspace.gemm_row_block``), or the pairs of a stack
    of ``count``."""
    long_k = padded(k) > int32_k_block(level)
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
    fallback: Fallback | None = None,
    on_native: Callable[[], None] | None = None,
    side: cp.cuda.Stream | None = None,
) -> cp.ndarray:
    """One INT8 product; the operands ``keep`` names reuse their tops and packs (``pack_reuse``):
    a kept operand is not read at all while its pack holds, nor copied when not row-major.
    ``side``: a second stream B's tops and pack run on beside A's (``packs_on_two_streams``).
    Class sums and combine run in blocks of A's rows (``sum_blocking``). With a ``fallback``
    (level "auto"'s route), cuBLAS SGEMM where it says so of the lines to recompute exactly
    (``on_native`` is called when it runs). Where graphs have conditional nodes and no one
    asks to be told, the GPU decides (``auto_fallback.sgemm_where_the_gpu_decides``) and the
    host never waits. Else the host learns the packs' flag counts through an asynchronous copy
    and waits for that copy alone, with the first CLASSES_BEFORE_ASKING classes' GEMMs already
    queued: waiting for the whole stream left the GPU idle while the host launched the rest
    (0.3-0.47 ms a call on an H100 at n = 3072-8192)."""
    if side is not None and keep == pack_reuse.KEEP_NOTHING:
        a_pack, b_pack = packs_on_two_streams(a, b, level, side)
    else:
        a_pack, b_pack = _packs(a, b, level, keep)
    c = cp.empty((a.shape[0], b.shape[1]), dtype=cp.float32)
    if fallback is not None and on_native is None and conditional.usable():
        _emulate_into(c, a_pack, b_pack, a, b, level)
        auto_fallback.sgemm_where_the_gpu_decides(a, b, c, a_pack, b_pack, fallback)
        return c
    read_counts = flag_counts(a_pack.flagged, b_pack.flagged) if fallback is not None else None

    def proceed() -> bool:  # asked with the first classes' GEMMs queued
        if read_counts is None or fallback is None:
            return True
        return not auto_fallback.mostly_exact(a, b, a_pack, b_pack, read_counts(), fallback)

    try:
        if _emulate_into(c, a_pack, b_pack, a, b, level, proceed):
            return c
    finally:
        if read_counts is not None:  # (its copy lands before the pinned buffer can be reused)
            read_counts()
    if on_native is not None:
        on_native()
    return auto_fallback.fallback_sgemm(a, b, c)


def _packs(
    a: cp.ndarray, b: cp.ndarray, level: Level, keep: pack_reuse.Keep
) -> tuple[PackedOperand, PackedOperand]:
    """Both operands' packs at ``level``, the kept ones reused (``int8_product``)."""
    kept_a, kept_b = (kept.on("cuda") for kept in keep)
    a_rows = functools.cache(functools.partial(unit_inner, a))  # copied once, if at all
    b_lines = functools.cache(functools.partial(packable_b, b))  # ... and B likewise
    if keep == pack_reuse.KEEP_NOTHING:
        a_top, b_top, kexp = tops_and_exponents(a_rows(), b_lines())
    else:
        a_top = kept_a.tops(lambda: a_tops(a_rows()))
        b_top = kept_b.tops(lambda: b_tops(b_lines()))
        kexp = exponents_from_tops(a_top.k, b_top.k)[0]
    a_pack = kept_a.pack(level.name, kexp, lambda: pack_a(a_rows(), kexp, level, a_top))
    b_pack = kept_b.pack(level.name, kexp, lambda: pack_b(b_lines(), kexp, level, b_top))
    a_pack.nan_inf, b_pack.nan_inf = a_top.bad, b_top.bad
    return a_pack, b_pack


def packs_on_two_streams(
    a: cp.ndarray, b: cp.ndarray, level: Level, side: cp.cuda.Stream
) -> tuple[PackedOperand, PackedOperand]:
    """Both packs, B's tops and pack on ``side`` beside A's on the current stream, joined for
    the k-exponents (which need both tops) and again after the packs. The same kernels on the
    same data as ``_packs``: the same bits. Small operands' tops and packs leave most SMs idle,
    so in a captured graph the two sides overlap."""
    with forked(side):
        b_lines = packable_b(b)
    a_rows = unit_inner(a)
    a_top, b_top, kexp = tops_and_exponents(a_rows, b_lines, side)
    with forked(side):
        b_pack = pack_b(b_lines, kexp, level, b_top)
    a_pack = pack_a(a_rows, kexp, level, a_top)
    joined(side)
    a_pack.nan_inf, b_pack.nan_inf = a_top.bad, b_top.bad
    return a_pack, b_pack


def _emulate_into(
    c: cp.ndarray,
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    a: cp.ndarray,
    b: cp.ndarray,
    level: Level,
    proceed: Callable[[], bool] | None = None,
) -> bool:
    """C = a @ b at ``level`` from the packs (the fused kernel where it serves, else blocks of
    A's rows: class sums and combine), then the bypass; False where ``proceed`` stopped it."""
    (m, k), n = a.shape, b.shape[1]
    if fused.serves(level, m, n, a_pack.k_pad):
        fused.product(a_pack, b_pack, level, c[None])
        if proceed is not None and not proceed():
            return False
        _bypass_lines(a_pack, b_pack, a[None], b[None], c[None])
        return True
    rows = sum_blocking(level, m, k, n)[0]
    blocks = [
        _Block(a_pack.part(first, last - first), b_pack, a[first:last], b, c[first:last])
        for first in range(0, m, rows)
        for last in [min(m, first + rows)]
    ]
    return _sums_and_combine(blocks, level, proceed)


def int8_product_deciding_on_gpu(
    a: cp.ndarray,
    b: cp.ndarray,
    level: Level,
    fallback: Fallback,
    side: cp.cuda.Stream | None = None,
) -> cp.ndarray:
    """``int8_product`` under "auto"'s ``fallback``, on a stream capturing a graph, with the
    fallback decided on the GPU: the packs, then the level's products, combine and bypass and,
    beside them on ``side`` (else before them), a kernel (``decide.cu``) that counts the
    unresolved lines among those the packs flag; after both, a conditional node runs the
    float32 GEMM over C where the fallback takes it. The bits are ``int8_product``'s with the
    same fallback, with no host synchronisation. Where the GEMM runs, the level's work was
    spent for nothing (data whose unresolved lines cover most of C are rare); a conditional
    node's body costs microseconds of GPU time even where it does not run, so the level's
    work is in none."""
    stream = cp.cuda.get_current_stream()
    if side is None:
        a_pack, b_pack = _packs(a, b, level, pack_reuse.KEEP_NOTHING)
    else:
        a_pack, b_pack = packs_on_two_streams(a, b, level, side)
    m, n = a.shape[0], b.shape[1]
    c = cp.empty((m, n), dtype=cp.float32)
    sgemm = auto_fallback.prepared_sgemm(a, b, c)
    take_sgemm = conditional.handle(stream)

    def decide() -> None:
        auto_fallback.launch_decide("decide_sgemm", (take_sgemm,), a_pack, b_pack, fallback)

    if side is None:
        decide()
        _emulate_into(c, a_pack, b_pack, a, b, level)
    else:
        side.wait_event(stream.record())
        with side:
            decide()
        _emulate_into(c, a_pack, b_pack, a, b, level)
        stream.wait_event(side.record())
    with conditional.only_if(stream, take_sgemm):
        sgemm()
    return c


def int8_product_stack(
    a: cp.ndarray, b: cp.ndarray, level: Level, side: cp.cuda.Stream | None = None
) -> cp.ndarray:
    """``int8_product`` of each pair of two float32 stacks (s, m, k) and (s, k, n) with m, k,
    n > 0, in a few launches for the whole stack: k-exponents, one pack of each operand, one
    strided-batched INT8 GEMM per weight class (per k block when k is long), one combine and
    one bypass launch (per block of pairs when the class sums would not fit at once). Each pair
    gets ``int8_product``'s bits (the same kernels, per pair). ``side``: a second stream B's
    tops and pack run on beside A's."""
    if a.shape[0] == 1:  # one pair: blocks of its rows, as a matrix product
        return int8_product(a[0], b[0], level, side=side)[None]
    a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
    count, m, k = a.shape
    n = b.shape[2]
    a_top, b_top, kexp = tops_and_exponents(a, b, side)
    wide = level.bypass_wide
    with forked(side):
        b_pack = pack_int8_columns(b, kexp, level.b_slices, True, wide, b_top)
    a_pack = pack_int8(
        a.reshape(count * m, k), kexp, A_SIDE, level.a_slices, False, wide, count, a_top
    )
    joined(side)
    c = cp.empty((count, m, n), dtype=cp.float32)
    if fused.serves(level, m, n, a_pack.k_pad):
        fused.product(a_pack, b_pack, level, c)
        _bypass_lines(a_pack, b_pack, a, b, c)
        return c
    pairs = sum_blocking(level, m, k, n, count)[0]
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
    a_rows, b = unit_inner(a), packable_b(b)
    a_top, b_top, kexp = tops_and_exponents(a_rows, b)
    a_pack, b_pack = pack_a(a_rows, kexp, level, a_top), pack_b(b, kexp, level, b_top)
    sums = int8_class_sums(a_pack, b_pack, level)
    stages: dict[str, Any] = {
        "k-exponents": lambda: tops_and_exponents(a_rows, b),
        "pack A": lambda: pack_a(a_rows, kexp, level, a_top),
        "pack B": lambda: pack_b(b, kexp, level, b_top),
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
    a_rows = unit_inner(a)
    kexp = k_exponents(a_rows, b)
    a_pack = pack_fp16(a_rows, kexp, A_SIDE, reversed_slots=False)  # slots (hi, lo)
    b_pack = pack_fp16(unit_inner(b.T), kexp, B_SIDE, reversed_slots=True)  # slots (lo, hi)
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

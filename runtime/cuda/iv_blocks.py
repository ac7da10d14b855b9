"""Level IV-blocks on the GPU (``blocks``; kernels in kernels/iv_blocks.cuh): four launches.

1. ``blocks_pack_b`` slices B per (block of k, column) into MMA fragments (B is the small
   operand of the shapes this level serves: k x n with n <= 128 or so);
2. ``blocks_rows_<NT>[_busy]`` streams A once, slicing it in registers per (row, block) and summing
   the class products on the INT8 tensor cores (``mma.sync``) into float64 totals;
3. ``blocks_bypass_rows`` and ``blocks_bypass_columns`` recompute the flagged rows and columns
   (NaN/Inf, unresolved; listed by the two kernels above) in order, without a host
   synchronisation.

Under "auto", ``blocks_sample_rows`` runs before step 2 (``blocks_product``'s fallback).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cupy as cp
import numpy as np

from .. import blocks, bypass, workspace
from ..combine import overflow_slack
from ..levels import Level, triangle
from . import build, conditional, launch
from .auto_fallback import fallback_sgemm, prepared_sgemm
from .convert import WIDEN, conversion
from .geometry import (
    BLOCKS_BUSY_SHAPES,
    BLOCKS_BYPASS_THREADS,
    BLOCKS_N_TILES,
    BLOCKS_ROW_PAD,
    BLOCKS_SHAPES,
    BLOCKS_THREADS,
    BLOCKS_TILE_ROWS,
    MAX_GRID_YZ,
)
from .launch import c_contiguous, flag_counts, free_bytes, vector_suffix
from .packs import deep_argument

if TYPE_CHECKING:  # (the rule comes with the route: this module never asks auto)
    from ..auto import Fallback

MIN_COMPUTE_CAPABILITY = 80  # mma.sync m16n8k32 on INT8: Ampere and later
QUERY_FREE_ABOVE = 256 << 20  # workspace bytes past which a call asks what memory is free first
_slack = functools.cache(overflow_slack)


@functools.cache  # (per call it cost microseconds of host time; levels are immutable)
def check_level(level: Level) -> None:
    """ValueError unless the kernels were built for ``level``'s slices and pairs (and its class
    pairs fit the int32 accumulators)."""
    slices, max_sum = level.a_slices, max(level.groups)
    if (
        level.name != blocks.LEVEL
        or level.b_slices != slices
        or level.pairs != triangle(slices, slices, max_sum)
    ):
        raise ValueError(f"level {level.name!r}: the GPU's blocks kernels serve {blocks.LEVEL}")
    blocks.check_int32(level)


@functools.cache
def _compute_capability(device: int) -> int:
    return int(cp.cuda.Device(device).compute_capability)


def supported(device: int) -> bool:
    return _compute_capability(device) >= MIN_COMPUTE_CAPABILITY


def check_device(device: int) -> None:
    if not supported(device):
        raise NotImplementedError(
            f"level {blocks.LEVEL} needs INT8 mma.sync (compute capability 8.0 or later); GPU "
            f"{device} has {_compute_capability(device) / 10:.1f}: use level IV or fp32-ordered"
        )


def n_tiles_per_block(n_tiles: int) -> int:
    """n-tiles (8 columns) one block of threads takes: the fewest of BLOCKS_N_TILES covering
    ``n_tiles``, at most the largest (wider products take several column groups, each reading A)."""
    return next((nt for nt in BLOCKS_N_TILES if nt >= n_tiles), BLOCKS_N_TILES[-1])


def stage_bytes(n_tiles: int, block_k: int, slices: int) -> int:
    """Shared memory of one stage: A's tile, B's fragments and B's exponents for ``n_tiles``."""
    a_tile = BLOCKS_TILE_ROWS * (block_k + BLOCKS_ROW_PAD) * 4
    b_fragments = n_tiles * slices * (block_k // 32) * 64 * 4
    return a_tile + b_fragments + n_tiles * 8 * 4


def workspace_bytes(level: Level, a: Any, b: Any) -> int:
    """Device memory of one product: B's fragments and exponents, the line flags, the result,
    and row-major copies of operands that are not."""
    (m, k), n = a.shape, b.shape[1]
    blocks_k, n_pad = -(-k // blocks.BLOCK_K), 8 * -(-n // 8)
    fragments = blocks_k * n_pad * level.b_slices * blocks.BLOCK_K  # a byte per digit
    copies = sum(4 * x.size for x in (a, b) if not x.flags.c_contiguous)
    return fragments + 4 * blocks_k * n_pad + 4 * (m + 4 * n + 2) + 4 * m * n + copies


def blocks_product(
    a: cp.ndarray,
    b: cp.ndarray,
    level: Level,
    fallback: Fallback | None = None,
    on_native: Callable[[], None] | None = None,
) -> cp.ndarray:
    """a @ b at level IV-blocks for float32 CuPy matrices with m, k, n > 0 (``blocks``'s
    arithmetic, bit for bit).

    With a ``fallback`` (level "auto"'s route), cuBLAS SGEMM where the lines to recompute
    exactly would cost more than IV-blocks saves (``fallback.takes_sgemm``; ``on_native``
    is called then): B's flagged columns (NaN/Inf ones included) are counted exactly, A's
    unresolved rows (NaN/Inf ones left out) estimated from about SAMPLED_ROWS rows, one in
    each run of ``_sample_stride`` (``blocks_sample_rows``), before the rows kernel, which,
    reading the same counts, returns at once where SGEMM will be taken. Where graphs have
    conditional nodes and no one asks to be told, a kernel decides after the rows kernel
    between the listed lines' recomputation and cuBLASLt's float32 GEMM
    (``conditional.decided``: no host synchronisation). Else the host reads both counts while
    the rows kernel runs, so narrow data lose no GPU time to the wait. (Waiting for the rows
    kernel's own counts instead cost 30% at 65536 x 4096 x 16: the next call's host work was
    no longer hidden.) Either way C is float32-grade; the estimate only picks the faster
    way."""
    check_level(level)
    device = cp.cuda.Device().id
    check_device(device)
    (m, k), n = a.shape, b.shape[1]
    needed = workspace_bytes(level, a, b)
    if needed > QUERY_FREE_ABOVE:  # (below, a failed allocation is CuPy's OutOfMemoryError)
        workspace.check_fits(level, m, k, n, needed, free_bytes(), "GPU")
    a, b = c_contiguous(a), c_contiguous(b)
    blocks_k = -(-k // blocks.BLOCK_K)
    n_tiles = -(-n // 8)
    deep = deep_argument(level.a_slices, k, level.bypass_wide)
    words = blocks_k * n_tiles * level.b_slices * (blocks.BLOCK_K // 32) * 64
    fragments = cp.empty(words, dtype=cp.uint32)
    exps = cp.empty(blocks_k * n_tiles * 8, dtype=cp.int32)
    lines = cp.zeros(4 * n + m + 3, dtype=cp.int32)  # per column; the flagged lines' lists
    col_deep, col_bad, col_top, flagged_cols = (lines[i * n : (i + 1) * n] for i in range(4))
    flagged_rows = lines[4 * n : 4 * n + m]
    counts = lines[4 * n + m :]  # rows listed, columns listed, sampled rows unresolved
    flagged, sampled = counts[:2], counts[2:]
    build.pack_module().get_function("blocks_pack_b")(
        (blocks_k * n_tiles,), (32,),
        (b, np.int32(k), np.int32(n), np.int32(n_tiles), deep, fragments, exps,
         col_deep, col_bad, col_top, flagged_cols, flagged[1:]),
    )  # fmt: skip
    auto = fallback is not None
    gpu_decides = auto and on_native is None and conditional.usable()
    if auto:
        _sample(a, deep, sampled)
    read_counts = flag_counts(sampled, flagged[1:]) if auto and not gpu_decides else None
    rows_per_sample = m / _samples(m, k)  # (a sampled unresolved row stands for these)
    bounds = (fallback.exact_share, fallback.row_entries) if fallback is not None else (0, 0)
    give_up = [bound * (1 + GIVE_UP_MARGIN) if auto else -1.0 for bound in bounds]
    nt = n_tiles_per_block(n_tiles)
    groups = -(-n_tiles // nt)
    vec = vector_suffix((a,), (k,))
    kernel, shared, rows_grid = _rows_launch(nt, vec, m, groups, level, device)
    c = cp.empty((m, n), dtype=cp.float32)
    kernel(
        (groups, rows_grid), (BLOCKS_THREADS,),
        (a, np.int64(m), np.int32(k), np.int32(n), np.int32(n_tiles), fragments, exps, col_top,
         deep, np.float64(k * _slack(level)), c, flagged_rows, counts, *map(np.float64, give_up),
         np.float64(rows_per_sample)),
        shared_mem=shared,
    )  # fmt: skip
    if fallback is not None and read_counts is not None:
        rows, cols = read_counts()
        if fallback.takes_sgemm(rows * rows_per_sample, cols, m, n):
            if on_native is not None:
                on_native()
            return fallback_sgemm(a, b, c)  # (cuBLASLt's: the GPU-decided way's bits)
    recompute = functools.partial(_recompute_listed, a, b, c, flagged_rows, flagged_cols, flagged)
    if fallback is not None and gpu_decides:
        sgemm = prepared_sgemm(a, b, c)

        def decide(bypass_handle: int, sgemm_handle: int) -> None:
            build.decide_module().get_function("decide_blocks")(
                (1,), (1,),
                (np.uint64(bypass_handle), np.uint64(sgemm_handle), sampled, flagged[1:],
                 np.float64(rows_per_sample), np.float64(m), np.float64(n),
                 np.float64(fallback.exact_share), np.float64(fallback.row_entries)),
            )  # fmt: skip

        conditional.decided(("IV-blocks fallback", m, k, n), decide, recompute, sgemm)
        return c
    recompute()
    return c


def _recompute_listed(
    a: cp.ndarray,
    b: cp.ndarray,
    c: cp.ndarray,
    flagged_rows: cp.ndarray,
    flagged_cols: cp.ndarray,
    flagged: cp.ndarray,
) -> None:
    """The flagged lines of C recomputed in order (each kernel stops at the count left on the
    device)."""
    (m, k), n = a.shape, b.shape[1]
    device = cp.cuda.Device().id
    # The rows kernel's items (a warp each) are serial float64 chains k long, dealt to its
    # blocks in turn: at most as many blocks as run at once, so no item waits for a second
    # round. (H100, 256 listed rows at 16384^2 x 64, 512 items: 0.66 ms when the grid had
    # twice the resident blocks and the items a block each.)
    bypass_blocks = 2 * launch.multiprocessors(device)
    row_items = m * -(-n // 32)  # (listed row, 32 columns)
    bypass_rows = _rows_kernel("blocks_bypass_rows")
    resident = launch.resident_blocks(bypass_rows, BLOCKS_BYPASS_THREADS, device)
    bypass_rows(
        (min(-(-row_items // (BLOCKS_BYPASS_THREADS // 32)), resident),),
        (BLOCKS_BYPASS_THREADS,),
        (flagged_rows, flagged[:1], a, b, np.int32(n), np.int32(k), c),
    )  # fmt: skip
    build.pack_module().get_function("blocks_bypass_columns")(
        (min(-(-m // BLOCKS_BYPASS_THREADS), bypass_blocks),), (BLOCKS_BYPASS_THREADS,),
        (flagged_cols, flagged[1:], a, b, np.int64(m), np.int32(n), np.int32(k), c),
    )  # fmt: skip


SAMPLED_ROWS = 256  # rows of A "auto" looks at before choosing IV-blocks's exact recomputation
SAMPLED_ENTRIES = 1 << 20  # ... fewer where k is long (about 4 MiB of A)
# The rows kernel gives up (returns at once) where the sampled estimate passes the fallback's
# bounds (auto.Fallback.takes_sgemm) by this much more than the host's: the two compare in
# different float64 forms, and a kernel that gave up where the host went on would leave C
# unwritten.
GIVE_UP_MARGIN = 1e-9


def _sample_stride(m: int, k: int) -> int:
    return max(1, m // max(1, min(SAMPLED_ROWS, SAMPLED_ENTRIES // k)))


def _samples(m: int, k: int) -> int:
    """Rows ``blocks_sample_rows`` looks at: one in each run of ``_sample_stride`` rows."""
    return -(-m // _sample_stride(m, k))


def sampled_rows(m: int, k: int) -> list[int]:
    """The rows ``blocks_sample_rows`` looks at (its hash, for tests and inspection): in run
    i of ``_sample_stride`` rows (the last may be shorter), the one at a hashed offset."""
    stride = _sample_stride(m, k)
    rows = []
    for i in range(_samples(m, k)):
        hashed = ((i + 1) * 0x9E3779B97F4A7C15) % (1 << 64)
        hashed ^= hashed >> 29
        rows.append(i * stride + hashed % min(stride, m - i * stride))
    return rows


def _sample(a: cp.ndarray, deep: np.int32, sampled: cp.ndarray) -> None:
    """Queues ``blocks_sample_rows``: how many of A's sampled rows are unresolved."""
    (m, k) = a.shape
    stride = _sample_stride(m, k)
    build.pack_module().get_function("blocks_sample_rows")(
        (_samples(m, k),), (256,), (a, np.int64(m), np.int32(k), np.int64(stride), deep, sampled)
    )


def _rows_launch(
    nt: int, vec: str, m: int, groups: int, level: Level, device: int
) -> tuple[Any, int, int]:
    """The rows kernel for ``nt`` n-tiles a block, its shared memory and its grid's rows (each
    grid row walks A's row tiles in turn): the variant capped for more blocks an SM
    (``BLOCKS_BUSY_SHAPES``) where its extra blocks save a round of tiles, else the plain one
    (``BLOCKS_SHAPES``; with as many rounds, its blocks, sharing an SM with fewer, are faster:
    H100, 40000 x 4096 x 24, 625 row tiles in two rounds either way, 335 against 347 us)."""
    tiles = -(-m // BLOCKS_TILE_ROWS)
    launches = []
    for busy in ("", "_busy") if nt in BLOCKS_BUSY_SHAPES else ("",):
        stages = (BLOCKS_BUSY_SHAPES if busy else BLOCKS_SHAPES)[nt][0]
        kernel = _rows_kernel(f"blocks_rows_{nt}{busy}{vec}")
        shared = stages * stage_bytes(nt, blocks.BLOCK_K, level.b_slices)
        per_group = -(-launch.resident_blocks(kernel, BLOCKS_THREADS, device, shared) // groups)
        launches.append((kernel, shared, max(1, min(tiles, MAX_GRID_YZ, per_group))))
    return min(launches, key=lambda option: -(-tiles // option[2]))  # (the plain one on a tie)


@functools.cache  # (one kernel object, so launch.resident_blocks allows it its memory once)
def _rows_kernel(name: str) -> Any:
    """A rows kernel (``blocks_rows_<n-tiles>[_busy][_vec]``: 16-byte copies of A in _vec;
    ``blocks_bypass_rows``)."""
    return build.pack_module().get_function(name)


COUNT_ENTRIES = 1 << 24  # entries per pass of ``unresolved_lines`` (float64 temporaries)


def unresolved_lines(a: cp.ndarray, b: cp.ndarray, level: Level) -> tuple[int, int]:
    """(rows of A, columns of B) ``blocks_product`` recomputes as unresolved (NaN/Inf lines
    left out), counted on the GPU by the CPU model's own rule (``blocks.block_deep_counts``)."""
    if not level.bypass_wide:
        return 0, 0
    a, b = c_contiguous(a), cp.ascontiguousarray(b.T)
    return _unresolved_count(a, level), _unresolved_count(b, level)


def _unresolved_count(lines: cp.ndarray, level: Level) -> int:
    """Lines (rows of ``lines``, float32) with more than k / DEEP_FRACTION entries deep below
    their own block's scale, a few lines at a time (about COUNT_ENTRIES entries), widened
    exactly first (CuPy's own float32 to float64 conversion flushes subnormals)."""
    widen = conversion(WIDEN, "mixpert_widen")
    count, k = 0, lines.shape[1]
    step = max(1, COUNT_ENTRIES // k)
    for r0 in range(0, lines.shape[0], step):
        deep = blocks.block_deep_counts(widen(lines[r0 : r0 + step]), level, k)
        count += int(cp.count_nonzero(deep * bypass.DEEP_FRACTION > k))
    return count

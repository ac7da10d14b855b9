"""Level fp32-ordered on the GPU (``ordered``: the CPU model of its one fixed order of
operations): the launchers of its tile, small-stack, pairs, split-k, tall and thin kernels (in
the combine module: ``build``), and ``ordered_product``, which picks one for a product's shape."""

from __future__ import annotations

import functools
from typing import Any

import cupy as cp
import numpy as np

from .. import ordered
from . import build, launch
from .geometry import (
    CHUNKS_SHAPES,
    MAX_GRID_YZ,
    PAIRS_SHAPES,
    PAIRS_STAGES,
    ROWS_MAX_GROUP,
    ROWS_THREADS,
    THIN_MAX_N,
    THIN_STAGES,
    THIN_THREADS,
    TOTALS_THREADS,
    TOTALS_WIDTH,
    batch_chunks,
    chunk_length,
)
from .launch import c_contiguous, vector_suffix


@functools.cache
def _kernel(name: str) -> Any:
    return build.combine_module().get_function(name)


def ordered_product(a: cp.ndarray, b: cp.ndarray, r: int | None = None) -> cp.ndarray:
    """Level fp32-ordered (``ordered``) for two matrices or two stacks (s, m, k) and (s, k, n)
    with m, n > 0: a matrix product with few output tiles and a long k split over its
    segments (``ordered_split_product``); a tall one (m >= ROWS_MIN_M) through
    ``ordered_thin_product`` (k <= CHUNK, n <= THIN_MAX_N) or ``ordered_rows_product``
    (n <= ROWS_MAX_N); a stack of pairs of at most 16 x 16 outputs with k <= STACK_MAX_K
    through ``ordered_stack_product``, of at most 32 x 32 with k <= 32 or of 33 to 64 (the larger
    of m and n) with k <= 64 through ``ordered_pairs_product`` (where the GPU's blocks can have
    its shared memory); else a 16 R x 16 R output tile per block (R: ``tile_size`` by default),
    each block walking the whole k."""
    stack = a.ndim == 3
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if r is None:
        r = tile_size(m, n)
    if not stack and _splits_k(m, n, k, r):
        return ordered_split_product(a, b)
    if not stack and m >= ROWS_MIN_M and k <= ordered.CHUNK and n <= THIN_MAX_N and thin_fits(k, n):
        return ordered_thin_product(a, b)
    if not stack and m >= ROWS_MIN_M and n <= ROWS_MAX_N:
        return ordered_rows_product(a, b)
    if stack and max(m, n) <= 16 and k <= STACK_MAX_K:
        return ordered_stack_product(a, b)
    pairs = pairs_tile(m, n, k) if stack else None
    if pairs is not None and launch.shared_fits(pairs_shared_bytes(pairs), cp.cuda.Device().id):
        return ordered_pairs_product(a, b)
    a3 = c_contiguous(a if stack else a[None])
    b3 = c_contiguous(b if stack else b[None])
    count = a3.shape[0]
    tile = 16 * r
    c = cp.empty((count, m, n), dtype=cp.float32)
    kernel = _kernel(f"ordered_product_{r}{_segmented(k)}")
    for first in batch_chunks(count):
        kernel(
            (-(-n // tile), min(-(-m // tile), MAX_GRID_YZ), chunk_length(first, count)), (16, 16),
            (a3, b3, np.int32(m), np.int32(n), np.int32(k), np.int32(first), c),
        )  # fmt: skip
    return c if stack else c[0]


# Stacks of pairs of at most 16 x 16 outputs: the whole k in one stage. (At k = 64 the tile
# kernel is faster: 41 against 52 us at 1024 x 64^3 on an H100, the stack kernel's 64-step
# stages spilling registers.)
STACK_MAX_K = 32


def ordered_stack_product(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """Level fp32-ordered for a stack of pairs of at most 16 x 16 outputs (k <= STACK_MAX_K;
    the ``ordered_stack`` kernels, staging 16 or 32 k-steps): as many blocks as fit on the GPU
    at once, each walking pairs with the next pair's operands in flight while it computes this
    one's tile."""
    count, m, k = a.shape
    n = b.shape[2]
    if max(m, n) > 16 or not 0 < k <= STACK_MAX_K:
        raise ValueError(
            f"the small-stack kernel takes pairs with m, n <= 16 and 0 < k <= {STACK_MAX_K}; "
            f"got {m} x {k} x {n}"
        )
    a, b = c_contiguous(a), c_contiguous(b)
    kernel = _kernel(f"ordered_stack_{16 if k <= 16 else 32}")
    c = cp.empty((count, m, n), dtype=cp.float32)
    grid = min(count, launch.resident_blocks(kernel, 256, cp.cuda.Device().id))
    kernel((grid,), (16, 16), (a, b, np.int32(m), np.int32(n), np.int32(k), np.int64(count), c))
    return c


def _pairs_per_group(t: int) -> int:
    """Pairs a block of ``ordered_pairs_<t>`` sums at once: a 4 x 4 block of outputs a thread."""
    return PAIRS_SHAPES[t][1] // (t * t // 16)


def pairs_tile(m: int, n: int, k: int) -> int | None:
    """T of the ``ordered_pairs`` kernel for pairs of m x k x n (the smallest that covers m and
    n, if it holds k), or None. (T = 64 for 32 x 64 x 32 pairs ran at 0.6x the tile kernel on an
    H100: three quarters of its threads idle.)"""
    t = min((t for t in PAIRS_SHAPES if max(m, n) <= t), default=None)
    return t if t is not None and 0 < k <= PAIRS_SHAPES[t][0] else None


def pairs_shared_bytes(t: int) -> int:
    """Dynamic shared memory of ``ordered_pairs_<t>`` (its PairsLayout): PAIRS_STAGES stages of
    a group's pairs, A's rows padded by 4 floats."""
    kmax = PAIRS_SHAPES[t][0]
    return 4 * PAIRS_STAGES * _pairs_per_group(t) * (t * (kmax + 4) + kmax * t)


def ordered_pairs_product(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """Level fp32-ordered for a stack of small pairs (m, n <= T, k <= the longest k for T in
    PAIRS_SHAPES; the ``ordered_pairs`` kernels): as many blocks as fit on the GPU at once,
    each walking groups of pairs through two shared-memory stages (cp.async), a 4 x 4 block of
    outputs a thread; in 16-byte pieces where k and n are multiples of 4 and both stacks
    16-byte aligned."""
    count, m, k = a.shape
    n = b.shape[2]
    t = pairs_tile(m, n, k)
    if t is None:
        raise ValueError(
            f"the small-pairs kernel takes pairs with m, n <= T and 0 < k <= the longest k for "
            f"T, T the least of {list(PAIRS_SHAPES)} covering m and n "
            f"({ {t: kmax for t, (kmax, _) in PAIRS_SHAPES.items()} }); got {m} x {k} x {n}"
        )
    a, b = c_contiguous(a), c_contiguous(b)
    vec = vector_suffix((a, b), (k, n))
    device = cp.cuda.Device().id
    shared = pairs_shared_bytes(t)
    launch.refuse_unless_shared_fits("the small-pairs kernel", shared, device)
    kernel = _kernel(f"ordered_pairs_{t}{vec}")
    c = cp.empty((count, m, n), dtype=cp.float32)
    threads = PAIRS_SHAPES[t][1]
    groups = -(-count // _pairs_per_group(t))
    grid = min(groups, launch.resident_blocks(kernel, threads, device, shared))
    kernel(
        (grid,), (threads,),
        (a, b, np.int32(m), np.int32(n), np.int32(k), np.int64(count), c),
        shared_mem=shared,
    )  # fmt: skip
    return c


def tile_size(m: int, n: int) -> int:
    """R of the fp32-ordered tile kernels (16 R x 16 R outputs a block): the smallest of 1, 2
    and 4 that covers m and n (small matrices waste no threads)."""
    return 1 if max(m, n) <= 16 else 2 if max(m, n) <= 32 else 4


def _segmented(k: int) -> str:
    """The kernel variant for k: "_segments" where k spans more than one segment."""
    return "_segments" if k > ordered.SEGMENT else ""


SPLIT_MIN_SEGMENTS = 8  # split k only where it is long enough to give each block real work

SPLIT_WAVES = 2  # ... and the output tiles alone fill fewer than this many blocks per SM


def _splits_k(m: int, n: int, k: int, r: int) -> bool:
    """Whether a product's k is split: long enough, too few output tiles to fill the GPU, and
    few enough outputs that the segment totals (8 m n k / SEGMENT bytes) stay below A and B's
    bytes (m n <= 64 (m + n) with SEGMENT = 512)."""
    tiles = -(-m // (16 * r)) * -(-n // (16 * r))
    sms = launch.multiprocessors(cp.cuda.Device().id)
    small = 8 * m * n <= ordered.SEGMENT * (m + n)
    return k >= SPLIT_MIN_SEGMENTS * ordered.SEGMENT and tiles < SPLIT_WAVES * sms and small


def ordered_split_product(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """Level fp32-ordered with k split (TSM2X's long-k case, small m and n): each segment of k
    gets its float64 totals, then each entry's totals are added in segment order and rounded
    once: the bits of one thread walking the whole k. Outputs of at most 32 x 32 run
    ``ordered_chunks`` (a block walks a run of segments, a stage's chunks summed at once, the
    next stage copied meanwhile); larger ones, and all on GPUs whose blocks cannot have that
    kernel's shared memory, ``ordered_segments`` (a block per 64 x 64 output tile and
    segment). A transposed A (X.T of a C-ordered X, as in X.T @ X) is read in place: a copy of
    a 16 x 2^21 transpose took 0.76 ms on an H100, three times the product."""
    transposed = a.flags.f_contiguous and not a.flags.c_contiguous
    a, b = (a if transposed else c_contiguous(a)), c_contiguous(b)
    m, k = a.shape
    n = b.shape[1]
    count = -(-k // ordered.SEGMENT)
    segments = cp.empty((count, m, n), dtype=cp.float64)
    at = "_at" if transposed else ""
    device = cp.cuda.Device().id
    t = min((t for t in CHUNKS_SHAPES if t >= max(m, n)), default=None)
    shared = chunks_shared_bytes(t, transposed) if t is not None else 0
    if t is not None and launch.shared_fits(shared, device):
        vec = vector_suffix((a, b), (m if transposed else k, n))
        kernel = _kernel(f"ordered_chunks_{t}{at}{vec}")
        blocks = min(count, launch.resident_blocks(kernel, chunks_threads(t), device, shared))
        kernel(
            (blocks,), (chunks_threads(t),),
            (a, b, np.int32(m), np.int32(n), np.int32(k), np.int32(count), segments),
            shared_mem=shared,
        )  # fmt: skip
        return _segment_totals(segments, m, n)
    tile = 64
    kernel = _kernel(f"ordered_segments{at}")
    for first in batch_chunks(count):  # grid z: at most 65535 segments a launch
        kernel(
            (-(-n // tile), -(-m // tile), chunk_length(first, count)), (16, 16),
            (a, b, np.int32(m), np.int32(n), np.int32(k), np.int32(first), segments),
        )  # fmt: skip
    return _segment_totals(segments, m, n)


def chunks_threads(t: int) -> int:
    """Threads a block of ``ordered_chunks_<t>``: a 4 x 4 block of outputs each, per chunk."""
    return CHUNKS_SHAPES[t][0] * t * t // 16


def chunks_shared_bytes(t: int, transposed: bool) -> int:
    """Dynamic shared memory of ``ordered_chunks_<t>`` (its ChunksLayout): its stages of A and
    B, and a float32 chunk sum per group and output."""
    groups, stages = CHUNKS_SHAPES[t]
    stage = groups * ordered.CHUNK
    a_floats = stage * t if transposed else t * (stage + 4)
    return 4 * (stages * (a_floats + stage * t) + groups * t * (t + 1))


def _segment_totals(segments: cp.ndarray, m: int, n: int) -> cp.ndarray:
    """Each entry's segment totals added in segment order, rounded once (16-byte copies where
    the entry count is even: every segment's entries then start 16-byte aligned)."""
    c = cp.empty((m, n), dtype=cp.float32)
    vec = "_vec" if m * n % 2 == 0 else ""
    _kernel(f"ordered_segment_totals{vec}")(
        (-(-(m * n) // TOTALS_WIDTH),),
        (TOTALS_THREADS,),
        (segments, np.int32(len(segments)), np.int64(m * n), c),
    )
    return c


ROWS_MIN_M = 2048  # tall: enough rows to fill the GPU with one thread per row and column group

ROWS_MAX_N = 128  # ... and few enough columns that A is read from DRAM once (then from L2)


def ordered_rows_product(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """Level fp32-ordered for one tall product (the ``ordered_rows`` kernels): one thread per
    row of A and group of 4, 8 or 16 columns of B (the fewest that cover n); A's tiles in
    16-byte copies where k is a multiple of 4 (the rows then stay aligned)."""
    a, b = c_contiguous(a), c_contiguous(b)
    m, k = a.shape
    n = b.shape[1]
    group = _column_group(n, ROWS_MAX_GROUP)
    vec = vector_suffix((a,), (k,))
    c = cp.empty((m, n), dtype=cp.float32)
    _kernel(f"ordered_rows_{group}{_segmented(k)}{vec}")(
        (-(-n // group), min(-(-m // ROWS_THREADS), MAX_GRID_YZ)), (ROWS_THREADS,),
        (a, b, np.int32(m), np.int32(n), np.int32(k), c),
    )  # fmt: skip
    return c


def thin_shared_bytes(k: int, group: int, vec: bool) -> int:
    """Dynamic shared memory of ``ordered_thin_<group>`` for k: B, the stages of A's rows (each row
    k floats padded to an odd count of floats, or of float4s where read 16 bytes at a time:
    ``thin_stride``) and the staged outputs."""
    stride = 4 * ((k // 4) | 1) if vec else k | 1
    return 4 * (
        ordered.CHUNK * group + (THIN_STAGES * stride + 4 * ((group // 4) | 1)) * THIN_THREADS
    )


def _column_group(n: int, most: int) -> int:
    """The columns a thread of the tall (``most``: ROWS_MAX_GROUP) or thin (THIN_MAX_N) kernels
    sums: the least of 4, 8, 16, 32 covering n, at most ``most``."""
    return min(4 if n <= 4 else 8 if n <= 8 else 16 if n <= 16 else 32, most)


def thin_fits(k: int, n: int) -> bool:
    """Whether a block of the current GPU may have the thin kernel's shared memory for k and n,
    with either copy width (at most 59392 bytes, at k = n = 32: a T4's 64 KiB is enough since
    the kernel went down to two stages): where it may not, ``ordered_product`` takes the tall
    kernel and "auto" cuBLAS."""
    shared = max(thin_shared_bytes(k, _column_group(n, THIN_MAX_N), vec) for vec in (False, True))
    return launch.shared_fits(shared, cp.cuda.Device().id)


def ordered_thin_product(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """Level fp32-ordered for one tall product with k <= CHUNK and n <= THIN_MAX_N (TSM2L's
    shape; the ``ordered_thin`` kernels): one thread per row of A, B in shared memory, as many
    blocks as run at once, each with THIN_STAGES - 1 tiles of rows on their way while it sums
    one (16-byte copies where k is a multiple of 4 and A is aligned)."""
    a, b = c_contiguous(a), c_contiguous(b)
    m, k = a.shape
    n = b.shape[1]
    group, vec = _column_group(n, THIN_MAX_N), vector_suffix((a,), (k,))
    device = cp.cuda.Device().id
    shared = thin_shared_bytes(k, group, bool(vec))
    launch.refuse_unless_shared_fits("ordered_thin", shared, device)
    kernel = _kernel(f"ordered_thin_{group}{vec}")
    c = cp.empty((m, n), dtype=cp.float32)
    resident = launch.resident_blocks(kernel, THIN_THREADS, device, shared)
    kernel(
        (min(-(-m // THIN_THREADS), resident),), (THIN_THREADS,),
        (a, b, np.int64(m), np.int32(n), np.int32(k), c), shared_mem=shared,
    )  # fmt: skip
    return c

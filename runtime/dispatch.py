"""``matmul``: validates one product, routes it to a backend and resolves "auto" there.

The backends (``cpu``, ``cuda``) each take ``matmul(a, b, level)`` with a concrete level; this
module decides which one runs and, for the "auto" policy, which level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal

import numpy as np

from . import batched, blocks, cpu, dask_products, device, equilibrate, ordered, pack_reuse
from .levels import NATIVE_LEVEL, Level, get_level
from .ordered_kernels import THIN_MAX_N
from .precision import get_default_level
from .validation import check_operand, check_pair

Backend = Literal["auto", "cpu", "cuda"]
BACKENDS: tuple[Backend, ...] = ("auto", "cpu", "cuda")
DASK = "dask"  # the backend route reports for Dask operands: each chunk picks its own

# NumPy operands go to the GPU only when the product is large enough to repay the copies.
OFFLOAD_MIN_FLOPS = 2 * 512**3
# level="auto" on the GPU: float32-grade emulation (level IV) only where it beats cuBLAS SGEMM.
# Calibrated from benchmarks/results/<gpu>/gemm.json: INT8 GEMMs with a small dimension run far
# below peak, and packing reads every input once, so skinny and small shapes stay native.
AUTO_EMULATED = "IV"
AUTO_MIN_DIM = 3072  # H100: IV ran at 1.0x SGEMM at n = 2048 and at 2.1x at n = 4096
# ... or every dimension at least AUTO_LARGE_MIN_DIM and at least AUTO_LARGE_MIN_WORK
# multiply-adds. H100, against SGEMM over two to five processes each (the INT8 algorithm is
# chosen per process, and some processes run IV a third slower throughout): level IV 1.40-2.0x
# and "auto" 1.24-1.79x at 16384 x 2048 x 2048, IV 2.17-2.21x and "auto" 2.16-2.19x at 2048 x
# 16384 x 2048, IV 2.33-2.37x at 8192 x 2048 x 8192, 2.03-2.05x at 2048 x 2048 x 16384. With
# 32 x 1024^3 multiply-adds "auto" fell to 0.90x in a slow process (8192 x 2048 x 2048; IV
# 1.07-1.85x), and IV ran 0.52-1.40x at 16 x 1024^3 (2048 x 2048 x 4096 and its turns).
# 1024 a side stays native: IV ran 0.40-0.81x at 16384-65536 x 1024 x 1024 while its GEMMs went
# in blocks of 4096 rows, 1.14x / 1.59x in one process since (workspace.gemm_row_block): not yet
# measured across processes.
AUTO_LARGE_MIN_DIM = 2048
AUTO_LARGE_MIN_WORK = 64 * 1024**3
# ... and for stacks (benchmarks/results/<gpu>/batched.md, against cuBLAS strided-batched
# SGEMM): level IV where each pair passes the 2-D rule (H100: 1.8x at 16 x 4096^3) or the
# stack rule below; fp32-ordered's small-stack kernel for pairs of at most 16 x 16 x 16 (1.3-2.3x
# at 4096 x 16^3), and its small-stack or pairs kernel for pairs of at most 32 x 32 x 32 where
# it copies 16 bytes at a time (k and n multiples of 4; H100, GPU time of 512 and 4096 pairs of
# each of m, n in {8, 17, 32}, k in {8, 20, 32}: 1.02-1.64x; with n = 17's 4-byte copies
# 0.71-0.98x). Its 64 x 64 kernel stays below cuBLAS (0.72-0.92x at 33-64 a side).
AUTO_ORDERED_MAX_DIM = 16
AUTO_PAIRS_MAX_DIM = 32
AUTO_SMALL = "fp32-ordered"
# ... and level IV for stacks of pairs of at least 1024 a side that hold at least 32 x 1024^3
# multiply-adds together (H100, best of three medians against cuBLAS strided-batched SGEMM: 1.17x
# at 32 x 1024^3, 1.21x at 64 x 1024^3, 1.47x at 64 x 1024x2048x1024, 1.68-1.95x at 4-16 x
# 2048^3; 1.03x at 16 x 1024^3 left out; 0.64x at 256 x 512^3, 0.32x at 1024 x 256^3).
AUTO_STACK_MIN_DIM = 1024
AUTO_STACK_MIN_WORK = 32 * 1024**3
# ... and for one thin product with a very long k (TSM2X's long-k case), fp32-ordered's split-k
# kernel for outputs of at most 32 a side (ordered_chunks). H100, calls back to back against
# cuBLAS SGEMM, after the totals kernel's rework (two runs each): 1.42-2.15x at k = 196608 for
# m x n in 1x1, 4x4, 8x8, 24x24, 32x8, 32x32, 1.8-2.5x at k = 229376, 1.35-2.54x at 262144 for
# 2x2 .. 32x32 and 3x17; at k = 131072 1.4-1.65x for most but 1.01-1.04x at 2x2, 0.89-0.99x at
# 3x17 and 0.98-1.52x at 4x4 (host-bound: ~25-40 us of Python and launches a call against
# cuBLAS's 38). Earlier, 0.7-0.9x at k = 65536. Matrix-vector shapes (exactly one of m and n
# is 1) stay with cuBLAS's own kernels, 17-27 us at every k measured: split-k 0.50-0.74x at 1 x
# k x {8, 16, 32} and {16, 32} x k x 1, k = 131072 and 262144 (1 x k x 1 is no such kernel's:
# 1.3-2.8x).
AUTO_SPLIT_MAX_MN = 32  # m and n at most this ...
AUTO_SPLIT_MIN_K = 196608  # ... and k at least this, unless a matrix-vector product
# ... and for one tall product with few columns (TSM2R's case), fp32-ordered's tall kernel
# (H100, skinny.md and a probe in the same session: 1.3x SGEMM at 65536 x 4096 x 16 and at
# 262144 x 1024 x 16, 1.5x at 65536 x 4096 x 8 and 65536 x 2048 x 16; 0.98x at
# 1048576 x 512 x 16, where each block's slabs of B weigh more against a short k, and 0.5-0.7x
# at n = 32, where A is read once per 16 columns). The rows must fill the GPU: one thread per
# row, 128 a block, ~4 blocks per SM.
AUTO_TALL_MIN_M = 65536
AUTO_TALL_MAX_N = 16
AUTO_TALL_MIN_K = 1024
# ... and for one product with many rows and k and n within a chunk (TSM2L's case), its thin
# kernel: with k n at most AUTO_THIN_MAX_KN from AUTO_THIN_MIN_M rows, any such k and n from
# AUTO_THIN_WIDE_MIN_M. H100, same-run probe against SGEMM (k x n in 1x16 .. 32x32, 7x5, 20x9,
# 8x32, 4x32): 1.17-1.46x at 2^17 rows (but 0.88x at 32x32), 0.99-2.15x at 2^18 (but 0.93x at
# 24x24), 0.99-2.23x at 2^19 (0.99x at 8x32), 1.07-2.9x at 2^20 (1.19x at 32x32, 1.16x at 24x24)
# and 1.03-3.9x at 2^22; skinny.md has 1048576 x 16 x 16.
AUTO_THIN_MIN_M = 1 << 17
AUTO_THIN_MAX_KN = 256
AUTO_THIN_WIDE_MIN_M = 1 << 20
# ... and, before those, for one tall product with few columns, a long k and rows enough to fill
# the GPU, level IV-blocks (its kernel slices A in registers as it streams it; H100, same-run
# probes against SGEMM: 1.45-1.74x at 65536 x 4096 x {8..32}, 1.38-1.86x at 262144 x 1024 x
# {8..32}, 1.08-1.4x at 16384 x 16384 x {8..32} and 1.25x there at n = 48 and 64; but 1.04x at
# 65536 x 4096 x 64, 0.84-0.91x at 65536 x 1024 x {16..64}, 0.87-0.89x at 1048576 x 512 x 32,
# and 0.4x at 4096 x 65536 x 64, where 64 row tiles leave most SMs idle. After BLOCKS_SHAPES
# gave n <= 32 more blocks an SM, k = 512 stays mixed as "auto" would call it: 1.02-1.15x at
# 1048576 x 512 x {16, 32}, 0.91-0.95x at 2^18 .. 2^21 x 512 x 32, 0.93x at k = 256).
AUTO_BLOCKS = blocks.LEVEL
AUTO_BLOCKS_MIN_M = 16384
AUTO_BLOCKS_MIN_K = 1024
AUTO_BLOCKS_MIN_MK = 1 << 28  # A of at least 1 GiB
AUTO_BLOCKS_MAX_N = 32
AUTO_BLOCKS_WIDE_MIN_K = 16384  # ... n up to AUTO_BLOCKS_WIDE_MAX_N where k is at least this
AUTO_BLOCKS_WIDE_MAX_N = 64
# ... but n from AUTO_BLOCKS_FEW_ROWS_MAX_N + 1 to AUTO_BLOCKS_MAX_N (4 n-tiles a block, 3
# blocks an SM) only from AUTO_BLOCKS_FILL_M rows: 16384 rows are 256 row tiles, 65% of the
# blocks an H100 runs at once. Same-run probes, GPU time (and a call's wall time with a sync
# after it, as in a loop whose other work synchronises, e.g. subspace's QR): H200, 16384 x
# 16384 x 24 556 us against SGEMM's 519 (639 / 542), x 32 540 / 517 (618 / 536), 16384 x
# 65536 x 32 2059 / 2031; H100, 16384^2 x 32 525-528 / 541-542; but 32768 x 8192 x 32 447 /
# 488 and 65536 x 4096 x 32 446 / 749 (H200), and n = 16 at 16384^2 415 / 517. (n = 33..64 at
# k >= AUTO_BLOCKS_WIDE_MIN_K stays: 8 n-tiles a block, one an SM, so 256 row tiles make two
# near-full rounds; H100 1.24-1.29x at 16384^2 x 64, blocks-flagged-rows.md; H200 1.07-1.10x
# at 16384^2 x 48 and x 64.)
AUTO_BLOCKS_FEW_ROWS_MAX_N = 16
AUTO_BLOCKS_FILL_M = 32768
_FLOAT32 = np.dtype(np.float32)


def matmul(
    a: Any,
    b: Any,
    level: str | Level | None = None,
    backend: Backend = "auto",
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    on_native: Callable[[], None] | None = None,
) -> Any:
    """a @ b at ``level`` (None: the default level, ``precision``; see ``mixpert.matmul`` for
    the contract): 2-D matrices here, vectors and stacks through ``batched``. ``keep``: the
    2-D product's operands whose packs are kept for later products (``pack_reuse``).
    ``on_native`` is called when "auto" resolved to an INT8 level on the GPU but ran cuBLAS
    SGEMM instead (``cuda.int8_product``'s fallback), so records name what ran."""
    level = get_level(get_default_level() if level is None else level)  # names fail first
    if device.is_dask_array(a) or device.is_dask_array(b):  # per chunk, on the chunk's backend
        chunk_backend = "auto" if backend == DASK else backend
        return dask_products.matmul(a, b, lambda x, y: matmul(x, y, level, chunk_backend))
    if getattr(a, "ndim", 2) != 2 or getattr(b, "ndim", 2) != 2:  # vectors and stacks
        check_backend(backend)
        if backend != "cpu":
            routed = _gpu_stack_fast_path(a, b, level)
            if routed is not None:
                return routed
        each = _stack_product(level, backend)
        return batched.matmul(a, b, lambda x, y: matmul(x, y, level, backend), each)
    if level.kind == "policy" and backend == "auto":
        routed = _gpu_auto_fast_path(a, b)
        if routed is not None:
            return routed
    chosen, concrete = route(a, b, level, backend)
    if chosen == "cuda":
        auto = level.kind == "policy"
        return _cuda().matmul(a, b, concrete, keep, native_when_bypassed=auto, on_native=on_native)
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        raise TypeError("backend='cpu' takes NumPy arrays; got a CuPy array (call .get() first)")
    return cpu.matmul(np.asarray(a), np.asarray(b), concrete, keep)


def _stack_product(level: Level, backend: Backend) -> batched.Matmul2D:
    """``batched.matmul``'s ``stack_product``: all pairs of two float32 stacks (s, m, k) and
    (s, k, n) in one call. The backend and "auto" resolve for the stack as ``route`` does for
    one pair; the CUDA stack path, or on the CPU the whole-stack INT8 and in-order products,
    else pair by pair."""

    def product(x: Any, y: Any) -> Any:
        chosen, concrete = route(x, y, level, backend)
        if chosen == "cuda":
            return _cuda().matmul_stack(x, y, concrete)
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            if concrete.kind == "int8":
                return cpu.int8_product_stack(x, y, concrete)
            if concrete.kind == "ordered":
                return ordered.ordered_product(x, y)
        out = np.empty((x.shape[0], x.shape[1], y.shape[2]), dtype=np.float32)
        for i in range(x.shape[0]):  # CuPy stacks here raise route's backend="cpu" error
            out[i] = matmul(x[i], y[i], concrete, backend)
        return out

    return product


def route(a: Any, b: Any, level: str | Level, backend: Backend = "auto") -> tuple[str, Level]:
    """(backend, concrete level) for one product, or for all pairs of two stacks (s, m, k) and
    (s, k, n), after checking the operands and names."""
    requested = get_level(level)  # unknown names fail before anything else
    if getattr(a, "ndim", 2) == 2 and getattr(b, "ndim", 2) == 2:
        check_pair(a, b)
    else:  # two stacks (s, m, k) and (s, k, n): batched.matmul has checked their shapes
        check_operand("a", a, matrix=False)
        check_operand("b", b, matrix=False)
    check_backend(backend)
    if device.is_dask_array(a) or device.is_dask_array(b):
        return DASK, requested  # "auto" resolves per chunk
    chosen = choose_backend(a, b, backend)
    return chosen, resolve_level(requested, a, b, chosen)


def check_backend(backend: Any) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {', '.join(map(repr, BACKENDS))}")


def _gpu_auto_fast_path(a: Any, b: Any) -> Any | None:
    """cuBLAS SGEMM for the small or skinny float32 CuPy products "auto" keeps native, and
    IV-blocks or fp32-ordered where one of their kernels wins (``_blocks_kernel_wins``,
    ``_ordered_kernel_wins``).

    At n = 128 a whole SGEMM call takes ~35 us, so the general path's checks would cost
    10-30%; this one tests just what it needs (same type, 2-D, float32, matching k, small).
    """
    cp = device.cupy_module() if device.is_cupy_array(a) else None
    if cp is None or type(a) is not cp.ndarray or type(b) is not cp.ndarray:
        return None
    if a.ndim != 2 or b.ndim != 2 or a.dtype != np.float32 or b.dtype != np.float32:
        return None
    m, k = a.shape
    k_b, n = b.shape
    if k != k_b or _emulation_wins(m, k, n):
        return None
    if _blocks_kernel_wins(m, k, n):
        return _cuda().matmul(a, b, get_level(AUTO_BLOCKS), native_when_bypassed=True)
    if _ordered_kernel_wins(m, k, n):
        return _cuda().ordered_product(a, b)
    return cp.matmul(a, b)


def _gpu_stack_fast_path(a: Any, b: Any, level: Level) -> Any | None:
    """``cuda.matmul_stack`` straight away for two C-contiguous float32 CuPy stacks of one
    stack shape, (..., m, k) @ (..., k, n): a small stack's kernel takes ~10 us, and the
    general path's broadcasting and reshapes would cost several times that."""
    cp = device.cupy_module() if device.is_cupy_array(a) else None
    if cp is None or type(a) is not cp.ndarray or type(b) is not cp.ndarray:
        return None
    if a.ndim < 3 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        return None
    if a.dtype != _FLOAT32 or b.dtype != _FLOAT32:  # (a dtype object compares fastest)
        return None
    if not (a.flags.c_contiguous and b.flags.c_contiguous) or 0 in a.shape or 0 in b.shape:
        return None
    if a.ndim > 3:  # (each CuPy call costs microseconds: a 3-D stack skips the reshapes)
        m, k = a.shape[-2:]
        c = _gpu_stack_fast_path(a.reshape(-1, m, k), b.reshape(-1, k, b.shape[-1]), level)
        return c.reshape(*a.shape[:-1], b.shape[-1])
    cuda = _cuda()
    concrete = level if level.kind != "policy" else resolve_level(level, a, b, "cuda")
    if concrete.kind == "fp32":  # checked above: what matmul_stack would check again
        return cuda.contiguous_sgemm_stack(a, b)
    if concrete.kind == "ordered":  # (no workspace beyond the result)
        return cuda.ordered_product(a, b)
    return cuda.matmul_stack(a, b, concrete)


@functools.cache
def _cuda() -> ModuleType:
    """The CUDA backend (imported on first use: it needs CuPy). Cached: an import statement
    costs about a microsecond a call, a tenth of a small stack's kernel."""
    from .cuda import backend

    return backend


def _pair_count(a: Any, b: Any) -> int:
    """Products in a @ b: 1 for two matrices, the broadcast stack's size for stacks."""
    return math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))


def _stack_emulation_wins(a: Any, b: Any, m: int, k: int, n: int) -> bool:
    """Whether level IV beats cuBLAS's batched SGEMM on the stack a @ b of m x k x n pairs
    (its pairs at least AUTO_STACK_MIN_DIM a side, AUTO_STACK_MIN_WORK multiply-adds in all,
    two pairs or more: level IV runs one pair as a matrix product, under the 2-D rule)."""
    if min(m, k, n) < AUTO_STACK_MIN_DIM:  # (first: small stacks' calls take ~20 us)
        return False
    pairs = _pair_count(a, b)
    return pairs > 1 and pairs * m * k * n >= AUTO_STACK_MIN_WORK


def _emulation_wins(m: int, k: int, n: int) -> bool:
    """Whether level IV beats cuBLAS SGEMM on one m x k x n product (or on each pair of a
    stack): every dimension at least AUTO_MIN_DIM, or at least AUTO_LARGE_MIN_DIM with
    AUTO_LARGE_MIN_WORK multiply-adds."""
    least = min(m, k, n)
    large = least >= AUTO_LARGE_MIN_DIM and m * k * n >= AUTO_LARGE_MIN_WORK
    return least >= AUTO_MIN_DIM or large


def _emulation_fits(a: Any, b: Any, m: int, k: int, n: int) -> bool:
    """Whether the GPU has room for level AUTO_EMULATED's workspace for a @ b (all pairs of a
    stack at once): where it has not, "auto" runs native float32, which needs none, rather than
    raise MemoryError. (No GPU at hand, as when routing is asked about shapes alone: True.)"""
    if not device.gpu_available():
        return True
    cuda = _cuda()
    level = get_level(AUTO_EMULATED)
    return cuda.workspace_bytes(level, m, k, n, _pair_count(a, b)) <= cuda.free_bytes()


def _small_pairs_kernel_wins(m: int, k: int, n: int) -> bool:
    """Whether fp32-ordered's small-stack or pairs kernel beats cuBLAS's batched SGEMM on a
    stack of m x k x n pairs (the crossovers above)."""
    if max(m, k, n) <= AUTO_ORDERED_MAX_DIM:
        return True
    return max(m, k, n) <= AUTO_PAIRS_MAX_DIM and k % 4 == 0 and n % 4 == 0


def resolve_level(level: str | Level, a: Any, b: Any, backend: str) -> Level:
    """The level a call runs: ``level`` itself, or for "auto" the fastest float32-grade one.

    "auto" means float32-grade at the lowest time: native float32 on the CPU (where emulation
    is the exact oracle, not a speed-up) and on GPU shapes too small or skinny for the INT8
    tensor cores to win; on the GPU, fp32-ordered for stacks of small pairs
    (``_small_pairs_kernel_wins``), level IV for stacks of large ones
    (``_stack_emulation_wins``), and level IV for large products (``_emulation_wins``);
    IV-blocks for one tall product with few columns (``_blocks_kernel_wins``),
    fp32-ordered for one product of the shapes where one of its kernels wins
    (``_ordered_kernel_wins``).
    """
    requested = get_level(level)
    if requested.kind != "policy":
        return requested
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if backend != "cuda":
        return get_level(NATIVE_LEVEL)
    if a.ndim >= 3 and b.ndim >= 3 and _small_pairs_kernel_wins(m, k, n):
        return get_level(AUTO_SMALL)
    stack_wins = a.ndim >= 3 and b.ndim >= 3 and _stack_emulation_wins(a, b, m, k, n)
    if (stack_wins or _emulation_wins(m, k, n)) and _emulation_fits(a, b, m, k, n):
        return get_level(AUTO_EMULATED)
    if a.ndim == 2 and b.ndim == 2 and _blocks_kernel_wins(m, k, n):
        return get_level(AUTO_BLOCKS)
    if a.ndim == 2 and b.ndim == 2 and _ordered_kernel_wins(m, k, n):
        return get_level(AUTO_SMALL)
    return get_level(NATIVE_LEVEL)


def _blocks_kernel_wins(m: int, k: int, n: int) -> bool:
    """Whether one product of this shape runs faster at level IV-blocks than on cuBLAS SGEMM
    on the current GPU: m at least AUTO_BLOCKS_MIN_M, k at least AUTO_BLOCKS_MIN_K, m k at
    least AUTO_BLOCKS_MIN_MK, and n at most AUTO_BLOCKS_MAX_N (AUTO_BLOCKS_WIDE_MAX_N where k
    is at least AUTO_BLOCKS_WIDE_MIN_K), leaving out n past AUTO_BLOCKS_FEW_ROWS_MAX_N up to
    AUTO_BLOCKS_MAX_N below AUTO_BLOCKS_FILL_M rows; never on a GPU without INT8 mma.sync."""
    if m < AUTO_BLOCKS_MIN_M or k < AUTO_BLOCKS_MIN_K or m * k < AUTO_BLOCKS_MIN_MK:
        return False
    if m < AUTO_BLOCKS_FILL_M and AUTO_BLOCKS_FEW_ROWS_MAX_N < n <= AUTO_BLOCKS_MAX_N:
        return False
    narrow = n <= (AUTO_BLOCKS_WIDE_MAX_N if k >= AUTO_BLOCKS_WIDE_MIN_K else AUTO_BLOCKS_MAX_N)
    return n > 0 and narrow and _blocks_supported()


def _blocks_supported() -> bool:
    """Whether the current GPU runs level IV-blocks (compute capability 8.0 or later)."""
    return device.gpu_available() and _cuda().blocks_supported()


def _thin_kernel_fits(k: int, n: int) -> bool:
    """Whether the current GPU's blocks can have fp32-ordered's thin kernel's shared memory."""
    return device.gpu_available() and _cuda().thin_fits(k, n)


def _ordered_kernel_wins(m: int, k: int, n: int) -> bool:
    """Whether one product of this shape runs faster on one of fp32-ordered's kernels than on
    cuBLAS SGEMM: split-k (m and n at most AUTO_SPLIT_MAX_MN and k at least AUTO_SPLIT_MIN_K,
    not a matrix-vector product),
    tall (m at least AUTO_TALL_MIN_M, n at most AUTO_TALL_MAX_N, k at least AUTO_TALL_MIN_K)
    or thin (k within a chunk and n at most THIN_MAX_N; m at least AUTO_THIN_MIN_M with k n at
    most AUTO_THIN_MAX_KN, or at least AUTO_THIN_WIDE_MIN_M; where the GPU's blocks can have
    the thin kernel's shared memory: elsewhere its stand-in was never measured against SGEMM)."""
    if m <= 0 or k <= 0 or n <= 0:
        return False
    matrix_vector = min(m, n) == 1 < max(m, n)
    split_k = max(m, n) <= AUTO_SPLIT_MAX_MN and k >= AUTO_SPLIT_MIN_K and not matrix_vector
    tall = m >= AUTO_TALL_MIN_M and n <= AUTO_TALL_MAX_N and k >= AUTO_TALL_MIN_K
    thin = k <= ordered.CHUNK and n <= THIN_MAX_N
    thin = thin and (
        m >= AUTO_THIN_WIDE_MIN_M or (m >= AUTO_THIN_MIN_M and k * n <= AUTO_THIN_MAX_KN)
    )
    thin = thin and _thin_kernel_fits(k, n)
    return split_k or tall or thin


def choose_backend(a: Any, b: Any, backend: Backend) -> str:
    on_gpu = device.is_cupy_array(a) or device.is_cupy_array(b)
    if backend != "auto":
        if backend == "cuda" and not device.gpu_available():
            raise RuntimeError(f"backend='cuda' asked for, but {device.unavailable_reason()}")
        return backend
    if on_gpu:
        return "cuda"
    m, k = a.shape[-2:]  # a stack's pairs decide one by one (each must repay its copies)
    large = 2 * m * k * b.shape[-1] >= OFFLOAD_MIN_FLOPS
    return "cuda" if large and device.gpu_available() else "cpu"


def rebalanced_k(a: Any, b: Any, level: str | Level) -> int:
    """How many k-indices equilibration moves or drops in this product (0 at native levels):
    what inspection reports as the wide-range lines handled."""
    if get_level(level).kind not in ("int8", "fp16"):  # (the levels that equilibrate)
        return 0
    if device.is_dask_array(a) or device.is_dask_array(b):
        return 0  # Dask: lazy, counted by no one
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        return _cuda().rebalanced_k(a, b)
    a32 = np.asarray(a).astype(np.float32, copy=False)
    return int(np.count_nonzero(equilibrate.k_exponents(a32, np.asarray(b).astype(np.float32))))


def unresolved_lines(a: Any, b: Any, level: str | Level) -> tuple[int, int]:
    """(rows of A, columns of B) this product recomputes exactly because the level's slices
    cannot resolve their range (``bypass``): what inspection reports (the same lines on every
    backend; 0 for Dask operands, which stay lazy)."""
    if device.is_dask_array(a) or device.is_dask_array(b):
        return 0, 0
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        return _cuda().unresolved_lines(a, b, get_level(level))
    return cpu.unresolved_lines(np.asarray(a), np.asarray(b), get_level(level))

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

import functools
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np

from .. import pack_reuse, workspace
from ..combine import int32_k_block
from ..levels import Kind, Level
from .convert import as_float32
from .fp32_ordered import ordered_product, thin_fits  # noqa: F401  (thin_fits: the dispatcher's)
from .launch import free_bytes
from .native import (  # noqa: F401  (contiguous_sgemm_stack: the dispatcher's)
    contiguous_sgemm_stack,
    fp64_product,
    sgemm_stack,
    tf32_product,
)
from .packs import k_exponents, pack_a, pack_b, packable_b, padded, tops_and_exponents, unit_inner
from .sliced import (
    FP16_K_BLOCK,
    fp16_product,
    int8_product,
    int8_product_stack,
    sum_blocking,
    unresolved_counts,
)

_FLOAT32 = np.dtype(np.float32)


def unresolved_lines(a: Any, b: Any, level: Level) -> tuple[int, int]:
    """``cpu.unresolved_lines`` from the pack kernels' own flags (one pack of each operand),
    NaN/Inf lines left out; brings two numbers to the host (level IV-blocks: counted from the
    entries' bits, ``cuda_blocks.unresolved_lines``)."""
    if not level.bypass_wide or 0 in (*a.shape, b.shape[1]):
        return 0, 0
    a, b = as_float32(cp.asarray(a)), as_float32(cp.asarray(b))
    if level.kind == "blocks":
        return _blocks_module().unresolved_lines(a, b, level)
    a_rows, b = unit_inner(a), packable_b(b)
    a_top, b_top, kexp = tops_and_exponents(a_rows, b)  # as int8_product packs them
    packs = pack_a(a_rows, kexp, level, a_top), pack_b(b, kexp, level, b_top)
    return unresolved_counts(a, b, *packs)


def rebalanced_k(a: Any, b: Any) -> int:
    """k-indices ``k_exponents`` moves or drops (brings one number to the host)."""
    f = k_exponents(unit_inner(as_float32(cp.asarray(a))), as_float32(cp.asarray(b)))
    return int(cp.count_nonzero(f[:-1]))


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
    sums = sum_blocking(level, m, k, n, count)[1] if level.kind == "int8" else None
    return workspace.gpu_bytes(level, m, k, n, padded(k), padded(k) > block, count, sums)


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

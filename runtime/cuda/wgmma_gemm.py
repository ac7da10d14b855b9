"""INT8 x INT8 -> INT32 "TN" GEMM on Hopper (sm_90a) through mixpert's hand-written wgmma
kernel ``kernels/wgmma_gemm.cu``, one of ``tn_gemm``'s candidates (chosen where it measures
fastest): C[b][i, j] (+)= sum_{p < depth} A[b][i, p] B[b][j, p] for i < m, j < n, b < batch,
A and B int8 with k contiguous (row strides lda / ldb bytes), C int32 row-major (row stride
ldc elements). TMA loads, a 4-stage shared-memory ring fed by a producer warpgroup, two
consumer warpgroups of m64n256k32 wgmma, a persistent grid (the kernel's header says more).

Built, loaded and launched as ``hopper`` says (NVRTC, TMA tensor maps, ``cuLaunchKernel`` on
CuPy's current stream); sm_90a code runs only on compute capability 9.0: ``available`` says
whether this device can.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from . import hopper
from .hopper import MAX_INT32, MAX_TMA_STRIDE, TMA_ALIGNMENT

SOURCE, KERNEL = "wgmma_gemm.cu", "wgmma_gemm"
# The launch configuration wgmma_gemm.cu is written for (its constants; the kernel traps on a
# block or dynamic smem that differs, rather than deadlock or overrun)
THREADS = 384
SMEM_BYTES = 197_696  # 4 stages x (16 + 32) KB + barriers + 1 KB for aligning the base
BLOCK_M, BLOCK_N = 128, 256  # output tile; the TMA boxes are 128 x BLOCK_M and 128 x BLOCK_N
BLOCK_K = 128  # k bytes per stage: the box's inner dimension, one 128-byte swizzle row
RASTER_GROUP = 16  # tile-rows along m visited together (L2 reuse of B)
MAP_CACHE = 4096  # tensor maps kept (a few hundred bytes each)


class _Args(ctypes.Structure):
    """The kernel's scalar parameters, after its two tensor maps, in its order."""

    _fields_ = [
        ("c", ctypes.c_uint64),
        ("ldc", ctypes.c_int64),
        ("stride_c", ctypes.c_int64),
        ("m", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("depth", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("accumulate", ctypes.c_int32),
        ("raster_group", ctypes.c_int32),
    ]


def available() -> bool:
    """Whether the current device is compute capability 9.0 and the kernel builds and loads."""
    return hopper.available(SOURCE, KERNEL, SMEM_BYTES)


def serves(
    m: int, n: int, depth: int, a_ptr: int, lda: int, b_ptr: int, ldb: int, c_ptr: int,
    batch: int = 1, stride_a: int = 0, stride_b: int = 0, stride_c: int = 0,
) -> bool:  # fmt: skip
    """Whether ``gemm`` takes this GEMM (C's row stride n) on the current device."""
    try:
        _validate(m, n, depth, a_ptr, lda, b_ptr, ldb, c_ptr, n, batch, stride_a, stride_b,
                  stride_c)  # fmt: skip
    except ValueError:
        return False
    return available()


def gemm(
    m: int,
    n: int,
    depth: int,
    a_ptr: int,
    lda: int,
    b_ptr: int,
    ldb: int,
    c_ptr: int,
    ldc: int,
    accumulate: bool,
    batch: int = 1,
    stride_a: int = 0,
    stride_b: int = 0,
    stride_c: int = 0,
    stream: Any = None,
) -> None:
    """C = A B^T (+ C when ``accumulate``) over ``depth``, for ``batch`` problems, on
    ``stream`` (a CuPy stream or a raw handle; CuPy's current stream when None).

    lda, ldb, stride_a, stride_b in bytes; ldc, stride_c in elements. ValueError on a shape,
    stride or alignment the kernel cannot take."""
    _validate(m, n, depth, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, batch, stride_a, stride_b, stride_c)
    import cupy as cp

    kernel = hopper.kernel(SOURCE, KERNEL, SMEM_BYTES, cp.cuda.runtime.getDevice())
    # batch 1: the map's batch stride is never stepped; any valid value does
    map_a = _tensor_map(a_ptr, depth, m, lda, batch, stride_a if batch > 1 else m * lda, BLOCK_M)
    map_b = _tensor_map(b_ptr, depth, n, ldb, batch, stride_b if batch > 1 else n * ldb, BLOCK_N)
    tiles = batch * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    args = _Args(c_ptr, ldc, stride_c if batch > 1 else 0, m, n, depth, batch,
                 int(bool(accumulate)), RASTER_GROUP)  # fmt: skip
    if stream is None:
        handle = cp.cuda.get_current_stream().ptr
    else:
        handle = stream if isinstance(stream, int) else stream.ptr
    hopper.launch(kernel, tiles, THREADS, (map_a, map_b), args, handle)


def _validate(
    m: int, n: int, depth: int, a_ptr: int, lda: int, b_ptr: int, ldb: int, c_ptr: int,
    ldc: int, batch: int, stride_a: int, stride_b: int, stride_c: int,
) -> None:  # fmt: skip
    def need(ok: bool, name: str, value: int, rule: str) -> None:
        if not ok:
            raise ValueError(f"wgmma_gemm: {name} = {value}: {rule}")

    for name, value in (("m", m), ("n", n), ("batch", batch)):
        need(0 < value <= MAX_INT32, name, value, "must be positive and fit in int32")
    need(0 < depth <= MAX_INT32 and depth % 16 == 0, "depth", depth,
         "must be a positive multiple of 16")  # fmt: skip
    for name, ptr in (("a_ptr", a_ptr), ("b_ptr", b_ptr)):
        need(ptr > 0 and ptr % TMA_ALIGNMENT == 0, name, ptr,
             f"must be a nonzero multiple of {TMA_ALIGNMENT} (TMA base address)")  # fmt: skip
    for name, ld in (("lda", lda), ("ldb", ldb)):
        need(depth <= ld < MAX_TMA_STRIDE and ld % TMA_ALIGNMENT == 0, name, ld,
             f"must be >= depth ({depth}), a multiple of {TMA_ALIGNMENT} and < 2^40")  # fmt: skip
    need(c_ptr > 0 and c_ptr % 4 == 0, "c_ptr", c_ptr, "must be a nonzero multiple of 4 (int32)")
    need(ldc >= n, "ldc", ldc, f"must be >= n ({n})")
    tiles = batch * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    need(tiles <= MAX_INT32, "batch", batch, f"gives {tiles} output tiles, more than int32 holds")
    if batch > 1:
        for name, stride in (("stride_a", stride_a), ("stride_b", stride_b)):
            rule = f"must be a positive multiple of {TMA_ALIGNMENT} and < 2^40 when batch > 1"
            need(0 < stride < MAX_TMA_STRIDE and stride % TMA_ALIGNMENT == 0, name, stride, rule)
        # problems whose outputs overlap would race
        window = (m - 1) * ldc + n
        rule = f"must be >= (m - 1) * ldc + n = {window} when batch > 1 (outputs must not overlap)"
        need(stride_c >= window, "stride_c", stride_c, rule)


@functools.lru_cache(maxsize=MAP_CACHE)
def _tensor_map(ptr: int, depth: int, rows: int, ld: int, batch: int, stride: int, box: int) -> Any:
    """The TMA map of ``batch`` problems of ``rows`` x ``depth`` int8 (row stride ``ld``, batch
    stride ``stride`` bytes): boxes of 128 B x ``box`` rows x 1, zeros past depth or rows."""
    return hopper.int8_tensor_map(ptr, (depth, rows, batch), (ld, stride), (BLOCK_K, box, 1))

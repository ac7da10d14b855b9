"""INT8 x INT8 -> INT32 "TN" GEMM on Hopper (sm_90a) through mixpert's hand-written wgmma
kernel ``kernels/wgmma_gemm.cu``, one of ``tn_gemm``'s candidates (chosen where it measures
fastest): C[b][i, j] (+)= sum_{p < depth} A[b][i, p] B[b][j, p] for i < m, j < n, b < batch,
A and B int8 with k contiguous (row strides lda / ldb bytes), C int32 row-major (row stride
ldc elements). TMA loads, a 4-stage shared-memory ring fed by a producer warpgroup, two
consumer warpgroups of m64n256k32 wgmma, a persistent grid (the kernel's header says more).

The kernel takes its operands as TMA tensor maps (``cuTensorMapEncodeTiled``: host-only,
microseconds), passed by value as ``__grid_constant__`` parameters; CuPy's RawKernel cannot
pass a 128-byte struct by value, so the module is built with NVRTC and launched with
``cuLaunchKernel`` through cuda-bindings, on CuPy's current stream (capturable in a graph).
sm_90a code runs only on compute capability 9.0: ``available`` says whether this device can.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any, NamedTuple

SOURCE = Path(__file__).resolve().parent / "kernels" / "wgmma_gemm.cu"
KERNEL = b"wgmma_gemm"
OPTIONS = (b"--gpu-architecture=sm_90a", b"-std=c++17")
# The launch configuration wgmma_gemm.cu is written for (its constants; the kernel traps on a
# block or dynamic smem that differs, rather than deadlock or overrun)
THREADS = 384
SMEM_BYTES = 197_696  # 4 stages x (16 + 32) KB + barriers + 1 KB for aligning the base
BLOCK_M, BLOCK_N = 128, 256  # output tile; the TMA boxes are 128 x BLOCK_M and 128 x BLOCK_N
BLOCK_K = 128  # k bytes per stage: the box's inner dimension, one 128-byte swizzle row
RASTER_GROUP = 16  # tile-rows along m visited together (L2 reuse of B)
TMA_ALIGNMENT = 16  # bytes: TMA base addresses and strides
MAX_TMA_STRIDE = 1 << 40
MAX_INT32 = (1 << 31) - 1
MAP_CACHE = 4096  # tensor maps kept (a few hundred bytes each)


class _Kernel(NamedTuple):
    function: Any  # CUfunction, in the device's primary context
    sms: int


class _Args(ctypes.Structure):
    """The kernel's scalar parameters, one block: the parameter array points into it."""

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


_SCALARS = [name for name, _ in _Args._fields_]  # in the kernel's parameter order


def available() -> bool:
    """Whether the current device is compute capability 9.0 and the kernel builds and loads."""
    try:
        import cupy as cp

        return _available(cp.cuda.runtime.getDevice())
    except Exception:  # no CuPy, no device, no cuda-bindings: not available
        return False


@functools.cache
def _available(device: int) -> bool:
    import cupy as cp

    if cp.cuda.Device(device).compute_capability != "90":
        return False
    try:
        _kernel(device)
    except Exception:  # NVRTC missing or too old for sm_90a, a driver that refuses the cubin
        return False
    return True


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
    from cuda.bindings import driver as cu

    kernel = _kernel(cp.cuda.runtime.getDevice())
    # batch 1: the map's batch stride is never stepped; any valid value does
    map_a = _tensor_map(a_ptr, depth, m, lda, batch, stride_a if batch > 1 else m * lda, BLOCK_M)
    map_b = _tensor_map(b_ptr, depth, n, ldb, batch, stride_b if batch > 1 else n * ldb, BLOCK_N)
    tiles = batch * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    args = _Args(c_ptr, ldc, stride_c if batch > 1 else 0, m, n, depth, batch,
                 int(bool(accumulate)), RASTER_GROUP)  # fmt: skip
    base = ctypes.addressof(args)
    params = (ctypes.c_void_p * (2 + len(_SCALARS)))(
        map_a.getPtr(), map_b.getPtr(), *(base + getattr(_Args, f).offset for f in _SCALARS)
    )
    if stream is None:
        handle = cp.cuda.get_current_stream().ptr
    else:
        handle = stream if isinstance(stream, int) else stream.ptr
    # the driver copies the parameters at the call (and into the node under capture):
    # args and params need to live only until it returns
    _check(cu.cuLaunchKernel(
        kernel.function, min(kernel.sms, tiles), 1, 1, THREADS, 1, 1, SMEM_BYTES,
        cu.CUstream(handle), ctypes.addressof(params), 0,
    ), "cuLaunchKernel(wgmma_gemm)")  # fmt: skip


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
    """3-D TMA map of ``batch`` problems of ``rows`` x ``depth`` int8 (row stride ``ld``, batch
    stride ``stride`` bytes): box 128 B x ``box`` rows x 1, 128-byte swizzle (the wgmma
    descriptors' layout); boxes past depth or rows fill with zeros (OOB_FILL_NONE)."""
    from cuda.bindings import driver as cu

    u64, u32 = cu.cuuint64_t, cu.cuuint32_t  # (cuda-bindings 13 refuses plain ints here)
    return _check(cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,  # int8 bits, copied verbatim
        3,
        ptr,
        [u64(depth), u64(rows), u64(batch)],  # innermost first
        [u64(ld), u64(stride)],  # bytes, dims 1 and 2
        [u32(BLOCK_K), u32(box), u32(1)],
        [u32(1), u32(1), u32(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ), "cuTensorMapEncodeTiled")  # fmt: skip


@functools.cache
def _kernel(device: int) -> _Kernel:
    """The kernel loaded into ``device``'s primary context (CuPy's), its smem limit raised."""
    import numpy as np
    from cuda.bindings import driver as cu

    image = np.frombuffer(_cubin(), dtype=np.uint8)
    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(device), "cuDeviceGet")
    context = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    # the module belongs to the context current at the load: make it the primary one, which
    # CuPy's runtime calls use, and give back whatever was current
    _check(cu.cuCtxPushCurrent(context), "cuCtxPushCurrent")
    try:
        module = _check(cu.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
        function = _check(cu.cuModuleGetFunction(module, KERNEL), "cuModuleGetFunction")
        _check(cu.cuFuncSetAttribute(
            function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            SMEM_BYTES,
        ), "cuFuncSetAttribute")  # fmt: skip
        sms = _check(cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev
        ), "cuDeviceGetAttribute")  # fmt: skip
    finally:
        _check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")
    return _Kernel(function, int(sms))


@functools.cache
def _cubin() -> bytes:
    """``wgmma_gemm.cu`` compiled by NVRTC to sm_90a SASS (once a process: one cubin serves
    every sm_90 device)."""
    from cuda.bindings import nvrtc

    program = _nvrtc(nvrtc.nvrtcCreateProgram(SOURCE.read_bytes(), b"wgmma_gemm.cu", 0, [], []))
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(OPTIONS), list(OPTIONS))
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = _nvrtc(nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            _nvrtc(nvrtc.nvrtcGetProgramLog(program, log))
            raise RuntimeError(f"NVRTC failed on wgmma_gemm.cu:\n{log.decode(errors='replace')}")
        size = _nvrtc(nvrtc.nvrtcGetCUBINSize(program))
        cubin = b" " * size
        _nvrtc(nvrtc.nvrtcGetCUBIN(program, cubin))
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return cubin


def _nvrtc(result: tuple[Any, ...]) -> Any:
    from cuda.bindings import nvrtc

    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC call failed: {result[0]!r}")
    values = result[1:]
    return values[0] if len(values) == 1 else values


def _check(result: Any, what: str) -> Any:
    """cuda-bindings returns (CUresult, *values): raise on an error, else the value(s)."""
    from cuda.bindings import driver as cu

    if not isinstance(result, tuple):
        result = (result,)
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        name = cu.cuGetErrorName(result[0])
        text = name[1].decode() if name[0] == cu.CUresult.CUDA_SUCCESS else repr(result[0])
        raise RuntimeError(f"{what} failed: {text}")
    values = result[1:]
    return values[0] if len(values) == 1 else (values or None)

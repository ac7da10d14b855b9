"""The fused level-IV INT8 product on Hopper (sm_90a) through the hand-written kernel
``fused_iv.cu``: the same contract and bits as ``mixpert.runtime.cuda.fused.product`` (the
Triton kernel) for level IV: every slice product on wgmma, the four INT32 class sums in
registers, ``combine``'s formula in the epilogue, float32 C.

The machinery is ``wgmma_gemm.py``'s: NVRTC build once a process, ``cuModuleLoadData`` once a
device (its primary context, CuPy's), TMA tensor maps from ``cuTensorMapEncodeTiled`` passed
by value as ``__grid_constant__`` parameters, ``cuLaunchKernel`` on CuPy's current stream
(capturable in a graph). sm_90a code runs only on compute capability 9.0.

Tensor maps: one per pack, 3-D {k_pad, slots, lines} (innermost first), strides
{k_pad, ld} bytes, box {128, 1, rows}, 128-byte swizzle, zero fill: each TMA box is one slot's
128-byte k-block of ``rows`` lines, zeros past k_pad (not the next slot's digits).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any, NamedTuple

SOURCE = Path(__file__).resolve().parent / "fused_iv.cu"
KERNEL = b"fused_iv"
OPTIONS = (b"--gpu-architecture=sm_90a", b"-std=c++17")
# The launch configuration fused_iv.cu is written for (its constants; the kernel traps on a
# block or dynamic smem that differs, rather than deadlock or overrun)
THREADS = 384
SMEM_BYTES = 222_256  # 3 stages x (48 + 24) KB + barriers + 1 KB for aligning the base
BLOCK_M, BLOCK_N = 128, 64  # output tile; TMA boxes of 128 B x 1 slot x BLOCK_M | BLOCK_N lines
BLOCK_K = 128  # k bytes per stage: the box's inner dimension, one 128-byte swizzle row
SLICES = 3  # level IV: 3 slices of A and of B, 3 slots a line
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
        ("a_exp", ctypes.c_uint64),
        ("b_exp", ctypes.c_uint64),
        ("c", ctypes.c_uint64),
        ("k_slack", ctypes.c_double),
        ("m", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("k_pad", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("w0", ctypes.c_int32),
        ("step", ctypes.c_int32),
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


def product(a_pack: Any, b_pack: Any, level: Any, c: Any) -> None:
    """C (s, m, n) from the packs of two stacks of s pairs (s = 1: two matrices), as
    ``fused.product``: every entry gets ``combine``'s value, flagged lines included (``sliced``'s
    bypass overwrites those). Level IV only. ValueError on anything the kernel cannot take."""
    import cupy as cp
    import numpy as np
    from cuda.bindings import driver as cu

    from mixpert.runtime.combine import int32_k_block, overflow_slack
    from mixpert.runtime.packer import pair_exponent

    count, m, n = _validate(a_pack, b_pack, level, c)
    if count == 0 or m == 0 or n == 0:
        return
    k_pad = a_pack.k_pad
    kernel = _kernel(cp.cuda.runtime.getDevice())
    if k_pad > int32_k_block(level):
        raise ValueError(f"fused_iv: k_pad = {k_pad}: must be <= combine.int32_k_block(level) = "
                         f"{int32_k_block(level)} (class sums must stay in INT32)")  # fmt: skip
    map_a = _tensor_map(a_pack.data.data.ptr, k_pad, count * m, BLOCK_M)
    map_b = _tensor_map(b_pack.data.data.ptr, k_pad, count * n, BLOCK_N)
    w0 = pair_exponent(0)
    step = pair_exponent(1) - pair_exponent(0)
    slack = float(np.float64(k_pad * overflow_slack(level)))  # fused.product's k_slack
    args = _Args(a_pack.exponents.data.ptr, b_pack.exponents.data.ptr, c.data.ptr, slack, m, n,
                 k_pad, count, w0, step, RASTER_GROUP)  # fmt: skip
    base = ctypes.addressof(args)
    params = (ctypes.c_void_p * (2 + len(_SCALARS)))(
        map_a.getPtr(), map_b.getPtr(), *(base + getattr(_Args, f).offset for f in _SCALARS)
    )
    tiles = count * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    handle = cp.cuda.get_current_stream().ptr
    # the driver copies the parameters at the call (and into the node under capture):
    # args and params need to live only until it returns
    _check(cu.cuLaunchKernel(
        kernel.function, min(kernel.sms, tiles), 1, 1, THREADS, 1, 1, SMEM_BYTES,
        cu.CUstream(handle), ctypes.addressof(params), 0,
    ), "cuLaunchKernel(fused_iv)")  # fmt: skip


def _is_level_iv(level: Any) -> bool:
    from mixpert.runtime.levels import triangle

    return (
        getattr(level, "kind", None) == "int8"
        and level.a_slices == SLICES
        and level.b_slices == SLICES
        and tuple(level.pairs) == triangle(SLICES, SLICES, 3)
    )


def _validate(a_pack: Any, b_pack: Any, level: Any, c: Any) -> tuple[int, int, int]:
    """(count, m, n) of C, or ValueError naming the rule broken."""
    import cupy as cp

    def need(ok: bool, what: str, rule: str) -> None:
        if not ok:
            raise ValueError(f"fused_iv: {what}: {rule}")

    need(_is_level_iv(level), f"level {getattr(level, 'name', level)!r}",
         "only level IV is implemented (INT8, 3 x 3 slices, pairs i + j <= 3)")  # fmt: skip
    need(c.ndim == 3 and c.dtype == cp.float32 and c.flags.c_contiguous, f"c {c.shape} {c.dtype}",
         "must be a C-contiguous float32 (s, m, n) array")  # fmt: skip
    count, m, n = c.shape
    need(count * max(m, n) + BLOCK_M <= MAX_INT32, f"c {c.shape}",
         "s * m and s * n (+ one tile) must fit in int32 (TMA line coordinates)")  # fmt: skip
    tiles = count * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    need(tiles <= MAX_INT32, f"c {c.shape}", f"gives {tiles} output tiles, more than int32 holds")
    need(c.data.ptr % 4 == 0, "c's pointer", "must be 4-byte aligned")
    for name, pack, lines in (("a_pack", a_pack, count * m), ("b_pack", b_pack, count * n)):
        data = pack.data
        need(data.dtype == cp.int8 and data.ndim == 3 and data.flags.c_contiguous,
             f"{name}.data {data.shape} {data.dtype}",
             "must be a C-contiguous int8 (lines, slots, k_pad) array")  # fmt: skip
        need(pack.slots == SLICES and data.shape[1] == SLICES, f"{name}.slots = {pack.slots}",
             f"must be {SLICES} (level IV's slices)")  # fmt: skip
        need(data.shape[0] >= lines, f"{name} lines = {data.shape[0]}",
             f"must be >= {lines} (the stack's lines)")  # fmt: skip
        need(data.shape[2] == pack.k_pad, f"{name}.k_pad = {pack.k_pad}",
             f"must equal data.shape[2] = {data.shape[2]}")  # fmt: skip
        need(pack.k_pad > 0 and pack.k_pad % TMA_ALIGNMENT == 0, f"{name}.k_pad = {pack.k_pad}",
             f"must be a positive multiple of {TMA_ALIGNMENT} (TMA strides)")  # fmt: skip
        need(pack.ld < MAX_TMA_STRIDE, f"{name}.ld = {pack.ld}", "must be < 2^40")
        need(data.data.ptr % TMA_ALIGNMENT == 0, f"{name}.data pointer",
             f"must be a multiple of {TMA_ALIGNMENT} (TMA base address)")  # fmt: skip
        exps = pack.exponents
        need(exps.dtype == cp.int32 and exps.ndim == 1 and exps.shape[0] >= lines
             and exps.flags.c_contiguous, f"{name}.exponents {exps.shape} {exps.dtype}",
             f"must be a contiguous int32 vector of >= {lines} entries")  # fmt: skip
    need(a_pack.k_pad == b_pack.k_pad, f"k_pad {a_pack.k_pad} / {b_pack.k_pad}",
         "A's and B's packs must have the same k_pad")  # fmt: skip
    return count, m, n


@functools.lru_cache(maxsize=MAP_CACHE)
def _tensor_map(ptr: int, k_pad: int, lines: int, box: int) -> Any:
    """3-D TMA map of a pack of ``lines`` lines of SLICES slots of ``k_pad`` int8: dims
    {k_pad, SLICES, lines}, strides {k_pad, SLICES * k_pad} bytes, box 128 B x 1 slot x
    ``box`` lines, 128-byte swizzle (the wgmma descriptors' layout); box elements past k_pad or
    past the last line read as zeros (OOB_FILL_NONE)."""
    from cuda.bindings import driver as cu

    u64, u32 = cu.cuuint64_t, cu.cuuint32_t  # (cuda-bindings 13 refuses plain ints here)
    return _check(cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,  # int8 bits, copied verbatim
        3,
        ptr,
        [u64(k_pad), u64(SLICES), u64(lines)],  # innermost first
        [u64(k_pad), u64(SLICES * k_pad)],  # bytes, dims 1 and 2
        [u32(BLOCK_K), u32(1), u32(box)],
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
    """``fused_iv.cu`` compiled by NVRTC to sm_90a SASS (once a process)."""
    from cuda.bindings import nvrtc

    program = _nvrtc(nvrtc.nvrtcCreateProgram(SOURCE.read_bytes(), b"fused_iv.cu", 0, [], []))
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(OPTIONS), list(OPTIONS))
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = _nvrtc(nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            _nvrtc(nvrtc.nvrtcGetProgramLog(program, log))
            raise RuntimeError(f"NVRTC failed on fused_iv.cu:\n{log.decode(errors='replace')}")
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

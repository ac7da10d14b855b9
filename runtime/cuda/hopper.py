"""What this backend's hand-written Hopper kernels share (``kernels/*.cu``, sm_90a): built once
a process by NVRTC, loaded once a device into its primary context (CuPy's), launched with
``cuLaunchKernel`` through cuda-bindings on CuPy's current stream (capturable in a graph).

They take their operands as TMA tensor maps (``cuTensorMapEncodeTiled``: host-only,
microseconds) passed by value as ``__grid_constant__`` parameters, which CuPy's RawKernel cannot
pass: hence NVRTC and the driver API rather than CuPy's modules. sm_90a code runs only on
compute capability 9.0. The device helpers the kernels share are ``kernels/hopper.cuh``.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any, NamedTuple

KERNELS = Path(__file__).resolve().parent / "kernels"
OPTIONS = (
    b"--gpu-architecture=sm_90a",
    b"-std=c++17",
    b"--include-path=" + str(KERNELS).encode(),
)
TMA_ALIGNMENT = 16  # bytes: TMA base addresses and strides
MAX_TMA_STRIDE = 1 << 40
MAX_INT32 = (1 << 31) - 1
SWIZZLES = (128, 64)  # bytes: the TMA swizzles the kernels' wgmma descriptors read


class Kernel(NamedTuple):
    """A kernel loaded on one device: its function, dynamic shared memory, and the device's SMs
    (a persistent grid's size)."""

    function: Any  # CUfunction, in the device's primary context
    name: str
    smem: int
    sms: int


def available(source: str, name: str, smem: int, defines: tuple[str, ...] = ()) -> bool:
    """Whether the current device is compute capability 9.0 and the kernel builds (with the
    macros ``defines``) and loads."""
    try:
        import cupy as cp

        device = cp.cuda.runtime.getDevice()
        if cp.cuda.Device(device).compute_capability != "90":
            return False
        kernel(source, name, smem, device, defines)
    except Exception:  # no CuPy, device or cuda-bindings; NVRTC too old; a refused cubin
        return False
    return True


@functools.cache
def kernel(source: str, name: str, smem: int, device: int, defines: tuple[str, ...] = ()) -> Kernel:
    """Kernel ``name`` of ``kernels/<source>`` (built with the macros ``defines``) loaded into
    ``device``'s primary context, its dynamic shared memory limit raised to ``smem`` bytes."""
    import numpy as np
    from cuda.bindings import driver as cu

    image = np.frombuffer(cubin(source, defines), dtype=np.uint8)
    check(cu.cuInit(0), "cuInit")
    dev = check(cu.cuDeviceGet(device), "cuDeviceGet")
    context = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    # the module belongs to the context current at the load: make it the primary one, which
    # CuPy's runtime calls use, and give back whatever was current
    check(cu.cuCtxPushCurrent(context), "cuCtxPushCurrent")
    try:
        module = check(cu.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
        function = check(cu.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")
        check(cu.cuFuncSetAttribute(
            function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem,
        ), "cuFuncSetAttribute")  # fmt: skip
        sms = check(cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev
        ), "cuDeviceGetAttribute")  # fmt: skip
    finally:
        check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")
    return Kernel(function, name, smem, int(sms))


@functools.cache
def cubin(source: str, defines: tuple[str, ...] = ()) -> bytes:
    """``kernels/<source>`` compiled by NVRTC to sm_90a SASS with the macros ``defines`` set
    (once a process: one cubin serves every sm_90 device)."""
    from cuda.bindings import nvrtc

    text = (KERNELS / source).read_bytes()
    program = _nvrtc(nvrtc.nvrtcCreateProgram(text, source.encode(), 0, [], []))
    try:
        options = [*OPTIONS, *(b"-D" + name.encode() for name in defines)]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = _nvrtc(nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            _nvrtc(nvrtc.nvrtcGetProgramLog(program, log))
            raise RuntimeError(f"NVRTC failed on {source}:\n{log.decode(errors='replace')}")
        size = _nvrtc(nvrtc.nvrtcGetCUBINSize(program))
        image = b" " * size
        _nvrtc(nvrtc.nvrtcGetCUBIN(program, image))
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return image


def launch(
    kernel: Kernel, blocks: int, threads: int, maps: tuple[Any, ...], args: ctypes.Structure,
    stream: int,
) -> None:  # fmt: skip
    """One launch of ``kernel`` on the raw stream handle ``stream``: a persistent grid of
    ``blocks`` blocks (as many as give each a tile of work), at most one an SM, the parameters
    the tensor ``maps`` then ``args``'s fields in order."""
    from cuda.bindings import driver as cu

    base = ctypes.addressof(args)
    fields = [name for name, _ in args._fields_]
    params = (ctypes.c_void_p * (len(maps) + len(fields)))(
        *(m.getPtr() for m in maps), *(base + getattr(type(args), f).offset for f in fields)
    )
    # the driver copies the parameters at the call (and into the node under capture):
    # args and params need to live only until it returns
    check(cu.cuLaunchKernel(
        kernel.function, min(kernel.sms, blocks), 1, 1, threads, 1, 1, kernel.smem,
        cu.CUstream(stream), ctypes.addressof(params), 0,
    ), f"cuLaunchKernel({kernel.name})")  # fmt: skip


def int8_tensor_map(
    ptr: int, dims: tuple[int, int, int], strides: tuple[int, int], box: tuple[int, int, int],
    swizzle: int = 128,
) -> Any:  # fmt: skip
    """A 3-D TMA map of int8 data at ``ptr``: ``dims`` innermost first, byte ``strides`` of
    dims 1 and 2, ``box`` elements a load; ``swizzle``-byte swizzle, 128 or 64 (the wgmma
    descriptors' layout: a box's inner size is at most the swizzle's); box elements past the
    dims read as zeros (OOB_FILL_NONE)."""
    if swizzle not in SWIZZLES or box[0] > swizzle:
        raise ValueError(f"swizzle {swizzle} with a box of {box[0]} bytes: must be one of "
                         f"{SWIZZLES}, at least the box's inner size")  # fmt: skip
    from cuda.bindings import driver as cu

    modes = {128: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
             64: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B}  # fmt: skip
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t  # (cuda-bindings 13 refuses plain ints here)
    return check(cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,  # int8 bits, copied verbatim
        3,
        ptr,
        [u64(d) for d in dims],
        [u64(s) for s in strides],
        [u32(b) for b in box],
        [u32(1), u32(1), u32(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        modes[swizzle],
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ), "cuTensorMapEncodeTiled")  # fmt: skip


def check(result: Any, what: str) -> Any:
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


def _nvrtc(result: tuple[Any, ...]) -> Any:
    from cuda.bindings import nvrtc

    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC call failed: {result[0]!r}")
    values = result[1:]
    return values[0] if len(values) == 1 else values

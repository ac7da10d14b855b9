"""``cupy.matmul`` of two float32 matrices as CuPy calls cuBLAS, made directly so that a stream
capture takes it: CuPy's cuBLAS wrapper refuses any call while the stream captures a graph.

CuPy (13 and 14) runs a 2-D float32 ``a @ b`` as one ``cublasGemmEx`` on its own handle for the
device: C^T = B^T A^T column-major, each operand taken as it lies where it is C- or
F-contiguous (else copied to C order first), the compute type CuPy's config gives float32
(32F; 32F_FAST_TF32 with ``CUPY_TF32=1``; 32F_PEDANTIC where set), the default tensor-op
algorithm from compute capability 8.0. ``matmul`` makes that very call, on the same handle and
stream, so cuBLAS takes the same algorithm and writes the same bits (whole-call replay,
``mixpert.replay``, checks them once per signature against the direct call). Empty products and
a single output entry run no cuBLAS in CuPy: those go to ``cupy.matmul`` itself. Under capture
cuBLAS 12.2+ takes its workspace from the graph (``cudaMallocAsync``).
"""

from __future__ import annotations

import ctypes
import functools
import re

import cupy as cp
import numpy as np
from cupy._core import _routines_linalg
from cupy.cuda import cublas

from . import libraries

CUDA_R_32F = 0  # cudaDataType (library_types.h)
# CuPy's compute-type settings (cupy._core._routines_linalg.COMPUTE_TYPE_*) that change
# float32's cuBLAS compute type
_PEDANTIC, _TF32 = 2, 7
_FLOAT32 = np.dtype(np.float32)
_ONE = np.array(1, np.float32)
_ZERO = np.array(0, np.float32)
_ONE_PTR, _ZERO_PTR = _ONE.ctypes.data, _ZERO.ctypes.data  # (host: the graph keeps the values)


def matmul(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """``cupy.matmul(a, b)`` for float32 CuPy matrices (m x k, k x n), bit for bit, in a form
    stream capture takes (module docstring)."""
    (m, k), n = a.shape, b.shape[1]
    if m == 0 or k == 0 or n == 0 or (m == 1 and n == 1):
        return cp.matmul(a, b)  # a fill or one reduction kernel: no cuBLAS
    x, trans_x, ld_x = _cublas_layout(a.T, 0)  # (CuPy's dot rolls A's axis: k x m)
    y, trans_y, ld_y = _cublas_layout(b, 1)
    c = cp.empty((m, n), dtype=cp.float32)
    handle = cp.cuda.device.get_cublas_handle()
    lib = _cublas()
    _check(lib.cublasSetStream_v2(handle, cp.cuda.get_current_stream().ptr))
    _check(lib.cublasGemmEx(
        handle, trans_y, trans_x, n, m, k, _ONE_PTR, y.data.ptr, CUDA_R_32F, ld_y,
        x.data.ptr, CUDA_R_32F, ld_x, _ZERO_PTR, c.data.ptr, CUDA_R_32F, n, compute_type(),
        _algorithm(cp.cuda.runtime.getDevice()),
    ))  # fmt: skip
    return c


def _cublas_layout(x: cp.ndarray, trans: int) -> tuple[cp.ndarray, int, int]:
    """(operand, transpose flag, leading dimension) as CuPy's ``_mat_to_cublas_contiguous``
    gives them to cuBLAS."""
    if x.flags.f_contiguous:
        return x, trans, max(x.strides[1] // x.itemsize, x.shape[0])
    if not x.flags.c_contiguous:
        x = x.copy()
    return x, 1 - trans, x.strides[0] // x.itemsize


def compute_type() -> int:
    """float32's cuBLAS compute type as CuPy's config gives it (read each call: CuPy reads it
    each product)."""
    setting = _routines_linalg.get_compute_type(_FLOAT32)
    if setting == _PEDANTIC:
        return cublas.CUBLAS_COMPUTE_32F_PEDANTIC
    if setting == _TF32:
        return cublas.CUBLAS_COMPUTE_32F_FAST_TF32
    return cublas.CUBLAS_COMPUTE_32F


@functools.cache
def _algorithm(device: int) -> int:
    capability = int(cp.cuda.Device(device).compute_capability)
    return cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP if capability >= 80 else cublas.CUBLAS_GEMM_DEFAULT


def _check(status: int) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLAS call failed with status {status}")


_P, _I = ctypes.c_void_p, ctypes.c_int
_SIGNATURES: dict[str, list[type]] = {
    "cublasSetStream_v2": [_P, _P],
    # handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
    # compute type, algorithm
    "cublasGemmEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I],
}


@functools.cache
def _cublas() -> ctypes.CDLL:
    """libcublas, the file CuPy loaded (its handle is CuPy's)."""
    cp.cuda.device.get_cublas_handle()  # (CuPy loads it for its first handle)
    major = cp.cuda.runtime.runtimeGetVersion() // 1000
    loaded = sorted(set(re.findall(r"\S*/libcublas\.so[.\d]*", libraries.process_maps())))
    library = libraries.load([*loaded, f"libcublas.so.{major}", "libcublas.so"], _SIGNATURES)
    if library is not None:
        return library
    raise RuntimeError("libcublas not found: no float32 GEMM that a graph can capture")

"""The native products on the GPU, called on cuBLAS directly: float32 GEMMs (SGEMM, and TF32
tensor-core inputs), one per matrix pair or one strided-batched GEMM per stack; and level fp64's
float64 product of float32 inputs, rounded once."""

from __future__ import annotations

import cupy as cp
import numpy as np
from cupy.cuda import cublas

from .convert import NARROW, WIDEN, conversion
from .launch import c_contiguous
from .tn_gemm import CUDA_R_32F

_ONE_F32 = np.array(1.0, dtype=np.float32)
_ZERO_F32 = np.array(0.0, dtype=np.float32)
# Their host addresses for cuBLAS's alpha and beta (``.ctypes`` builds an object each call).
_ONE_F32_PTR, _ZERO_F32_PTR = _ONE_F32.ctypes.data, _ZERO_F32.ctypes.data


def tf32_product(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """Native float32 GEMM with TF32 tensor-core inputs (COMPUTE_32F_FAST_TF32)."""
    return native_gemm(a, b, cublas.CUBLAS_COMPUTE_32F_FAST_TF32)


def sgemm_stack(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """cuBLAS strided-batched SGEMM of two stacks, called directly: ``cp.matmul`` does the same
    GEMM after ~20 us of Python checks, as long as the whole call on a small stack. The compute
    type is the one ``cp.matmul`` passes (the data type CUDA_R_32F): with
    CUBLAS_COMPUTE_32F cuBLAS chose kernels 12-14% slower at 1024 x 64^3 and 128^3 (H100)."""
    return native_gemm(a, b, CUDA_R_32F)


def contiguous_sgemm_stack(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """``sgemm_stack`` for two C-contiguous float32 stacks (the caller has checked)."""
    return _contiguous_gemm(a, b, CUDA_R_32F)


def native_gemm(a: cp.ndarray, b: cp.ndarray, compute: int) -> cp.ndarray:
    """One float32 cuBLAS GEMM at ``compute``: cublasGemmEx for two matrices,
    cublasGemmStridedBatchedEx for two stacks (s, m, k) and (s, k, n)."""
    return _contiguous_gemm(c_contiguous(a), c_contiguous(b), compute)


def _contiguous_gemm(a: cp.ndarray, b: cp.ndarray, compute: int) -> cp.ndarray:
    m, k = a.shape[-2:]
    n = b.shape[-1]
    c = cp.empty((*a.shape[:-2], m, n), dtype=cp.float32)
    handle = cp.cuda.device.get_cublas_handle()
    ops = (handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k, _ONE_F32_PTR)
    tail = (compute, cublas.CUBLAS_GEMM_DEFAULT)
    if a.ndim == 3:
        cublas.gemmStridedBatchedEx(
            *ops, b.data.ptr, CUDA_R_32F, n, k * n, a.data.ptr, CUDA_R_32F, k, m * k,
            _ZERO_F32_PTR, c.data.ptr, CUDA_R_32F, n, m * n, a.shape[0], *tail,
        )  # fmt: skip
        return c
    cublas.gemmEx(
        *ops, b.data.ptr, CUDA_R_32F, n, a.data.ptr, CUDA_R_32F, k,
        _ZERO_F32_PTR, c.data.ptr, CUDA_R_32F, n, *tail,
    )  # fmt: skip
    return c


def fp64_product(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """float64 product of the float32 inputs, rounded once: exact widening and narrowing (no
    flush of subnormals), the canonical NaN (the CPU backend's bits where sums agree)."""
    widen = conversion(WIDEN, "mixpert_widen")
    product = cp.matmul(widen(a), widen(b))
    return conversion(NARROW, "mixpert_narrow")(product)

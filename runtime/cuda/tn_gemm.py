"""The TN GEMMs over packed spans, column-major as cuBLAS sees them: ``cublasGemmEx`` (FP16),
and for INT8 x INT8 -> INT32 the algorithm measured fastest for each shape.

``cublasGemmEx`` runs cuBLAS's first heuristic choice, which for the GEMMs of the INT8 levels is
often not the fastest. Measured on an H100 (``benchmarks/lt_probe``): for the strided-batched
GEMMs of a 16 x 4096^3 stack one of cuBLASLt's candidates ran at 1710 TOPS against
``cublasGemmStridedBatchedEx``'s 1185; at n = 8192 the best candidate gained 4-13% per weight
class; at n = 16384 none beat ``cublasGemmEx``. So the first INT8 GEMM of each shape (with
beta = 0) times ``cublasGemmEx`` and up to ``CANDIDATES`` cuBLASLt heuristic algorithms on the
real operands (best of ``TUNING_RUNS``, CUDA events) and keeps the fastest for the process.
Integer GEMMs are exact and every candidate computes the same sums, so the choice changes no bit.

On Hopper (compute capability 9.0) mixpert's own INT8 GEMM (``wgmma_gemm``: TMA, wgmma, warp
specialisation) is one more candidate. On an H200 it ran 0.84-1.12x the best of cublasGemmEx
and cuBLASLt's candidates, shape by shape (``benchmarks/results/NVIDIA-H200/int8-engines.json``):
ahead on the long-depth class GEMMs of n >= 8192, behind at 4096.

``MIXPERT_INT8_GEMM=cublas`` in the environment keeps ``cublasGemmEx`` for every shape that first
runs while it is set; ``MIXPERT_INT8_GEMM=cublaslt`` keeps cuBLAS's and cuBLASLt's algorithms
alone (no wgmma kernel).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import cupy as cp
import numpy as np
from cupy.cuda import cublas

from .. import workspace
from . import libraries

CANDIDATES = 8  # cuBLASLt heuristic algorithms timed per shape
TUNING_RUNS = 3  # timed runs of each candidate (after one warm-up)
WORKSPACE_BYTES = workspace.GEMM_WORKSPACE  # the most workspace a candidate may ask for

# cuBLAS / CUDA enum values (cublasLt.h, cublas_api.h, library_types.h; CuPy's runtime module
# does not export all of them)
CUDA_R_32F, CUDA_R_16F, CUDA_R_8I, CUDA_R_32I = 0, 2, 3, 10
DESC_TRANSA, DESC_TRANSB = 3, 4
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # A, B, C, D: bytes (uint32); default 256
MAX_ALIGNMENT = 256


@dataclass(frozen=True)
class Types:
    """Input, output and compute types of a GEMM, with its alpha = 1 and beta = 0 or 1."""

    input: int
    output: int
    compute: int
    one: np.ndarray
    zero: np.ndarray

    @functools.cached_property
    def one_ptr(self) -> int:
        """alpha's host address (``.ctypes`` builds an object a call: microseconds a GEMM)."""
        return self.one.ctypes.data

    @functools.cached_property
    def zero_ptr(self) -> int:
        return self.zero.ctypes.data

    def beta(self, accumulate: bool) -> int:
        return self.one_ptr if accumulate else self.zero_ptr


INT8 = Types(CUDA_R_8I, CUDA_R_32I, cublas.CUBLAS_COMPUTE_32I, np.array(1, np.int32),
             np.array(0, np.int32))  # fmt: skip
FP16 = Types(CUDA_R_16F, CUDA_R_32F, cublas.CUBLAS_COMPUTE_32F, np.array(1, np.float32),
             np.array(0, np.float32))  # fmt: skip


class _Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [
        ("algo", _Algo),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


class Gemm(NamedTuple):  # (a tuple: built and hashed per GEMM, cheaply)
    """C (n x m, ld n) = op(A)^T B over ``depth``, column-major as cuBLAS sees it: A is
    (depth x n, ld lda), B (depth x m, ld ldb); ``batch`` > 1: strided over the three."""

    n: int
    m: int
    depth: int
    lda: int
    ldb: int
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0


@dataclass(frozen=True)
class _LtPlan:
    desc: ctypes.c_void_p
    layouts: tuple[ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    algo: _Algo
    workspace: int


class _Wgmma:
    """The plan of a shape on which mixpert's own wgmma kernel won (``wgmma_gemm``)."""


WGMMA = _Wgmma()
# (device, shape, pointer alignments) -> plan; None: cublasGemmEx
_chosen: dict[tuple[int, Gemm, tuple[int, int, int]], _LtPlan | _Wgmma | None] = {}
_UNTIMED = _LtPlan(ctypes.c_void_p(), (ctypes.c_void_p(),) * 3, _Algo(), 0)  # (a marker)
# ... -> cuBLASLt's first candidate, for GEMMs under capture
_first: dict[tuple[int, Gemm, tuple[int, int, int]], _LtPlan] = {}


def gemm(
    shape: Gemm, a_ptr: int, b_ptr: int, c_ptr: int, accumulate: bool, types: Types = INT8
) -> None:
    """C = A^T B (+ C when ``accumulate``) on the current stream: INT8 on the shape's fastest
    algorithm (measured at its first GEMM with beta = 0), FP16 through ``cublasGemmEx``."""
    if types is not INT8:
        gemm_ex(shape, a_ptr, b_ptr, c_ptr, accumulate, types)
        return
    alignments = (_alignment(a_ptr), _alignment(b_ptr), _alignment(c_ptr))
    device = cp.cuda.runtime.getDevice()
    key = (device, shape, alignments)
    plan = _chosen.get(key, _UNTIMED)
    if plan is _UNTIMED or plan is None:
        if cp.cuda.get_current_stream().is_capturing():
            # no timing under capture, and CuPy's cuBLAS refuses it: cuBLASLt's first choice
            # (the sums are exact, so any algorithm gives the same bits)
            _lt_matmul(_first_candidate(shape, alignments), a_ptr, b_ptr, c_ptr, accumulate, device)
            return
        if plan is _UNTIMED:
            if accumulate or os.environ.get("MIXPERT_INT8_GEMM") == "cublas" or _lt() is None:
                gemm_ex(shape, a_ptr, b_ptr, c_ptr, accumulate)  # timing would clobber C's sums
                return
            plan = _chosen[key] = _fastest(shape, alignments, a_ptr, b_ptr, c_ptr)
    if plan is None:
        gemm_ex(shape, a_ptr, b_ptr, c_ptr, accumulate)
    elif plan is WGMMA:
        _wgmma(shape, a_ptr, b_ptr, c_ptr, accumulate)
    else:
        _lt_matmul(plan, a_ptr, b_ptr, c_ptr, accumulate, device)


def _first_candidate(shape: Gemm, alignments: tuple[int, int, int]) -> _LtPlan:
    key = (cp.cuda.runtime.getDevice(), shape, alignments)
    if key not in _first:
        if _lt() is None:
            raise RuntimeError("cuBLASLt not found: INT8 GEMMs cannot be captured in a graph")
        plans = _candidates(shape, alignments)[2]
        if not plans:
            raise RuntimeError(f"cuBLASLt offers no algorithm for the INT8 GEMM {shape}")
        _first[key] = plans[0]
    return _first[key]


def chosen_algorithms() -> dict[Gemm, str]:
    """Each INT8 shape tuned on this device -> "cublasGemmEx", "cuBLASLt" or "wgmma" (for
    reports)."""
    device = cp.cuda.Device().id

    def name(plan: _LtPlan | _Wgmma | None) -> str:
        return "cublasGemmEx" if plan is None else "wgmma" if plan is WGMMA else "cuBLASLt"

    return {s: name(p) for (d, s, _), p in _chosen.items() if d == device}


def _alignment(ptr: int) -> int:
    """The largest power of two (up to MAX_ALIGNMENT) dividing the address ``ptr``."""
    return min(MAX_ALIGNMENT, ptr & -ptr) if ptr else MAX_ALIGNMENT


def gemm_ex(
    shape: Gemm, a_ptr: int, b_ptr: int, c_ptr: int, accumulate: bool, types: Types = INT8
) -> None:
    """The GEMM through ``cublasGemmEx`` (``cublasGemmStridedBatchedEx`` for a batch)."""
    handle = cp.cuda.device.get_cublas_handle()
    s, t = shape, types
    op_t, op_n = cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N
    if s.batch > 1:
        cublas.gemmStridedBatchedEx(
            handle, op_t, op_n, s.n, s.m, s.depth, t.one_ptr,
            a_ptr, t.input, s.lda, s.stride_a, b_ptr, t.input, s.ldb, s.stride_b,
            t.beta(accumulate), c_ptr, t.output, s.n, s.stride_c, s.batch, t.compute,
            cublas.CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip
    else:
        cublas.gemmEx(
            handle, op_t, op_n, s.n, s.m, s.depth, t.one_ptr,
            a_ptr, t.input, s.lda, b_ptr, t.input, s.ldb,
            t.beta(accumulate), c_ptr, t.output, s.n, t.compute, cublas.CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip


def _fastest(
    shape: Gemm, alignments: tuple[int, int, int], a_ptr: int, b_ptr: int, c_ptr: int
) -> _LtPlan | _Wgmma | None:
    """Time cublasGemmEx, cuBLASLt's candidates (those that work at these pointer alignments)
    and mixpert's wgmma kernel (where it runs: ``wgmma_gemm.serves``) on these operands; the
    fastest's plan."""
    best_plan: _LtPlan | _Wgmma | None = None
    best = _time(lambda: gemm_ex(shape, a_ptr, b_ptr, c_ptr, False))
    desc, layouts, plans = _candidates(shape, alignments)
    device = cp.cuda.runtime.getDevice()
    for plan in plans:
        try:
            seconds = _time(lambda plan=plan: _lt_matmul(plan, a_ptr, b_ptr, c_ptr, False, device))
        except RuntimeError:  # a candidate the library offers but cannot run here
            continue
        if seconds < best:
            best, best_plan = seconds, plan
    if _wgmma_serves(shape, a_ptr, b_ptr):
        seconds = _time(lambda: _wgmma(shape, a_ptr, b_ptr, c_ptr, False))
        if seconds < best:
            best, best_plan = seconds, WGMMA
    if not isinstance(best_plan, _LtPlan):  # the candidates' descriptors are not kept
        lib = _lt()
        lib.cublasLtMatmulDescDestroy(desc)
        for layout in layouts:
            lib.cublasLtMatrixLayoutDestroy(layout)
    return best_plan


def _wgmma_serves(shape: Gemm, a_ptr: int, b_ptr: int) -> bool:
    """Whether mixpert's wgmma kernel takes this GEMM here (``wgmma_gemm.serves``), unless
    ``MIXPERT_INT8_GEMM=cublaslt`` keeps cuBLAS's algorithms alone."""
    from . import wgmma_gemm

    if os.environ.get("MIXPERT_INT8_GEMM") == "cublaslt":
        return False
    s = shape
    return wgmma_gemm.serves(
        s.m, s.n, s.depth, b_ptr, s.ldb, a_ptr, s.lda, MAX_ALIGNMENT, s.batch, s.stride_b,
        s.stride_a, s.stride_c,
    )  # fmt: skip


def _wgmma(shape: Gemm, a_ptr: int, b_ptr: int, c_ptr: int, accumulate: bool) -> None:
    """The GEMM on mixpert's wgmma kernel: cuBLAS's column-major C (n x m) = A^T B is the
    row-major m x n product of B's m rows and A's n rows, k-contiguous both."""
    from . import wgmma_gemm

    s = shape
    wgmma_gemm.gemm(
        s.m, s.n, s.depth, b_ptr, s.ldb, a_ptr, s.lda, c_ptr, s.n, accumulate,
        s.batch, s.stride_b, s.stride_a, s.stride_c,
    )  # fmt: skip


def _time(run: Any) -> float:
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    run()
    best = float("inf")
    for _ in range(TUNING_RUNS):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop))
    return best


def _candidates(
    shape: Gemm, alignments: tuple[int, int, int]
) -> tuple[ctypes.c_void_p, tuple[ctypes.c_void_p, ...], list[_LtPlan]]:
    """cuBLASLt's heuristic candidates for ``shape``, sharing one descriptor and its layouts
    (returned too: the caller destroys them if it keeps no plan)."""
    s = shape
    desc = _descriptor(INT8.compute, CUDA_R_32I, cublas.CUBLAS_OP_T)
    layouts = (
        _layout(CUDA_R_8I, s.depth, s.n, s.lda, s.batch, s.stride_a),
        _layout(CUDA_R_8I, s.depth, s.m, s.ldb, s.batch, s.stride_b),
        _layout(CUDA_R_32I, s.n, s.m, s.n, s.batch, s.stride_c),
    )
    return desc, layouts, _heuristic(desc, layouts, alignments)


def _descriptor(compute: int, scale: int, op_a: int) -> ctypes.c_void_p:
    """A matmul descriptor: ``op_a`` on A (cuBLAS's A), B as it is."""
    lib = _lt()
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, scale))
    for attribute, op in ((DESC_TRANSA, op_a), (DESC_TRANSB, cublas.CUBLAS_OP_N)):
        value = ctypes.c_int32(op)
        _check(lib.cublasLtMatmulDescSetAttribute(desc, attribute, ctypes.byref(value), 4))
    return desc


def _heuristic(
    desc: ctypes.c_void_p, layouts: tuple[ctypes.c_void_p, ...], alignments: tuple[int, int, int]
) -> list[_LtPlan]:
    """Up to CANDIDATES algorithms cuBLASLt's heuristic offers for ``desc`` on ``layouts``, at
    these pointer alignments (C's for D too), fastest first by its estimate."""
    lib = _lt()
    preference = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)))
    limit = ctypes.c_uint64(WORKSPACE_BYTES)
    _check(lib.cublasLtMatmulPreferenceSetAttribute(
        preference, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(limit), 8))  # fmt: skip
    for attribute, alignment in zip(PREF_MIN_ALIGNMENT, (*alignments, alignments[2]), strict=True):
        value = ctypes.c_uint32(alignment)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(
            preference, attribute, ctypes.byref(value), 4))  # fmt: skip
    results = (_Heuristic * CANDIDATES)()
    count = ctypes.c_int(0)
    a, b, c = layouts
    status = lib.cublasLtMatmulAlgoGetHeuristic(
        _handle(), desc, a, b, c, c, preference, CANDIDATES, results, ctypes.byref(count)
    )
    lib.cublasLtMatmulPreferenceDestroy(preference)
    return [
        _LtPlan(desc, layouts, results[i].algo, results[i].workspace_size)
        for i in range(count.value if status == 0 else 0)
        if results[i].state == 0
    ]


# (device, m, k, n) -> the float32 GEMM's plan (cuBLASLt's first candidate at SGEMM_ALIGNMENT)
_sgemm_plans: dict[tuple[int, int, int, int], _LtPlan] = {}
SGEMM_ALIGNMENT = 16  # bytes the float32 GEMM asks of its pointers: one algorithm a shape
FP32 = Types(CUDA_R_32F, CUDA_R_32F, cublas.CUBLAS_COMPUTE_32F, np.array(1, np.float32),
             np.array(0, np.float32))  # fmt: skip


def sgemm(a: cp.ndarray, b: cp.ndarray, c: cp.ndarray, workspace: cp.ndarray | None = None) -> None:
    """c = a @ b for C-contiguous float32 matrices with pointers SGEMM_ALIGNMENT-aligned, on
    the current stream: cuBLASLt's first algorithm for the shape, called directly, so the same
    bits on every call and under stream capture (CuPy's cuBLAS refuses capture). ``workspace``:
    at least ``sgemm_workspace_bytes`` bytes (else one from CuPy's pool)."""
    plan = _sgemm_plan(a.shape[0], a.shape[1], b.shape[1])
    device = cp.cuda.runtime.getDevice()
    _lt_matmul(plan, b.data.ptr, a.data.ptr, c.data.ptr, False, device, FP32, workspace)


def sgemm_ready(x: cp.ndarray) -> bool:
    """Whether ``sgemm`` takes ``x`` as it is: C-contiguous, SGEMM_ALIGNMENT-aligned."""
    return x.flags.c_contiguous and x.data.ptr % SGEMM_ALIGNMENT == 0


def sgemm_workspace_bytes(m: int, k: int, n: int) -> int:
    """The workspace ``sgemm`` of this shape asks for."""
    return max(_sgemm_plan(m, k, n).workspace, 1)


def _sgemm_plan(m: int, k: int, n: int) -> _LtPlan:
    device = cp.cuda.runtime.getDevice()
    key = (device, m, k, n)
    plan = _sgemm_plans.get(key)
    if plan is None:
        if _lt() is None:
            raise RuntimeError("cuBLASLt not found: no float32 GEMM that a graph can capture")
        # row-major C = A B is column-major C^T = B^T A^T: cuBLAS's A is b (n x k, ld n)
        desc = _descriptor(FP32.compute, CUDA_R_32F, cublas.CUBLAS_OP_N)
        layouts = (
            _layout(CUDA_R_32F, n, k, n, 1, 0),
            _layout(CUDA_R_32F, k, m, k, 1, 0),
            _layout(CUDA_R_32F, n, m, n, 1, 0),
        )
        plans = _heuristic(desc, layouts, (SGEMM_ALIGNMENT,) * 3)
        if not plans:
            raise RuntimeError(f"cuBLASLt offers no float32 GEMM for {m} x {k} x {n}")
        plan = _sgemm_plans[key] = plans[0]
    return plan


def _layout(dtype: int, rows: int, cols: int, ld: int, batch: int, stride: int) -> ctypes.c_void_p:
    lib = _lt()
    layout = ctypes.c_void_p()
    _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, rows, cols, ld))
    if batch > 1:
        count, offset = ctypes.c_int32(batch), ctypes.c_int64(stride)
        _check(lib.cublasLtMatrixLayoutSetAttribute(
            layout, LAYOUT_BATCH_COUNT, ctypes.byref(count), 4))  # fmt: skip
        _check(lib.cublasLtMatrixLayoutSetAttribute(
            layout, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.byref(offset), 8))  # fmt: skip
    return layout


def _lt_matmul(
    plan: _LtPlan,
    a_ptr: int,
    b_ptr: int,
    c_ptr: int,
    accumulate: bool,
    device: int,
    types: Types = INT8,
    workspace: cp.ndarray | None = None,
) -> None:
    if workspace is None:
        workspace = cp.empty(max(plan.workspace, 1), dtype=cp.uint8)  # from CuPy's pool
    a, b, c = plan.layouts
    _check(_lt().cublasLtMatmul(
        _handle_for(device), plan.desc, types.one_ptr, a_ptr, a, b_ptr, b,
        types.beta(accumulate), c_ptr, c, c_ptr, c,
        ctypes.byref(plan.algo), workspace.data.ptr, plan.workspace,
        cp.cuda.get_current_stream().ptr,
    ))  # fmt: skip


def _check(status: int) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLASLt call failed with status {status}")


_P, _HANDLE_OUT = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
_SET_ATTRIBUTE = [_P, ctypes.c_int, _P, ctypes.c_size_t]
_SIGNATURES: dict[str, list[Any]] = {
    "cublasLtCreate": [_HANDLE_OUT],
    "cublasLtMatmulDescCreate": [_HANDLE_OUT, ctypes.c_int, ctypes.c_int],
    "cublasLtMatmulDescSetAttribute": _SET_ATTRIBUTE,
    "cublasLtMatrixLayoutCreate": [
        _HANDLE_OUT,
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_int64,
    ],  # fmt: skip
    "cublasLtMatrixLayoutSetAttribute": _SET_ATTRIBUTE,
    "cublasLtMatmulPreferenceCreate": [_HANDLE_OUT],
    "cublasLtMatmulPreferenceSetAttribute": _SET_ATTRIBUTE,
    "cublasLtMatmulPreferenceDestroy": [_P],
    "cublasLtMatmulDescDestroy": [_P],
    "cublasLtMatrixLayoutDestroy": [_P],
    "cublasLtMatmulAlgoGetHeuristic": [_P] * 7
    + [ctypes.c_int, ctypes.POINTER(_Heuristic), ctypes.POINTER(ctypes.c_int)],  # fmt: skip
    # handle, desc, alpha, A, A layout, B, B layout, beta, C, C layout, D, D layout; algo,
    # workspace, its size, stream
    "cublasLtMatmul": [_P] * 12 + [ctypes.POINTER(_Algo), _P, ctypes.c_size_t, _P],
}


@functools.cache
def _lt() -> ctypes.CDLL | None:
    """libcublasLt, the one CuPy's cuBLAS already loaded (None where it cannot be found)."""
    major = cp.cuda.runtime.runtimeGetVersion() // 1000
    names = [*_loaded_lt(libraries.process_maps()), f"libcublasLt.so.{major}", "libcublasLt.so"]
    return libraries.load(names, _SIGNATURES)


def _loaded_lt(maps: str) -> list[str]:
    """The libcublasLt files in a process's memory map ``maps``, the one beside CuPy's
    libcublas first (another library may have brought its own copy)."""
    loaded = sorted(set(re.findall(r"\S*libcublasLt\.so[.\d]*", maps)))
    beside = {str(Path(p).parent) for p in re.findall(r"\S*libcublas\.so[.\d]*", maps)}
    return sorted(loaded, key=lambda path: str(Path(path).parent) not in beside)


@functools.cache
def _handle_for(device: int) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    _check(_lt().cublasLtCreate(ctypes.byref(handle)))  # type: ignore[union-attr]
    return handle


def _handle() -> ctypes.c_void_p:
    return _handle_for(cp.cuda.Device().id)

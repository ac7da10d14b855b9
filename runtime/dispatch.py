"""``matmul``: validates one product, routes it to a backend and resolves "auto" there.

The backends (``cpu``, ``cuda``) each take ``matmul(a, b, level)`` with a concrete level; this
module decides which one runs and, for the "auto" policy, which level.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from . import batched, cpu, dask_products, device, equilibrate
from .levels import NATIVE_LEVEL, Level, get_level
from .precision import get_default_level
from .validation import check_pair

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


def matmul(a: Any, b: Any, level: str | Level | None = None, backend: Backend = "auto") -> Any:
    """a @ b at ``level`` (None: the default level, ``precision``; see ``mixpert.matmul`` for
    the contract): 2-D matrices here, vectors and stacks through ``batched``."""
    level = get_level(get_default_level() if level is None else level)  # names fail first
    if device.is_dask_array(a) or device.is_dask_array(b):  # per chunk, on the chunk's backend
        chunk_backend = "auto" if backend == DASK else backend
        return dask_products.matmul(a, b, lambda x, y: matmul(x, y, level, chunk_backend))
    if getattr(a, "ndim", 2) != 2 or getattr(b, "ndim", 2) != 2:  # vectors and stacks
        each = _cpu_stack_product(a, b, level, backend)
        return batched.matmul(a, b, lambda x, y: matmul(x, y, level, backend), each)
    if level.kind == "policy" and backend == "auto":
        routed = _native_gpu_fast_path(a, b)
        if routed is not None:
            return routed
    chosen, concrete = route(a, b, level, backend)
    if chosen == "cuda":
        from . import cuda

        return cuda.matmul(a, b, concrete)
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        raise TypeError("backend='cpu' takes NumPy arrays; got a CuPy array (call .get() first)")
    return cpu.matmul(np.asarray(a), np.asarray(b), concrete)


def _cpu_stack_product(a: Any, b: Any, level: Level, backend: Backend) -> Any | None:
    """``cpu.int8_product_stack`` at ``level`` for two NumPy stacks whose pairs would each run
    on the CPU at an INT8 level (their shape decides, as in ``route``), else None."""
    if not all(isinstance(x, np.ndarray) and x.ndim >= 3 for x in (a, b)):
        return None
    m, k = a.shape[-2:]
    pair_a, pair_b = np.empty((m, k), np.float32), np.empty((k, b.shape[-1]), np.float32)
    if choose_backend(pair_a, pair_b, backend) != "cpu":  # the rules read shapes only
        return None
    concrete = resolve_level(level, pair_a, pair_b, "cpu")
    if concrete.kind != "int8":
        return None
    return lambda x, y: cpu.int8_product_stack(x, y, concrete)


def route(a: Any, b: Any, level: str | Level, backend: Backend = "auto") -> tuple[str, Level]:
    """(backend, concrete level) for one product, after checking the operands and names."""
    requested = get_level(level)  # unknown names fail before anything else
    check_pair(a, b)
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {', '.join(map(repr, BACKENDS))}")
    if device.is_dask_array(a) or device.is_dask_array(b):
        return DASK, requested  # "auto" resolves per chunk
    chosen = choose_backend(a, b, backend)
    return chosen, resolve_level(requested, a, b, chosen)


def _native_gpu_fast_path(a: Any, b: Any) -> Any | None:
    """cuBLAS SGEMM for the small or skinny float32 CuPy products "auto" keeps native.

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
    if k != k_b or min(m, k, n) >= AUTO_MIN_DIM:
        return None
    return cp.matmul(a, b)


def resolve_level(level: str | Level, a: Any, b: Any, backend: str) -> Level:
    """The level a call runs: ``level`` itself, or for "auto" the fastest float32-grade one.

    "auto" means float32-grade at the lowest time: native float32 on the CPU (where emulation
    is the exact oracle, not a speed-up) and on GPU shapes too small or skinny for the INT8
    tensor cores to win; level IV elsewhere on the GPU.
    """
    requested = get_level(level)
    if requested.kind != "policy":
        return requested
    m, k = a.shape
    n = b.shape[1]
    if backend == "cuda" and min(m, k, n) >= AUTO_MIN_DIM:
        return get_level(AUTO_EMULATED)
    return get_level(NATIVE_LEVEL)


def choose_backend(a: Any, b: Any, backend: Backend) -> str:
    on_gpu = device.is_cupy_array(a) or device.is_cupy_array(b)
    if backend != "auto":
        if backend == "cuda" and not device.gpu_available():
            raise RuntimeError(f"backend='cuda' asked for, but {device.unavailable_reason()}")
        return backend
    if on_gpu:
        return "cuda"
    m, k = a.shape
    large = 2 * m * k * b.shape[1] >= OFFLOAD_MIN_FLOPS
    return "cuda" if large and device.gpu_available() else "cpu"


def rebalanced_k(a: Any, b: Any, level: str | Level) -> int:
    """How many k-indices equilibration moves or drops in this product (0 at native levels):
    what inspection reports as the wide-range lines handled."""
    if not get_level(level).emulated or device.is_dask_array(a) or device.is_dask_array(b):
        return 0  # Dask: lazy, counted by no one
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        from . import cuda

        return cuda.rebalanced_k(a, b)
    a32 = np.asarray(a).astype(np.float32, copy=False)
    return int(np.count_nonzero(equilibrate.k_exponents(a32, np.asarray(b).astype(np.float32))))


def unresolved_lines(a: Any, b: Any, level: str | Level) -> tuple[int, int]:
    """(rows of A, columns of B) this product recomputes exactly because the level's slices
    cannot resolve their range (``bypass``): what inspection reports (the same lines on every
    backend; 0 for Dask operands, which stay lazy)."""
    if device.is_dask_array(a) or device.is_dask_array(b):
        return 0, 0
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        from . import cuda

        return cuda.unresolved_lines(a, b, get_level(level))
    return cpu.unresolved_lines(np.asarray(a), np.asarray(b), get_level(level))

"""Exact conversions on the device, elementwise (CuPy's astype flushes subnormals): float32 to
float64 and back with NumPy's rounding, the canonical NaN, and the FP16 path's exact float64
accumulation of its float32 k-block sums."""

from __future__ import annotations

import functools

import cupy as cp

from . import sources

# (input, output, operation) of each conversion, on the device helpers
WIDEN = ("float32 x", "float64 y", "y = exact_double(x)")
NARROW = ("float64 d", "float32 y", "y = canonical(d)")
ROUND = ("float64 d", "float32 y", "y = round_to_float(d)")  # float64 operands -> float32
ACCUMULATE = ("float32 x", "float64 total", "total = total + exact_double(x)")  # FP16 k blocks


@functools.cache
def conversion(spec: tuple[str, str, str], name: str) -> cp.ElementwiseKernel:
    return cp.ElementwiseKernel(*spec, name=name, preamble=sources.helpers())


def as_float32(x: cp.ndarray) -> cp.ndarray:
    """``x`` rounded to float32 as NumPy rounds it (CuPy's astype would flush subnormals)."""
    if x.dtype == cp.float64:
        return conversion(ROUND, "mixpert_round")(x)
    return x.astype(cp.float32, copy=False)  # float16 -> float32 is exact

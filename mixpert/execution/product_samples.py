"""Samples of the products a profiling run computes, for the tuner's per-op errors.

While the tuner records a run with samples (``state.record_calls(samples=True)``), each runtime
call keeps a ``ProductSample``: a few rows of A, the same number of columns of B, and the block
of the output where they meet, copied to the host. From it the tuner measures the op's own error
against float64 (the same float32 operands, multiplied exactly) and feeds the error model the
operands' magnitudes and k. Rows and columns are evenly spaced, so a sample is the same on every
run of the same inputs, whatever the level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mixpert.runtime import device

MAX_LINES = 32  # rows of A and columns of B a sample keeps at most
MAX_ENTRIES = 1 << 21  # entries of A's rows (and of B's columns) a sample keeps at most


def _spread(count: int, most: int) -> np.ndarray:
    """At most ``most`` evenly spaced indices of ``range(count)``, first and last included."""
    return np.unique(np.linspace(0, count - 1, min(count, most)).round().astype(np.intp))


@dataclass(frozen=True)
class ProductSample:
    """Rows ``a_rows`` (r x k) of A, columns ``b_cols`` (k x c) of B, and ``out`` (r x c), the
    output entries where they meet, all float32 on the host."""

    a_rows: np.ndarray
    b_cols: np.ndarray
    out: np.ndarray

    @classmethod
    def take(cls, a: Any, b: Any, out: Any) -> ProductSample | None:
        """A sample of ``out = a @ b`` (2-D, or the first pair of two stacks); None where the
        operands are not arrays (NumPy, CuPy, Dask) or the product is empty."""
        if not all(hasattr(x, "ndim") and hasattr(x, "dtype") for x in (a, b, out)):
            return None
        if a.ndim == 3:
            a, b, out = a[0], b[0], out[0]
        if a.ndim != 2 or b.ndim != 2 or 0 in (*a.shape, b.shape[1]):
            return None
        k = a.shape[1]
        lines = max(1, min(MAX_LINES, MAX_ENTRIES // k))
        rows, cols = _spread(a.shape[0], lines), _spread(b.shape[1], lines)
        take = _device_take if device.is_cupy_array(a) else lambda x, i: x[i]  # Dask's too
        a_rows = device.to_host(take(a, rows)).astype(np.float32)
        b_cols = device.to_host(take(b.T, cols)).astype(np.float32).T
        block = device.to_host(take(take(out, rows).T, cols)).T.astype(np.float32)
        return cls(a_rows, b_cols, block)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(r, k, c) of the sampled product."""
        return self.a_rows.shape[0], self.a_rows.shape[1], self.b_cols.shape[1]

    def squared_error(self) -> tuple[float, float]:
        """(||out - A B||^2, ||A B||^2) over the sample, A B exact in float64 (non-finite
        entries where float64 has them too are left out: they are no one's rounding)."""
        return squared_error(self.out, self.reference())

    def reference(self) -> np.ndarray:
        return self.a_rows.astype(np.float64) @ self.b_cols.astype(np.float64)


def squared_error(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(||got - want||^2, ||want||^2) in float64 over the entries where ``want`` is finite."""
    finite = np.isfinite(want)
    diff = got.astype(np.float64)[finite] - want[finite]
    return float(diff @ diff), float(want[finite] @ want[finite])


def _device_take(x: Any, index: np.ndarray) -> Any:
    """``x[index]`` along the first axis for a CuPy array (the index moved to its device)."""
    return x[device.cupy_module().asarray(index)]

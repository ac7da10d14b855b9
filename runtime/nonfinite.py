"""NaN and Inf: the rows of A and columns of B that hold them bypass emulation.

The packers treat non-finite entries as 0; afterwards every output row (column) whose A row
(B column) holds a NaN or Inf is recomputed as a float64 product of the original values. Such an
output entry always contains an Inf or NaN term, so its value (NaN, +Inf or -Inf) does not depend
on the summation order: the same on every backend, and the one float32 gives unless finite
products overflow float32 on the way (float32 [[inf, 1e30]] @ [[1], [-1e30]] is NaN, mixpert's
inf; [[1e30, -1e30]] @ [[1e10], [1e10]] is NaN in float32 and the exact 0 in mixpert). NaNs are
written as the canonical quiet NaN (0x7FC00000): payloads and signs differ between CPUs and GPUs.
"""

from __future__ import annotations

from typing import Any


def nonfinite_lines(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """Indices of the rows of ``a`` and the columns of ``b`` holding a NaN or Inf."""
    rows = xp.flatnonzero(~xp.isfinite(a).all(axis=1))
    cols = xp.flatnonzero(~xp.isfinite(b).all(axis=0))
    return rows, cols


def patch_nonfinite(xp: Any, c: Any, a: Any, b: Any, rows: Any, cols: Any) -> Any:
    """Overwrite ``c`` where the inputs' non-finite rows and columns reach it."""
    if rows.size:
        c[rows, :] = _canonical(xp, a[rows, :].astype(xp.float64) @ b.astype(xp.float64))
    if cols.size:
        c[:, cols] = _canonical(xp, a.astype(xp.float64) @ b[:, cols].astype(xp.float64))
    return c


def _canonical(xp: Any, product: Any) -> Any:
    return xp.where(xp.isnan(product), xp.float32(xp.nan), product.astype(xp.float32))

"""The error metric (MixPert Eq. 10) and the float64 reference it is measured against.

``relative_error(c, c64) = ||C - C64||_F / ||C64||_F``; ``output_error`` extends it to a
function's outputs (all floating-point arrays of a result, nested tuples and lists included,
together). Sums run in float64 on the arrays' own device (NumPy or CuPy); one number comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .runtime import device
from .tuning.copies import float64_copies


def float_leaves(value: Any) -> list[Any]:
    """The floating-point arrays in an output (nested tuples/lists), NumPy or CuPy as they are."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in float_leaves(item)]
    array = value if device.is_cupy_array(value) else np.asarray(value)
    return [array] if np.issubdtype(array.dtype, np.floating) else []


def _sum_of_squares(x: Any) -> float:
    return float((x * x).sum())  # on the array's own device; float() brings one number back


def output_error(outputs: Any, reference: Any) -> float:
    """MixPert Eq. 10 over all floating-point outputs together (inf if any is non-finite)."""
    got, want = float_leaves(outputs), float_leaves(reference)
    if len(got) != len(want):
        raise ValueError(f"{len(got)} float outputs, reference has {len(want)}")
    num = sum(
        _sum_of_squares(g.astype(np.float64) - w.astype(np.float64))
        for g, w in zip(got, want, strict=True)
    )
    den = sum(_sum_of_squares(w.astype(np.float64)) for w in want)
    return ratio_of_sums(num, den)


def ratio_of_sums(num: float, den: float) -> float:
    """sqrt(num / den) from the squared norms of a difference and a reference: inf where the
    difference is not finite, the absolute norm where the reference is zero."""
    if not np.isfinite(num):
        return float("inf")
    return float(np.sqrt(num / den)) if den > 0 else float(np.sqrt(num))


def relative_error(c: Any, reference: Any) -> float:
    """MixPert Eq. 10 for one product: ||C - C64||_F / ||C64||_F (inf if C is not finite)."""
    return output_error(c, reference)


def reference_outputs(py_func: Callable[..., Any], args: Sequence[Any]) -> Any:
    """The undecorated function on float64 copies of the inputs, on their own device
    (NumPy arrays under NumPy, CuPy arrays under CuPy: float64 GEMMs there are exact enough)."""
    return py_func(*float64_copies(args))


def float64_product(a: Any, b: Any) -> Any:
    """The float64 product of the float32 operands: what a product's error is measured against."""
    return a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)

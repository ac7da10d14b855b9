"""Checks on the operands of a product: errors name the operand, the value and the rule."""

from __future__ import annotations

from typing import Any

import numpy as np

ACCEPTED_FLOATS = (np.float16, np.float32, np.float64)


def check_operand(name: str, x: Any) -> None:
    """Raise TypeError/ValueError unless ``x`` is a 2-D real floating-point array."""
    dtype = getattr(x, "dtype", None)
    ndim = getattr(x, "ndim", None)
    if dtype is None or ndim is None:
        raise TypeError(
            f"operand {name} is a {type(x).__name__}; mixpert.matmul takes NumPy or CuPy arrays"
        )
    if ndim != 2:
        raise ValueError(
            f"operand {name} has ndim={ndim} (shape {tuple(x.shape)}); "
            "mixpert.matmul multiplies 2-D matrices only"
        )
    if np.dtype(dtype).type not in ACCEPTED_FLOATS:
        raise TypeError(
            f"operand {name} has dtype {np.dtype(dtype)}; mixpert.matmul takes real floating-point "
            "matrices (float32, or float16/float64, which are rounded to float32)"
        )


def check_pair(a: Any, b: Any) -> None:
    check_operand("a", a)
    check_operand("b", b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"a.shape[1] = {a.shape[1]} must equal b.shape[0] = {b.shape[0]} "
            f"to form a @ b (a is {tuple(a.shape)}, b is {tuple(b.shape)})"
        )

"""Checks on the arguments of a product: errors name the operand, the value and the rule."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

ACCEPTED_FLOATS = (np.float16, np.float32, np.float64)
Backend = Literal["auto", "cpu", "cuda"]
BACKENDS: tuple[Backend, ...] = ("auto", "cpu", "cuda")


def check_backend(backend: Any) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {', '.join(map(repr, BACKENDS))}")


def refuse_masked(values: Any, names: Any = None) -> None:
    """TypeError for a NumPy masked array with masked entries: the mask would be dropped."""
    for position, x in enumerate(values):
        if isinstance(x, np.ma.MaskedArray) and np.ma.is_masked(x):
            name = names[position] if names else f"argument {position}"
            raise TypeError(
                f"{name} is a masked array with {int(np.ma.count_masked(x))} masked entries; "
                "mixpert would compute with the values under the mask: pass x.filled(fill) or "
                "np.ma.getdata(x) to say which values to use"
            )


def check_operand(name: str, x: Any, matrix: bool = True) -> None:
    """Raise TypeError/ValueError unless ``x`` is a real floating-point array: a 2-D matrix,
    or with ``matrix=False`` any array of at least one dimension (np.matmul's operands)."""
    refuse_masked([x], [f"operand {name}"])
    dtype = getattr(x, "dtype", None)
    ndim = getattr(x, "ndim", None)
    if dtype is None or ndim is None:
        raise TypeError(
            f"operand {name} is a {type(x).__name__}; mixpert.matmul takes NumPy or CuPy arrays"
        )
    if ndim == 0 or (matrix and ndim != 2):
        rule = (
            "this step multiplies 2-D matrices only"
            if matrix
            else "mixpert.matmul, like np.matmul, needs operands of at least 1 dimension "
            "(2-D matrices, 1-D vectors or N-D stacks)"
        )
        raise ValueError(f"operand {name} has ndim={ndim} (shape {tuple(x.shape)}); {rule}")
    if np.dtype(dtype).type not in ACCEPTED_FLOATS:
        raise TypeError(
            f"operand {name} has dtype {np.dtype(dtype)}; mixpert.matmul takes real floating-point "
            "arrays (float32, or float16/float64, which are rounded to float32)"
        )


def check_pair(a: Any, b: Any) -> None:
    check_operand("a", a)
    check_operand("b", b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"a.shape[1] = {a.shape[1]} must equal b.shape[0] = {b.shape[0]} "
            f"to form a @ b (a is {tuple(a.shape)}, b is {tuple(b.shape)})"
        )

"""Products mixpert does not emulate, given NumPy's meaning where Numba alone has none.

Numba's ``a @ b`` / ``np.dot`` take float or complex arrays of one dtype, 1-D or 2-D. For the
sites it rewrites, mixpert picks instead (``implementation``): two numeric dtypes promote as
NumPy promotes them (float64 @ float32 is float64, complex64 @ float32 is complex64); integer
and boolean products are exact and wrap on overflow as NumPy's integers do; stacks of another
float or complex dtype multiply pair by pair with broadcast stack dimensions. What still has no
meaning (a scalar operand, a 0-D array, ``np.dot`` of stacks, stacks of mixed or integer dtypes)
raises ``ProductTypingError`` naming the site, its line, the two operand types and what to do,
instead of Numba's trace through mixpert's stub.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import numpy as np
from numba import types
from numba.core import errors
from numba.extending import register_jitable
from numba.np.numpy_support import as_dtype

from mixpert.execution.op_ids import op_id_of


@register_jitable
def check_inner(a, b):  # type: ignore[no-untyped-def]
    if a.shape[-1] != b.shape[-2]:
        raise ValueError("a @ b: a.shape[-1] differs from b.shape[-2] (np.matmul's rule)")


@register_jitable
def broadcast_stacks(a, b):  # type: ignore[no-untyped-def]
    """The stack dimensions broadcast (ValueError when they do not), and both stacks as
    contiguous (pairs, rows, columns) arrays of matching pairs."""
    check_inner(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_all = np.ascontiguousarray(np.broadcast_to(a, batch + (m, k))).reshape((-1, m, k))
    b_all = np.ascontiguousarray(np.broadcast_to(b, batch + (k, n))).reshape((-1, k, n))
    return batch, a_all, b_all


def _common_dtype(a: types.Type, b: types.Type) -> Any | None:
    """NumPy's result dtype for a product of two numeric arrays (float64 @ float32 is float64,
    int32 @ int64 is int64), else None (not two arrays of numbers)."""
    numeric = (types.Boolean, types.Integer, types.Float, types.Complex)
    if not all(isinstance(x, types.Array) and isinstance(x.dtype, numeric) for x in (a, b)):
        return None
    return np.result_type(as_dtype(a.dtype), as_dtype(b.dtype))


@register_jitable
def _integer_product(a, b, dtype):  # type: ignore[no-untyped-def]
    """np.matmul / np.dot of integer or boolean matrices and vectors (Numba's BLAS products take
    floats only): exact sums in ``dtype``, wrapping on overflow as NumPy's integers do."""
    a2 = a.reshape((1, a.shape[0])) if a.ndim == 1 else a
    b2 = b.reshape((b.shape[0], 1)) if b.ndim == 1 else b
    if a2.shape[1] != b2.shape[0]:
        raise ValueError("matmul: the inner dimensions of the operands differ")
    out = np.zeros((a2.shape[0], b2.shape[1]), dtype=dtype)
    for i in range(a2.shape[0]):
        for q in range(a2.shape[1]):
            x = dtype(a2[i, q])
            for j in range(b2.shape[1]):
                out[i, j] += x * dtype(b2[q, j])
    return out


@register_jitable
def _as_bool(x):  # type: ignore[no-untyped-def]
    return x != 0


@register_jitable
def _unchanged(x):  # type: ignore[no-untyped-def]
    return x


def _integer_impl(a: types.Array, b: types.Array, common: Any):  # type: ignore[no-untyped-def]
    boolean = common == np.bool_  # NumPy: OR of ANDs, a boolean (counted here, then tested)
    dtype = np.int64 if boolean else common.type
    finish = _as_bool if boolean else _unchanged
    if a.ndim == 1 and b.ndim == 1:
        return lambda op_index, a, b: finish(_integer_product(a, b, dtype)[0, 0])
    if a.ndim == 1 or b.ndim == 1:
        return lambda op_index, a, b: finish(_integer_product(a, b, dtype).ravel())
    return lambda op_index, a, b: finish(_integer_product(a, b, dtype))


def _promoted_impl(kind: str, common: Any):  # type: ignore[no-untyped-def]
    if kind == "matmul":
        return lambda op_index, a, b: a.astype(common) @ b.astype(common)
    if kind == "dot":
        return lambda op_index, a, b: np.dot(a.astype(common), b.astype(common))
    return lambda op_index, a, b: a.astype(common).dot(b.astype(common))


def _native_stacks(op_index, a, b):  # type: ignore[no-untyped-def]
    """np.matmul of stacks of another float or complex dtype: one BLAS product per pair."""
    batch, a_all, b_all = broadcast_stacks(a, b)
    out = np.empty((a_all.shape[0], a.shape[-2], b.shape[-1]), dtype=a_all.dtype)
    for i in range(a_all.shape[0]):
        out[i] = np.dot(a_all[i], b_all[i])
    return out.reshape(batch + (a.shape[-2], b.shape[-1]))


SPELLING = {"matmul": "a @ b", "dot": "np.dot(a, b)", "method_dot": "a.dot(b)"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REFUSAL = re.compile(r"mixpert: (\S+:\d+): (.*)")
_LOCATION = re.compile(r'File "([^"]+)", line (\d+)')


class ProductTypingError(TypeError):
    """A product site mixpert cannot compile, named with its operands' types and the reason."""


def product_typing_error(error: Exception) -> ProductTypingError | None:
    """The refusal ``_refuse`` raised inside Numba's typing error, as one short error naming
    the site and where it is; None when ``error`` holds no such refusal."""
    text = _ANSI.sub("", str(error))
    refusal = _REFUSAL.search(text)
    if refusal is None:
        return None
    where = _LOCATION.findall(text)
    place = f' (File "{where[-1][0]}", line {where[-1][1]})' if where else ""
    return ProductTypingError(f"product site {refusal.group(1)}{place}: {refusal.group(2)}")


def _refuse(op_index: types.Type, kind: str, a: types.Type, b: types.Type, why: str) -> NoReturn:
    site = op_id_of(getattr(op_index, "literal_value", -1)) or "a product site"
    raise errors.TypingError(f"mixpert: {site}: {SPELLING[kind]} with a = {a} and b = {b}: {why}")


def implementation(
    kind: str, op_index: types.Type, a: types.Type, b: types.Type, native: Any
) -> Any:
    """The implementation of a site of ``kind`` for operands mixpert does not emulate
    (``native``: Numba's own operation), or ProductTypingError."""
    common = _common_dtype(a, b)
    why = _unsupported(kind, a, b, common)
    if why is not None:
        _refuse(op_index, kind, a, b, why)
    if max(a.ndim, b.ndim) > 2:
        return _native_stacks
    if common.kind in "biu":
        return _integer_impl(a, b, common)
    return _promoted_impl(kind, common) if a.dtype != b.dtype else native


def _unsupported(kind: str, a: types.Type, b: types.Type, common: Any) -> str | None:
    """Why mixpert cannot compile this product (None: it can), in the user's terms."""
    if common is None:
        bad = b if isinstance(a, types.Array) else a
        hint = " (to scale by a number, use *)" if isinstance(bad, types.Number) else ""
        return f"{bad} is not an array of numbers{hint}"
    if min(a.ndim, b.ndim) == 0:
        return "a 0-D operand is not a matrix or a vector"
    if max(a.ndim, b.ndim) <= 2:
        return None
    if kind != "matmul":
        return "np.dot of N-D arrays is not supported here; for stacks write a @ b or np.matmul"
    if common.kind in "biu" or a.dtype != b.dtype:
        return "stacks of mixed or integer dtypes are not supported; convert them with .astype"
    return None

"""Products mixpert does not emulate: Numba's own where Numba has one, else NumPy's meaning.

Numba's ``a @ b`` / ``np.dot`` / ``a.dot(b)`` take float or complex arrays of one dtype, 1-D or
2-D; it has no ``np.matmul``, no ``a @= b``, and its ``np.dot(a, b, out)`` wants three arrays of
one dtype. For the sites it rewrites, mixpert picks instead (``implementation``):

- Numba's own operation where Numba has one (operands of unknown layout 'A' made contiguous
  first, as Numba's product does anyway, so that Numba's contiguity warning comes once, from
  the site: ``native_sites``);
- two numeric dtypes promote as NumPy promotes them (float64 @ float32 is float64, complex64 @
  float32 is complex64); integer and boolean products are exact and wrap on overflow as
  NumPy's integers do;
- stacks (N-D, N >= 3, on either side; the other a vector, a matrix or a stack) follow
  ``np.matmul``: stack dimensions broadcast, a shared vector or matrix folds into one product;
  ``np.dot`` and ``a.dot(b)`` of N-D arrays follow ``np.dot`` (a's last axis against b's
  second-to-last);
- ``a @= b`` and ``np.dot(a, b, out)`` follow NumPy's rules for the array written into.

``np.dot`` with a number or a 0-D array on one side multiplies, as NumPy does. What NumPy
itself refuses (``a @ 2.0``, ``a @= b`` with a 1-D ``b`` or a product ``a`` cannot hold, an
``out`` of another dtype or layout) raises ``ProductTypingError`` at compile time, naming the
site, its line, the operand types and what to do, instead of Numba's trace through mixpert's
stubs.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import numpy as np
from numba import types
from numba.core import errors
from numba.extending import overload, register_jitable
from numba.np.numpy_support import as_dtype

from mixpert.execution.op_ids import op_id_of


@register_jitable
def check_inner(a, b):  # type: ignore[no-untyped-def]
    if a.shape[-1] != b.shape[-2]:
        raise ValueError("a @ b: a.shape[-1] differs from b.shape[-2] (np.matmul's rule)")


@register_jitable
def count(shape):  # type: ignore[no-untyped-def]
    """The product of a non-empty shape: reshapes spell their sizes out, since -1 cannot
    stand for a size beside a zero one (an empty stack of k = 0 matrices)."""
    total = 1
    for size in shape:
        total *= size
    return total


@register_jitable
def broadcast_stacks(a, b):  # type: ignore[no-untyped-def]
    """The stack dimensions broadcast (ValueError when they do not), and both stacks as
    contiguous (pairs, rows, columns) arrays of matching pairs."""
    check_inner(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    pairs = count(batch)
    a_all = np.ascontiguousarray(np.broadcast_to(a, batch + (m, k))).reshape((pairs, m, k))
    b_all = np.ascontiguousarray(np.broadcast_to(b, batch + (k, n))).reshape((pairs, k, n))
    return batch, a_all, b_all


# --- helpers chosen by operand type (Numba picks the body when it types the call) -----------


def contiguous(x: Any) -> Any:
    """``x`` in C order when its layout is not known to be C or F (Numba's products copy
    such an operand anyway; the copy here keeps Numba from warning a second time)."""
    return np.ascontiguousarray(x)


@overload(contiguous)
def _ol_contiguous(x):  # type: ignore[no-untyped-def]
    if isinstance(x, types.Array) and x.layout == "A":
        return lambda x: np.ascontiguousarray(x)
    return lambda x: x


def rows_of(a: Any) -> Any:
    """``a`` as a matrix of rows (its last axis the columns): a vector is one row."""
    return np.reshape(a, (int(np.prod(a.shape[:-1])), a.shape[-1]))


@overload(rows_of)
def _ol_rows_of(a):  # type: ignore[no-untyped-def]
    if a.ndim == 1:
        return lambda a: np.ascontiguousarray(a).reshape((1, a.shape[0]))
    if a.ndim == 2:
        return lambda a: contiguous(a)
    return lambda a: np.ascontiguousarray(a).reshape((count(a.shape[:-1]), a.shape[-1]))


def columns_of(b: Any) -> Any:
    """``b`` as a (k, columns) matrix: a vector is one column; a stack (..., k, n) puts its
    matrices side by side, stack index major (NumPy's order of the product's axes)."""
    return b


@overload(columns_of)
def _ol_columns_of(b):  # type: ignore[no-untyped-def]
    if b.ndim == 1:
        return lambda b: np.ascontiguousarray(b).reshape((b.shape[0], 1))
    if b.ndim == 2:
        return lambda b: contiguous(b)

    def impl(b):  # type: ignore[no-untyped-def]
        k, n, matrices = b.shape[-2], b.shape[-1], count(b.shape[:-2])
        stack = np.ascontiguousarray(b).reshape((matrices, k, n))
        return np.ascontiguousarray(stack.transpose((1, 0, 2))).reshape((k, matrices * n))

    return impl


def contracted(b: Any) -> int:
    """The length of ``b``'s axis a product sums over (its only or its second-to-last)."""
    return int(b.shape[0] if b.ndim == 1 else b.shape[-2])


@overload(contracted)
def _ol_contracted(b):  # type: ignore[no-untyped-def]
    if b.ndim == 1:
        return lambda b: b.shape[0]
    return lambda b: b.shape[-2]


def dot_shape(a: Any, b: Any) -> tuple[int, ...]:
    """``np.dot(a, b).shape``: a's axes but its last, then b's but its contracted one."""
    return np.dot(a, b).shape


@overload(dot_shape)
def _ol_dot_shape(a, b):  # type: ignore[no-untyped-def]
    if b.ndim == 1:
        return lambda a, b: a.shape[:-1]
    return lambda a, b: a.shape[:-1] + b.shape[:-2] + (b.shape[-1],)


def converted(x: Any, dtype: Any) -> Any:
    """``x`` as ``dtype``: itself (contiguous) when it has it, else a converted copy."""
    return x.astype(dtype)


@overload(converted)
def _ol_converted(x, dtype):  # type: ignore[no-untyped-def]
    if x.dtype == dtype.instance_type:
        return lambda x, dtype: contiguous(x)
    return lambda x, dtype: x.astype(dtype)


@register_jitable
def _integer_product(a, b, dtype):  # type: ignore[no-untyped-def]
    """np.matmul / np.dot of integer or boolean matrices and vectors (Numba's BLAS products take
    floats only): exact sums in ``dtype``, wrapping on overflow as NumPy's integers do."""
    a2 = np.ascontiguousarray(a).reshape((1, a.shape[0])) if a.ndim == 1 else a
    b2 = np.ascontiguousarray(b).reshape((b.shape[0], 1)) if b.ndim == 1 else b
    if a2.shape[1] != b2.shape[0]:
        raise ValueError("matmul: the inner dimensions of the operands differ")
    out = np.zeros((a2.shape[0], b2.shape[1]), dtype=dtype)
    for i in range(a2.shape[0]):
        for q in range(a2.shape[1]):
            x = dtype(a2[i, q])
            for j in range(b2.shape[1]):
                out[i, j] += x * dtype(b2[q, j])
    return out


def matrix_product(x: Any, y: Any) -> Any:
    """NumPy's product of two matrices of any numeric dtypes (promoted, integers exact)."""
    return np.dot(x, y)


@overload(matrix_product)
def _ol_matrix_product(x, y):  # type: ignore[no-untyped-def]
    common = np.result_type(as_dtype(x.dtype), as_dtype(y.dtype))
    if common == np.bool_:  # NumPy: OR of ANDs, a boolean (counted here, then tested)
        return lambda x, y: _integer_product(x, y, np.int64) != 0
    if common.kind in "iu":
        accumulate = common.type
        return lambda x, y: _integer_product(x, y, accumulate)
    dtype = common.type
    return lambda x, y: np.dot(converted(x, dtype), converted(y, dtype))


# --- implementations of a site (op_index, a, b) ------------------------------------------------


@register_jitable
def _as_bool(x):  # type: ignore[no-untyped-def]
    return x != 0


@register_jitable
def _unchanged(x):  # type: ignore[no-untyped-def]
    return x


def _integer_impl(a: types.Array, b: types.Array, common: Any):  # type: ignore[no-untyped-def]
    boolean = common == np.bool_
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


@register_jitable
def _check_contracted(a, b):  # type: ignore[no-untyped-def]
    if a.shape[-1] != contracted(b):
        raise ValueError("a @ b: a.shape[-1] differs from b's contracted dimension")


def matmul_stacks(a: types.Array, b: types.Array, common: Any):  # type: ignore[no-untyped-def]
    """``np.matmul(a, b)`` with a stack on at least one side: a shared vector or matrix folds
    into one product, two stacks multiply pair by pair (stack dimensions broadcast)."""
    if b.ndim <= 2:  # a's stack folds into rows: (..., m, k) -> (rows, k)
        if b.ndim == 1:
            return lambda op_index, a, b: matrix_product(rows_of(a), columns_of(b)).reshape(
                a.shape[:-1]
            )
        return lambda op_index, a, b: matrix_product(rows_of(a), b).reshape(
            a.shape[:-1] + (b.shape[-1],)
        )
    if a.ndim == 1:  # b's stack folds into columns, the vector is one row
        return lambda op_index, a, b: matrix_product(rows_of(a), columns_of(b)).reshape(
            b.shape[:-2] + (b.shape[-1],)
        )
    if a.ndim == 2:

        def matrix_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
            _check_contracted(a, b)
            m, n, matrices = a.shape[0], b.shape[-1], count(b.shape[:-2])
            wide = matrix_product(a, columns_of(b))  # (m, matrices * n)
            pairs = np.ascontiguousarray(wide.reshape((m, matrices, n)).transpose((1, 0, 2)))
            return pairs.reshape(b.shape[:-2] + (m, n))

        return matrix_times_stack
    dtype = common.type

    def stack_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
        batch, a_all, b_all = broadcast_stacks(a, b)
        out = np.empty((a_all.shape[0], a.shape[-2], b.shape[-1]), dtype)
        for i in range(a_all.shape[0]):
            out[i] = matrix_product(a_all[i], b_all[i])
        return out.reshape(batch + (a.shape[-2], b.shape[-1]))

    return stack_times_stack


def _dot_stacks(op_index, a, b):  # type: ignore[no-untyped-def]
    """``np.dot(a, b)`` with an N-D operand (N >= 3): a's rows against b's columns, in one
    product."""
    _check_contracted(a, b)
    return matrix_product(rows_of(a), columns_of(b)).reshape(dot_shape(a, b))


SPELLING = {
    "matmul": "a @ b",
    "dot": "np.dot(a, b)",
    "method_dot": "a.dot(b)",
    "imatmul": "a @= b",
    "dot_out": "np.dot(a, b, out)",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REFUSAL = re.compile(r"mixpert: (\S+:\d+): (.*)")
_LOCATION = re.compile(r'File "([^"]+)", line (\d+)')


class ProductTypingError(errors.TypingError, TypeError):
    """A product site mixpert cannot compile, named with its operands' types and the reason.

    A Numba ``TypingError`` (what ``numba.njit`` raises for a product it cannot type) and a
    ``TypeError`` (what NumPy raises for operands it cannot multiply)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, highlighting=False)


def product_typing_error(error: Exception) -> ProductTypingError | None:
    """The refusal ``refuse`` raised inside Numba's typing error, as one short error naming
    the site and where it is; None when ``error`` holds no such refusal."""
    if isinstance(error, ProductTypingError):
        return error
    text = _ANSI.sub("", str(error))
    refusal = _REFUSAL.search(text)
    if refusal is None:
        return None
    where = _LOCATION.findall(text)
    place = f' (File "{where[-1][0]}", line {where[-1][1]})' if where else ""
    return ProductTypingError(f"product site {refusal.group(1)}{place}: {refusal.group(2)}")


def refuse(op_index: types.Type, kind: str, a: types.Type, b: types.Type, why: str) -> NoReturn:
    site = op_id_of(getattr(op_index, "literal_value", -1)) or "a product site"
    raise errors.TypingError(f"mixpert: {site}: {SPELLING[kind]} with a = {a} and b = {b}: {why}")


def common_dtype(a: types.Type, b: types.Type) -> Any | None:
    """NumPy's result dtype for a product of two numeric arrays (float64 @ float32 is float64,
    int32 @ int64 is int64), else None (not two arrays of numbers)."""
    numeric = (types.Boolean, types.Integer, types.Float, types.Complex)
    if not all(isinstance(x, types.Array) and isinstance(x.dtype, numeric) for x in (a, b)):
        return None
    return np.result_type(as_dtype(a.dtype), as_dtype(b.dtype))


def numba_multiplies(a: types.Type, b: types.Type) -> bool:
    """Whether Numba's own ``a @ b`` / ``np.dot(a, b)`` takes these operands: float or complex
    arrays of one dtype, each 1-D or 2-D."""
    return (
        all(isinstance(x, types.Array) and x.ndim in (1, 2) for x in (a, b))
        and a.dtype == b.dtype
        and isinstance(a.dtype, (types.Float, types.Complex))
    )


def implementation(
    kind: str, op_index: types.Type, a: types.Type, b: types.Type, native: Any
) -> Any:
    """The implementation of a site of ``kind`` ("matmul", "dot" or "method_dot") for operands
    mixpert does not emulate (``native``: Numba's own operation), or ProductTypingError."""
    if kind != "matmul":
        scaled = _scaled_impl(a, b)
        if scaled is not None:
            return scaled
    common = common_dtype(a, b)
    why = unsupported(a, b, common)
    if why is not None:
        refuse(op_index, kind, a, b, why)
    if max(a.ndim, b.ndim) > 2:
        return matmul_stacks(a, b, common) if kind == "matmul" else _dot_stacks
    if common.kind in "biu":
        return _integer_impl(a, b, common)
    return _promoted_impl(kind, common) if a.dtype != b.dtype else native


_NUMBERS = (types.Boolean, types.Integer, types.Float, types.Complex)


def _scaled_impl(a: types.Type, b: types.Type):  # type: ignore[no-untyped-def]
    """``np.dot`` of an array and a number (or a 0-D array): NumPy multiplies, in the dtype of
    both as arrays (np.dot(float32 array, 2.0) is float64); None for other operands."""
    kinds = []
    for x in (a, b):
        if isinstance(x, _NUMBERS):
            kinds.append((as_dtype(x), 0))
        elif isinstance(x, types.Array) and isinstance(x.dtype, _NUMBERS):
            kinds.append((as_dtype(x.dtype), x.ndim))
        else:
            return None
    if min(n for _, n in kinds) > 0 or max(n for _, n in kinds) == 0:
        return None  # two arrays, or no array: not a scaling
    dtype = np.result_type(kinds[0][0], kinds[1][0]).type
    return lambda op_index, a, b: np.asarray(a).astype(dtype) * np.asarray(b).astype(dtype)


def unsupported(a: types.Type, b: types.Type, common: Any) -> str | None:
    """Why NumPy has no product of these operands (None: it has), in the user's terms."""
    if common is None:
        bad = b if isinstance(a, types.Array) else a
        hint = " (to scale by a number, use *)" if isinstance(bad, types.Number) else ""
        return f"{bad} is not an array of numbers{hint}"
    if min(a.ndim, b.ndim) == 0:
        return "a 0-D operand is not a matrix or a vector"
    return None


def in_place_refusal(a: types.Type, b: types.Type) -> str | None:
    """Why NumPy refuses ``a @= b`` for these operand types (None: it computes it): the
    product is written into ``a``, so ``b`` must be a matrix or a stack, and the product's
    dtype must cast to a's under NumPy's same_kind rule."""
    common = common_dtype(a, b)
    why = unsupported(a, b, common)
    if why is not None:
        return why
    if b.ndim < 2:
        return (
            "NumPy's in-place matmul needs b of at least 2 dimensions (the product must keep "
            "a's shape); write a = a @ b"
        )
    if not np.can_cast(common, as_dtype(a.dtype), "same_kind"):
        return (
            f"the product is {common}, which NumPy does not write into a's {a.dtype} "
            "(same_kind casting); write a = a @ b"
        )
    return None


def out_refusal(a: types.Type, b: types.Type, out: types.Type) -> str | None:
    """Why NumPy (and Numba) refuse ``np.dot(a, b, out)`` for these types (None: NumPy
    computes it): ``out`` must be a C-contiguous array of the product's dtype. (An out of the
    wrong shape is NumPy's and Numba's ValueError at run time.)"""
    common = common_dtype(a, b)
    why = unsupported(a, b, common)
    if why is not None:
        return why
    if not isinstance(out, types.Array):
        return f"out = {out} is not an array"
    if as_dtype(out.dtype) != common:
        return (
            f"out is {out.dtype} but the product is {common}; np.dot writes only into an out "
            "of the product's dtype"
        )
    if out.layout != "C":
        return f"out = {out} is not C-contiguous (np.dot writes only into a C-contiguous out)"
    return None


def numba_writes_out(a: types.Type, b: types.Type, out: types.Type) -> bool:
    """Whether Numba's own ``np.dot(a, b, out)`` takes these types (NumPy's rules hold)."""
    return (
        numba_multiplies(a, b)
        and (a.ndim, b.ndim) != (1, 1)
        and isinstance(out, types.Array)
        and out.dtype == a.dtype
    )

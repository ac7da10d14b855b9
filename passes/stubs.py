"""What a rewritten site calls: ``mixpert_matmul``, ``mixpert_dot``, ``mixpert_method_dot``,
``mixpert_dot_out``.

Each takes ``(op_index, a, b)``. In nopython code an ``@overload`` picks the implementation from
the operand types: 2-D float32 x 2-D float32 calls the run-time hook through the ``mixpert_gemm``
symbol; float32 stacks (``a @ b`` and ``np.matmul`` with an N-D operand, N >= 3, the other 2-D or
N-D, stack dimensions broadcast as np.matmul does) take the routes of ``runtime.batched`` (a
shared matrix folds the stack into one product); any other operands (float64, complex,
integers, 1-D) keep Numba's own operation (``a @ b``,
``np.dot(a, b)`` or ``a.dot(b)``), after promoting two real dtypes as NumPy does (float64 @
float32 is float64, which Numba alone refuses). In object mode (CuPy arrays) the plain Python
bodies below run instead, with the same rule, through the same hook.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import numpy as np
from numba import types
from numba.core import errors
from numba.extending import overload, register_jitable
from numba.np.numpy_support import as_dtype

from mixpert.execution.hook import MixpertRuntimeError, Status, emulable, run_site
from mixpert.execution.op_ids import op_id_of

from .gemm_call import gemm_call

# Compiled code compares the status with plain integers (frozen in as constants).
_OK, _NATIVE = int(Status.OK), int(Status.NATIVE)


def mixpert_matmul(op_index: int, a: Any, b: Any) -> Any:
    """``a @ b`` at the active plan's level for op ``op_index``."""
    return run_site(op_index, a, b, lambda x, y: x @ y, matmul=True)


def mixpert_dot(op_index: int, a: Any, b: Any) -> Any:
    """``np.dot(a, b)`` at the active plan's level for op ``op_index``."""
    return run_site(op_index, a, b, lambda x, y: np.dot(x, y))


def mixpert_method_dot(op_index: int, a: Any, b: Any) -> Any:
    """``a.dot(b)`` at the active plan's level for op ``op_index``."""
    return run_site(op_index, a, b, lambda x, y: x.dot(y))


def mixpert_dot_out(op_index: int, a: Any, b: Any, out: Any) -> Any:
    """``np.dot(a, b, out)`` at the active plan's level for op ``op_index``."""
    if not emulable(a, b):
        return np.dot(a, b, out)
    out[...] = run_site(op_index, a, b, lambda x, y: np.dot(x, y))
    return out


def mixpert_imatmul(op_index: int, a: Any, b: Any) -> Any:
    """``a @= b`` at the active plan's level for op ``op_index``: the product written into a."""
    if not emulable(a, b):
        a @= b
        return a
    a[...] = run_site(op_index, a, b, lambda x, y: x @ y, matmul=True)
    return a


STUBS = {
    "matmul": mixpert_matmul,
    "imatmul": mixpert_imatmul,
    "dot": mixpert_dot,
    "method_dot": mixpert_method_dot,
    "dot_out": mixpert_dot_out,
}


def _emulable(a: types.Type, b: types.Type) -> bool:
    return all(
        isinstance(x, types.Array) and x.ndim == 2 and x.dtype == types.float32 for x in (a, b)
    )


# One implementation per spelling, each running the spelling itself as the native fallback
# (written out rather than calling a shared helper: one function less to compile per signature).
def _native_impl(kind: str):  # type: ignore[no-untyped-def]
    if kind == "matmul":
        return lambda op_index, a, b: a @ b
    if kind == "dot":
        return lambda op_index, a, b: np.dot(a, b)
    return lambda op_index, a, b: a.dot(b)


def _matmul_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return a @ b
    if status != _OK:  # Status.ERROR: the wrapper re-raises the runtime's exception
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


def _dot_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return np.dot(a, b)
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


def _method_dot_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return a.dot(b)
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


def _stacked(a: types.Type, b: types.Type) -> str | None:
    """Which route a float32 stack product ``a @ b`` takes (Numba itself multiplies 2-D operands
    only): "fold A" for a stack times one matrix, "fold B" for one matrix times a stack,
    "pairs" for two stacks (broadcast as np.matmul does); None for anything else."""
    if not all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b)):
        return None
    if min(a.ndim, b.ndim) < 2 or max(a.ndim, b.ndim) < 3:
        return None
    if b.ndim == 2:
        return "fold A"
    return "fold B" if a.ndim == 2 else "pairs"


@register_jitable
def _check_inner(a, b):  # type: ignore[no-untyped-def]
    if a.shape[-1] != b.shape[-2]:
        raise ValueError("a @ b: a.shape[-1] differs from b.shape[-2] (np.matmul's rule)")


@register_jitable
def _product(op_index, a, b):  # type: ignore[no-untyped-def]
    """One 2-D product of the site: the runtime's, or Numba's own where the plan says native."""
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


def _stack_times_matrix(op_index, a, b):  # type: ignore[no-untyped-def]
    _check_inner(a, b)
    m, k = a.shape[-2], a.shape[-1]
    folded = np.ascontiguousarray(a).reshape((-1, k))  # one product for the whole stack
    return _product(op_index, folded, b).reshape(a.shape[:-2] + (m, b.shape[1]))


def _matrix_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
    _check_inner(a, b)
    k, n = b.shape[-2], b.shape[-1]
    stack = np.ascontiguousarray(b).reshape((-1, k, n))
    batch = stack.shape[0]
    columns = np.empty((k, batch * n), dtype=np.float32)  # the stack side by side: one product
    for i in range(batch):
        columns[:, i * n : (i + 1) * n] = stack[i]
    wide = _product(op_index, a, columns)
    m = a.shape[0]
    out = np.empty((batch, m, n), dtype=np.float32)
    for i in range(batch):
        out[i] = wide[:, i * n : (i + 1) * n]
    return out.reshape(b.shape[:-2] + (m, n))


@register_jitable
def _broadcast_stacks(a, b):  # type: ignore[no-untyped-def]
    """The stack dimensions broadcast (ValueError when they do not), and both stacks as
    contiguous (pairs, rows, columns) arrays of matching pairs."""
    _check_inner(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_all = np.ascontiguousarray(np.broadcast_to(a, batch + (m, k))).reshape((-1, m, k))
    b_all = np.ascontiguousarray(np.broadcast_to(b, batch + (k, n))).reshape((-1, k, n))
    return batch, a_all, b_all


def _stack_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
    batch, a_all, b_all = _broadcast_stacks(a, b)
    out = np.empty((a_all.shape[0], a.shape[-2], b.shape[-1]), dtype=np.float32)
    for i in range(a_all.shape[0]):
        out[i] = _product(op_index, a_all[i], b_all[i])
    return out.reshape(batch + (a.shape[-2], b.shape[-1]))


STACKED = {
    "fold A": _stack_times_matrix,
    "fold B": _matrix_times_stack,
    "pairs": _stack_times_stack,
}


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


def _integer_impl(a: types.Array, b: types.Array, common: Any):  # type: ignore[no-untyped-def]
    dtype = np.int64 if common == np.bool_ else common.type  # bools sum as integers here
    if a.ndim == 1 and b.ndim == 1:
        return lambda op_index, a, b: _integer_product(a, b, dtype)[0, 0]
    if a.ndim == 1 or b.ndim == 1:
        return lambda op_index, a, b: _integer_product(a, b, dtype).ravel()
    return lambda op_index, a, b: _integer_product(a, b, dtype)


def _promoted_impl(kind: str, common: Any):  # type: ignore[no-untyped-def]
    if kind == "matmul":
        return lambda op_index, a, b: a.astype(common) @ b.astype(common)
    if kind == "dot":
        return lambda op_index, a, b: np.dot(a.astype(common), b.astype(common))
    return lambda op_index, a, b: a.astype(common).dot(b.astype(common))


def _native_stacks(op_index, a, b):  # type: ignore[no-untyped-def]
    """np.matmul of stacks of another float or complex dtype: one BLAS product per pair."""
    batch, a_all, b_all = _broadcast_stacks(a, b)
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


def _make_overload(stub: Any, kind: str, emulated: Any) -> None:
    native = _native_impl(kind)

    @overload(stub)
    def _ol(op_index, a, b):  # type: ignore[no-untyped-def]
        if _emulable(a, b):
            return emulated
        route = _stacked(a, b) if kind == "matmul" else None
        if route is not None:
            return STACKED[route]
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


_make_overload(mixpert_matmul, "matmul", _matmul_impl)
_make_overload(mixpert_dot, "dot", _dot_impl)
_make_overload(mixpert_method_dot, "method_dot", _method_dot_impl)


def _dot_out_impl(op_index, a, b, out):  # type: ignore[no-untyped-def]
    status, product = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return np.dot(a, b, out)
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    if out.shape != product.shape:
        raise ValueError("np.dot: out has the wrong shape for the product")
    out[...] = product
    return out


@overload(mixpert_dot_out)
def _ol_dot_out(op_index, a, b, out):  # type: ignore[no-untyped-def]
    emulated = _emulable(a, b) and isinstance(out, types.Array) and out.dtype == types.float32
    if emulated:
        return _dot_out_impl
    return lambda op_index, a, b, out: np.dot(a, b, out)


@register_jitable
def _into_first(a, product):  # type: ignore[no-untyped-def]
    if product.shape != a.shape:
        raise ValueError("a @= b: the product's shape differs from a's")
    a[...] = product
    return a


def _imatmul_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, product = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return _into_first(a, a @ b)
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return _into_first(a, product)


@overload(mixpert_imatmul)
def _ol_imatmul(op_index, a, b):  # type: ignore[no-untyped-def]
    if _emulable(a, b):
        return _imatmul_impl
    # Numba has no @=: NumPy's meaning, the product written into a
    return lambda op_index, a, b: _into_first(a, a @ b)

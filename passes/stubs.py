"""What a rewritten site calls: ``mixpert_matmul``, ``mixpert_dot``, ``mixpert_method_dot``,
``mixpert_dot_out``.

Each takes ``(op_index, a, b)``. In nopython code an ``@overload`` picks the implementation from
the operand types: 2-D float32 x 2-D float32 calls the run-time hook through the ``mixpert_gemm``
symbol; float32 stacks (``a @ b`` and ``np.matmul`` of 3-D @ 2-D, 3-D @ 3-D, 2-D @ 3-D) take the
routes of ``runtime.batched`` (a shared matrix folds the stack into one product); any other
operands (float64, complex, integers, 1-D, deeper stacks) keep Numba's own operation (``a @ b``,
``np.dot(a, b)`` or ``a.dot(b)``), after promoting two real dtypes as NumPy does (float64 @
float32 is float64, which Numba alone refuses). In object mode (CuPy arrays) the plain Python
bodies below run instead, with the same rule, through the same hook.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.extending import overload, register_jitable
from numba.np.numpy_support import as_dtype

from mixpert.execution.hook import MixpertRuntimeError, Status, emulable, run_site

from .gemm_call import gemm_call

# Compiled code compares the status with plain integers (frozen in as constants).
_OK, _NATIVE = int(Status.OK), int(Status.NATIVE)


def mixpert_matmul(op_index: int, a: Any, b: Any) -> Any:
    """``a @ b`` at the active plan's level for op ``op_index``."""
    return run_site(op_index, a, b, lambda x, y: x @ y)


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
    a[...] = run_site(op_index, a, b, lambda x, y: x @ y)
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


def _stacked(a: types.Type, b: types.Type) -> tuple[int, int] | None:
    """(a.ndim, b.ndim) for the float32 stacks ``a @ b`` emulates: 3-D @ 2-D, 3-D @ 3-D and
    2-D @ 3-D (Numba itself multiplies 2-D operands only)."""
    if not all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b)):
        return None
    dims = (a.ndim, b.ndim)
    return dims if dims in ((3, 2), (3, 3), (2, 3)) else None


def _stack_times_matrix(op_index, a, b):  # type: ignore[no-untyped-def]
    batch, m, k = a.shape
    folded = np.ascontiguousarray(a).reshape(batch * m, k)  # one product for the whole stack
    status, out = gemm_call(op_index, folded, b)
    if status == _NATIVE:
        out = np.dot(folded, b)
    elif status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out.reshape(batch, m, b.shape[1])


def _stack_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
    batch = a.shape[0]
    if b.shape[0] != batch:
        raise ValueError("a @ b: the stacks have different lengths")
    out = np.empty((batch, a.shape[1], b.shape[2]), dtype=np.float32)
    for i in range(batch):
        status, product = gemm_call(op_index, a[i], b[i])
        if status == _NATIVE:
            out[i] = np.dot(np.ascontiguousarray(a[i]), np.ascontiguousarray(b[i]))
        elif status != _OK:
            raise MixpertRuntimeError("mixpert runtime call failed")
        else:
            out[i] = product
    return out


def _matrix_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
    batch, k, n = b.shape
    columns = np.ascontiguousarray(b.transpose(1, 0, 2)).reshape(k, batch * n)  # one product
    status, out = gemm_call(op_index, a, columns)
    if status == _NATIVE:
        out = np.dot(np.ascontiguousarray(a), columns)
    elif status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return np.ascontiguousarray(out.reshape(a.shape[0], batch, n).transpose(1, 0, 2))


STACKED = {(3, 2): _stack_times_matrix, (3, 3): _stack_times_stack, (2, 3): _matrix_times_stack}


def _mixed_dtypes(a: types.Type, b: types.Type) -> Any | None:
    """NumPy's common dtype of two arrays of different real dtypes (Numba's products refuse
    them; NumPy promotes: float64 @ float32 is float64), else None."""
    if not all(isinstance(x, types.Array) for x in (a, b)) or a.dtype == b.dtype:
        return None
    if not all(isinstance(x.dtype, (types.Integer, types.Float)) for x in (a, b)):
        return None
    return np.result_type(as_dtype(a.dtype), as_dtype(b.dtype))


def _promoted_impl(kind: str, common: Any):  # type: ignore[no-untyped-def]
    if kind == "matmul":
        return lambda op_index, a, b: a.astype(common) @ b.astype(common)
    if kind == "dot":
        return lambda op_index, a, b: np.dot(a.astype(common), b.astype(common))
    return lambda op_index, a, b: a.astype(common).dot(b.astype(common))


def _make_overload(stub: Any, kind: str, emulated: Any) -> None:
    native = _native_impl(kind)

    @overload(stub)
    def _ol(op_index, a, b):  # type: ignore[no-untyped-def]
        if _emulable(a, b):
            return emulated
        dims = _stacked(a, b) if kind == "matmul" else None
        if dims is not None:
            return STACKED[dims]
        common = _mixed_dtypes(a, b)
        return _promoted_impl(kind, common) if common is not None else native


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

"""What a rewritten site calls: ``mixpert_matmul``, ``mixpert_dot``, ``mixpert_method_dot``,
``mixpert_dot_out``.

Each takes ``(op_index, a, b)``. In nopython code an ``@overload`` picks the implementation from
the operand types: 2-D float32 x 2-D float32 calls the run-time hook through the ``mixpert_gemm``
symbol; float32 stacks (``a @ b`` and ``np.matmul`` with an N-D operand, N >= 3, the other 2-D or
N-D, stack dimensions broadcast as np.matmul does) take the routes of ``runtime.batched`` (a
shared matrix folds the stack into one product). Other operands get NumPy's meaning where Numba
alone has none: two real dtypes promote as NumPy does (float64 @ float32 is float64), integer
products are exact and wrap, stacks of another float or complex dtype multiply pair by pair;
the rest keep Numba's own operation (``a @ b``, ``np.dot(a, b)`` or ``a.dot(b)``), and what
cannot compile raises ``ProductTypingError`` naming the site. In object mode (CuPy, Dask) the
plain Python bodies below run instead, with the same rule, through the same hook.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.extending import overload, register_jitable

from mixpert.execution.hook import MixpertRuntimeError, Status, emulable, run_site

from . import numpy_products
from .gemm_call import gemm_call, gemm_stack_call
from .numpy_products import broadcast_stacks, check_inner

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
def _product(op_index, a, b):  # type: ignore[no-untyped-def]
    """One 2-D product of the site: the runtime's, or Numba's own where the plan says native."""
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


@register_jitable  # also called by the @= sites
def _stack_times_matrix(op_index, a, b):  # type: ignore[no-untyped-def]
    check_inner(a, b)
    m, k = a.shape[-2], a.shape[-1]
    folded = np.ascontiguousarray(a).reshape((-1, k))  # one product for the whole stack
    return _product(op_index, folded, b).reshape(a.shape[:-2] + (m, b.shape[1]))


@register_jitable  # also called by the @= sites
def _matrix_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
    check_inner(a, b)
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


@register_jitable  # also called by the @= sites
def _stack_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
    batch, a_all, b_all = broadcast_stacks(a, b)  # contiguous pairs: one runtime call for all
    status, out = gemm_stack_call(op_index, a_all, b_all)
    if status == _NATIVE:
        for i in range(a_all.shape[0]):
            out[i] = np.dot(a_all[i], b_all[i])
    elif status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out.reshape(batch + (a.shape[-2], b.shape[-1]))


STACKED = {
    "fold A": _stack_times_matrix,
    "fold B": _matrix_times_stack,
    "pairs": _stack_times_stack,
}


def _make_overload(stub: Any, kind: str, emulated: Any) -> None:
    native = _native_impl(kind)

    @overload(stub)
    def _ol(op_index, a, b):  # type: ignore[no-untyped-def]
        if _emulable(a, b):
            return emulated
        route = _stacked(a, b) if kind == "matmul" else None
        if route is not None:
            return STACKED[route]
        return numpy_products.implementation(kind, op_index, a, b, native)


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
    # Numba has no @=: NumPy's meaning, the product (as a @ b computes it) written into a
    route = _stacked(a, b)
    if route is not None:
        stacked = STACKED[route]
        return lambda op_index, a, b: _into_first(a, stacked(op_index, a, b))
    native = _native_impl("matmul")
    product = register_jitable(numpy_products.implementation("matmul", op_index, a, b, native))
    return lambda op_index, a, b: _into_first(a, product(op_index, a, b))

"""What a rewritten site calls: ``mixpert_matmul``, ``mixpert_dot``, ``mixpert_method_dot``,
``mixpert_imatmul``, ``mixpert_dot_out``.

Each takes ``(op_index, a, b)`` (``out`` too for np.dot's). In nopython code an ``@overload``
picks the implementation from the operand types: 2-D float32 x 2-D float32 calls the run-time
hook through the ``mixpert_gemm`` symbol; float32 stacks (``a @ b`` and ``np.matmul`` with an
N-D operand, N >= 3, the other 2-D or N-D, stack dimensions broadcast as np.matmul does) take
the routes of ``runtime.batched`` (a shared matrix folds the stack into one product), and
``np.dot`` of float32 N-D operands is one folded product too. Other operands keep Numba's own
operation where Numba has one, else get NumPy's meaning (``numpy_products``: promotion, exact
integers, stacks beside vectors, ``a @= b``, ``np.dot`` into any ``out`` NumPy accepts); what
NumPy refuses raises ``ProductTypingError`` naming the site. In object mode (CuPy, Dask,
``forceobj=True``) the plain Python bodies below run instead, with the same rule, through the
same hook.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.extending import overload, register_jitable

from mixpert.execution.hook import MixpertRuntimeError, Status, emulable, run_site

from . import numpy_products
from .gemm_call import gemm_call, gemm_stack_call
from .numpy_products import (
    broadcast_stacks,
    check_inner,
    columns_of,
    contiguous,
    count,
    dot_shape,
    rows_of,
)

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
    c_order = getattr(getattr(out, "flags", None), "c_contiguous", True)
    if not emulable(a, b) or out.dtype != a.dtype or not c_order:
        return np.dot(a, b, out)  # NumPy's product, or NumPy's error for such an out
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
# Operands of layout 'A' are made contiguous first (as Numba's product does anyway), so Numba's
# contiguity warning comes once per compile from the site (native_sites), not from in here.
def _native_impl(kind: str):  # type: ignore[no-untyped-def]
    if kind == "matmul":
        return lambda op_index, a, b: contiguous(a) @ contiguous(b)
    if kind == "dot":
        return lambda op_index, a, b: np.dot(contiguous(a), contiguous(b))
    return lambda op_index, a, b: contiguous(a).dot(contiguous(b))


def _matmul_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return contiguous(a) @ contiguous(b)
    if status != _OK:  # Status.ERROR: the wrapper re-raises the runtime's exception
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


def _dot_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return np.dot(contiguous(a), contiguous(b))
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


def _method_dot_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return contiguous(a).dot(contiguous(b))
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return out


def _stacked(a: types.Type, b: types.Type) -> str | None:
    """Which route a float32 stack product ``a @ b`` takes (Numba itself multiplies 2-D operands
    only): "fold A" for a stack times one matrix, "fold B" for one matrix times a stack,
    "pairs" for two stacks (broadcast as np.matmul does); None for anything else (a vector
    beside a stack runs natively, as every matrix-vector product does)."""
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
    rows = count(a.shape[:-1])  # (not -1: k may be 0)
    folded = np.ascontiguousarray(a).reshape((rows, k))  # one product for the whole stack
    return _product(op_index, folded, b).reshape(a.shape[:-2] + (m, b.shape[1]))


@register_jitable  # also called by the @= sites
def _matrix_times_stack(op_index, a, b):  # type: ignore[no-untyped-def]
    check_inner(a, b)
    k, n = b.shape[-2], b.shape[-1]
    stack = np.ascontiguousarray(b).reshape((count(b.shape[:-2]), k, n))
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


def _dot_of_stacks(op_index, a, b):  # type: ignore[no-untyped-def]
    """np.dot of float32 operands, one N-D (N >= 3), neither a vector: a's rows against b's
    columns, one emulated product (np.dot's axes, not np.matmul's)."""
    if a.shape[-1] != b.shape[-2]:
        raise ValueError("np.dot: a.shape[-1] differs from b.shape[-2]")
    return _product(op_index, rows_of(a), columns_of(b)).reshape(dot_shape(a, b))


def _make_overload(stub: Any, kind: str, emulated: Any) -> None:
    native = _native_impl(kind)

    @overload(stub)
    def _ol(op_index, a, b):  # type: ignore[no-untyped-def]
        if _emulable(a, b):
            return emulated
        route = _stacked(a, b)
        if route is not None:
            return STACKED[route] if kind == "matmul" else _dot_of_stacks
        return numpy_products.implementation(kind, op_index, a, b, native)


_make_overload(mixpert_matmul, "matmul", _matmul_impl)
_make_overload(mixpert_dot, "dot", _dot_impl)
_make_overload(mixpert_method_dot, "method_dot", _method_dot_impl)


def _dot_out_impl(op_index, a, b, out):  # type: ignore[no-untyped-def]
    status, product = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return np.dot(contiguous(a), contiguous(b), out)
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return _into_out(out, product)


@register_jitable
def _into_out(out, product):  # type: ignore[no-untyped-def]
    if out.shape != product.shape:
        raise ValueError("np.dot(a, b, out): out has the wrong shape for the product")
    out[...] = product
    return out


@register_jitable
def _into_scalar(out, product):  # type: ignore[no-untyped-def]
    out[()] = product
    return out


def _out_of_another_ndim(op_index, a, b, out):  # type: ignore[no-untyped-def]
    raise ValueError("np.dot(a, b, out): out's number of dimensions differs from the product's")


@overload(mixpert_dot_out)
def _ol_dot_out(op_index, a, b, out):  # type: ignore[no-untyped-def]
    why = numpy_products.out_refusal(a, b, out)
    if why is not None:
        numpy_products.refuse(op_index, "dot_out", a, b, why)
    if out.ndim != a.ndim + b.ndim - 2:  # NumPy's run-time error (Numba's, where it has one)
        return _out_of_another_ndim
    if _emulable(a, b):  # out is then a float32 matrix (out_refusal)
        return _dot_out_impl
    if numpy_products.numba_writes_out(a, b, out):
        return lambda op_index, a, b, out: np.dot(contiguous(a), contiguous(b), out)
    # NumPy's meaning where Numba has none (other dtypes, N-D, a vector dot product into a
    # 0-D out): the product as np.dot(a, b) computes it, written into out
    if a.ndim == 1 and b.ndim == 1:
        return lambda op_index, a, b, out: _into_scalar(out, mixpert_dot(op_index, a, b))
    return lambda op_index, a, b, out: _into_out(out, mixpert_dot(op_index, a, b))


@register_jitable
def _into_first(a, product):  # type: ignore[no-untyped-def]
    if product.shape != a.shape:
        raise ValueError("a @= b: the product's shape differs from a's")
    a[...] = product
    return a


def _imatmul_impl(op_index, a, b):  # type: ignore[no-untyped-def]
    status, product = gemm_call(op_index, a, b)
    if status == _NATIVE:
        return _into_first(a, contiguous(a) @ contiguous(b))
    if status != _OK:
        raise MixpertRuntimeError("mixpert runtime call failed")
    return _into_first(a, product)


@overload(mixpert_imatmul)
def _ol_imatmul(op_index, a, b):  # type: ignore[no-untyped-def]
    why = numpy_products.in_place_refusal(a, b)
    if why is not None:
        numpy_products.refuse(op_index, "imatmul", a, b, why)
    if _emulable(a, b):
        return _imatmul_impl
    # Numba has no @=: NumPy's meaning, the product (as a @ b computes it) written into a
    return lambda op_index, a, b: _into_first(a, mixpert_matmul(op_index, a, b))

"""What a rewritten site calls: ``mixpert_matmul``, ``mixpert_dot``, ``mixpert_method_dot``.

Each takes ``(op_index, a, b)``. In nopython code an ``@overload`` picks the implementation from the
operand types: 2-D float32 x 2-D float32 calls the runtime through the ``mixpert_gemm`` symbol; any
other operands (float64, complex, integers, 1-D, 3-D, mixed dtypes) keep Numba's own operation
(``a @ b``, ``np.dot(a, b)`` or ``a.dot(b)``), unchanged. In object mode (CuPy arrays) the plain
Python bodies below run instead, with the same rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.extending import overload

from . import bridge
from .gemm_call import gemm_call


def _emulable_py(a: Any, b: Any) -> bool:
    return (
        getattr(a, "ndim", 0) == 2
        and getattr(b, "ndim", 0) == 2
        and a.dtype == np.float32
        and b.dtype == np.float32
        and type(a) is type(b)
    )


def _run_py(index: int, a: Any, b: Any, native: Any) -> Any:
    if not _emulable_py(a, b):
        return native(a, b)
    level = bridge.level_for(index)
    if level.name == bridge.NATIVE_LEVEL and bridge._local.records is None:
        return native(a, b)
    return bridge.execute(index, a, b, level)


def mixpert_matmul(index: int, a: Any, b: Any) -> Any:
    """``a @ b`` at the active plan's level for op ``index``."""
    return _run_py(index, a, b, lambda x, y: x @ y)


def mixpert_dot(index: int, a: Any, b: Any) -> Any:
    """``np.dot(a, b)`` at the active plan's level for op ``index``."""
    return _run_py(index, a, b, lambda x, y: np.dot(x, y))


def mixpert_method_dot(index: int, a: Any, b: Any) -> Any:
    """``a.dot(b)`` at the active plan's level for op ``index``."""
    return _run_py(index, a, b, lambda x, y: x.dot(y))


STUBS = {"matmul": mixpert_matmul, "dot": mixpert_dot, "method_dot": mixpert_method_dot}


def _emulable(a: types.Type, b: types.Type) -> bool:
    return all(
        isinstance(x, types.Array) and x.ndim == 2 and x.dtype == types.float32 for x in (a, b)
    )


# One implementation per spelling, each running the spelling itself as the native fallback
# (written out rather than calling a shared helper: one function less to compile per signature).
def _native_impl(kind: str):  # type: ignore[no-untyped-def]
    if kind == "matmul":
        return lambda index, a, b: a @ b
    if kind == "dot":
        return lambda index, a, b: np.dot(a, b)
    return lambda index, a, b: a.dot(b)


def _matmul_impl(index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(index, a, b)
    if status == 1:  # bridge.NATIVE
        return a @ b
    if status != 0:  # bridge.ERROR: the wrapper re-raises the runtime's exception
        raise bridge.MixpertRuntimeError("mixpert runtime call failed")
    return out


def _dot_impl(index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(index, a, b)
    if status == 1:
        return np.dot(a, b)
    if status != 0:
        raise bridge.MixpertRuntimeError("mixpert runtime call failed")
    return out


def _method_dot_impl(index, a, b):  # type: ignore[no-untyped-def]
    status, out = gemm_call(index, a, b)
    if status == 1:
        return a.dot(b)
    if status != 0:
        raise bridge.MixpertRuntimeError("mixpert runtime call failed")
    return out


def _make_overload(stub: Any, kind: str, emulated: Any) -> None:
    native = _native_impl(kind)

    @overload(stub)
    def _ol(index, a, b):  # type: ignore[no-untyped-def]
        return emulated if _emulable(a, b) else native


_make_overload(mixpert_matmul, "matmul", _matmul_impl)
_make_overload(mixpert_dot, "dot", _dot_impl)
_make_overload(mixpert_method_dot, "method_dot", _method_dot_impl)

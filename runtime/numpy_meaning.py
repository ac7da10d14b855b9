"""``np.matmul``'s meaning around the emulated float32 product (issue 38).

``matmul(a, b, out, product)`` returns what ``np.matmul(a, b, out=out)`` returns
(``cupy.matmul``'s for CuPy arrays, Dask's for Dask arrays), with one change: where NumPy
computes in float32 (its matmul loop for the operands' dtypes is float32 -> float32:
float32 with float32, float16, bool or 8/16-bit integers), ``product`` computes it on the
operands cast to float32, which is exact and what NumPy's loop does too. Every other dtype
combination (float64, float16 alone, integers, complex, object, ...), every operand that
overrides ``__array_ufunc__`` and every call with ufunc keywords (``axes``, ``dtype``, ...)
runs NumPy's (or the array library's) own matmul, so results, dtypes and errors are theirs.

``out`` follows NumPy: the result is cast ``same_kind`` into it (inputs broadcast to its loop
dimensions), it is returned, and overlap with the inputs is harmless (the emulated result is
computed whole before it is copied). Any ``out`` NumPy refuses is handed to NumPy, which raises
its own error before computing.

Arrays of other libraries that speak DLPack (PyTorch, JAX) are viewed without a copy
(``np.from_dlpack`` on the CPU, ``cupy.from_dlpack`` on a CUDA device) and the result comes
back as the first such operand's kind, on its device (``<library>.from_dlpack``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from . import device
from .device import is_cupy_array, is_dask_array
from .validation import refuse_masked

Product = Callable[[Any, Any], Any]

_FLOAT32 = np.dtype(np.float32)
_DLPACK_GPU = (2, 10)  # DLDeviceType kDLCUDA, kDLROCM: device memory (host kinds go to NumPy)


def with_numpy_semantics(a: Any, b: Any, out: Any, product: Product, **ufunc_kwargs: Any) -> Any:
    """``np.matmul(a, b, out=out, **ufunc_kwargs)``, float32 products by ``product`` (two
    float32 arrays of one kind, NumPy or CuPy, or Dask operands)."""
    if out is None and not ufunc_kwargs and _float32_pair(a, b):  # the hot path: no more checks
        result = product(a, b)
        return result[()] if type(a) is np.ndarray and np.ndim(result) == 0 else result
    foreign = next((x for x in (a, b, out) if _is_foreign(x)), None)
    if foreign is not None:  # torch, JAX, ...: views, then the result in their kind
        views = [None if x is None else _view(x) for x in (a, b, out)]
        result = with_numpy_semantics(views[0], views[1], views[2], product, **ufunc_kwargs)
        if out is not None:
            return out
        return _as_kind_of(foreign, result)
    if is_dask_array(a) or is_dask_array(b):  # lazy chunks: runtime.dask_products
        if out is None and not ufunc_kwargs and loop_dtype(a, b) == _FLOAT32:
            return product(a, b)
        return np.matmul(a, b, out=out, **ufunc_kwargs)  # Dask's own matmul
    if is_cupy_array(a) or is_cupy_array(b) or is_cupy_array(out):
        return _cupy_matmul(a, b, out, product, ufunc_kwargs)
    refuse_masked([a, b], ["operand a", "operand b"])
    if ufunc_kwargs or _overrides(a) or _overrides(b) or loop_dtype(a, b) != _FLOAT32:
        return np.matmul(a, b, out=out, **ufunc_kwargs)

    x, y = (np.asarray(v).astype(np.float32, copy=False) for v in (a, b))
    if out is not None and not _fits(out, x, y, np.ndarray):
        return np.matmul(a, b, out=out)  # NumPy raises its error (before computing anything)
    return _deliver(np, product(x, y), out, (a, b))


def _float32_pair(a: Any, b: Any) -> bool:
    """Two float32 NumPy arrays (no subclass) or two float32 CuPy arrays: nothing to convert,
    wrap or check here (a small CuPy product takes tens of microseconds in all)."""
    if type(a) is not type(b) or not (type(a) is np.ndarray or is_cupy_array(a)):
        return False
    return a.dtype == _FLOAT32 and b.dtype == _FLOAT32


def loop_dtype(a: Any, b: Any) -> np.dtype | None:
    """The dtype NumPy's matmul computes ``a @ b`` in, or None where it has no loop."""
    try:
        dtypes = tuple(np.dtype(_dtype_of(x)) for x in (a, b))
        return np.matmul.resolve_dtypes((*dtypes, None))[2]
    except (TypeError, ValueError):  # no loop (strings, void, ...): NumPy's error comes later
        return None


def _dtype_of(x: Any) -> Any:
    dtype = getattr(x, "dtype", None)
    return np.asarray(x).dtype if dtype is None else dtype  # lists: NumPy's conversion


def _overrides(x: Any) -> bool:
    """An operand that takes over NumPy's ufuncs (``__array_ufunc__`` of its own, or None)."""
    if isinstance(x, np.ndarray) and type(x).__array_ufunc__ is np.ndarray.__array_ufunc__:
        return False
    return hasattr(type(x), "__array_ufunc__")


def _fits(out: Any, x: Any, y: Any, kind: type) -> bool:
    """Whether NumPy takes ``out`` for ``x @ y`` as it is: an array of the operands' kind whose
    core dimensions are the result's, whose loop dimensions the operands' broadcast to, and to
    whose dtype float32 casts ``same_kind``."""
    target = _single(out)
    if not isinstance(target, kind) or not np.can_cast(_FLOAT32, target.dtype, "same_kind"):
        return False
    if x.ndim == 0 or y.ndim == 0 or x.shape[-1] != (y.shape[0] if y.ndim == 1 else y.shape[-2]):
        return False
    core = (x.shape[-2:-1] if x.ndim >= 2 else ()) + (y.shape[-1:] if y.ndim >= 2 else ())
    if target.ndim < len(core) or tuple(target.shape[target.ndim - len(core) :]) != core:
        return False
    loop = tuple(target.shape[: target.ndim - len(core)])
    try:
        return np.broadcast_shapes(x.shape[:-2], y.shape[:-2], loop) == loop
    except ValueError:
        return False


def _single(out: Any) -> Any:
    """``out`` as a ufunc takes it: an array, or a tuple holding one."""
    return out[0] if isinstance(out, tuple) and len(out) == 1 else out


def _deliver(xp: Any, result: Any, out: Any, operands: tuple[Any, Any]) -> Any:
    """The emulated ``result`` as ``np.matmul`` hands it over: copied into ``out`` (cast
    ``same_kind``, broadcast over its loop dimensions) and ``out`` returned; else wrapped by an
    ndarray subclass operand (np.matrix) and, from NumPy, a scalar for vector @ vector."""
    if xp is np:  # (NumPy's own vector @ vector inside the product gives a scalar)
        result = np.asarray(result)
    if out is not None:
        target = _single(out)
        xp.copyto(target, result, casting="same_kind")
        return target
    if xp is not np:  # CuPy returns 0-d arrays, never scalars
        return result
    subclassed = [x for x in operands if isinstance(x, np.ndarray) and type(x) is not np.ndarray]
    if subclassed:  # NumPy's choice: the highest __array_priority__, the first on ties
        owner = max(subclassed, key=lambda x: getattr(x, "__array_priority__", 0.0))
        return owner.__array_wrap__(result, None, result.ndim == 0)
    return result[()] if result.ndim == 0 else result


def _cupy_matmul(a: Any, b: Any, out: Any, product: Product, ufunc_kwargs: dict) -> Any:
    """``cupy.matmul(a, b, out=out)``, float32 products emulated (CuPy's meaning: both operands
    CuPy arrays; anything else is CuPy's to take or refuse)."""
    cp = device.cupy_module() or importlib.import_module("cupy")  # (tests stand one in)

    def native() -> Any:
        return cp.matmul(a, b, out=out, **ufunc_kwargs)

    if ufunc_kwargs or not (is_cupy_array(a) and is_cupy_array(b)):
        return native()
    if loop_dtype(a, b) != _FLOAT32:
        return native()
    x, y = (v.astype(cp.float32, copy=False) for v in (a, b))
    if out is not None and not _fits(out, x, y, cp.ndarray):
        return native()
    return _deliver(cp, product(x, y), out, (a, b))


def _is_foreign(x: Any) -> bool:
    """An array of another library that speaks DLPack (not NumPy, CuPy or Dask)."""
    if x is None or isinstance(x, np.ndarray) or is_cupy_array(x) or is_dask_array(x):
        return False
    return hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")


def _view(x: Any) -> Any:
    """A NumPy (host memory) or CuPy (device memory) view of a DLPack array, with no copy;
    NumPy and CuPy arrays as they are."""
    if not _is_foreign(x):
        return x
    if x.__dlpack_device__()[0] in _DLPACK_GPU:
        try:
            import cupy as cp
        except ImportError:
            raise TypeError(
                f"{type(x).__name__} on a GPU: mixpert takes device arrays through CuPy, which is "
                "not installed (pip install 'mixpert[cuda12]' or 'mixpert[cuda13]')"
            ) from None
        return cp.from_dlpack(x)
    return np.from_dlpack(x)


def _as_kind_of(template: Any, result: Any) -> Any:
    """``result`` (NumPy or CuPy) as an array of ``template``'s library, on the same device."""
    root = type(template).__module__.split(".")[0]
    if root in ("jax", "jaxlib"):
        module = importlib.import_module("jax.numpy")
    else:
        module = importlib.import_module(root)
    if isinstance(result, np.generic):  # vector @ vector: the library's 0-d array
        result = np.asarray(result)
    from_dlpack = getattr(module, "from_dlpack", None)
    if from_dlpack is None or not hasattr(result, "__dlpack__"):
        return result
    return from_dlpack(result)

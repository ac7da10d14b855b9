"""Copies of a function's arguments for the runs the tuner makes of it.

Tuning calls the user's function many times: the float64 reference, one profiling run per
candidate plan, timed runs. The caller's code means its side effects (an in-place update of a
weight inside a parameter tuple, a counter in a dict, an attribute of an object) to happen once,
when the caller calls, so every such run works on a deep copy of all its arguments: arrays
(NumPy, CuPy on their own device, Dask) at any depth of tuples, lists and dicts, and objects
through ``copy.deepcopy``. Aliasing between arguments is kept (one copy for one object). Where a
copy cannot be made (a generator, an open file, a lock), the run is refused with
``UncopyableArgumentError`` naming the argument: never run on the caller's own object.
"""

from __future__ import annotations

import copy
import inspect
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import typed

from ..runtime import device

# Immutable values, and code rather than data (most of which cannot be copied): shared.
_SHARED = (
    *(type(None), bool, int, float, complex, str, bytes, range, np.dtype),
    *(types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type),
)


class UncopyableArgumentError(TypeError):
    """An argument of a function being tuned cannot be copied, so a profiling run would run the
    function's side effects on the caller's own object: tuning is refused instead."""


def is_array(a: Any) -> bool:
    return hasattr(a, "dtype") and hasattr(a, "shape") and hasattr(a, "copy")


def is_float_array(a: Any) -> bool:
    return is_array(a) and np.issubdtype(a.dtype, np.floating)


def copies(args: Sequence[Any], names: Sequence[str] = ()) -> tuple[Any, ...]:
    """Deep copies of ``args`` for one run: arrays copied on their own device, containers and
    objects rebuilt, code shared. ``names`` (the parameters') make the refusal say which."""
    return _copied(args, names, float64=False)


def float64_copies(args: Sequence[Any], names: Sequence[str] = ()) -> tuple[Any, ...]:
    """``copies`` with floating-point arrays in tuples, lists and dicts as float64 (the
    reference run's inputs); arrays held by other objects, Numba's typed containers among
    them (their item types are fixed), are copied as they are."""
    return _copied(args, names, float64=True)


def float_array_leaves(value: Any) -> list[Any]:
    """The floating-point arrays in ``value`` and, in order, in its tuples, lists and dict
    values: the arrays a run may write into, matched one to one between an argument and its
    copy (``copies`` keeps the structure)."""
    if isinstance(value, (tuple, list, typed.List)):
        return [leaf for item in value for leaf in float_array_leaves(item)]
    if isinstance(value, (dict, typed.Dict)):
        return [leaf for item in value.values() for leaf in float_array_leaves(item)]
    return [value] if is_float_array(value) and not isinstance(value, np.generic) else []


def parameter_names(func: Any) -> tuple[str, ...]:
    """``func``'s positional parameter names, for messages (none where it has no signature)."""
    try:
        return tuple(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return ()


def _copied(args: Sequence[Any], names: Sequence[str], float64: bool) -> tuple[Any, ...]:
    memo: dict[int, Any] = {}  # one copy per object: arguments that alias still alias
    out = []
    for i, arg in enumerate(args):
        try:
            out.append(_copy(arg, memo, float64))
        except UncopyableArgumentError:
            raise
        except Exception as error:  # deepcopy's refusals are TypeError, copy.Error, pickle's
            name = f"argument {i}" + (f" ({names[i]!r})" if i < len(names) else "")
            raise UncopyableArgumentError(
                f"{name} cannot be copied ({type(error).__name__}: {error}); tuning runs the "
                "function several times and never on the caller's own objects. Pass arguments "
                "that copy.deepcopy can copy, or give the function a plan (plan=, plan_file=)."
            ) from error
    return tuple(out)


def _copy(value: Any, memo: dict[int, Any], float64: bool) -> Any:
    if isinstance(value, _SHARED) or _is_dispatcher(value):
        return value
    key = id(value)
    if key in memo:
        return memo[key]
    if is_array(value):
        memo[key] = _array_copy(value, float64)
    elif type(value) is tuple:
        memo[key] = tuple(_copy(item, memo, float64) for item in value)
    elif isinstance(value, tuple) and hasattr(value, "_make"):  # a namedtuple
        memo[key] = value._make(_copy(item, memo, float64) for item in value)
    elif type(value) is list:
        memo[key] = items = []  # registered first: a list may hold itself
        items.extend(_copy(item, memo, float64) for item in value)
    elif type(value) is dict:
        memo[key] = entries = {}
        entries.update((k, _copy(v, memo, float64)) for k, v in value.items())
    elif isinstance(value, (typed.List, typed.Dict)):  # deepcopy cannot pickle their memory
        memo[key] = container = value.copy()  # of the same item types: Numba's signature kept
        for index in range(len(value)) if isinstance(value, typed.List) else value.keys():
            container[index] = _copy(value[index], memo, float64=False)
    else:
        return copy.deepcopy(value, memo)  # records the copy in memo itself
    return memo[key]


def _array_copy(a: Any, float64: bool) -> Any:
    promote = float64 and np.issubdtype(a.dtype, np.floating)
    if device.is_cupy_array(a):
        with a.device:  # copy() would land on the current device
            return a.astype(np.float64) if promote else a.copy()
    return a.astype(np.float64) if promote else a.copy()


def _is_dispatcher(value: Any) -> bool:
    """A Numba or mixpert compiled function passed as an argument: code, shared."""
    return hasattr(value, "py_func") and callable(value)

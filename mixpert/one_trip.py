"""One trip per call: NumPy code on a GPU machine moves its data once a call, not once a product.

A ``mixpert.jit`` function called with NumPy arrays runs nopython on the host, and each product
it sends to the GPU moves its operands over and its result back. When the function's plan is
for a GPU (a ``Plan`` tuned for target "cuda" that does not run on the host, ``on_host``), a
GPU is usable, and the function is whole-array code (``Placement``: the compiler pass
``placement`` judged its body, and its arguments are NumPy arrays of numbers, none sharing
memory with another), the call instead

1. copies each array argument to the GPU once, through pinned staging buffers and
   asynchronous copies (``runtime.cuda.transfers``);
2. runs the body on the CuPy copies: the object-mode path CuPy arguments take, each product at
   its plan's level under the same op id, the elementwise and reduction code on CuPy;
3. copies the results back once, as NumPy arrays of their dtypes and shapes (inside tuples,
   lists and dicts too; 0-d results as NumPy scalars), and writes the arguments the function
   may write into (``FunctionSummary.mutates``) back into the caller's arrays, so they end as
   the host run would leave them. A result that is an argument comes back as the caller's
   array, a view of a C- or F-contiguous argument as the same view of the caller's array (of
   another argument: as a copy).

If the body raises, the arguments it wrote are written back as far as it got, as on the host,
and the error propagates; a TypeError, AttributeError or NotImplementedError (``REFUSALS``: CuPy
refusing something the pass let through, or the code's own error) instead runs the call on the
host from the untouched arguments: an error of the code's own is raised there as the host raises
it, and where the host succeeds, later calls with arguments of that kind stay on the host.
``MIXPERT_ONE_TRIP=0`` turns one trip off (products move one by one, as before).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from .passes.placement import Placement
from .plans.plan import Plan
from .runtime import device

ENV = "MIXPERT_ONE_TRIP"
NUMBERS = frozenset("biufc")  # dtype kinds CuPy arrays hold: bool, integers, floats, complex
SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)
# what CuPy raises for what it lacks: a NumPy function (__array_function__ declines), an array
# method, an option
REFUSALS = (TypeError, AttributeError, NotImplementedError)


def enabled() -> bool:
    """Whether one trip is on (``MIXPERT_ONE_TRIP``, read at each call; "0" turns it off)."""
    return os.environ.get(ENV, "1") != "0"


def plan_runs_on_gpu(plan: Any) -> bool:
    """A plan tuned for the GPU that does not run natively on the host. Mappings of levels and
    plans of other targets (or of files older than one trip) keep products moving one by one."""
    return isinstance(plan, Plan) and plan.target == "cuda" and not plan.on_host


def wanted(plan: Any) -> bool:
    """Whether a call under ``plan`` with NumPy arguments asks where its body should run: one
    trip on, a usable GPU, a plan for it. Cheap: every nopython call asks."""
    return plan_runs_on_gpu(plan) and enabled() and device.gpu_available()


def argument_reason(args: Sequence[Any], names: Sequence[str], mutated: frozenset[int]) -> str:
    """Why these arguments keep the body on the host ("" where they move): an argument that
    is no NumPy array of numbers or plain scalar, arrays that share memory (the copies would
    not), a read-only array the function writes."""
    arrays: list[tuple[str, np.ndarray]] = []
    for i, arg in enumerate(args):
        name = repr(names[i]) if i < len(names) else str(i)
        if isinstance(arg, np.ndarray):
            if type(arg) is not np.ndarray:
                return f"argument {name} is a {type(arg).__name__}, not a plain NumPy array"
            if arg.dtype.kind not in NUMBERS or not arg.dtype.isnative:
                return f"argument {name} has dtype {arg.dtype}, which CuPy arrays lack"
            if i in mutated and not arg.flags.writeable:
                return f"argument {name} is read-only and the function may write into it"
            arrays.append((name, arg))
        elif not isinstance(arg, SCALARS):
            return f"argument {name} is a {type(arg).__name__}"
    if not arrays:
        return "no NumPy array arguments to move"
    for i, (first, x) in enumerate(arrays):
        for second, y in arrays[i + 1 :]:
            if np.may_share_memory(x, y):
                return f"arguments {first} and {second} may share memory"
    return ""


def placement_for(
    static: Placement | None, args: Sequence[Any], names: Sequence[str], mutated: frozenset[int]
) -> Placement:
    """The body's placement for a call with ``args``: the pass's (``static``; None: not
    judged), then the arguments'."""
    if static is None:
        return Placement("its body was not judged")
    if not static.movable:
        return static
    reason = argument_reason(args, names, mutated)
    return Placement(reason) if reason else static


def run(
    body: Callable[[tuple[Any, ...]], Any], args: Sequence[Any], mutated: frozenset[int]
) -> Any:
    """``body(moved)`` on CuPy copies of the NumPy arrays among ``args`` (the module
    docstring): arguments over once, results back once, written arguments back into the
    caller's arrays."""
    transfers = _transfers()
    moved = tuple(transfers.to_device(a) if isinstance(a, np.ndarray) else a for a in args)
    written = [(args[i], moved[i]) for i in sorted(mutated) if isinstance(args[i], np.ndarray)]
    try:
        result = body(moved)
    except REFUSALS:
        raise  # the caller runs the call on the host, from the untouched arguments
    except BaseException:
        _write_back(written)  # as far as the body got, as on the host
        raise
    _write_back(written)
    mirrors = [(a, m) for a, m in zip(args, moved, strict=True) if isinstance(a, np.ndarray)]
    return _Back(mirrors).bring(result)


def _write_back(written: list[tuple[np.ndarray, Any]]) -> None:
    transfers = _transfers()
    for host, copy in written:
        transfers.to_host(copy, host)


class _Back:
    """Results brought back: CuPy arrays as NumPy ones (an argument's copy, or a view of it, as
    the caller's array or that view of it), containers rebuilt, one host array per device
    array however often it is returned."""

    def __init__(self, mirrors: list[tuple[np.ndarray, Any]]) -> None:
        self.mirrors = mirrors
        self.memo: dict[int, Any] = {}

    def bring(self, value: Any) -> Any:
        if device.is_cupy_array(value):
            known = self.memo.get(id(value))
            if known is None:
                known = self.memo[id(value)] = (value, self._array(value))
            return known[1]
        if type(value) is tuple or type(value) is list:
            return type(value)(self.bring(v) for v in value)
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
            return type(value)(*(self.bring(v) for v in value))
        if type(value) is dict:
            return {k: self.bring(v) for k, v in value.items()}
        return value

    def _array(self, value: Any) -> Any:
        if value.ndim == 0:  # x.sum(), x[0, 0]: NumPy gives a scalar, never a view
            return _transfers().to_host(value)[()]
        for host, copy in self.mirrors:
            if value is copy:
                return host
            view = _view_of(host, copy, value)
            if view is not None:
                return view
        return _transfers().to_host(value)


def _view_of(host: np.ndarray, copy: Any, value: Any) -> np.ndarray | None:
    """``value`` (a device array) as the same view of ``host`` where it views ``copy``, the
    device mirror of a contiguous ``host`` (``transfers`` keeps such a layout byte for byte);
    None where it does not."""
    if not (host.flags.c_contiguous or host.flags.f_contiguous) or value.size == 0:
        return None
    offset = value.data.ptr - copy.data.ptr
    if not 0 <= offset < copy.nbytes:
        return None
    extent = [(n - 1) * s for n, s in zip(value.shape, value.strides, strict=True)]
    low = offset + sum(e for e in extent if e < 0)
    high = offset + sum(e for e in extent if e > 0) + value.itemsize
    if low < 0 or high > copy.nbytes:
        return None
    base = host.reshape(-1, order="A").view(np.uint8)  # the caller's bytes, in memory order
    return np.ndarray(value.shape, value.dtype, base, offset, value.strides)


def nbytes(value: Any) -> int:
    """Bytes of the arrays in ``value`` and its tuples, lists and dicts (what comes back)."""
    if hasattr(value, "nbytes") and hasattr(value, "dtype"):
        return int(value.nbytes)
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    return 0


def moved_bytes(args: Sequence[Any], result: Any, mutated: frozenset[int]) -> int:
    """Bytes one call moves in one trip: the array arguments over, the results and the
    arguments it may write back."""
    over = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
    written = sum(args[i].nbytes for i in mutated if isinstance(args[i], np.ndarray))
    return over + nbytes(result) + written


@functools.cache
def _transfers() -> ModuleType:
    from .runtime.cuda import transfers

    return transfers

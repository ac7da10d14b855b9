"""The run-time side of a rewritten site: the ``mixpert_gemm`` symbol, the active plan, profiling.

Compiled code calls the external C symbol ``mixpert_gemm`` (a ctypes callback registered once with
``llvmlite.binding.add_symbol``) with the op's index, the shapes, raw pointers and byte strides.
The callback looks the op up in the active plan (thread-local, set by the jitted function's
wrapper; swapping it never recompiles), runs ``mixpert.runtime.matmul`` at that level and writes
the float32 result into the output the compiled code allocated. Its status tells the compiled code
what to do next:

- ``OK`` (0): the result is in the output.
- ``NATIVE`` (1): the level is native float32: run Numba's own ``np.dot`` (so a plan of "fp32"
  everywhere gives exactly plain ``numba.njit``'s bits).
- ``ERROR`` (2): the runtime raised; the exception waits in ``take_pending_error`` and the compiled
  code raises ``MixpertRuntimeError``, which the wrapper replaces by the original exception.

``record_calls()`` profiles: while it is active every emulated call appends a ``CallRecord``.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import binding

from mixpert.runtime import dispatch
from mixpert.runtime.levels import DEFAULT_LEVEL, Level, get_level

SYMBOL = "mixpert_gemm"
OK, NATIVE, ERROR = 0, 1, 2
NATIVE_LEVEL = "fp32"  # the level compiled code runs itself with Numba's BLAS call


class MixpertRuntimeError(RuntimeError):
    """Raised by compiled code when the runtime failed; the wrapper re-raises the original."""


@dataclass(frozen=True)
class ActivePlan:
    """A plan resolved for the callback: op index -> Level, and the level of unlisted ops."""

    levels: Mapping[int, Level]
    default: Level
    names: Mapping[int, str] = field(default_factory=dict)  # op index -> op id, for records


def resolve_plan(plan: Any, default: str | Level = DEFAULT_LEVEL) -> ActivePlan:
    """An ``ActivePlan`` from a mapping op id -> level name, or an object with ``.levels``."""
    from .sites import op_index

    if plan is None:
        plan = {}
    mapping = getattr(plan, "levels", plan)
    if not isinstance(mapping, Mapping):
        raise TypeError(
            f"plan is a {type(plan).__name__}; pass a mapping op id -> level name "
            "or an object with a .levels mapping"
        )
    levels = {op_index(op_id): get_level(level) for op_id, level in mapping.items()}
    names = {op_index(op_id): op_id for op_id in mapping}
    return ActivePlan(levels, get_level(default), names)


@dataclass(frozen=True)
class CallRecord:
    """One runtime call seen by ``record_calls``."""

    op_index: int
    m: int
    k: int
    n: int
    level: str
    seconds: float
    op_id: str = ""


class _Local(threading.local):
    plan: ActivePlan | None = None
    pending: BaseException | None = None
    records: list[CallRecord] | None = None


_local = _Local()
_DEFAULT_PLAN = resolve_plan(None)
# op index -> op id, filled by the passes; used to name records and errors.
OP_NAMES: dict[int, str] = {}


def current_plan() -> ActivePlan:
    return _local.plan or _DEFAULT_PLAN


def swap_plan(plan: ActivePlan | None) -> ActivePlan | None:
    """Make ``plan`` active in this thread; returns the previous one (for try/finally)."""
    previous = _local.plan
    _local.plan = plan
    return previous


@contextmanager
def using_plan(plan: Any) -> Iterator[ActivePlan]:
    """Run the body with ``plan`` (anything ``resolve_plan`` takes, or an ActivePlan) active."""
    active = plan if isinstance(plan, ActivePlan) else resolve_plan(plan)
    previous = swap_plan(active)
    try:
        yield active
    finally:
        swap_plan(previous)


@contextmanager
def record_calls() -> Iterator[list[CallRecord]]:
    """Collect a ``CallRecord`` (op, m, k, n, level, seconds) for every runtime call in the body.

    While recording, native float32 ops run through the runtime too (so they can be timed);
    their bits may then differ from Numba's BLAS in the last place.
    """
    records: list[CallRecord] = []
    previous = _local.records
    _local.records = records
    try:
        yield records
    finally:
        _local.records = previous
        named = [
            CallRecord(r.op_index, r.m, r.k, r.n, r.level, r.seconds, OP_NAMES.get(r.op_index, ""))
            for r in records
        ]
        records[:] = named


def take_pending_error() -> BaseException | None:
    error, _local.pending = _local.pending, None
    return error


def level_for(index: int) -> Level:
    plan = current_plan()
    return plan.levels.get(index, plan.default)


def execute(index: int, a: Any, b: Any, level: Level) -> Any:
    """Run one product at ``level`` (recording it when asked); any array kind."""
    records = _local.records
    if records is None:
        return dispatch.matmul(a, b, level=level)
    start = time.perf_counter()
    result = dispatch.matmul(a, b, level=level)
    sync = getattr(getattr(result, "device", None), "synchronize", None)
    if sync is not None:  # CuPy: time the kernels, not their launch
        sync()
    m, k = a.shape
    records.append(CallRecord(index, m, k, b.shape[1], level.name, time.perf_counter() - start))
    return result


def _matrix(ptr: int, rows: int, cols: int, s0: int, s1: int) -> np.ndarray:
    """A float32 view of memory owned by compiled code (any strides, even negative ones)."""
    if rows == 0 or cols == 0:
        return np.empty((rows, cols), np.float32)
    low = min(0, (rows - 1) * s0) + min(0, (cols - 1) * s1)
    high = max(0, (rows - 1) * s0) + max(0, (cols - 1) * s1) + 4
    buffer = (ctypes.c_char * (high - low)).from_address(ptr + low)
    return np.ndarray((rows, cols), np.float32, buffer, -low, (s0, s1))


def _gemm(
    index: int,
    m: int,
    k: int,
    kb: int,
    n: int,
    a_ptr: int,
    a_s0: int,
    a_s1: int,
    b_ptr: int,
    b_s0: int,
    b_s1: int,
    out_ptr: int,
) -> int:
    try:
        level = level_for(index)
        recording = _local.records is not None
        if level.name == NATIVE_LEVEL and not recording:
            return NATIVE
        a = _matrix(a_ptr, m, k, a_s0, a_s1)
        b = _matrix(b_ptr, kb, n, b_s0, b_s1)
        if level.kind == "policy" and k == kb:  # "auto": resolve it here, as the runtime would
            backend = dispatch.choose_backend(a, b, "auto")
            level = dispatch.resolve_level(level, a, b, backend)
            if level.name == NATIVE_LEVEL and backend == "cpu" and not recording:
                return NATIVE
        result = execute(index, a, b, level)
        if m and n:
            _matrix(out_ptr, m, n, 4 * n, 4)[...] = result
        return OK
    except BaseException as error:  # ctypes would print and swallow it: hand it to the caller
        _local.pending = error
        return ERROR


_I64 = ctypes.c_int64
GEMM_CFUNC = ctypes.CFUNCTYPE(ctypes.c_int32, *([_I64] * 12))
_callback = GEMM_CFUNC(_gemm)  # module global: must outlive every compiled function
binding.add_symbol(SYMBOL, ctypes.cast(_callback, ctypes.c_void_p).value)

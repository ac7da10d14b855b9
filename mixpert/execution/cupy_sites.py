"""The shortest way through a rewritten site whose operands are two float32 CuPy matrices (object
mode: ``@mixpert.jit`` on CuPy arrays), and what a site runs while a whole call is captured as
one CUDA graph (``mixpert.replay``).

``product`` serves the site, or returns None and ``hook.run_site`` takes the general path:

- a site the plan runs natively (level fp32) is a type check and CuPy's own product, replayed
  as one graph of the op's own where the backend serves one (``_native``: a loop's operands
  then stay where the graph points, and no call rewrites it): no route, no kept-pack scope, no
  dispatch (every layer of checks shows at tens of microseconds a call);
- an INT8 site goes to its op's own execution plan for the signature (m, k, n, level, device,
  stream): the plan cache's ``CapturedProduct`` (``cuda.backend.captured_plan``), looked up
  once per op and signature and kept in the op's table (``_tables``), so a call skips
  dispatch's checks and the cache's lookup;
- an "auto" site takes the route "auto" chose for its shape the first time (``_auto``): native
  float32 as ``_native``, level IV by the op's plan with the route's fallback;
- other levels and routes, kept packs, records and DEBUG logging take the general path.

While this thread captures a whole call (``capturing``), a site runs what a graph can hold,
with the bits of the direct call: level fp32 as CuPy's own cuBLAS call made directly
(``cuda.graph_gemm``: CuPy's wrapper refuses capture), an INT8 level as its kernels run
uncaptured (the kernels a ``CapturedProduct`` replays; for two matrices, B's tops and pack
forked onto a second stream as in its graph), "auto" as its route says (its INT8 route with
the fallback decided on the GPU, where graphs take conditional nodes).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from mixpert.runtime import device, dispatch, plan_cache
from mixpert.runtime.auto import Fallback
from mixpert.runtime.levels import Level
from mixpert.runtime.pack_reuse import KEEP_NOTHING

from .state import keep_for, level_for, recording

log = logging.getLogger("mixpert")
_FLOAT32 = np.dtype(np.float32)  # (a dtype object compares fastest)
TABLE_ENTRIES = 16  # signatures an op's table keeps (a table past it starts again)
_MISSING = object()

# op index -> (m, k, n, level name, device, stream) -> the CapturedProduct serving it, or None
# where none does (the product runs on the general path)
_tables: dict[int, dict[tuple[Any, ...], Any]] = {}


class _Mode(threading.local):
    capturing: bool = False  # this thread is capturing a whole call (mixpert.replay)

    def __init__(self) -> None:
        self.sides: dict[int, Any] = {}  # device id -> this thread's side stream (_side_stream)


_mode = _Mode()


@contextmanager
def capturing() -> Iterator[None]:
    """Sites in the body run what a stream capture can hold (module docstring)."""
    outer = _mode.capturing
    _mode.capturing = True
    try:
        yield
    finally:
        _mode.capturing = outer


def capturing_now() -> bool:
    """Whether this thread is capturing a whole call."""
    return _mode.capturing


def product(op_index: int, a: Any, b: Any) -> Any | None:
    """``a @ b`` for two CuPy arrays (the caller checked their type), or None where the general
    path takes them (module docstring)."""
    if a.dtype != _FLOAT32 or b.dtype != _FLOAT32:
        return None
    if a.ndim != 2 or b.ndim != 2:
        return _captured_stack(op_index, a, b) if _mode.capturing else None
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        return None  # (the general path raises the error)
    if _mode.capturing:
        return _captured(op_index, a, b)
    if recording() or log.isEnabledFor(logging.DEBUG):
        return None  # records and logs name each call: the general path does
    level = level_for(op_index)
    kind = level.kind
    if kind == "fp32":
        return _native(op_index, a, b)
    if kind == "int8":
        keep = keep_for(op_index, a, b)
        if keep is KEEP_NOTHING and m and k and n:
            c = _planned(op_index, a, b, level, (m, k, n))
            if c is not None:
                return c
        return dispatch.cupy_matrix_product(a, b, level, keep)
    if kind == "policy" and m and k and n:
        return _auto(op_index, a, b, level, (m, k, n))
    keep = keep_for(op_index, a, b) if kind == "policy" else KEEP_NOTHING  # ("auto" may pack)
    return dispatch.cupy_matrix_product(a, b, level, keep)


def _auto(op_index: int, a: Any, b: Any, level: Level, shape: tuple[int, int, int]) -> Any:
    """a @ b at "auto" by the route it took for this shape before
    (``dispatch.kept_auto_route_on_gpu``): native float32 as ``_native`` (it packs nothing, so
    no kept packs are asked for), an INT8 level by the op's plan with the route's fallback
    where no pack is kept; else the general path."""
    route = dispatch.kept_auto_route_on_gpu(*shape)
    if route.level.kind == "fp32":
        return _native(op_index, a, b)
    keep = keep_for(op_index, a, b)
    if keep is KEEP_NOTHING and route.level.kind == "int8":
        c = _planned(op_index, a, b, route.level, shape, route.fallback)
        if c is not None:
            return c
    return dispatch.cupy_matrix_product(a, b, level, keep)


def _native(op_index: int, a: Any, b: Any) -> Any:
    """CuPy's own SGEMM of two float32 matrices, replayed as one graph of the op's own where the
    backend serves one (``cuda.backend.replayed_sgemm``: small products, from a signature's
    second call; the same bits, for less host time than CuPy's call)."""
    replay = getattr(_backend(), "replayed_sgemm", None)
    c = None if replay is None else replay(a, b, op_index)
    return device.cupy_module().matmul(a, b) if c is None else c


def _planned(
    op_index: int,
    a: Any,
    b: Any,
    level: Level,
    shape: tuple[int, int, int],
    fallback: Fallback | None = None,
) -> Any:
    """a @ b replayed by the op's plan for this signature; None where none serves."""
    if not plan_cache.enabled():  # (read each call, as the cache reads it)
        return None
    cp = device.cupy_module()
    here = cp.cuda.runtime.getDevice()
    if a.data.device_id != here or b.data.device_id != here:
        return None
    rule = None if fallback is None else (fallback.exact_share, fallback.row_entries)
    key = (*shape, level.name, rule, here, cp.cuda.get_current_stream().ptr)
    table = _tables.get(op_index)
    if table is None:
        table = _tables.setdefault(op_index, {})
    plan = table.get(key, _MISSING)
    if plan is _MISSING:
        plan = _find_plan(*shape, level, fallback)
        if len(table) >= TABLE_ENTRIES:
            table.clear()
        table[key] = plan
    if plan is None:
        return None
    c = plan(a, b)
    if c is None:  # released (evicted, clear_cache): the next call finds the cache's plan again
        table.pop(key, None)
    return c


def _find_plan(m: int, k: int, n: int, level: Level, fallback: Fallback | None = None) -> Any:
    """The plan cache's ``CapturedProduct`` for m x k x n at ``level`` (with "auto"'s
    ``fallback``) on the current device and stream (made now if new;
    ``cuda.backend.captured_plan``), or None where none serves or the backend offers no lookup
    (the general path then finds the same plan each call)."""
    lookup = getattr(_backend(), "captured_plan", None)
    return None if lookup is None else lookup(m, k, n, level, fallback)


def _captured(op_index: int, a: Any, b: Any) -> Any:
    """a @ b on a stream capturing a whole call: what the direct call runs, in a form the
    capture takes (module docstring)."""
    level = level_for(op_index)
    fallback = None
    if level.kind == "policy":
        routed = dispatch.route(a, b, level)
        level, fallback = routed.level, routed.fallback
    if level.kind == "fp32":
        return _graph_gemm().matmul(a, b)
    if level.kind == "ordered":
        return _backend().ordered_product(a, b)
    keep = keep_for(op_index, a, b) if level.kind == "int8" else KEEP_NOTHING
    # B's tops and pack beside A's, as a plan's own graph forks them (nothing kept: kept packs
    # take pack_reuse's way, on one stream)
    side = _side_stream() if level.kind == "int8" and keep is KEEP_NOTHING else None
    if fallback is not None and level.kind == "int8" and _backend().capturable(level, fallback):
        # "auto"'s INT8 route: its fallback after packing decided on the GPU, as its plan's
        # graph decides it (a host check would break the capture); built uncaptured first
        sliced = _sliced()
        if device.cupy_module().cuda.get_current_stream().is_capturing():
            return sliced.int8_product_deciding_on_gpu(a, b, level, fallback, side)
        _auto_fallback().warm_deciding(a, b)
    return _backend().product_at_level(a, b, level, keep, fallback, side=side)


def _side_stream() -> Any:
    """This thread's second stream on the current device, made at the first captured call's
    uncaptured run (the warm-up before the capture): the same for every call, so a graph's
    fork costs no stream made inside a capture. One still capturing outside a capture (a
    capture that failed between fork and join) is replaced."""
    cp = device.cupy_module()
    here = cp.cuda.runtime.getDevice()
    side = _mode.sides.get(here)
    if side is None or (side.is_capturing() and not cp.cuda.get_current_stream().is_capturing()):
        side = _mode.sides[here] = cp.cuda.Stream(non_blocking=True)
    return side


def _captured_stack(op_index: int, a: Any, b: Any) -> Any:
    """The pairs of two C-contiguous float32 stacks (s, m, k) and (s, k, n) at an INT8 level on
    a stream capturing a whole call: the stack's kernels (those its plan's graph replays),
    not the plan cache, which would make a plan, and synchronise, inside the capture. None:
    the general path."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return None
    if not (a.flags.c_contiguous and b.flags.c_contiguous) or 0 in a.shape + b.shape:
        return None
    level = level_for(op_index)
    if level.kind == "policy":
        level = dispatch.route(a, b, level).level
    return _backend().stack_product_at_level(a, b, level) if level.kind == "int8" else None


def clear() -> None:
    """Forgets every op's plans (``mixpert.clear_cache``: the cache releases them)."""
    _tables.clear()


dispatch.on_clear_cache(clear)


@functools.cache
def _backend() -> ModuleType:
    from mixpert.runtime.cuda import backend

    return backend


@functools.cache
def _sliced() -> ModuleType:
    from mixpert.runtime.cuda import sliced

    return sliced


@functools.cache
def _auto_fallback() -> ModuleType:
    from mixpert.runtime.cuda import auto_fallback

    return auto_fallback


@functools.cache
def _graph_gemm() -> ModuleType:
    from mixpert.runtime.cuda import graph_gemm

    return graph_gemm

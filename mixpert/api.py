"""The public one-shot functions: ``matmul`` and ``tune``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import tuner
from .execution.op_ids import op_index
from .execution.state import CallRecord, record, recording
from .jit import MixpertFunction, jit
from .plans.plan import Plan
from .runtime import device, dispatch
from .runtime.levels import NATIVE_LEVEL, Level, LevelName, get_level
from .runtime.precision import get_default_level

DIRECT_OP = "mixpert.matmul"  # the op id of a direct call's record: no site of compiled code


def matmul(
    a: Any, b: Any, level: LevelName | Level | None = None, backend: dispatch.Backend = "auto"
) -> Any:
    """Emulated float32 ``a @ b`` on INT8 (or FP16) products at ``level``.

    ``a`` (m, k) and ``b`` (k, n) are 2-D NumPy or CuPy arrays of any strides and order; 1-D and
    N-D operands follow ``np.matmul`` (vectors run natively, stacks broadcast; see
    ``mixpert.runtime.batched``); 2-D Dask arrays give a Dask array whose blocks are per-chunk
    products added in k order (``mixpert.runtime.dask_products``). Levels are
    named ("I".."V", "T6", "fp16", "tf32", "fp32", "fp64", "fp32-ordered", "auto"; any case; see
    ``mixpert.LADDER``); None takes the default level (``mixpert.set_default_level``,
    ``mixpert.default_level``, ``$MIXPERT_DEFAULT_LEVEL``; initially "auto": the fastest
    float32-grade way for the shape and device). The result is a float32 array of
    shape (m, n) of the operands' kind: CuPy arrays stay on their GPU with no host copy; NumPy
    arrays run on the exact CPU backend, or on the GPU (copied there and back) when one is usable
    and the product is large enough to win (``backend="auto"``; force with "cpu" or "cuda").

    float16 and float64 inputs are rounded to float32 first: mixpert emulates float32 products,
    so a float64 input is treated as the float32 matrix nearest to it and the result is float32.

    NaN and Inf come out where float32 matmul puts them (their rows and columns bypass
    emulation); zeros, subnormals, wide exponent ranges and empty dimensions are handled. IV
    and V keep SGEMM's componentwise bound 2 k u |A||B| by recomputing exactly the lines their
    slices cannot resolve (``mixpert.runtime.bypass``; README "What each level promises"); the
    cheaper levels keep a bound scaled by each row's and column's largest entry. The
    INT8 levels are deterministic: the same inputs give the same bits on every run and on both
    backends. The native levels (fp32, tf32, fp64, and "auto" where it means fp32) sum in the
    BLAS's order, and the FP16 level sums in FP32 on GPUs: their bits may differ by backend.

    Raises TypeError for non-float dtypes or non-array operands, ValueError for 0-d operands,
    for mismatched inner dimensions and for unknown level names.

    Inside ``mixpert.record()`` each call is recorded (op id ``"mixpert.matmul"``) with its
    m, k, n (m counts every pair of a stack), the level that ran and its time.
    """
    if recording(here=True):  # this thread's own recording (a worker's is its call's)
        return _recorded(a, b, level, backend)
    return dispatch.matmul(a, b, level=level, backend=backend)


def _recorded(a: Any, b: Any, level: LevelName | Level | None, backend: Any) -> Any:
    """``dispatch.matmul`` as the unrecorded call makes it, timed; then its ``CallRecord``
    (here, not in the runtime: ``runtime`` never imports ``execution``)."""
    fell_back: list[bool] = []  # "auto" ran cuBLAS SGEMM after packing for an INT8 level
    start = time.perf_counter()
    result = dispatch.matmul(
        a, b, level=level, backend=backend, on_native=lambda: fell_back.append(True)
    )
    sync = getattr(getattr(result, "device", None), "synchronize", None)
    if sync is not None:  # CuPy: time the kernels, not their launch
        sync()
    seconds = time.perf_counter() - start
    requested = get_level(get_default_level() if level is None else level)
    ran, where = _route_of(a, b, requested, backend)
    if fell_back:
        ran = get_level(NATIVE_LEVEL)
    m, k, n = _sizes(a, b)
    record(CallRecord(op_index(DIRECT_OP), m, k, n, ran.name, seconds, where), here=True)
    return result


def _route_of(a: Any, b: Any, requested: Level, backend: Any) -> tuple[Level, str]:
    """The level and backend the call's (first) matrix product ran at ("auto" resolved)."""
    where = "cuda" if device.is_cupy_array(a) or device.is_cupy_array(b) else "cpu"
    try:
        if a.ndim == 1 or b.ndim == 1:  # vectors run natively (runtime.batched)
            return get_level(NATIVE_LEVEL), where
        x = a if a.ndim == 2 else a[(0,) * (a.ndim - 2)]  # a stack: its first pair
        y = b if b.ndim == 2 else b[(0,) * (b.ndim - 2)]
        routed = dispatch.route(x, y, requested, backend)
    except (AttributeError, TypeError, ValueError):  # operands only NumPy's product takes
        return requested, where
    return routed.level, routed.backend


def _sizes(a: Any, b: Any) -> tuple[int, int, int]:
    """(m, k, n) of ``a @ b`` as ``np.matmul`` reads the operands, m summed over a stack."""
    sa, sb = tuple(getattr(a, "shape", np.shape(a))), tuple(getattr(b, "shape", np.shape(b)))
    m = sa[-2] if len(sa) >= 2 else 1
    n = sb[-1] if len(sb) >= 2 else 1
    stack = np.broadcast_shapes(sa[:-2], sb[:-2]) if len(sa) > 2 or len(sb) > 2 else ()
    return m * math.prod(stack), sa[-1] if sa else 1, n


def tune(
    func: Callable[..., Any],
    args: Sequence[Any],
    tol: float | None = None,
    *,
    candidates: Sequence[str] | None = None,
    on_run: Callable[[], None] | None = None,
    measure: bool | None = None,
    margin: float | None = None,
    validation: Sequence[Sequence[Any]] = (),
    target: tuner.Target | None = None,
) -> Plan:
    """Tune ``func`` (plain or ``mixpert.jit``-ed) on representative ``args``; return a Plan.

    Greedy per-op levels (MixPert 3.4; see ``mixpert.tuner``) so that the output error against
    float64 stays within ``tol`` beyond the inputs seen: each op's own error and the error
    model's figure for generic data of its size and magnitudes within its budget (tol; float32
    grade for ops feeding a discrete step), the measured error within the share of tol its
    spread leaves (``margin`` fixes that share instead), and within tol on each input of
    ``validation`` (the worst is the plan's ``held_out_error``). ``tol`` None: 1e-6, said in
    the log. ``target``: "cpu", "cuda" or "auto" (the GPU when one is usable here): the device
    whose time the plan minimises; on a CPU target plans run native float32 where it meets tol.
    ``measure``: also time the plan against all native float32 (default: only on a GPU).
    """
    jitted = func if isinstance(func, MixpertFunction) else jit(func)
    return tuner.tune(
        jitted, args, tol, candidates=candidates, on_run=on_run, measure=measure,
        margin=margin, validation=validation, target=target,
    )  # fmt: skip

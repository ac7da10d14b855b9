"""The public one-shot functions: ``matmul`` and ``tune``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .execution.op_ids import op_index
from .execution.state import CallRecord, record, recording
from .jit import MixpertFunction, jit
from .plans.plan import Plan
from .runtime import device, dispatch, numpy_meaning
from .runtime.levels import NATIVE_LEVEL, Level, LevelName, get_level
from .runtime.precision import get_default_level
from .timing import synchronizer_for
from .tuning import tuner

DIRECT_OP = "mixpert.matmul"  # the op id of a direct call's record: no site of compiled code


def matmul(
    a: Any,
    b: Any,
    /,
    out: Any = None,
    *,
    level: LevelName | Level | None = None,
    backend: dispatch.Backend = "auto",
    **ufunc_kwargs: Any,
) -> Any:
    """``np.matmul(a, b, out=out)``, its float32 products emulated on INT8 (or FP16) products.

    The contract: ``mixpert.matmul`` has ``np.matmul``'s meaning for every operand NumPy
    accepts (``cupy.matmul``'s for CuPy arrays, Dask's for Dask arrays): the same result
    shape, dtype and kind, the same scalars (vector @ vector), the same errors with the same
    types. Where NumPy computes in float32 (its matmul loop for the operands' dtypes is float32:
    float32 with float32, float16, bool or 8/16-bit integers; 2-D, vectors, stacks,
    broadcasting), the product is emulated at ``level``; every other dtype combination is
    computed natively by NumPy and is exactly ``np.matmul``'s: float64 (float32 beside float64
    included) in float64, float16 alone in float16 (NumPy's meaning, not emulated), integers
    with wrap-around, complex, object, bool; lists, tuples and other array-likes are converted
    as NumPy converts them (a list of floats is float64). ``out`` (positional or keyword) follows
    NumPy: the result is cast ``same_kind`` into it, the operands broadcast over its loop
    dimensions, it is returned, and overlap with the operands is handled; NumPy's own error for
    any ``out`` it refuses. Arrays of other libraries that speak DLPack (PyTorch, JAX) are read
    without a copy and the result comes back as their kind, on their device
    (``mixpert.runtime.numpy_meaning``).

    Exceptions to "exactly np.matmul", by design:

    - float32 products are emulated: within the level's bound of float32 matmul, not its bits
      (at "fp32", and "auto" on the CPU, they are NumPy's native float32 product).
    - ufunc keywords (``axes``, ``axis``, ``dtype``, ``casting``, ``order``, ``subok``,
      ``signature``) are passed to ``np.matmul``, which then computes natively.
    - operands that take over NumPy's ufuncs (their own ``__array_ufunc__``) get their own
      ``np.matmul``, natively.
    - a NumPy masked array with masked entries is refused (TypeError): mixpert would compute
      with the values under the mask.
    - an operand of ndim 0 of a float32 product is refused with mixpert's ValueError naming
      the operand (NumPy's error type, another message); mismatched inner or stack
      dimensions likewise.
    - Dask operands of a float32 product give a lazy float32 Dask array of per-chunk products
      (``mixpert.runtime.dask_products``; 2-D only, no ``out``).

    ``a`` and ``b`` may have any strides and order. Levels are named ("I".."V", "T6", "fp16",
    "tf32", "fp32", "fp64", "fp32-ordered", "auto"; any case; see ``mixpert.LADDER``); None
    takes the default level (``mixpert.set_default_level``, ``mixpert.default_level``,
    ``$MIXPERT_DEFAULT_LEVEL``; initially "auto": the fastest float32-grade way for the shape
    and device). CuPy arrays stay on their GPU with no host copy; NumPy arrays run on the exact
    CPU backend, or on the GPU (copied there and back) when one is usable and the product is
    large enough to win (``backend="auto"``; force with "cpu" or "cuda"; the backend concerns
    the emulated products only).

    NaN and Inf come out where float32 matmul puts them (their rows and columns bypass
    emulation); zeros, subnormals, wide exponent ranges and empty dimensions are handled. IV
    and V keep SGEMM's componentwise bound 2 k u |A||B| by recomputing exactly the lines their
    slices cannot resolve (``mixpert.runtime.bypass``; README "What each level promises"),
    except IV (and IV-blocks) at k < 8, which keep a larger proven bound there
    (docs/numerics.md, "Level IV at short k"; "auto" never routes IV at such k); the cheaper
    levels keep a bound scaled by each row's and column's largest entry. The INT8 levels are
    deterministic: the same inputs give the same bits on every run and on both backends. The
    native levels (fp32, tf32, fp64, and "auto" where it means fp32) sum in the BLAS's order,
    and the FP16 level sums in FP32 on GPUs: their bits may differ by backend.

    Raises ValueError for unknown level or backend names (before anything else).

    Inside ``mixpert.record()`` each call is recorded (op id ``"mixpert.matmul"``) with its
    m, k, n (m counts every pair of a stack), the level that ran ("native <dtype>" where
    NumPy's own product ran) and its time.
    """
    if out is None and backend == "auto" and not ufunc_kwargs and not recording(here=True):
        # two float32 CuPy matrices: straight to the GPU route (a ~20 us call shows each layer)
        level = dispatch.level_in_force(level)  # (parsed once: the general path takes it so)
        fast = dispatch.cupy_matrix_product(a, b, level)
        if fast is not None:
            return fast
    if isinstance(out, (str, Level)):  # the pre-issue-38 positional level
        raise TypeError(
            f"mixpert.matmul's third positional argument is out, as np.matmul's; got {out!r}: "
            f"pass the level by name, level={out!r}"
        )
    if recording(here=True):  # this thread's own recording (a worker's is its call's)
        return _recorded(a, b, out, level, backend, ufunc_kwargs)
    return dispatch.np_matmul_at_level(a, b, level=level, backend=backend, out=out, **ufunc_kwargs)


def _recorded(
    a: Any,
    b: Any,
    out: Any,
    level: LevelName | Level | None,
    backend: Any,
    ufunc_kwargs: dict[str, Any],
) -> Any:
    """``dispatch.np_matmul_at_level`` as the unrecorded call makes it, timed; then its
    ``CallRecord`` (here, not in the runtime: ``runtime`` never imports ``execution``)."""
    fell_back: list[bool] = []  # "auto" ran cuBLAS SGEMM after packing for an INT8 level
    synchronizer_for((a, b))()  # (CuPy: work queued before this product is not its time)
    start = time.perf_counter()
    result = dispatch.np_matmul_at_level(
        a, b, level=level, backend=backend, on_native=lambda: fell_back.append(True), out=out,
        **ufunc_kwargs,
    )  # fmt: skip
    sync = getattr(getattr(result, "device", None), "synchronize", None)
    if sync is not None:  # CuPy: time the kernels, not their launch
        sync()
    seconds = time.perf_counter() - start
    requested = get_level(get_default_level() if level is None else level)
    ran, where = _route_of(a, b, requested, backend)
    if fell_back:
        ran = get_level(NATIVE_LEVEL)
    name = ran.name
    loop = numpy_meaning.loop_dtype(a, b)
    if ufunc_kwargs or loop != np.float32:  # NumPy's own product ran
        name = f"native {loop if loop is not None else 'matmul'}"
    m, k, n = _sizes(a, b)
    record(CallRecord(op_index(DIRECT_OP), m, k, n, name, seconds, where), here=True)
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

    Greedy per-op levels (MixPert 3.4; see ``mixpert.tuning``) so that the output error against
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
    jitted.compile_for(args)  # a refused product: ProductTypingError, before any Python run
    return tuner.tune(
        jitted, args, tol, candidates=candidates, on_run=on_run, measure=measure,
        margin=margin, validation=validation, target=target,
    )  # fmt: skip

"""``np_matmul_at_level``: checks one product, routes it once (``auto``) and runs the route on a
backend.

The backends (``cpu``, ``cuda``) each take ``product_at_level(a, b, level)`` with a concrete level;
``auto.route`` decides which one runs and, for the "auto" policy, which level. ``run`` carries
out a route, so a caller that has routed a call (the execution hook) does not route it again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from . import (
    auto,
    batched,
    cpu,
    dask_products,
    device,
    equilibrate,
    numpy_meaning,
    ordered,
    pack_reuse,
    plan_cache,
)
from .auto import DASK, Route
from .auto import choose_backend as choose_backend  # (public here: the benchmarks ask it)
from .levels import Level, get_level
from .precision import get_default_level
from .validation import BACKENDS as BACKENDS
from .validation import Backend, check_backend, check_operand, check_pair

_FLOAT32 = np.dtype(np.float32)


def np_matmul_at_level(
    a: Any,
    b: Any,
    level: str | Level | None = None,
    backend: Backend = "auto",
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    on_native: Callable[[], None] | None = None,
    *,
    out: Any = None,
    **ufunc_kwargs: Any,
) -> Any:
    """``np.matmul(a, b, out=out, **ufunc_kwargs)`` with its float32 products at ``level``
    (None: the default level, ``precision``; see ``mixpert.matmul`` for the contract and
    ``numpy_meaning`` for what runs natively): 2-D matrices here, vectors and stacks through
    ``batched``. ``keep``: the 2-D product's operands whose packs are kept for later products
    (``pack_reuse``). ``on_native`` is called when "auto" resolved to an INT8 level on the GPU
    but ran cuBLAS SGEMM instead (its route's ``Fallback``), so records name what ran."""
    level = level_in_force(level)  # names fail first, once
    check_backend(backend)  # (also where the product runs natively)
    if out is None and not ufunc_kwargs and backend == "auto":
        fast = cupy_matrix_product(a, b, level, keep, on_native)  # no more layers than this
        if fast is not None:
            return fast

    def emulated(x: Any, y: Any) -> Any:
        return product(x, y, level, backend, keep, on_native)

    return numpy_meaning.with_numpy_semantics(a, b, out, emulated, **ufunc_kwargs)


def level_in_force(level: str | Level | None) -> Level:
    """``level`` parsed, or the default level where it is None (ValueError for unknown names)."""
    return get_level(get_default_level() if level is None else level)


def product(
    a: Any,
    b: Any,
    level: Level,
    backend: Backend = "auto",
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    on_native: Callable[[], None] | None = None,
) -> Any:
    """``np_matmul_at_level`` at a level already parsed: each product is routed once, here
    (Dask operands: each chunk; stacks: each folded product, or the stack as one call)."""
    if device.is_dask_array(a) or device.is_dask_array(b):  # per chunk, on the chunk's backend
        chunk_backend = "auto" if backend == DASK else backend
        return dask_products.blockwise_product(
            a, b, lambda x, y: product(x, y, level, chunk_backend)
        )
    if getattr(a, "ndim", 2) != 2 or getattr(b, "ndim", 2) != 2:  # vectors and stacks
        check_backend(backend)
        if backend != "cpu":
            routed = _gpu_stack_fast_path(a, b, level)
            if routed is not None:
                return routed
        each = _stack_product(level, backend)
        return batched.broadcast_products(a, b, lambda x, y: product(x, y, level, backend), each)
    fast = cupy_matrix_product(a, b, level, keep, on_native) if backend == "auto" else None
    if fast is not None:
        return fast
    return run(a, b, route(a, b, level, backend), keep, on_native)


def cupy_matrix_product(
    a: Any,
    b: Any,
    level: Level,
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    on_native: Callable[[], None] | None = None,
) -> Any | None:
    """a @ b for two float32 CuPy matrices, by the shortest way there is:
    CuPy's own product at "fp32", "auto"'s choice for the shape, an INT8 level replayed as one
    graph (``_replayed``); None for other operands (the general path takes them). At n = 128 a
    whole SGEMM call takes tens of microseconds: each layer of checks would show."""
    shape = _cupy_float32_matrices(a, b)
    if shape is None:
        return None
    if level.kind == "fp32" or (level.kind == "policy" and auto.native_by_shape(*shape)):
        return _native(a, b)
    if level.kind == "policy":
        routed = kept_auto_route_on_gpu(*shape)
        try:
            return _on_gpu(a, b, routed, keep, on_native, plain=True)
        except MemoryError:  # (cupy's OutOfMemoryError is one)
            if not _forget_kept_route(routed, *shape):
                raise
        # the memory the rules found free when the route was kept is gone (its plan evicted,
        # other arrays since): asked again, they take the route that fits now
        return _on_gpu(a, b, kept_auto_route_on_gpu(*shape), keep, on_native, plain=True)
    replayed = _replayed(a, b, level, keep)
    return replayed if replayed is not None else run(a, b, route(a, b, level), keep, on_native)


def auto_route_on_gpu(m: int, k: int, n: int) -> Route:
    """The route "auto" takes for an m x k x n product of two float32 CuPy matrices."""
    return auto.on_gpu(m, k, n, 1, "matrix", _gpu())


# "auto"'s routes of float32 CuPy matrices per (m, k, n, device), kept while plans are: the
# rules read the shape and the free memory (a product's workspace must fit), and asking the
# driver and sizing the workspace each call costs the host more than a replayed product of
# 1024^3 does, where a route's plan, once made, owns its memory. Cleared with the plans.
_kept_routes: dict[tuple[int, int, int, int], Route] = {}
KEPT_ROUTES = 4096  # shapes kept (past it the table starts again)


def kept_auto_route_on_gpu(m: int, k: int, n: int) -> Route:
    """``auto_route_on_gpu``, asked once per shape and device while plans are kept
    (``plan_cache.enabled``), else each call."""
    if not plan_cache.enabled():
        return auto_route_on_gpu(m, k, n)
    key = _kept_key(m, k, n)
    found = _kept_routes.get(key)
    if found is None:
        found = auto_route_on_gpu(m, k, n)
        if len(_kept_routes) >= KEPT_ROUTES:
            _kept_routes.clear()
        _kept_routes[key] = found
    return found


def _forget_kept_route(routed: Route, m: int, k: int, n: int) -> bool:
    """Whether ``routed`` was a kept route of an INT8 level for this shape, now forgotten."""
    if routed.level.kind != "int8" or not plan_cache.enabled():
        return False
    return _kept_routes.pop(_kept_key(m, k, n), None) is routed


def _kept_key(m: int, k: int, n: int) -> tuple[int, int, int, int]:
    return (m, k, n, device.cupy_module().cuda.runtime.getDevice())


def route(a: Any, b: Any, level: str | Level, backend: Backend = "auto") -> Route:
    """The route of one product, or of all pairs of two stacks (s, m, k) and (s, k, n), after
    checking the operands and names (``auto.route``)."""
    requested = get_level(level)  # unknown names fail before anything else
    if getattr(a, "ndim", 2) == 2 and getattr(b, "ndim", 2) == 2:
        check_pair(a, b)
    else:  # two stacks (s, m, k) and (s, k, n): batched.broadcast_products has checked their shapes
        check_operand("a", a, matrix=False)
        check_operand("b", b, matrix=False)
    check_backend(backend)
    return auto.route(a, b, requested, backend, _gpu)


def resolve_level(level: str | Level, a: Any, b: Any, backend: str) -> Level:
    """The level a @ b runs at on ``backend``: ``level`` itself, or what "auto" resolves to
    (``auto.resolve``; the operands' shapes alone are read)."""
    return auto.resolve(get_level(level), a, b, backend, _gpu)


def run(
    a: Any,
    b: Any,
    routed: Route,
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    on_native: Callable[[], None] | None = None,
) -> Any:
    """a @ b as ``routed`` (this call's ``route``) says: two matrices, or all pairs of two
    float32 stacks (s, m, k) and (s, k, n) (Dask operands: each chunk routes itself)."""
    if routed.backend == DASK:
        return dask_products.blockwise_product(a, b, lambda x, y: product(x, y, routed.level))
    if a.ndim != 2 or b.ndim != 2:
        if routed.backend == "cuda" and _contiguous_cupy_stacks(a, b):
            return _contiguous_stack(a, b, routed.level)
        return _run_stack(a, b, routed)
    if routed.backend == "cuda":
        return _on_gpu(a, b, routed, keep, on_native)
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        raise TypeError("backend='cpu' takes NumPy arrays; got a CuPy array (call .get() first)")
    return cpu.product_at_level(np.asarray(a), np.asarray(b), routed.level, keep)


def _on_gpu(
    a: Any,
    b: Any,
    routed: Route,
    keep: pack_reuse.Keep,
    on_native: Callable[[], None] | None,
    plain: bool = False,
) -> Any:
    """Two matrices on the CUDA backend; ``plain``: float32 CuPy matrices of matching k, which
    cuBLAS SGEMM and fp32-ordered take straight away (skipping
    ``cuda.backend.product_at_level``'s checks)."""
    kind = routed.level.kind
    if plain and kind == "fp32":
        return _native(a, b)
    if plain and kind == "ordered":  # (auto takes it only where m, k, n > 0)
        return _cuda().ordered_product(a, b)
    # a route with "auto"'s fallback replays only where no one asks to be told it ran
    told = routed.fallback is not None and on_native is not None
    replayed = None if told else _replayed(a, b, routed.level, keep, routed.fallback)
    if replayed is not None:
        return replayed
    return _cuda().product_at_level(a, b, routed.level, keep, routed.fallback, on_native)


def _native(a: Any, b: Any) -> Any:
    """CuPy's own product of two float32 CuPy matrices (``a.dot(b)``: ``cupy.matmul``'s call
    for matrices, under its gufunc layer), replayed as one graph where that serves
    (``cuda.backend.replayed_sgemm``): the same bits."""
    replayed = _cuda().replayed_sgemm(a, b)
    return a.dot(b) if replayed is None else replayed


def _replayed(
    a: Any, b: Any, level: Level, keep: pack_reuse.Keep, fallback: auto.Fallback | None = None
) -> Any | None:
    """a @ b at an INT8 level for float32 CuPy matrices with m, k, n > 0, replayed as one
    CUDA graph from the plan cache (``cuda.backend.captured_product``); None where that does
    not serve, and the product runs uncaptured: the same kernels, the same bits."""
    if level.kind != "int8" or keep != pack_reuse.KEEP_NOTHING:
        return None
    shape = _cupy_float32_matrices(a, b)
    if shape is None or 0 in shape:
        return None
    return _cuda().captured_product(a, b, level, fallback)


def _stack_product(level: Level, backend: Backend) -> batched.Matmul2D:
    """``batched.broadcast_products``'s ``stack_product``: all pairs of two float32 stacks
    (s, m, k) and (s, k, n) in one call, routed as one (``auto`` reads the stack's shape)."""

    def stack_product(x: Any, y: Any) -> Any:
        return _run_stack(x, y, route(x, y, level, backend))

    return stack_product


def _run_stack(a: Any, b: Any, routed: Route) -> Any:
    """All pairs of two float32 stacks (s, m, k) and (s, k, n) as ``routed`` says: the CUDA
    stack path, or on the CPU the whole-stack INT8 and in-order products, else pair by pair."""
    if routed.backend == "cuda":
        return _cuda().stack_product_at_level(a, b, routed.level)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if routed.level.kind == "int8":
            return cpu.int8_product_stack(a, b, routed.level)
        if routed.level.kind == "ordered":
            return ordered.ordered_product(a, b)
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=np.float32)
    for i in range(a.shape[0]):  # (CuPy stacks here raise run's backend="cpu" error)
        out[i] = run(a[i], b[i], routed)
    return out


def _cupy_float32_matrices(a: Any, b: Any) -> tuple[int, int, int] | None:
    """(m, k, n) where a and b are float32 CuPy matrices of matching k, else None: what the hot
    path tests, and nothing more (the general path's checks would cost 10-30% of the call)."""
    kind = type(a)
    if kind is not _cupy_ndarray and kind is not _learn_cupy_ndarray(a):
        return None
    if type(b) is not kind:
        return None
    if a.ndim != 2 or b.ndim != 2 or a.dtype != _FLOAT32 or b.dtype != _FLOAT32:
        return None
    m, k = a.shape
    k_b, n = b.shape
    return (m, k, n) if k == k_b else None


_cupy_ndarray: type | None = None  # CuPy's array type, as the last CuPy operand had it


def _learn_cupy_ndarray(x: Any) -> type | None:
    """CuPy's array type where ``x`` is a CuPy array on a usable GPU (kept: the next call
    compares types alone), else None: NumPy operands never import CuPy here."""
    global _cupy_ndarray
    cp = device.cupy_module() if device.is_cupy_array(x) else None
    if cp is None:
        return None
    _cupy_ndarray = cp.ndarray
    return _cupy_ndarray


def _contiguous_cupy_stacks(a: Any, b: Any) -> bool:
    """Two C-contiguous float32 CuPy stacks of one stack shape, (..., m, k) @ (..., k, n), with
    no empty dimension: ``_contiguous_stack`` takes them as they are."""
    cp = device.cupy_module() if device.is_cupy_array(a) else None
    if cp is None or type(a) is not cp.ndarray or type(b) is not cp.ndarray:
        return False
    if a.ndim < 3 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        return False
    if a.dtype != _FLOAT32 or b.dtype != _FLOAT32:  # (a dtype object compares fastest)
        return False
    return a.flags.c_contiguous and b.flags.c_contiguous and 0 not in a.shape + b.shape


def _gpu_stack_fast_path(a: Any, b: Any, level: Level) -> Any | None:
    """``_contiguous_stack`` straight away for two stacks ``_contiguous_cupy_stacks`` takes: a
    small stack's kernel takes ~10 us, and the general path's broadcasting and reshapes would
    cost several times that."""
    if not _contiguous_cupy_stacks(a, b):
        return None
    if a.ndim > 3:  # (each CuPy call costs microseconds: a 3-D stack skips the reshapes)
        m, k = a.shape[-2:]
        c = _gpu_stack_fast_path(a.reshape(-1, m, k), b.reshape(-1, k, b.shape[-1]), level)
        return c.reshape(*a.shape[:-1], b.shape[-1])
    if level.kind == "policy":
        count, m, k = a.shape
        level = auto.on_gpu(m, k, b.shape[2], count, "stack", _gpu()).level
    return _contiguous_stack(a, b, level)


def _contiguous_stack(a: Any, b: Any, level: Level) -> Any:
    """The pairs of two stacks ``_contiguous_cupy_stacks`` takes, (s, m, k) @ (s, k, n)."""
    cuda = _cuda()
    if level.kind == "fp32":  # checked: what stack_product_at_level would check again
        return cuda.contiguous_sgemm_stack(a, b)
    if level.kind == "ordered":  # (no workspace beyond the result)
        return cuda.ordered_product(a, b)
    replayed = cuda.captured_product(a, b, level) if level.kind == "int8" else None
    return replayed if replayed is not None else cuda.stack_product_at_level(a, b, level)


@functools.cache
def _cuda() -> ModuleType:
    """The CUDA backend (imported on first use: it needs CuPy). Cached: an import statement
    costs about a microsecond a call, a tenth of a small stack's kernel."""
    from .cuda import backend

    return backend


def _gpu() -> auto.Gpu | None:
    """The GPU ``auto``'s rules ask (the CUDA backend), or None where none is usable."""
    return _cuda() if device.gpu_available() else None  # type: ignore[return-value]


_clear_hooks: list[Callable[[], None]] = []  # what else keeps plans: on_clear_cache


def on_clear_cache(hook: Callable[[], None]) -> None:
    """Have ``clear_cache`` call ``hook`` too (the layers above keep plans of their own: a jit
    op's table of plans, a function's replayed calls)."""
    _clear_hooks.append(hook)


def clear_cache() -> None:
    """Releases the execution plans kept for repeated products (their device memory), and the
    whole calls of jitted functions kept as graphs (``mixpert.jit(replay=True)``)."""
    for hook in _clear_hooks:
        hook()
    _kept_routes.clear()
    if device.gpu_available():
        _cuda().clear_plans()


def rebalanced_k(a: Any, b: Any, level: str | Level) -> int:
    """How many k-indices equilibration moves or drops in this product (0 at native levels):
    what inspection reports as the wide-range lines handled."""
    if get_level(level).kind not in ("int8", "fp16"):  # (the levels that equilibrate)
        return 0
    if device.is_dask_array(a) or device.is_dask_array(b):
        return 0  # Dask: lazy, counted by no one
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        return _cuda().rebalanced_k(a, b)
    a32 = np.asarray(a).astype(np.float32, copy=False)
    return int(np.count_nonzero(equilibrate.k_exponents(a32, np.asarray(b).astype(np.float32))))


def unresolved_lines(a: Any, b: Any, level: str | Level) -> tuple[int, int]:
    """(rows of A, columns of B) this product recomputes exactly because the level's slices
    cannot resolve their range (``bypass``): what inspection reports (the same lines on every
    backend; 0 for Dask operands, which stay lazy)."""
    if device.is_dask_array(a) or device.is_dask_array(b):
        return 0, 0
    if device.is_cupy_array(a) or device.is_cupy_array(b):
        return _cuda().unresolved_lines(a, b, get_level(level))
    return cpu.unresolved_lines(np.asarray(a), np.asarray(b), get_level(level))

"""The CUDA backend's entry points, as the dispatcher calls them: ``product_at_level`` and
``stack_product_at_level`` at a concrete level, each level kind through one table of products
(``PRODUCTS``; whole stacks in one call: ``STACK_PRODUCTS``), and the workspace checked before
anything is allocated; what inspection asks (``unresolved_lines``, ``rebalanced_k``) and the
dispatcher's questions about the GPU. The products themselves are the package's other modules':
``sliced`` (INT8 and FP16 slices), ``iv_blocks``, ``fp32_ordered`` and ``native``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import cupy as cp
import numpy as np

from .. import pack_reuse, plan_cache, workspace
from ..combine import int32_k_block
from ..levels import Kind, Level
from ..plan_cache import PlanCache
from . import conditional, fused, graph_gemm, iv_blocks
from .auto_fallback import unresolved_counts
from .calibrate import crossovers  # "auto"'s crossovers as measured on this GPU's model
from .captured import CapturedProduct, CapturedSgemm, capturable, conditional_nodes
from .convert import as_float32
from .fp32_ordered import ordered_product, thin_fits
from .launch import free_bytes
from .native import contiguous_sgemm_stack, fp64_product, sgemm_stack, tf32_product
from .packs import k_exponents, pack_a, pack_b, packable_b, padded, tops_and_exponents, unit_inner
from .sliced import (
    FP16_K_BLOCK,
    fp16_product,
    int8_product,
    int8_product_stack,
    sum_blocking,
)

if TYPE_CHECKING:  # (the rule comes with the route: this package never asks auto)
    from ..auto import Fallback

__all__ = [  # (ordered_product, thin_fits, contiguous_sgemm_stack, free_bytes: the dispatcher's)
    "PRODUCTS",
    "STACK_PRODUCTS",
    "Call",
    "blocks_supported",
    "captured_plan",
    "captured_product",
    "clear_plans",
    "crossovers",
    "replays",
    "contiguous_sgemm_stack",
    "free_bytes",
    "ordered_product",
    "product_at_level",
    "rebalanced_k",
    "stack_product_at_level",
    "thin_fits",
    "unresolved_lines",
    "workspace_bytes",
]

_FLOAT32 = np.dtype(np.float32)


class Call(NamedTuple):
    """What a call asks beyond a @ b at its level: the operands whose packs to keep (kind
    "int8": ``pack_reuse``), level "auto"'s fallback to cuBLAS SGEMM after packing, as its
    route gives it (kinds "int8" and "blocks": ``auto.Fallback``, with ``on_native`` called
    when the fallback runs), and a second stream B's tops and pack run on beside A's (kind
    "int8" with nothing kept: a fork where the call is captured into a graph). The other kinds
    take none of it."""

    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING
    fallback: Fallback | None = None
    on_native: Callable[[], None] | None = None
    side: cp.cuda.Stream | None = None


PLAIN = Call()


class Product(Protocol):
    """A level kind's a @ b for float32 CuPy matrices with m, k, n > 0, taking from ``call``
    what the kind uses."""

    def __call__(
        self, a: cp.ndarray, b: cp.ndarray, level: Level, call: Call = PLAIN, /
    ) -> cp.ndarray: ...


def _int8(a: cp.ndarray, b: cp.ndarray, level: Level, call: Call = PLAIN) -> cp.ndarray:
    return int8_product(a, b, level, call.keep, call.fallback, call.on_native, call.side)


def _blocks(a: cp.ndarray, b: cp.ndarray, level: Level, call: Call = PLAIN) -> cp.ndarray:
    return iv_blocks.blocks_product(a, b, level, call.fallback, call.on_native)


# Level kind -> its product: every kind, so matmul has no case of its own.
PRODUCTS: dict[Kind, Product] = {
    "int8": _int8,
    "blocks": _blocks,
    "fp16": lambda a, b, level, call=PLAIN: fp16_product(a, b),
    "tf32": lambda a, b, level, call=PLAIN: tf32_product(a, b),
    "fp32": lambda a, b, level, call=PLAIN: cp.matmul(a, b),
    "fp64": lambda a, b, level, call=PLAIN: fp64_product(a, b),
    "ordered": lambda a, b, level, call=PLAIN: ordered_product(a, b),
}
# ... and for two stacks (s, m, k), (s, k, n) in one call; the other kinds run pair by pair.
STACK_PRODUCTS: dict[Kind, Callable[[cp.ndarray, cp.ndarray, Level], cp.ndarray]] = {
    "int8": int8_product_stack,
    "tf32": lambda a, b, level: tf32_product(a, b),
    "fp32": lambda a, b, level: sgemm_stack(a, b),
    "fp64": lambda a, b, level: fp64_product(a, b),
    "ordered": lambda a, b, level: ordered_product(a, b),
}


def product_at_level(
    a: Any,
    b: Any,
    level: Level,
    keep: pack_reuse.Keep = pack_reuse.KEEP_NOTHING,
    fallback: Fallback | None = None,
    on_native: Callable[[], None] | None = None,
    side: cp.cuda.Stream | None = None,
) -> Any:
    """The CUDA backend's entry: a @ b at ``level`` (not "auto") for 2-D float arrays.

    CuPy in, CuPy out; NumPy in, copied over and back. Operands are rounded to float32; empty
    dimensions give zeros. NaN/Inf lines are handled inside the combine kernels (IV-blocks: its
    bypass kernels). Levels of kind "int8" keep the packs of the operands ``keep`` names
    (``pack_reuse``; IV-blocks packs nothing to keep); ``fallback``: level "auto"'s, from its
    route, for ``int8_product`` and ``iv_blocks.blocks_product``; ``side``: ``Call``'s.
    """
    product = PRODUCTS.get(level.kind)
    if product is None:
        raise ValueError(f"level {level.name!r} (kind {level.kind}) has no CUDA implementation")
    host = not (isinstance(a, cp.ndarray) or isinstance(b, cp.ndarray))
    a, b = as_float32(cp.asarray(a)), as_float32(cp.asarray(b))
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        c = cp.zeros((m, n), dtype=cp.float32)
    else:
        _check_workspace(level, m, k, n)
        c = product(a, b, level, Call(keep, fallback, on_native, side))
    return cp.asnumpy(c) if host else c


def stack_product_at_level(a: Any, b: Any, level: Level) -> Any:
    """``product_at_level`` of each pair of two stacks (s, m, k) and (s, k, n), as one stack:
    the whole stack in a few launches where the level's kind has a stack product, else pair by
    pair."""
    a_dev, b_dev = isinstance(a, cp.ndarray), isinstance(b, cp.ndarray)
    host = not (a_dev or b_dev)
    if not (a_dev and b_dev and a.dtype == _FLOAT32 and b.dtype == _FLOAT32):
        a, b = as_float32(cp.asarray(a)), as_float32(cp.asarray(b))
    count, m, k = a.shape
    n = b.shape[2]
    if 0 in (count, m, k, n):
        c = cp.zeros((count, m, n), dtype=cp.float32)
    elif level.kind in STACK_PRODUCTS:
        _check_workspace(level, m, k, n, count)
        c = STACK_PRODUCTS[level.kind](a, b, level)
    else:
        c = cp.stack([product_at_level(a[i], b[i], level) for i in range(count)])
    return cp.asnumpy(c) if host else c


def _check_workspace(level: Level, m: int, k: int, n: int, count: int = 1) -> None:
    """MemoryError before allocating when ``count`` products' workspace cannot fit."""
    if level.emulated and level.kind != "blocks":  # (IV-blocks checks its own operands)
        needed = workspace_bytes(level, m, k, n, count)
        workspace.check_fits(level, count * m, k, n, needed, free_bytes(), "GPU")


def workspace_bytes(level: Level, m: int, k: int, n: int, count: int = 1) -> int:
    """The most device memory ``count`` (m x k) @ (k x n) products at an emulated ``level``
    allocate at once (``workspace.gpu_bytes``)."""
    block = int32_k_block(level) if level.kind == "int8" else FP16_K_BLOCK
    sums = sum_blocking(level, m, k, n, count)[1] if level.kind == "int8" else None
    return workspace.gpu_bytes(level, m, k, n, padded(k), padded(k) > block, count, sums)


def unresolved_lines(a: Any, b: Any, level: Level) -> tuple[int, int]:
    """``cpu.unresolved_lines`` from the pack kernels' own flags (one pack of each operand),
    NaN/Inf lines left out; brings two numbers to the host (level IV-blocks: counted from the
    entries' bits, ``iv_blocks.unresolved_lines``)."""
    if not level.bypass_wide or 0 in (*a.shape, b.shape[1]):
        return 0, 0
    a, b = as_float32(cp.asarray(a)), as_float32(cp.asarray(b))
    if level.kind == "blocks":
        return iv_blocks.unresolved_lines(a, b, level)
    a_rows, b = unit_inner(a), packable_b(b)
    a_top, b_top, kexp = tops_and_exponents(a_rows, b)  # as int8_product packs them
    packs = pack_a(a_rows, kexp, level, a_top), pack_b(b, kexp, level, b_top)
    return unresolved_counts(a, b, *packs)


def rebalanced_k(a: Any, b: Any) -> int:
    """k-indices ``k_exponents`` moves or drops (brings one number to the host)."""
    f = k_exponents(unit_inner(as_float32(cp.asarray(a))), as_float32(cp.asarray(b)))
    return int(cp.count_nonzero(f[:-1]))


def blocks_supported() -> bool:
    """Whether the current GPU runs level IV-blocks's kernels (INT8 mma.sync)."""
    return iv_blocks.supported(cp.cuda.Device().id)


_log = logging.getLogger("mixpert")
# Products replay a graph up to this many multiply-adds: past it the GPU's work hides the
# direct call's host time, and copying the operands into a plan's buffers would cost more.
REPLAY_MAX_WORK = 4096**3
_plans: dict[int, PlanCache] = {}  # device -> its plans


def _device_plans(device: int) -> PlanCache:
    """``device``'s plan cache, made at its first use."""
    cache = _plans.get(device)
    if cache is None:  # (an empty cache is falsy: it has a length)
        cache = _plans.setdefault(device, PlanCache())
    return cache


def captured_product(
    a: cp.ndarray, b: cp.ndarray, level: Level, fallback: Fallback | None = None
) -> cp.ndarray | None:
    """a @ b for float32 CuPy matrices with m, k, n > 0, or all pairs of two C-contiguous
    float32 stacks (s, m, k) and (s, k, n), replayed from the graph of the plan cache's
    ``CapturedProduct`` for this signature (``captured_plan``); None where none serves: the
    caller runs it uncaptured, with the same bits."""
    device = cp.cuda.runtime.getDevice()
    if device != a.data.device_id or device != b.data.device_id:
        return None
    count = a.shape[0] if a.ndim == 3 else 1
    if a.ndim == 3 and count == 1:  # one pair: the matrix product's plan
        c = captured_product(a[0], b[0], level, fallback)
        return None if c is None else c[None]
    (m, k), n = a.shape[-2:], b.shape[-1]
    plan = captured_plan(m, k, n, level, fallback, count, device)
    return None if plan is None else plan(a, b)


class _Capturing(Exception):
    """No plan is made now: the stream is capturing a graph (making one synchronises), or the
    signature is new."""


def captured_plan(
    m: int,
    k: int,
    n: int,
    level: Level,
    fallback: Fallback | None = None,
    count: int = 1,
    device: int | None = None,
) -> CapturedProduct | None:
    """The plan cache's ``CapturedProduct`` for this signature (``device``, default the
    current one; the current stream, shape, level, "auto"'s fallback; made now if new), or
    None where none serves: another level kind, more work than REPLAY_MAX_WORK, the cache off
    or full, a product that cannot be captured here, or a new signature on a stream that is
    capturing a graph."""
    if not capturable(level, fallback) or count * m * k * n > REPLAY_MAX_WORK:
        return None
    device = cp.cuda.runtime.getDevice() if device is None else device
    stream = cp.cuda.get_current_stream()
    cache = _device_plans(device)
    # (names and numbers: a Level's dataclass hash costs microseconds a call)
    rule = None if fallback is None else (fallback.exact_share, fallback.row_entries)
    # (the fused kernel's switch too: a graph captured with it on would replay it when off)
    key = (stream.ptr, count, m, k, n, level.name, rule, fused.mode())

    def make() -> CapturedProduct | None:
        if stream.is_capturing():  # (asked on a miss alone: a hit costs no driver call)
            raise _Capturing
        return _captured(m, k, n, level, fallback, count)

    try:
        return cache.get(key, make)
    except _Capturing:
        return None


# Native products replay a graph up to this many multiply-adds: past it the GPU's work hides
# CuPy's host time.
REPLAY_SGEMM_MAX_WORK = 1024**3
_sighted: set[tuple[Any, ...]] = set()  # native signatures seen once: planned when seen again
_SIGHTED_MAX = 4096


def replayed_sgemm(a: cp.ndarray, b: cp.ndarray, owner: Hashable = None) -> cp.ndarray | None:
    """``a.dot(b)`` for float32 CuPy matrices (CuPy's cuBLAS SGEMM), bit for bit, replayed from
    the plan cache's ``CapturedSgemm`` where both are C-contiguous and 256-byte aligned on the
    current device and the product is small; planned at a signature's second call (a capture
    costs milliseconds: a shape met once never pays it). None where none serves.

    ``owner`` (a jitted function's op) gets a plan of its own while the cache has room for
    one: a site called in a loop then finds its graph pointed at its operands already, where
    sites sharing a plan would rewrite its addresses (a driver call) at every call. A full
    cache gives the new signature the plan its shape shares (owner None): many sites and
    shapes would otherwise evict each other's plans and capture again and again."""
    (m, k), n = a.shape, b.shape[1]
    if m * k * n > REPLAY_SGEMM_MAX_WORK or not (m and k and n):
        return None
    # (CuPy's own flags, read without building the ``flags`` object: a call's microseconds count)
    if a.data.ptr % 256 or b.data.ptr % 256 or not (a._c_contiguous and b._c_contiguous):
        return None
    device = cp.cuda.runtime.getDevice()
    if device != a.data.device_id or device != b.data.device_id:
        return None
    stream = cp.cuda.get_current_stream()
    key = ("sgemm", owner, stream.ptr, m, k, n, graph_gemm.compute_type())
    cache = _device_plans(device)
    plan = cache.find(key)
    if plan is plan_cache.MISSING and owner is not None and not cache.has_room():
        key = ("sgemm", None, *key[2:])
        plan = cache.find(key)
    if plan is not plan_cache.MISSING:
        return None if plan is None else plan(a, b)

    def make() -> CapturedSgemm | None:
        if key not in _sighted or stream.is_capturing():
            if len(_sighted) >= _SIGHTED_MAX:
                _sighted.clear()
            _sighted.add(key)
            raise _Capturing  # (nothing kept: asked again next time)
        try:
            return CapturedSgemm(m, k, n)
        except Exception as error:  # (CuPy's own product runs instead: the same bits)
            _log.debug("SGEMM %d x %d x %d: not captured (%s)", m, k, n, error)
            return None

    try:
        plan = cache.get(key, make)
    except _Capturing:
        return None
    return None if plan is None else plan(a, b)


def replays(m: int, k: int, n: int) -> bool:
    """Whether "auto"'s level IV on two matrices of this shape replays one graph here (its
    fallback decided on the GPU): ``auto``'s rules ask it."""
    return m * k * n <= REPLAY_MAX_WORK and conditional_nodes() and plan_cache.enabled()


def _captured(
    m: int, k: int, n: int, level: Level, fallback: Fallback | None, count: int = 1
) -> CapturedProduct | None:
    try:
        _check_workspace(level, m, k, n, count)
        return CapturedProduct(m, k, n, level, fallback, count)
    except Exception as error:  # (the product then runs uncaptured: slower, same bits)
        shape = f"{count} x " * (count > 1) + f"{m} x {k} x {n}"
        _log.debug("level %s, %s: not captured (%s)", level.name, shape, error)
        return None


def clear_plans() -> None:
    """Releases every device's execution plans and the graphs of "auto"'s GPU-decided
    fallback (``mixpert.clear_cache``)."""
    for cache in _plans.values():
        cache.clear()
    _sighted.clear()
    if conditional.available():
        conditional.clear_graphs()

"""The run-time hook of a rewritten site: the ``mixpert_gemm`` symbol, its status, the error relay.

Compiled (nopython) code calls the external C symbol ``mixpert_gemm`` (a ctypes callback
registered once with ``llvmlite.binding.add_symbol``) with the op's index, the shapes, raw
pointers and byte strides, or ``mixpert_gemm_stack`` for the pairs of two contiguous stacks;
object-mode code (CuPy operands) calls ``run_site``. Both ask
``route_to_run`` what to do, so the two modes decide alike. The callback's ``Status`` tells the
compiled code what comes next:

- ``OK``: the result is in the output the compiled code allocated.
- ``NATIVE``: run Numba's own product (so a plan of native float32 everywhere gives exactly
  plain ``numba.njit``'s bits).
- ``ERROR``: the runtime raised. ctypes cannot carry an exception through C, so it waits in this
  thread (``take_pending_error``); the compiled code raises ``MixpertRuntimeError`` and the
  jitted function's wrapper raises the original in its place (``reraise_pending``).
"""

from __future__ import annotations

import ctypes
import enum
import functools
import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

import numpy as np
from llvmlite import binding

from mixpert.runtime import batched, device, dispatch
from mixpert.runtime.auto import Route
from mixpert.runtime.levels import NATIVE_LEVEL, Level, get_level
from mixpert.runtime.pack_reuse import KEEP_NOTHING, Keep

from . import cupy_sites
from .kept_packs import reuse_counts, reused
from .op_ids import op_id_of
from .product_samples import ProductSample
from .state import CallRecord, keep_for, level_for, record, recording, wants_sample

SYMBOL = "mixpert_gemm"
log = logging.getLogger("mixpert")


class Status(enum.IntEnum):
    """What ``mixpert_gemm`` returns to compiled code."""

    OK = 0
    NATIVE = 1
    ERROR = 2


class MixpertRuntimeError(RuntimeError):
    """Raised by compiled code when the runtime failed; the wrapper re-raises the original.

    Under a caller with no wrapper (plain ``numba.njit`` code calling a mixpert function) this
    is what arrives, so it names the original and carries it as ``__cause__``. Numba builds it
    in the failing thread, possibly twice per raise: it reads the pending error, never takes it.
    """

    def __init__(self, *args: object) -> None:
        self.original = _pending.error
        if self.original is not None:
            cause = f"{type(self.original).__name__}: {self.original}"
            args = (f"{args[0]}: {cause}" if args else cause, *args[1:])
        super().__init__(*args)
        self.__cause__ = self.original


class _Pending(threading.local):
    error: BaseException | None = None


_pending = _Pending()


def take_pending_error() -> BaseException | None:
    """The exception the last failed runtime call in this thread left, once."""
    error, _pending.error = _pending.error, None
    return error


OP_NOTE = "in mixpert op "  # the note a runtime error gets, naming its product's op id


def _hand_over(error: BaseException, op_index: int) -> None:
    """Keep ``error`` for the caller in this thread, noting which product raised it."""
    error.add_note(f"{OP_NOTE}{op_id_of(op_index)}")
    _pending.error = error


def reraise_pending(relay: MixpertRuntimeError) -> NoReturn:
    """Raise the runtime's original exception in place of compiled code's ``relay``."""
    pending = take_pending_error() or relay.original
    if pending is None:
        raise relay
    raise pending from None


def route_to_run(op_index: int, a: Any, b: Any, level: Level | None = None) -> Route | None:
    """The route op ``op_index`` takes on these operands, or None: the caller's own product.

    The caller runs its own product where the plan says native float32, or says "auto" and
    "auto" means native float32 on the CPU; except while calls are recorded, when every
    product goes through the runtime to be timed. Otherwise this call's route, computed here
    once (the plan read once), goes to ``run_product``: "auto" keeps its fallback after
    packing, and records name the level that ran. ``level``: the plan's, when the caller has
    read it already.
    """
    level = level_for(op_index) if level is None else level
    routed = None
    if level.name != NATIVE_LEVEL or recording():
        routed = dispatch.route(a, b, level)
        native = routed.backend == "cpu" and routed.level.name == NATIVE_LEVEL
        routed = None if native and not recording() else routed
    if routed is None and log.isEnabledFor(logging.DEBUG):
        log.debug("%s: %s x %s runs natively", op_id_of(op_index), a.shape, b.shape)
    return routed


def run_product(op_index: int, a: Any, b: Any, routed: Route, keep: Keep | None = None) -> Any:
    """``a @ b`` on the runtime as ``routed`` (``route_to_run``'s) says, recording it when
    asked; any array kind. The operands the compiler proved loop-invariant keep their packs for
    the rest of the call (``keep``: their slots, when the caller has asked for them)."""
    stack = a.ndim == 3  # the pairs of two stacks: routed as a stack, recorded once
    if keep is None:
        keep = KEEP_NOTHING if stack else keep_for(op_index, a, b)
    if not (recording() or log.isEnabledFor(logging.DEBUG)):
        return dispatch.run(a, b, routed, keep)
    backend, ran = routed.backend, routed.level
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if stack:
        m *= a.shape[0]  # one record for the stack, with its total flops
    log.debug("%s: %dx%dx%d at %s on %s", op_id_of(op_index), m, k, n, ran.name, backend)
    reuses = reuse_counts(keep)
    fell_back: list[bool] = []  # "auto" ran cuBLAS SGEMM over the INT8 level it resolved to
    if device.is_cupy_array(a) or device.is_cupy_array(b):  # work queued before is not its time
        device.cupy_module().cuda.Device().synchronize()
    start = time.perf_counter()
    result = dispatch.run(a, b, routed, keep, on_native=lambda: fell_back.append(True))
    sync = getattr(getattr(result, "device", None), "synchronize", None)
    if sync is not None:  # CuPy: time the kernels, not their launch
        sync()
    seconds = time.perf_counter() - start
    if recording():
        if fell_back:
            ran = get_level(NATIVE_LEVEL)
        moved, exact = (0, (0, 0)) if stack or fell_back else (
            dispatch.rebalanced_k(a, b, ran), dispatch.unresolved_lines(a, b, ran)
        )  # fmt: skip
        kept = reused(keep, reuses)
        sample = ProductSample.take(a, b, result) if wants_sample(op_index) else None
        record(
            CallRecord(op_index, m, k, n, ran.name, seconds, backend, moved, exact, kept, sample)
        )
    return result


def emulable(a: Any, b: Any) -> bool:
    """Operands a site outside compiled code emulates: two 2-D float32 arrays of one kind, or a
    Dask array beside a Dask, NumPy or CuPy one (``runtime.dask_products`` pairs the chunks)."""
    return (
        getattr(a, "ndim", 0) == 2
        and getattr(b, "ndim", 0) == 2
        and a.dtype == np.float32
        and b.dtype == np.float32
        and _one_kind(a, b)
    )


def _one_kind(a: Any, b: Any) -> bool:
    return type(a) is type(b) or device.is_dask_array(a) or device.is_dask_array(b)


def stacked(a: Any, b: Any) -> bool:
    """Float32 stacks of one kind (N-D, N >= 3, times 2-D or N-D), which a matmul site splits
    into 2-D products as ``np.matmul`` does (``runtime.batched``)."""
    ndims = (getattr(a, "ndim", 0), getattr(b, "ndim", 0))
    return (
        min(ndims) >= 2
        and max(ndims) >= 3
        and a.dtype == np.float32
        and b.dtype == np.float32
        and _one_kind(a, b)
    )


def run_site(
    op_index: int, a: Any, b: Any, native: Callable[[Any, Any], Any], matmul: bool = False
) -> Any:
    """A site run by Python (object mode, ``NUMBA_DISABLE_JIT``): ``native(a, b)`` for operands
    mixpert does not emulate, else the runtime or ``native``, as ``route_to_run`` says. A
    ``matmul`` site (``@``, ``np.matmul``) also takes float32 stacks: two stacks go to the
    runtime as one call (``_run_stack``), a stack beside a shared matrix folds into one 2-D
    product. Two CuPy arrays try ``cupy_sites.product`` first: a native site is then a type
    check and ``cupy.matmul``, an INT8 one its op's plan."""
    cp = device.cupy_module()
    if cp is not None and type(a) is cp.ndarray and type(b) is cp.ndarray:
        fast = cupy_sites.product(op_index, a, b)
        if fast is not None:
            return fast
    if matmul and stacked(a, b):
        each = None if device.is_dask_array(a) or device.is_dask_array(b) else (
            lambda x, y: _run_stack(op_index, x, y, native)
        )  # fmt: skip
        return batched.broadcast_products(a, b, lambda x, y: run_site(op_index, x, y, native), each)
    routed = route_to_run(op_index, a, b) if emulable(a, b) else None
    return native(a, b) if routed is None else run_product(op_index, a, b, routed)


def _run_stack(op_index: int, a: Any, b: Any, native: Callable[[Any, Any], Any]) -> Any:
    """The pairs of two float32 stacks (s, m, k) and (s, k, n) of one kind as one runtime call
    (the CUDA stack path: a few launches for the whole stack), or ``native`` on them."""
    routed = route_to_run(op_index, a, b) if a.shape[0] else None
    return native(a, b) if routed is None else run_product(op_index, a, b, routed)


def _plainly_native(level: Level) -> bool:
    """The plan says native float32 and nothing records or logs the call: the compiled code
    runs its own product, and the operands need not even be looked at."""
    plain = level.name == NATIVE_LEVEL and not recording()
    return plain and not log.isEnabledFor(logging.DEBUG)


def _matrix(ptr: int, rows: int, cols: int, s0: int, s1: int) -> np.ndarray:
    """A float32 view of memory owned by compiled code (any strides, even negative ones)."""
    if rows == 0 or cols == 0:
        return np.empty((rows, cols), np.float32)
    low = min(0, (rows - 1) * s0) + min(0, (cols - 1) * s1)
    high = max(0, (rows - 1) * s0) + max(0, (cols - 1) * s1) + 4
    buffer = (ctypes.c_char * (high - low)).from_address(ptr + low)
    return np.ndarray((rows, cols), np.float32, buffer, -low, (s0, s1))


def _gemm(
    op_index: int,
    m: int,
    k: int,
    b_rows: int,
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
        level = level_for(op_index)  # read once: the plan may change under other threads
        if _plainly_native(level):
            return Status.NATIVE
        a = _matrix(a_ptr, m, k, a_s0, a_s1)
        b = _matrix(b_ptr, b_rows, n, b_s0, b_s1)
        routed = route_to_run(op_index, a, b, level)
        if routed is None:
            return Status.NATIVE
        _product_into(_matrix(out_ptr, m, n, 4 * n, 4) if m and n else None, op_index, a, b,
                      routed)  # fmt: skip
        return Status.OK
    except BaseException as error:  # ctypes would print and swallow it: hand it to the caller
        _hand_over(error, op_index)
        return Status.ERROR


def _product_into(
    out: np.ndarray | None, op_index: int, a: np.ndarray, b: np.ndarray, routed: Route
) -> None:
    """``a @ b`` of compiled code's operands as ``routed`` says, written into ``out`` (its
    output buffer; None where the product is empty). On the GPU the operands go over through
    pinned staging buffers (a loop-invariant one once per call, beside its pack) and the result
    comes back straight into ``out`` (``cuda.transfers``): no NumPy array in between, and the
    host's staging copies overlap the copy engine's."""
    if routed.backend != "cuda":
        result = run_product(op_index, a, b, routed)
        if out is not None:
            out[...] = result
        return
    transfers = _transfers()
    keep = KEEP_NOTHING if a.ndim == 3 else keep_for(op_index, a, b)  # the host operands'
    where = transfers.device_label()
    a_dev = keep[0].copy(where, lambda: transfers.to_device(a))
    b_dev = keep[1].copy(where, lambda: transfers.to_device(b))
    result = run_product(op_index, a_dev, b_dev, routed, keep)
    if out is not None:
        transfers.to_host(result, out)


@functools.cache
def _transfers() -> ModuleType:
    """The pinned staging of host arrays (imported on first use: it needs CuPy)."""
    from mixpert.runtime.cuda import transfers

    return transfers


def _stack(ptr: int, count: int, rows: int, cols: int) -> np.ndarray:
    """A float32 view of a C-contiguous (count, rows, cols) stack owned by compiled code."""
    if count * rows * cols == 0:
        return np.empty((count, rows, cols), np.float32)
    buffer = (ctypes.c_char * (4 * count * rows * cols)).from_address(ptr)
    return np.ndarray((count, rows, cols), np.float32, buffer)


def _gemm_stack(
    op_index: int, count: int, m: int, k: int, n: int, a_ptr: int, b_ptr: int, out_ptr: int
) -> int:
    """``mixpert_gemm_stack``: the pairs of two C-contiguous stacks in one call (the runtime's
    stack route: on the CPU one vectorised product, ``cpu.int8_product_stack``)."""
    try:
        a, b = _stack(a_ptr, count, m, k), _stack(b_ptr, count, k, n)
        routed = route_to_run(op_index, a, b) if count else None
        if routed is None:
            return Status.NATIVE
        _product_into(_stack(out_ptr, count, m, n) if m and n else None, op_index, a, b, routed)
        return Status.OK
    except BaseException as error:  # as in _gemm
        _hand_over(error, op_index)
        return Status.ERROR


_I64 = ctypes.c_int64
GEMM_ARGUMENTS = 12  # op index, m, k, b_rows, n, A pointer and strides, B pointer and strides, C
GEMM_CFUNC = ctypes.CFUNCTYPE(ctypes.c_int32, *([_I64] * GEMM_ARGUMENTS))
_callback = GEMM_CFUNC(_gemm)  # module global: must outlive every compiled function
binding.add_symbol(SYMBOL, ctypes.cast(_callback, ctypes.c_void_p).value)
STACK_SYMBOL = "mixpert_gemm_stack"
STACK_ARGUMENTS = 8  # op index, count, m, k, n, A pointer, B pointer, C pointer
_stack_callback = ctypes.CFUNCTYPE(ctypes.c_int32, *([_I64] * STACK_ARGUMENTS))(_gemm_stack)
binding.add_symbol(STACK_SYMBOL, ctypes.cast(_stack_callback, ctypes.c_void_p).value)

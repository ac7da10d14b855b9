"""Where a sample's time goes: each product timed inside a real call, natively and at the plan's
levels, and the speedups that bounds.

A sample's speedup is Amdahl's: the work around its products (elementwise passes, reductions,
factorisations, the host's own time) is the same either way. Each product is bracketed by two
marks on the stream it runs on (CUDA events on CuPy arrays, the clock on NumPy's), read once the
call has ended, so the timing adds no host synchronisation. A product's time is what the stream
spent from the work queued before it to its last kernel: its kernels' time, or the host's launch
time where the GPU waited for the host.

- native: the sample's Python function with each product site calling the native product
  (``interpreted.python_variant``: the sites numbered as the compiler numbers them, so the op ids
  are the plan's);
- mixpert: the tuned function as it runs, each ``run_site`` call bracketed (on NumPy arguments
  the body runs interpreted, as under NUMBA_DISABLE_JIT: compiled nopython code calls its
  products where Python cannot bracket them).

For a sample whose native time T spends G in its products, and the rest R = T - G, ``bounds``
gives its speedup with products at no cost, T / R, and with each product at the board's INT8
rate, T / (R + the products' floors): an INT8 level's floor is its INT8 GEMMs at the rate of one
large INT8 GEMM, G_i * products / int8_ratio (``int8_ratio``: SGEMM's time over an INT8 GEMM's of
the same size, measured in the same run); "auto"'s is the lesser of G_i and level IV's; a native
level's (fp32, tf32, fp16, ...) the time the product took at it.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any
from unittest import mock

import numba
import numpy as np

from ..execution.hook import run_site
from ..execution.op_ids import op_id_of
from ..interpreted import native, python_variant
from ..passes import stubs
from ..runtime.levels import AUTO, SLICED_KINDS, get_level
from ..timing import synchronizer

# ``mixpert.jit`` names the decorator on the package; the module calls ``run_site`` itself
jit_module = importlib.import_module("mixpert.jit")
FLOAT32_GRADE_INT8 = "IV"  # the INT8 level "auto" takes where the tensor cores win


@dataclass(frozen=True)
class OpSeconds:
    """One op's products in one call: how many ran, and their seconds together."""

    calls: int
    seconds: float


class _Stopwatch:
    """Marks around each product, read after the call (CUDA events record on the current
    stream without waiting for it)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.marks: list[tuple[str, Any, Any]] = []

    def _mark(self) -> Any:
        if self.xp is np:
            return time.perf_counter()
        event = self.xp.cuda.Event()
        event.record()
        return event

    def timed(self, op: str, product: Callable[[], Any]) -> Any:
        start = self._mark()
        result = product()
        self.marks.append((op, start, self._mark()))
        return result

    def _elapsed(self, start: Any, stop: Any) -> float:
        if self.xp is np:
            return stop - start
        return self.xp.cuda.get_elapsed_time(start, stop) * 1e-3

    def best_call(
        self, call: Callable[[], Any], repeats: int
    ) -> tuple[dict[str, OpSeconds], float]:
        """Per op, the products of the quickest of ``repeats`` calls (after one warm-up), and
        that call's wall seconds."""
        sync = synchronizer(self.xp)
        call()
        sync()
        best: tuple[dict[str, OpSeconds], float] = ({}, math.inf)
        for _ in range(repeats):
            self.marks = []
            start = time.perf_counter()
            call()
            sync()
            wall = time.perf_counter() - start
            if wall < best[1]:
                best = (self._per_op(), wall)
        return best

    def _per_op(self) -> dict[str, OpSeconds]:
        totals: dict[str, OpSeconds] = {}
        for op, start, stop in self.marks:
            seen = totals.get(op, OpSeconds(0, 0.0))
            totals[op] = OpSeconds(seen.calls + 1, seen.seconds + self._elapsed(start, stop))
        return totals


def native_op_seconds(
    func: Any, args: Sequence[Any], xp: Any, repeats: int = 2
) -> tuple[dict[str, OpSeconds], float]:
    """The sample's own Python function, its products native and timed one by one."""
    stopwatch = _Stopwatch(xp)
    qualname = func.py_func.__qualname__

    def site(ordinal: int, a: Any, b: Any, kind: str) -> Any:
        return stopwatch.timed(f"{qualname}:{ordinal}", lambda: native(kind)(a, b))

    variant = python_variant(func.py_func, site)
    if variant is func.py_func:
        raise ValueError(
            f"{qualname}: its source cannot be read (or it closes over variables), so its "
            "products cannot be timed one by one"
        )
    return stopwatch.best_call(lambda: variant(*args), repeats)


def mixpert_op_seconds(
    func: Any, args: Sequence[Any], xp: Any, repeats: int = 2
) -> tuple[dict[str, OpSeconds], float]:
    """``func`` (a tuned ``mixpert.jit`` function) as it runs, its products timed one by one."""
    stopwatch = _Stopwatch(xp)

    def timed_site(
        op_index: int, a: Any, b: Any, product: Callable[[Any, Any], Any], matmul: bool = False
    ) -> Any:
        return stopwatch.timed(
            op_id_of(op_index), lambda: run_site(op_index, a, b, product, matmul=matmul)
        )

    with ExitStack() as stack:
        for module in (stubs, jit_module):  # object-mode code's stubs; the interpreted body
            stack.enter_context(mock.patch.object(module, "run_site", timed_site))
        if xp is np:
            stack.enter_context(mock.patch.object(numba.config, "DISABLE_JIT", True))
        return stopwatch.best_call(lambda: func(*args), repeats)


def floor_seconds(
    level_name: str, native_time: OpSeconds, ran: OpSeconds | None, int8_ratio: float
) -> float:
    """The least time an op's products could take at its level on this board (module doc)."""
    level = get_level(level_name)
    if level.kind in SLICED_KINDS:
        return native_time.seconds * level.products / int8_ratio
    if level.name == AUTO.name:
        iv = get_level(FLOAT32_GRADE_INT8).products
        return native_time.seconds * min(1.0, iv / int8_ratio)
    return native_time.seconds if ran is None else ran.seconds


@dataclass(frozen=True)
class SampleBounds:
    """What a sample's products take and what that bounds its speedup to (module doc)."""

    native_product_seconds: float
    mixpert_product_seconds: float
    rest_seconds: float  # the native time outside the products
    product_share: float  # of the native time
    product_speedup: float | None  # native products' time over mixpert's
    free_bound: float | None  # speedup with products at no cost (None: no time outside them)
    board_bound: float | None  # with products at the board's INT8 rate (None: no ratio)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bounds(
    native_seconds: float,
    native_ops: Mapping[str, OpSeconds],
    mixpert_ops: Mapping[str, OpSeconds],
    levels: Mapping[str, str],
    int8_ratio: float | None,
) -> SampleBounds:
    """A sample's bounds from its native time and the per-op times above; ``levels``: the plan's
    (an op it does not name runs "auto")."""
    products = sum(t.seconds for t in native_ops.values())
    ran = sum(t.seconds for t in mixpert_ops.values())
    rest = native_seconds - products
    board = None
    if int8_ratio is not None:
        floors = sum(
            floor_seconds(levels.get(op, AUTO.name), t, mixpert_ops.get(op), int8_ratio)
            for op, t in native_ops.items()
        )
        least = max(rest, 0.0) + floors  # (a product-only sample's marks may cover all of T)
        board = native_seconds / least if least > 0 else None
    return SampleBounds(
        native_product_seconds=products,
        mixpert_product_seconds=ran,
        rest_seconds=rest,
        product_share=products / native_seconds,
        product_speedup=products / ran if ran > 0 else None,
        free_bound=native_seconds / rest if rest > 0 else None,
        board_bound=board,
    )

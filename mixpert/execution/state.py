"""Run-time state of rewritten sites, per thread: the active plan, the call's kept packs and the
call records.

A jitted function's wrapper makes its plan active for the duration of a call (``activate``),
with a fresh ``PackScope`` for its loop-invariant operands (``kept_packs``); compiled code asks
``level_for(op_index)`` at every product. ``record_calls`` profiles: while it
is active every runtime call appends a ``CallRecord``.

Threads that never activated anything (Numba's workers running a ``prange`` body) use the plan
and the records of the latest activation in the process, so products in parallel loops run at
the plan's level and are recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from mixpert.runtime.levels import Level, get_level
from mixpert.runtime.pack_reuse import KEEP_NOTHING, Keep
from mixpert.runtime.precision import get_default_level

from .kept_packs import PackScope
from .op_ids import op_id_of, op_index
from .product_samples import ProductSample


@dataclass(frozen=True)
class ActivePlan:
    """A plan as the run time reads it: op index -> Level; unlisted ops run at the default
    level in force (``mixpert.runtime.precision``)."""

    levels: Mapping[int, Level]

    @classmethod
    def from_levels(cls, levels: Mapping[str, str | Level]) -> ActivePlan:
        """From op id -> level (name or Level); unknown level names raise ValueError here."""
        return cls({op_index(op): get_level(lv) for op, lv in levels.items()})

    def level_of(self, op_index: int) -> Level:
        level = self.levels.get(op_index)
        return get_default_level() if level is None else level


EMPTY_PLAN = ActivePlan({})  # every op at the default level


@dataclass(frozen=True)
class CallRecord:
    """One runtime call seen by ``record_calls``."""

    op_index: int
    m: int
    k: int
    n: int
    level: str  # the level that ran ("auto" resolved)
    seconds: float
    backend: str = ""  # "cpu" or "cuda"
    rebalanced_k: int = 0  # k-indices equilibration moved or dropped (wide-range data)
    exact_lines: tuple[int, int] = (0, 0)  # unresolved (rows, columns) recomputed exactly
    reused: tuple[bool, bool] = (False, False)  # (A, B) reused a pack kept in this call
    # rows, columns and output block kept for the tuner (``record_calls(samples=True)``)
    sample: ProductSample | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        exact = (
            " ({} rows, {} columns exact)".format(*self.exact_lines)
            if any(self.exact_lines)
            else ""
        )
        where = f" on {self.backend}" if self.backend else ""
        return (
            f"<call {self.op_id} {self.m}x{self.k}x{self.n} at {self.level}{where}: "
            f"{self.seconds * 1e3:.3g} ms{exact}>"
        )

    @property
    def shape(self) -> tuple[int, int, int]:
        """(m, k, n)."""
        return self.m, self.k, self.n

    @property
    def op_id(self) -> str:
        return op_id_of(self.op_index)


class _State(threading.local):
    plan: ActivePlan | None = None
    packs: PackScope | None = None
    records: list[CallRecord] | None = None
    sampling: bool = False  # records keep a ProductSample (the tuner's)
    sampled: dict[int, int]  # op index -> calls sampled in this recording
    own: bool = False  # this thread activated a plan or started recording itself


_state = _State()
# The latest activation in any thread (one object for all threads), for worker threads.
_latest = SimpleNamespace(plan=None, records=None)


def _mine() -> _State | SimpleNamespace:
    return _state if _state.own else _latest


# Op index -> the level its function's plan gives it, kept by the jitted functions: what a
# product runs at when its function is called from plain Numba code (no wrapper activates a plan).
_standing: dict[int, Level] = {}


def keep_standing(plan: ActivePlan) -> None:
    """Remember ``plan``'s levels for calls that arrive without an active plan."""
    _standing.update(plan.levels)


def level_for(op_index: int) -> Level:
    """The level the active plan gives op ``op_index`` (possibly "auto"); with no plan active
    anywhere (a call from plain Numba code), the level its own function's plan gave it."""
    plan = _mine().plan
    if plan is None:
        standing = _standing.get(op_index)
        return get_default_level() if standing is None else standing
    return plan.level_of(op_index)


@contextmanager
def activate(plan: ActivePlan, packs: PackScope | None = None) -> Iterator[ActivePlan]:
    """Run the body with ``plan`` active in this thread, its products keeping the packs of
    loop-invariant operands in ``packs`` (None: none kept); the previous ones come back after."""
    saved = (_state.plan, _state.packs, _state.own, _latest.plan, _latest.records)
    _state.plan, _state.packs, _state.own = plan, packs, True
    _latest.plan, _latest.records = plan, _state.records
    try:
        yield plan
    finally:
        _state.plan, _state.packs, _state.own, _latest.plan, _latest.records = saved


def keep_for(op_index: int, a: Any, b: Any) -> Keep:
    """The kept-pack slots of op ``op_index``'s operands in the call this thread activated
    (``kept_packs``). Other threads keep nothing: a worker of a ``prange`` loop, or a plain
    Numba caller, cannot tell whether the latest activation's call is still running."""
    packs = _state.packs if _state.own else None
    return KEEP_NOTHING if packs is None else packs.keep_for(op_index, a, b)


def recording() -> bool:
    """Whether ``record_calls`` is collecting for this thread."""
    return _mine().records is not None


SAMPLES_PER_OP = 4  # calls of one op a recording keeps samples of (a loop's first few)


def wants_sample(op_index: int) -> bool:
    """Whether this call of op ``op_index`` should keep a ``ProductSample`` in the records
    (``record_calls(samples=True)``, and fewer than ``SAMPLES_PER_OP`` kept for it so far)."""
    if not (_state.sampling and recording()):
        return False
    taken = _state.sampled.get(op_index, 0)
    _state.sampled[op_index] = taken + 1
    return taken < SAMPLES_PER_OP


def record(entry: CallRecord) -> None:
    records = _mine().records
    if records is not None:
        records.append(entry)  # list.append is atomic: worker threads may share the list


@contextmanager
def record_calls(samples: bool = False) -> Iterator[list[CallRecord]]:
    """Collect a ``CallRecord`` (op id, m, k, n, level, seconds, backend) for every product of a
    jitted function run in the body, in this thread (public as ``mixpert.record``); with
    ``samples``, each keeps a ``ProductSample`` of its operands and output (for the tuner).

    While recording, native float32 ops run through the runtime too (so they can be timed);
    their bits may then differ from Numba's BLAS in the last place.
    """
    records: list[CallRecord] = []
    saved = (_state.records, _state.sampling, _state.own, _latest.records)
    _state.records, _state.sampling, _state.own, _latest.records = records, samples, True, records
    _state.sampled = {}
    try:
        yield records
    finally:
        _state.records, _state.sampling, _state.own, _latest.records = saved

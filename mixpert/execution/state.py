"""Run-time state of rewritten sites, per thread: the active plan and the call records.

A jitted function's wrapper makes its plan active for the duration of a call (``activate``);
compiled code asks ``level_for(op_index)`` at every product. ``record_calls`` profiles: while it
is active every runtime call appends a ``CallRecord``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from mixpert.runtime.levels import Level, get_level
from mixpert.runtime.precision import get_default_level

from .op_ids import op_id_of, op_index


@dataclass(frozen=True)
class ActivePlan:
    """A plan as the run time reads it: op index -> Level; unlisted ops run at ``default``, or
    when that is None at the default level in force (``mixpert.runtime.precision``)."""

    levels: Mapping[int, Level]
    default: Level | None = None

    @classmethod
    def from_levels(
        cls, levels: Mapping[str, str | Level], default: str | Level | None = None
    ) -> ActivePlan:
        """From op id -> level (name or Level); unknown level names raise ValueError here."""
        fallback = None if default is None else get_level(default)
        return cls({op_index(op): get_level(lv) for op, lv in levels.items()}, fallback)

    def level_of(self, op_index: int) -> Level:
        level = self.levels.get(op_index, self.default)
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

    @property
    def shape(self) -> tuple[int, int, int]:
        """(m, k, n)."""
        return self.m, self.k, self.n

    @property
    def op_id(self) -> str:
        return op_id_of(self.op_index)


class _ThreadState(threading.local):
    plan: ActivePlan = EMPTY_PLAN
    records: list[CallRecord] | None = None


_state = _ThreadState()


def current_plan() -> ActivePlan:
    return _state.plan


def level_for(op_index: int) -> Level:
    """The level the active plan gives op ``op_index`` (possibly "auto")."""
    return _state.plan.level_of(op_index)


@contextmanager
def activate(plan: ActivePlan) -> Iterator[ActivePlan]:
    """Run the body with ``plan`` active in this thread (the previous one comes back after)."""
    previous, _state.plan = _state.plan, plan
    try:
        yield plan
    finally:
        _state.plan = previous


def recording() -> bool:
    """Whether ``record_calls`` is collecting in this thread."""
    return _state.records is not None


def record(entry: CallRecord) -> None:
    if _state.records is not None:
        _state.records.append(entry)


@contextmanager
def record_calls() -> Iterator[list[CallRecord]]:
    """Collect a ``CallRecord`` (op id, m, k, n, level, seconds, backend) for every product of a
    jitted function run in the body, in this thread (public as ``mixpert.record``).

    While recording, native float32 ops run through the runtime too (so they can be timed);
    their bits may then differ from Numba's BLAS in the last place.
    """
    records: list[CallRecord] = []
    previous, _state.records = _state.records, records
    try:
        yield records
    finally:
        _state.records = previous

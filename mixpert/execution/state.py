"""Run-time state of rewritten sites: the active plan, the call's kept packs and the call
records, per call and per thread.

A jitted function's wrapper opens a *scope* for the duration of a call (``activate``): its plan,
a fresh ``PackScope`` for its loop-invariant operands (``kept_packs``) and the op indices its
compiled code runs; compiled code asks ``level_for(op_index)`` at every product.
``record_calls`` opens a scope that collects a ``CallRecord`` for every runtime call.

Which scope a product belongs to:

- a thread that opened scopes itself uses its innermost one;
- a thread that opened none (a worker of Numba's ``prange``, or a thread running plain
  ``numba.njit`` code) uses the most recent scope still open in any thread whose function runs
  that op: a ``prange`` body runs its function's plan and is recorded with its call;
- with no such scope (a mixpert function called from plain Numba code, whose wrapper never
  runs), the op runs at its *standing* level: the one its own function's plan gives it.

Open scopes are a set, not a stack shared by threads: each removes itself when it ends, so calls
that end in any order across threads leave no plan behind.

A worker cannot tell which thread's call it serves: when two threads call the same function's
``prange`` code at once, both calls' workers follow the newer call (its plan, which is the same
plan unless the calls are ``with_plan`` variants of one function, and its records).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
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


OpIndices = Callable[[], Collection[int]]  # asked lazily: a first call compiles before its ops


def _no_ops() -> Collection[int]:
    return ()


@dataclass(eq=False)
class _Scope:
    """One open ``activate`` or ``record_calls``; a nested one starts as a copy of its outer."""

    plan: ActivePlan | None = None  # None: each op at its standing level
    packs: PackScope | None = None
    ops: OpIndices | None = _no_ops  # the ops its function runs (None: any op)
    records: list[CallRecord] | None = None
    sampling: bool = False  # records keep a ProductSample (the tuner's)
    sampled: dict[int, int] = field(default_factory=dict)  # op index -> calls sampled

    def runs(self, op_index: int) -> bool:
        return self.ops is None or op_index in self.ops()


class _State(threading.local):
    scope: _Scope | None = None  # the innermost scope this thread opened
    # a thread that opened none: its last product's scope, weakly (an idle worker thread must
    # not keep a finished call's records alive)
    borrowed: weakref.ref[_Scope] | None = None


_state = _State()
_open: dict[int, _Scope] = {}  # id -> scope, every open scope of every thread, oldest first
_open_lock = threading.Lock()

# Op index -> the level its function's plan gives it, kept by the jitted functions: what a
# product runs at when its function is called from plain Numba code (no wrapper activates a plan).
_standing: dict[int, Level] = {}


def keep_standing(plan: ActivePlan) -> None:
    """Remember ``plan``'s levels for calls that arrive without an active plan."""
    _standing.update(plan.levels)


def _scope_of(op_index: int) -> _Scope | None:
    """The scope op ``op_index``'s product in this thread belongs to (module docstring)."""
    own = _state.scope
    if own is not None:
        return own
    with _open_lock:  # a snapshot: other threads open and close scopes meanwhile
        candidates = list(_open.values())
    found = next((s for s in reversed(candidates) if s.runs(op_index)), None)
    _state.borrowed = None if found is None else weakref.ref(found)  # recording(), record()
    return found


def _current() -> _Scope | None:
    if _state.scope is not None:
        return _state.scope
    return None if _state.borrowed is None else _state.borrowed()


def level_for(op_index: int) -> Level:
    """The level op ``op_index`` runs at in this thread's product (possibly "auto"): its scope's
    plan, or, for an op no open scope runs (a call from plain Numba code), the level its own
    function's plan gave it (module docstring)."""
    scope = _scope_of(op_index)
    plan = None if scope is None else scope.plan
    if plan is not None:
        level = plan.levels.get(op_index)
        if level is not None:
            return level
        if scope is not None and scope.runs(op_index):
            return get_default_level()  # left out of its function's plan
    standing = _standing.get(op_index)
    return get_default_level() if standing is None else standing


@contextmanager
def _opened(scope: _Scope) -> Iterator[_Scope]:
    outer = _state.scope
    _state.scope = scope
    with _open_lock:
        _open[id(scope)] = scope
    try:
        yield scope
    finally:
        with _open_lock:
            del _open[id(scope)]
        _state.scope = outer


class _Activation:
    """``activate``'s context: ``_opened`` as a class (every jitted call opens one: a
    generator-based context manager costs microseconds more)."""

    __slots__ = ("outer", "scope")

    def __init__(self, scope: _Scope) -> None:
        self.scope = scope
        self.outer: _Scope | None = None

    def __enter__(self) -> ActivePlan:
        self.outer = _state.scope
        _state.scope = scope = self.scope
        with _open_lock:
            _open[id(scope)] = scope
        return scope.plan  # type: ignore[return-value]  (activate's scopes have one)

    def __exit__(self, *exc: object) -> None:
        with _open_lock:
            del _open[id(self.scope)]
        _state.scope = self.outer


def activate(
    plan: ActivePlan, packs: PackScope | None = None, ops: OpIndices | None = None
) -> _Activation:
    """Run the body (``with activate(...) as plan:``) with ``plan`` active in this thread, its
    products keeping the packs of loop-invariant operands in ``packs`` (None: none kept).
    ``ops`` gives the op indices the called function runs: other threads' products of those
    ops (``prange`` workers) run this plan too (None: any op's, for callers that do not know
    them). The previous scope comes back after; records go on to the enclosing
    ``record_calls``."""
    outer = _state.scope
    if outer is None:
        return _Activation(_Scope(plan, packs, ops))
    return _Activation(_Scope(plan, packs, ops, outer.records, outer.sampling, outer.sampled))


def keep_for(op_index: int, a: Any, b: Any) -> Keep:
    """The kept-pack slots of op ``op_index``'s operands in the call this thread activated
    (``kept_packs``). Other threads keep nothing: a worker of a ``prange`` loop, or a plain
    Numba caller, cannot tell whether another thread's call is at the same point."""
    scope = _state.scope
    packs = None if scope is None else scope.packs
    return KEEP_NOTHING if packs is None else packs.keep_for(op_index, a, b)


def recording(here: bool = False) -> bool:
    """Whether ``record_calls`` collects the current product: this thread's own recording,
    or, for a thread that opened none, the scope its last ``level_for`` found; ``here``: this
    thread's own only (a direct ``mixpert.matmul`` call)."""
    scope = _state.scope if here else _current()
    return scope is not None and scope.records is not None


SAMPLES_PER_OP = 4  # calls of one op a recording keeps samples of (a loop's first few)


def wants_sample(op_index: int) -> bool:
    """Whether this call of op ``op_index`` should keep a ``ProductSample`` in the records
    (``record_calls(samples=True)``, and fewer than ``SAMPLES_PER_OP`` kept for it so far)."""
    scope = _current()
    if scope is None or scope.records is None or not scope.sampling:
        return False
    taken = scope.sampled.get(op_index, 0)
    scope.sampled[op_index] = taken + 1
    return taken < SAMPLES_PER_OP


def record(entry: CallRecord, here: bool = False) -> None:
    """Append ``entry`` to the records of the current product's scope (``recording``)."""
    scope = _state.scope if here else _current()
    if scope is not None and scope.records is not None:
        scope.records.append(entry)  # list.append is atomic: worker threads may share the list


@contextmanager
def record_calls(samples: bool = False) -> Iterator[list[CallRecord]]:
    """Collect a ``CallRecord`` (op id, m, k, n, level, seconds, backend) for every product run
    in the body in this thread: of jitted functions (their ``prange`` workers included) and
    direct ``mixpert.matmul`` calls (public as ``mixpert.record``); with ``samples``, each
    product of a jitted function keeps a ``ProductSample`` of its operands and output (for the
    tuner).

    While recording, native float32 ops run through the runtime too (so they can be timed);
    their bits may then differ from Numba's BLAS in the last place.
    """
    records: list[CallRecord] = []
    outer = _state.scope or _Scope()
    with _opened(_Scope(outer.plan, outer.packs, outer.ops, records, samples)):
        yield records

"""A bounded, thread-safe cache of execution plans (least recently used first out).

A plan is made once per key (a product's signature: device, stream, shape, level) and executed
many times; it holds device memory (``nbytes``) and gives it back with ``release()``. The cache
keeps at most ``max_entries`` plans and ``max_bytes`` of their memory (``$MIXPERT_PLAN_CACHE``:
"0" turns it off, else "<entries>,<MiB>"). A key whose plan cannot be made (a product that
cannot be captured here) is remembered as such, so it costs the attempt once.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from . import switches

DEFAULT_ENTRIES = 64
DEFAULT_MIB = 2048
SWITCH = "MIXPERT_PLAN_CACHE"
MISSING = object()  # ``PlanCache.find``: no plan kept for the key yet


class Plan(Protocol):
    nbytes: int

    def release(self) -> None: ...


def limits() -> tuple[int, int]:
    """(entries, bytes) from ``$MIXPERT_PLAN_CACHE`` (the defaults where it is unset, or "0":
    that switch is read at each lookup)."""
    text = os.environ.get(SWITCH, "").strip()
    if text in ("", "0"):
        return DEFAULT_ENTRIES, DEFAULT_MIB << 20
    try:
        entries, mib = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"{SWITCH}={text!r}: give '0' (no plan cache) or '<entries>,<MiB>', e.g. '64,2048'"
        ) from None
    return max(entries, 0), max(mib, 0) << 20


def enabled() -> bool:
    """Whether plans are kept (``$MIXPERT_PLAN_CACHE`` is not "0"; read at each lookup, several
    times a product: ``switches``)."""
    return switches.read(SWITCH, "") != "0"


class PlanCache:
    def __init__(self, max_entries: int | None = None, max_bytes: int | None = None) -> None:
        entries, nbytes = limits()
        self.max_entries = entries if max_entries is None else max_entries
        self.max_bytes = nbytes if max_bytes is None else max_bytes
        self._plans: OrderedDict[Hashable, Any] = OrderedDict()  # None: cannot be made
        self._lock = threading.Lock()
        self.bytes = 0

    def has_room(self) -> bool:
        """Whether one more plan would be kept without evicting another (by entries)."""
        return len(self._plans) < self.max_entries

    def find(self, key: Hashable) -> Any:
        """The plan kept for ``key`` (None: one that cannot be made, or plans are off), or
        MISSING where none is kept yet (``get`` makes it): a hit without a closure to make."""
        if not enabled():
            return None
        with self._lock:
            plan = self._plans.get(key, MISSING)
            if plan is not MISSING:
                self._plans.move_to_end(key)
            return plan

    def get(self, key: Hashable, make: Callable[[], Plan | None]) -> Any:
        """The plan for ``key``, made by ``make`` on first use (None: run uncached)."""
        found = self.find(key)  # (plans off: None, read each call: benchmarks compare both ways)
        if found is not MISSING:
            return found
        # (made outside the lock: capturing takes milliseconds)
        plan = make() if self.max_entries > 0 else None
        if plan is not None and plan.nbytes > self.max_bytes:
            plan.release()  # larger than the whole cache: run uncached, and remember it
            plan = None
        with self._lock:
            if key in self._plans:  # another thread made it meanwhile: keep theirs
                if plan is not None:
                    plan.release()
                return self._plans[key]
            self._plans[key] = plan
            self.bytes += plan.nbytes if plan is not None else 0
            self._evict()
            return plan

    def _evict(self) -> None:
        while self._plans and (len(self._plans) > self.max_entries or self.bytes > self.max_bytes):
            _, old = self._plans.popitem(last=False)
            if old is not None:
                self.bytes -= old.nbytes
                old.release()

    def clear(self) -> None:
        """Releases every plan (their device memory goes back once their work has run)."""
        with self._lock:
            plans, self._plans, self.bytes = list(self._plans.values()), OrderedDict(), 0
        for plan in plans:
            if plan is not None:
                plan.release()

    def __len__(self) -> int:
        return len(self._plans)

"""The one line a first call that tunes shows: the function, its ops, and its runs so far.

On a terminal (stderr is a TTY) the line is redrawn in place after each profiling run and ends
with the plan's levels; elsewhere the same facts go to the ``"mixpert"`` logger at INFO, once at
the start and once at the end, so logs and CI output get no progress noise.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TextIO

log = logging.getLogger("mixpert")


class TuningProgress:
    """``on_run`` callback for ``tuner.tune``; ``done(levels)`` closes the line."""

    def __init__(
        self, name: str, ops: Sequence[str], total: int, tol: float, target: str,
        stream: TextIO | None = None,
    ) -> None:  # fmt: skip
        self.stream = sys.stderr if stream is None else stream
        self.terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        shown = ", ".join(ops[:4]) + (f", ... ({len(ops)})" if len(ops) > 4 else "")
        self.head = f"mixpert: tuning {name} [{shown}] for tol={tol:g} on {target}"
        self.total, self.runs, self.start = max(1, total), 0, time.perf_counter()
        if self.terminal:
            self._draw()
        else:
            log.info("%s (at most %d profiling runs) ...", self.head, self.total)

    def __call__(self) -> None:
        self.runs += 1
        if self.terminal:
            self._draw()

    def _draw(self) -> None:
        runs = min(self.runs, self.total)
        self.stream.write(f"\r{self.head}: run {runs}/{self.total}")
        self.stream.flush()

    def done(self, levels: Mapping[str, str]) -> None:
        seconds = time.perf_counter() - self.start
        chosen = ", ".join(f"{op} {level}" for op, level in sorted(levels.items()))
        if self.terminal:
            self.stream.write(f"\r{self.head}: {self.runs} runs, {seconds:.1f} s -> {chosen}\n")
            self.stream.flush()
        else:
            log.info("tuned: %d profiling runs, %.1f s -> %s", self.runs, seconds, chosen)

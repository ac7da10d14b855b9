"""Held-out inputs: the tuned plan is run on inputs the walk never saw, and must keep tol there.

They are the ``validation`` inputs given, made up to ``RESAMPLED_INPUTS`` by resamples of the
tuning input's rows (``inputs.resampled``). ``tuner.tune`` holds the plan within tol on each,
and the errors' mean over all inputs, plus ``tuner.Z_HELD_OUT`` times their spread, within tol
too; else it tightens the share of tol and walks again (its runs are cached).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..metrics import output_error
from . import inputs
from .profiling import Profiler, Tunable

# With fewer validation inputs than this, resamples of the tuning input's rows make up the
# number (``inputs.resampled``): the plan holds within tol on them too.
RESAMPLED_INPUTS = 6
HELD_OUT_MIN_SECONDS = 5.0  # held-out runs may cost what the walk did, or this, if more
RESAMPLE_SEED = 0x7E57


def resample(args: tuple[Any, ...], index: int) -> Callable[[], tuple[Any, ...]]:
    """The ``index``-th resample of ``args`` (``inputs.resampled``), made on demand."""
    return lambda: inputs.resampled(args, np.random.default_rng((RESAMPLE_SEED, index)))


@dataclass
class HeldOut:
    """A held-out input the tuned plan must also keep within tol. Its arguments are made when
    asked and dropped after each run, so several held-out inputs of a large function cost one
    input's memory at a time; its float64 outputs (small, mostly) are kept, and errors cached
    per plan."""

    func: Tunable
    make: Callable[[], tuple[Any, ...]]
    resample: bool = False  # made from the tuning input (may be skipped for time), not given
    runs: int = 0
    usable: bool = True  # False once the function cannot run it (a singular resample, ...)
    reference: Any = None
    written: tuple[int, ...] = ()
    errors: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)

    def error(self, levels: Mapping[str, str]) -> float | None:
        key = tuple(sorted(levels.items()))
        if key not in self.errors and self.usable:
            try:
                prof = Profiler(self.func, self.make(), reference=self.reference)
                if self.reference is None:
                    self.reference, self.written = prof.reference, prof.written
                    if not math.isfinite(output_error(prof.reference, prof.reference)):
                        raise FloatingPointError  # no finite float64 answer to hold it to
                prof.written = self.written
                self.errors[key] = prof.error(levels)
                self.runs += prof.runs
            except Exception:  # noqa: BLE001 - the function's own failure on this input
                self.usable = False
        return self.errors.get(key) if self.usable else None


def errors_on(
    held_out: Sequence[HeldOut], levels: Mapping[str, str], seconds: float
) -> list[float]:
    """The errors of ``levels`` on the held-out inputs the function runs on, taken in turn
    until they have cost ``seconds`` (at least one is always taken)."""
    errors: list[float] = []
    start = time.perf_counter()
    for h in held_out:
        if h.resample and errors and time.perf_counter() - start > seconds:
            break  # a large function: resamples may cost what the walk cost
        error = h.error(levels)
        if error is not None:
            errors.append(error)
    return errors

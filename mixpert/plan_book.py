"""Which plan a ``@mixpert.jit(tol=...)`` function runs with: ``PlanBook``.

A function jitted with ``tol`` and no explicit ``plan`` looks, on each call, for a plan matching
the arguments' signature (dtype and ndim; see ``mixpert.plans.plan``) whose tol is at least as
tight: first among the plans it already holds, then in ``plan_file`` when given (read on the
first call; its plans for this function get the check ``plan=`` gets, ``check_plan_covers``:
a stale plan raises ``StalePlanError`` rather than running, a plan naming ops the function lacks
raises ``PlanMismatchError``, one leaving ops out warns; each names the file). With no matching
plan, ``on_missing`` decides:

- ``"tune"`` (default): tune now on this call's arguments (they are the representative inputs;
  the tuner profiles copies), keep the plan, and save it into ``plan_file`` when given, beside
  the plans for other inputs. The function is compiled for them first, so a product the types
  refuse raises ``ProductTypingError`` as an untuned call does;
- ``"default"``: run every op at ``default_level`` (``NATIVE_LEVEL``: native float32, always
  safe);
- ``"raise"``: raise ``MissingPlanError`` (for deployments that must only run tuned plans).

The default for ``on_missing`` comes from the ``MIXPERT_ON_MISSING_PLAN`` environment variable.
Tuning shows one progress line on a terminal, else logs at INFO on the ``"mixpert"`` logger
(``tuning.progress``); ``target`` names the device the plan is for
(``tuning.targets.resolve_target``). A plan tuned on degenerate data (``tuning.inputs``:
integers, constants, zeros, a tiny range) is provisional: it serves calls whose data are
degenerate too, and the first call with real data tunes again and replaces it. Lookups hold the
book's lock: threads that call a function for the first time at once wait for one tuning and
then share its plan.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from .plans.files import check_folder
from .plans.plan import Plan, check_plan_covers, function_identity, read_plans, signature_of
from .runtime.levels import NATIVE_LEVEL, get_level
from .tuning.inputs import degenerate_reason
from .tuning.profiling import Tunable
from .tuning.progress import TuningProgress
from .tuning.search import walk_budget
from .tuning.targets import Target, candidates_for, resolve_target
from .tuning.tuner import checked_tol, tune

OnMissing = Literal["tune", "default", "raise"]
ON_MISSING_ENV = "MIXPERT_ON_MISSING_PLAN"
log = logging.getLogger("mixpert")


def _arguments_kind(args: Sequence[Any]) -> tuple[Any, ...]:
    """What plans match on (dtype and ndim of each array, else the type), cheaply."""
    return tuple(
        (a.dtype, a.ndim) if hasattr(a, "dtype") and hasattr(a, "ndim") else type(a) for a in args
    )


class Compilable(Tunable, Protocol):
    """A jitted function the book can tune: ``mixpert.jit`` gives one."""

    def compile_for(self, args: Sequence[Any]) -> None: ...


class DegenerateTuningDataWarning(UserWarning):
    """A first call brought smoke-test data (integers, constants, zeros, a tiny range)."""


class MissingPlanError(LookupError):
    """No plan matches the call and ``on_missing="raise"``."""


class PlanBook:
    """The plans one jitted function chooses from (see the module docstring)."""

    def __init__(
        self,
        tol: float,
        plan_file: str | Path | None = None,
        on_missing: OnMissing | None = None,
        default_level: str = NATIVE_LEVEL,
        target: Target | None = None,
    ):
        source = "argument on_missing" if on_missing else f"${ON_MISSING_ENV}"
        on_missing = on_missing or os.environ.get(ON_MISSING_ENV, "tune")  # type: ignore[assignment]
        if on_missing not in get_args(OnMissing):
            raise ValueError(f"{source} is {on_missing!r}; it must be 'tune', 'default' or 'raise'")
        get_level(default_level)  # unknown names fail at decoration
        self.tol = checked_tol(tol)
        self.on_missing, self.default_level = on_missing, default_level
        self.target = target
        resolve_target(target)  # an unknown target fails at decoration
        self.plan_file = check_folder(plan_file) if plan_file else None
        self.plans: list[Plan] = []
        self._by_kind: dict[tuple[Any, ...], Plan] = {}  # per-call fast path
        self._file_read = False
        self._lock = threading.RLock()

    @staticmethod
    def _real_data(func: Compilable, plan: Plan, args: Sequence[Any]) -> bool:
        """Whether ``args`` are fit to replace ``plan``'s degenerate tuning data."""
        if degenerate_reason(args):
            return False
        log.info("%s: tuning again on real data (%s)", function_identity(func), plan.provisional)
        return True

    def plan_for(self, func: Compilable, args: Sequence[Any]) -> Plan | dict[str, str]:
        with self._lock:
            return self._plan_for(func, args)

    def _plan_for(self, func: Compilable, args: Sequence[Any]) -> Plan | dict[str, str]:
        if not self._file_read:
            if self.plan_file is not None and self.plan_file.exists():
                mine = [p for p in read_plans(self.plan_file) if p.is_for(func)]
                for plan in mine:  # as for plan=: stale or foreign ops raise, on this call and
                    # every later one; ops left out warn (user's frame: __call__, _active_for,
                    # plan_for, _plan_for, here)
                    check_plan_covers(plan, func, stacklevel=6)
                self.plans.extend(mine)
            self._file_read = True
        kind = _arguments_kind(args)
        known = self._by_kind.get(kind)
        if known is not None and known in self.plans:
            return known  # a settled plan for arguments of this kind: no matching needed
        for plan in self.plans:
            if plan.matches(args) and plan.tol <= self.tol:
                if not plan.provisional:
                    self._by_kind[kind] = plan
                    return plan
                if not self._real_data(func, plan, args):
                    return plan
                self.plans.remove(plan)  # tuned on smoke data: this call brings real data
                break
        if self.on_missing == "raise":
            raise MissingPlanError(
                f"no plan for {func!r} with tol {self.tol:g} and inputs {signature_of(args)}"
                + (f" in {self.plan_file}" if self.plan_file else "")
                + "; run `mixpert tune` or use on_missing='tune'"
            )
        if self.on_missing == "default":
            return dict.fromkeys(func.ops, self.default_level)
        # types first: a product Numba refuses raises ProductTypingError, as an untuned call
        # would, not NumPy's error from the tuner's float64 run of the Python function
        func.compile_for(args)
        where = resolve_target(self.target)
        progress = TuningProgress(
            function_identity(func), list(func.ops),
            walk_budget(len(func.ops), candidates_for(where)), self.tol, where,
        )  # fmt: skip
        plan = tune(func, args, tol=self.tol, on_run=progress, target=self.target)
        progress.done(plan.levels)
        if plan.provisional:
            warnings.warn(
                f"mixpert: {function_identity(func)} was tuned on degenerate data "
                f"({plan.provisional}): its plan rests on the error model alone and is tuned "
                "again on the next call whose inputs are not degenerate",
                DegenerateTuningDataWarning,
                stacklevel=5,
            )
        self.plans.append(plan)
        if self.plan_file is not None:
            plan.save(self.plan_file)
        return plan

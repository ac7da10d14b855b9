"""Which plan a ``@mixpert.jit(tol=...)`` function runs with: ``PlanBook``.

A function jitted with ``tol`` and no explicit ``plan`` looks, on each call, for a plan matching
the arguments' signature (dtype and ndim; see ``mixpert.plan``) whose tol is at least as tight:
first among the plans it already holds, then in ``plan_file`` when given (read on the first call
and ``check``-ed against the function's current ops, so a stale plan raises ``StalePlanError``
rather than running). With no matching plan, ``on_missing`` decides:

- ``"tune"`` (default): tune now on this call's arguments (they are the representative inputs),
  keep the plan, and save it to ``plan_file`` when given;
- ``"default"``: run every op at ``default_level`` (``NATIVE_LEVEL``: native float32, always
  safe);
- ``"raise"``: raise ``MissingPlanError`` (for deployments that must only run tuned plans).

The default for ``on_missing`` comes from the ``MIXPERT_ON_MISSING_PLAN`` environment variable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from .plan import Plan
from .runtime.levels import NATIVE_LEVEL
from .tuner import tune

if TYPE_CHECKING:
    from .jit import MixpertFunction

OnMissing = Literal["tune", "default", "raise"]
ON_MISSING_ENV = "MIXPERT_ON_MISSING_PLAN"


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
    ):
        on_missing = on_missing or os.environ.get(ON_MISSING_ENV, "tune")  # type: ignore[assignment]
        if on_missing not in get_args(OnMissing):
            raise ValueError(
                f"on_missing={on_missing!r}: use 'tune', 'default' or 'raise' "
                f"(argument or ${ON_MISSING_ENV})"
            )
        self.tol, self.on_missing, self.default_level = tol, on_missing, default_level
        self.plan_file = Path(plan_file) if plan_file else None
        self.plans: list[Plan] = []
        self._file_read = False

    def plan_for(self, func: MixpertFunction, args: Sequence[Any]) -> Plan | dict[str, str]:
        if not self._file_read:
            self._file_read = True
            if self.plan_file is not None and self.plan_file.exists():
                self.plans.append(Plan.load(self.plan_file, func))  # stale: raises here
        for plan in self.plans:
            if plan.matches(args) and plan.tol <= self.tol:
                return plan
        if self.on_missing == "raise":
            raise MissingPlanError(
                f"no plan for {func!r} with tol {self.tol:g} and inputs like these; "
                "run `mixpert tune` or use on_missing='tune'"
            )
        if self.on_missing == "default":
            return dict.fromkeys(func.ops, self.default_level)
        plan = tune(func, args, tol=self.tol)
        self.plans.append(plan)
        if self.plan_file is not None:
            plan.save(self.plan_file)
        return plan

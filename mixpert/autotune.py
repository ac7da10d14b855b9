"""``@mixpert.autotune(tol=...)``: a jitted function that finds, checks or makes its plan.

On each call the wrapper looks for a plan matching the arguments' signature (in memory, then in
``plan_file`` when given). A plan from the file is ``check``-ed first, so a stale plan raises
``StalePlanError`` rather than running. With no matching plan, ``on_missing`` decides:

- ``"tune"`` (default): tune now on this call's arguments (they are the representative inputs),
  keep the plan, and save it to ``plan_file`` when given;
- ``"default"``: run every op at ``default_level`` (``"fp32"``: native float32, always safe);
- ``"raise"``: raise ``MissingPlanError`` (for deployments that must only run tuned plans).

The default for ``on_missing`` comes from the ``MIXPERT_ON_MISSING_PLAN`` environment variable.
``mixpert.jit`` itself is left unchanged: ``@mixpert.jit(tol=...)`` stores tol, runs at the
runtime's default level, and takes a plan via ``plan=``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from .jit import MixpertFunction, jit
from .plan import Plan, StalePlanError
from .tuner import tune

OnMissing = Literal["tune", "default", "raise"]


class MissingPlanError(LookupError):
    """No plan matches the call and ``on_missing="raise"``."""


class AutotunedFunction:
    def __init__(
        self,
        func: Callable[..., Any],
        tol: float,
        plan_file: str | Path | None,
        on_missing: OnMissing,
        default_level: str,
    ):
        if on_missing not in ("tune", "default", "raise"):
            raise ValueError(f"on_missing={on_missing!r}: use 'tune', 'default' or 'raise'")
        self.jitted = func if isinstance(func, MixpertFunction) else jit(func, tol=tol)
        self.tol, self.on_missing, self.default_level = tol, on_missing, default_level
        self.plan_file = Path(plan_file) if plan_file else None
        self.plans: list[Plan] = []
        if self.plan_file is not None and self.plan_file.exists():
            self.plans.append(Plan.load(self.plan_file, self.jitted))  # stale: raises now

    def plan_for(self, args: tuple[Any, ...]) -> Plan | dict[str, str]:
        for plan in self.plans:
            if plan.matches(args) and plan.tol <= self.tol:
                plan.check(self.jitted, args)
                return plan
        if self.on_missing == "raise":
            raise MissingPlanError(
                f"no plan for {self.jitted!r} with tol {self.tol:g} and these inputs; "
                "run `mixpert tune` or use on_missing='tune'"
            )
        if self.on_missing == "default":
            return dict.fromkeys(self.jitted.ops, self.default_level)
        plan = tune(self.jitted, args, tol=self.tol)
        self.plans.append(plan)
        if self.plan_file is not None:
            plan.save(self.plan_file)
        return plan

    def __call__(self, *args: Any) -> Any:
        plan = self.plan_for(args)
        return self.jitted.with_plan(plan)(*args)


def autotune(
    func: Callable[..., Any] | None = None,
    *,
    tol: float,
    plan_file: str | Path | None = None,
    on_missing: OnMissing | None = None,
    default_level: str = "fp32",
) -> Any:
    """Use as ``@mixpert.autotune(tol=1e-5, plan_file="f.plan.json")``; see the module docstring."""
    mode = on_missing or os.environ.get("MIXPERT_ON_MISSING_PLAN", "tune")

    def wrap(f: Callable[..., Any]) -> AutotunedFunction:
        return AutotunedFunction(f, tol, plan_file, mode, default_level)  # type: ignore[arg-type]

    return wrap if func is None else wrap(func)


__all__ = ["AutotunedFunction", "MissingPlanError", "StalePlanError", "autotune"]

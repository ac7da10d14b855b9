"""A tuned plan: op id -> level for one function, with what it was tuned for, saved as JSON.

A plan records the function's identity (``module:qualname``), a hash of its op table (op ids and
their source lines), the input signature, the device, ``tol`` and what tuning measured. Before a
plan is applied, ``Plan.check`` compares the hash with the function's current ops: a plan whose
ops have changed is *stale* and raises ``StalePlanError`` instead of running with wrong levels.

The signature matches on dtype and number of dimensions, not on sizes: a plan tuned on
representative sizes is meant to serve other sizes of the same kind of input.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from .execution import EMPTY_PLAN, ActivePlan
from .runtime.levels import get_level

FORMAT = "mixpert-plan/1"


class StalePlanError(ValueError):
    """The plan was tuned for a different op table (the function's matmuls changed)."""


class PlanMismatchError(ValueError):
    """The plan belongs to another function or another kind of input."""


def function_identity(func: Any) -> str:
    """``module:qualname`` of a Python function or of a jitted one (its ``py_func``)."""
    py = getattr(func, "py_func", func)
    return f"{py.__module__}:{py.__qualname__}"


def op_table_hash(ops: Mapping[str, Any]) -> str:
    """Hash of the op ids and their source text: any added, removed or edited matmul changes it."""
    h = hashlib.sha256()
    for op_id in sorted(ops):
        h.update(op_id.encode())
        h.update(b"\0")
        h.update(str(getattr(ops[op_id], "source", "")).strip().encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def describe_arg(arg: Any) -> str:
    """'float32[64x128]' for arrays, the type name otherwise."""
    if hasattr(arg, "dtype") and hasattr(arg, "shape"):
        return f"{np.dtype(arg.dtype).name}[{'x'.join(str(d) for d in arg.shape)}]"
    return type(arg).__name__


def signature_of(args: Sequence[Any]) -> list[str]:
    return [describe_arg(a) for a in args]


def _kind(description: str) -> str:
    """The part of a signature entry plans match on: dtype and ndim ('float32/2')."""
    if "[" not in description:
        return description
    dtype, dims = description[:-1].split("[", 1)
    return f"{dtype}/{len(dims.split('x')) if dims else 0}"


@dataclass(frozen=True)
class OpReport:
    """Per-op figures from tuning (for the CLI table and the saved file)."""

    op_id: str
    location: str
    level: str
    share: float  # share of the plan's predicted time
    contribution: float  # error added when the tuner set this op's level (0 at the top level)


@dataclass
class Plan:
    """``levels``: op id -> level name; ``mixpert.jit(func, plan=plan)`` reads ``.levels``."""

    levels: dict[str, str]
    function: str
    op_hash: str
    signature: list[str]
    device: str
    tol: float
    error: float  # Eq. 10 error of the plan on the tuning inputs
    predicted_speedup: float  # over all ops at native float32, from the cost model
    measured_speedup: float | None = None  # GPU only: wall time over all ops at fp32
    met_tol: bool = True  # False: tol is tighter than any level reaches; levels are the accurate
    profiling_runs: int = 0
    ops: list[OpReport] = field(default_factory=list)

    def __post_init__(self) -> None:
        for level in self.levels.values():
            get_level(level)  # unknown names fail at load time, not mid-run

    # --- checks ----------------------------------------------------------------------------
    def check(self, func: Any, args: Sequence[Any] | None = None) -> None:
        """Raise if this plan must not be applied to ``func`` (and ``args``)."""
        name = function_identity(func)
        if name != self.function:
            raise PlanMismatchError(f"plan is for {self.function}, not {name}")
        ops = getattr(func, "ops", None)
        if ops is not None:
            current = op_table_hash(ops)
            if current != self.op_hash:
                missing = sorted(set(self.levels) - set(ops))
                raise StalePlanError(
                    f"stale plan for {self.function}: op table hash {self.op_hash} was tuned, "
                    f"the function now has {current} ({len(ops)} ops"
                    + (f"; gone: {', '.join(missing)}" if missing else "")
                    + "); re-run `mixpert tune`"
                )
        if args is not None and not self.matches(args):
            raise PlanMismatchError(
                f"plan tuned for inputs {self.signature}, called with {signature_of(args)}"
            )

    def matches(self, args: Sequence[Any]) -> bool:
        """Same number of arguments with the same dtypes and dimensions."""
        mine = [_kind(s) for s in self.signature]
        return mine == [_kind(s) for s in signature_of(args)]

    # --- files -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a mixpert plan (format {data.get('format')!r}, want {FORMAT})")
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["ops"] = [OpReport(**row) for row in values.get("ops", [])]
        return cls(**values)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path, func: Any = None) -> Plan:
        """Read a plan; with ``func``, also ``check`` it (stale plans raise here)."""
        plan = cls.from_json(json.loads(Path(path).read_text()))
        if func is not None:
            plan.check(func)
        return plan


PlanLike: TypeAlias = Plan | Mapping[str, str]  # what users hand to jit, with_plan and the CLI


def as_active_plan(plan: PlanLike | None) -> ActivePlan:
    """The one normalisation: a ``Plan`` or a mapping op id -> level name becomes the plan the
    run time reads (None: every op at the default level). Unknown level names raise here."""
    if plan is None:
        return EMPTY_PLAN
    if isinstance(plan, Plan):
        return ActivePlan.from_levels(plan.levels)
    if isinstance(plan, Mapping):
        return ActivePlan.from_levels(plan)
    raise TypeError(
        f"plan is a {type(plan).__name__}; pass a mixpert.Plan or a mapping op id -> level name"
    )

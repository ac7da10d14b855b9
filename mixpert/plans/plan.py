"""A tuned plan: op id -> level for one function, with what it was tuned for.

A plan records the function's qualified name, each op's source hash (``OpInfo.source_hash``), the
input signature, the device, ``tol`` and what tuning measured. Before a plan is applied,
``Plan.check`` compares it with the function's current ops: a plan whose products changed is
*stale* and raises ``StalePlanError`` naming them, instead of running with wrong levels. Op ids
carry no module name and no line (``passes.sites``), so a plan applies whether the file is
imported or run as a script, and across edits that do not touch the products.

The signature matches on dtype and number of dimensions, not on sizes: a plan tuned on
representative sizes is meant to serve other sizes of the same kind of input. Files hold several
plans side by side; ``plans.files`` reads and writes them, and the functions at the end of this
module (``read_plans``, ``save_plan``) turn its checked JSON objects into plans and back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from ..execution import EMPTY_PLAN, ActivePlan
from ..runtime.levels import get_level
from ..runtime.precision import get_default_level
from .files import check_folder, checked_plan_fields, read_plan_file, write_plan_file


class StalePlanError(ValueError):
    """The plan was tuned for other products (the function's matmuls changed)."""


class PlanMismatchError(ValueError):
    """The plan belongs to another function, names ops it lacks, or another kind of input."""


class PlanCoverageWarning(UserWarning):
    """A plan leaves out some of the function's ops; they run at the default level."""


def function_identity(func: Any) -> str:
    """The qualified name of a Python function or of a jitted one (its ``py_func``)."""
    return getattr(func, "py_func", func).__qualname__


def op_table_hash(ops: Mapping[str, Any]) -> str:
    """Hash of the op ids and their source text: any added, removed or edited matmul changes it."""
    h = hashlib.sha256()
    for op_id in sorted(ops):
        h.update(op_id.encode())
        h.update(b"\0")
        h.update(str(getattr(ops[op_id], "source", "")).strip().encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def op_sources(ops: Mapping[str, Any]) -> dict[str, str]:
    """Op id -> source hash, as a plan stores them."""
    return {op_id: op.source_hash for op_id, op in sorted(ops.items())}


def describe_arg(arg: Any) -> str:
    """'float32[64x128]' for arrays, the type name otherwise."""
    if hasattr(arg, "dtype") and hasattr(arg, "shape"):
        return f"{np.dtype(arg.dtype).name}[{'x'.join(str(d) for d in arg.shape)}]"
    return type(arg).__name__


def signature_of(args: Sequence[Any]) -> list[str]:
    return [describe_arg(a) for a in args]


def signature_kind(signature: Sequence[str]) -> list[str]:
    """What plans match on: dtype and ndim of each argument ('float32/2')."""
    kinds = []
    for description in signature:
        if "[" not in description:
            kinds.append(description)
            continue
        dtype, dims = description[:-1].split("[", 1)
        kinds.append(f"{dtype}/{len(dims.split('x')) if dims else 0}")
    return kinds


@dataclass(frozen=True)
class OpReport:
    """Per-op figures from tuning (for the CLI table and the saved file)."""

    op_id: str
    location: str  # file:line, the file relative to the working directory when under it
    level: str
    share: float  # share of the plan's predicted time
    contribution: float  # error added when the tuner set this op's level (0 at the top level)
    # Why the op never reaches the runtime with the tuned arguments (float64 operands, a
    # matrix-vector product, ...): it runs Numba's own product whatever its level says.
    native: str = ""
    # Why the op is not at the next cheaper candidate level: the acceptance rule that refused
    # it, naming the op it judged and the figures ("" where the op is at the cheapest level).
    forced_by: str = ""


@dataclass
class Plan:
    """``levels``: op id -> level name; ``mixpert.jit(func, plan=plan)`` runs with it."""

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
    op_sources: dict[str, str] = field(default_factory=dict)  # op id -> source hash
    margin: float = 1.0  # moves were kept within margin * tol on the tuning inputs
    held_out_error: float | None = None  # worst error on validation inputs, when given
    tuned_on: str = ""  # the inputs it was tuned on, in words
    # why the tuning data could not be trusted ("" when they could): the plan rests on the error
    # model, and a ``tol=`` function tunes again on its next call with other data
    provisional: str = ""
    target: str = ""  # the device whose costs it minimises ("cpu" or "cuda")
    # A plan for the GPU tuned on NumPy arguments: the bytes a call moves to the GPU and back
    # (one trip, or each product's operands and result) and their predicted seconds
    # (``tuning.trip``); the call's seconds on the GPU with them (measured where a GPU was
    # usable, else predicted) and natively on the host (timed, when timing was asked); None
    # where nothing moves (CuPy arguments, a plan for the CPU).
    trip_bytes: int | None = None
    trip_seconds: float | None = None
    gpu_seconds: float | None = None
    host_seconds: float | None = None
    # why the plan runs natively on the host, every op at native float32 ("" where it runs as
    # its target says): the host's own run beat the GPU's with its copies
    on_host: str = ""
    # the plan file it was read from ("" for none; not saved): every error about it names it
    source: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        for level in self.levels.values():
            get_level(level)  # unknown names fail at load time, not mid-run

    def __repr__(self) -> str:
        levels = ", ".join(f"{op} {level}" for op, level in self.levels.items())
        return f"<Plan {self.function}: {levels}; tol {self.tol:g}, error {self.error:.2e}>"

    def __str__(self) -> str:
        """The plan as a user reads it: one line of facts, then a line per op."""
        held = f", held-out {self.held_out_error:.2e}" if self.held_out_error is not None else ""
        lines = [
            f"plan for {self.function} (tol {self.tol:g}, on {self.target or self.device}): "
            f"error {self.error:.2e} within {self.margin:.2g} tol{held}, predicted "
            f"{self.predicted_speedup:.2f}x native float32"
            + ("" if self.met_tol else "; tol NOT met: the most accurate levels")
        ]
        if self.tuned_on:
            lines.append(f"  tuned on {self.tuned_on}")
        if self.provisional:
            lines.append(f"  provisional: {self.provisional}")
        if self.trip_seconds is not None:
            lines.append(f"  {self.trip_text()}")
        if self.on_host:
            lines.append(f"  runs natively on the host: {self.on_host}")
        for op, level in self.levels.items():
            report = next((r for r in self.ops if r.op_id == op), None)
            where = f"  {report.location}" if report else ""
            lines.append(f"  {op:<24} {level:<12}{where}")
            if report and report.forced_by:
                lines.append(f"    not cheaper: {report.forced_by}")
        return "\n".join(lines)

    def trip_text(self) -> str:
        """The trip of a call with NumPy arguments, and the call's time with it and on the
        host, in one line."""
        moved = f"{(self.trip_bytes or 0) / 2**20:.3g} MiB"
        line = f"trip: {moved} to the GPU and back a call, predicted {_ms(self.trip_seconds)}"
        timed = self.host_seconds is not None and self.device != "cpu"  # (on a GPU)
        how = "measured" if timed else "predicted"
        if self.gpu_seconds is not None:
            line += f"; the call with it {_ms(self.gpu_seconds)} ({how})"
        if self.host_seconds is not None:
            line += f", natively on the host {_ms(self.host_seconds)}"
        return line

    # --- checks ----------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """How errors name the plan: 'plan file path: ' for a plan read from one, else ''."""
        return f"plan file {self.source}: " if self.source else ""

    def is_for(self, func: Any) -> bool:
        """Whether this plan was tuned for a function of ``func``'s qualified name."""
        return self.function.rpartition(":")[2] == function_identity(func)  # 0.1: module:name

    def check(self, func: Any, args: Sequence[Any] | None = None) -> None:
        """Raise if this plan must not be applied to ``func`` (and ``args``)."""
        if not self.is_for(func):
            raise PlanMismatchError(
                f"{self.origin}plan is for {self.function}, not {function_identity(func)}"
            )
        ops = getattr(func, "ops", None)
        if ops is not None:
            self._check_ops(ops)
        if args is not None and not self.matches(args):
            raise PlanMismatchError(
                f"{self.origin}plan for {self.function} was tuned for inputs {self.signature}, "
                f"called with {signature_of(args)}"
            )

    def _check_ops(self, ops: Mapping[str, Any]) -> None:
        if self.op_sources:
            now = op_sources(ops)
            gone = sorted(set(self.op_sources) - set(now))
            new = sorted(set(now) - set(self.op_sources))
            edited = sorted(op for op in now if self.op_sources.get(op, now[op]) != now[op])
            stale = bool(gone or new or edited)
        else:  # files of mixpert 0.1 keep only the hash of the whole table
            gone = sorted(set(self.levels) - set(ops))
            new = sorted(set(ops) - set(self.levels))
            edited = []
            stale = op_table_hash(ops) != self.op_hash
        if stale:
            parts = [
                f"{what}: {', '.join(names)}"
                for what, names in (("edited", edited), ("gone", gone), ("new", new))
                if names
            ]
            raise StalePlanError(
                f"{self.origin}stale plan for {self.function}: its products changed since tuning "
                f"({'; '.join(parts) or 'op table hash ' + self.op_hash}); re-run `mixpert tune`"
            )

    def matches(self, args: Sequence[Any]) -> bool:
        """Same number of arguments with the same dtypes and dimensions."""
        return signature_kind(self.signature) == signature_kind(signature_of(args))

    # --- files -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["source"]  # where it was read from is no part of the plan
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "plan") -> Plan:
        """A plan from its JSON object, every field checked (``files.PlanFileError``)."""
        return plan_from_json(data, where)

    def save(self, path: str | Path) -> Path:
        """Write this plan into the plan file ``path``, beside plans for other inputs."""
        return save_plan(path, self)

    @classmethod
    def load(cls, path: str | Path, func: Any = None, args: Sequence[Any] | None = None) -> Plan:
        """The plan in file ``path`` for ``func`` (and ``args``); ``check``-ed when ``func`` is
        given (stale plans raise here). A file with plans for several inputs needs ``args``."""
        return select_plan(read_plans(path), func, args, f"plan file {path}")


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:.3g} ms"


def select_plan(plans: Sequence[Plan], func: Any, args: Sequence[Any] | None, where: str) -> Plan:
    """The one plan of ``plans`` for ``func`` and ``args`` (PlanMismatchError otherwise)."""
    if func is not None:
        mine = [p for p in plans if p.is_for(func)]
        if not mine:
            found = sorted({p.function for p in plans})
            raise PlanMismatchError(
                f"{where} holds no plan for {function_identity(func)} (it has: {found})"
            )
        plans = mine
    if not plans:
        raise PlanMismatchError(f"{where} holds no plans")
    if args is not None:
        plans = [p for p in plans if p.matches(args)] or [plans[0]]
    if len(plans) > 1:
        kinds = [signature_kind(p.signature) for p in plans]
        raise PlanMismatchError(
            f"{where} holds plans for several kinds of input ({kinds}); give the inputs"
        )
    plan = plans[0]
    if func is not None:
        plan.check(func, args)
    return plan


def _plan_of(values: dict[str, Any], source: str = "") -> Plan:
    """A ``Plan`` from fields ``files.checked_plan_fields`` has checked (read from ``source``)."""
    ops = [OpReport(**row) for row in values.get("ops", [])]
    return Plan(**{**values, "ops": ops, "source": source})


def plan_from_json(data: Any, where: str = "plan") -> Plan:
    """A ``Plan`` from its JSON object, every field checked."""
    return _plan_of(checked_plan_fields(data, where))


def read_plans(path: str | Path) -> list[Plan]:
    """Every plan in the file (PlanFileError for anything that is not a valid plan file)."""
    return [_plan_of(values, str(path)) for values in read_plan_file(path)]


def write_plans(path: str | Path, plans: Sequence[Plan]) -> Path:
    """Write ``plans`` to ``path`` atomically (a temporary file, then a rename)."""
    return write_plan_file(path, [p.to_json() for p in plans])


def save_plan(path: str | Path, plan: Plan) -> Path:
    """Put ``plan`` into the file at ``path``: it replaces a plan for the same function and
    kind of input, and sits beside plans for others."""
    path = check_folder(path)
    plans = read_plans(path) if path.exists() else []
    key = (plan.function, signature_kind(plan.signature))
    kept = [p for p in plans if (p.function, signature_kind(p.signature)) != key]
    return write_plans(path, [*kept, plan])


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


def check_plan_covers(plan: PlanLike, func: Any, stacklevel: int = 4) -> None:
    """Raise if ``plan`` names ops ``func`` lacks (or is stale for it); warn if it leaves
    some out (``stacklevel``: the user's frame). Nothing about a plan is silently ignored; a
    plan read from a file is checked alike and named by its file."""
    ops = func.ops
    origin = ""
    if isinstance(plan, Plan):
        plan.check(func)
        origin = plan.origin
    levels = plan.levels if isinstance(plan, Plan) else plan
    unknown = sorted(set(levels) - set(ops))
    if unknown:
        raise PlanMismatchError(
            f"{origin}plan names ops {function_identity(func)} does not have: "
            f"{', '.join(unknown)} "
            f"(its ops: {', '.join(sorted(ops)) or 'none'})"
        )
    missing = sorted(set(ops) - set(levels))
    if missing:
        warnings.warn(
            f"{origin}plan for {function_identity(func)} leaves out ops {', '.join(missing)}; "
            f"they run at the default level ({get_default_level().name})",
            PlanCoverageWarning,
            stacklevel=stacklevel,
        )

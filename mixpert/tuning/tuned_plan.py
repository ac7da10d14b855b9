"""The tuned plan as a ``Plan``: the walk's levels with their record (errors, each op's share of
the time, predicted and measured speed-up, the inputs it was tuned on, the target).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..plans.plan import OpReport, Plan, function_identity, op_sources, op_table_hash, signature_of
from ..runtime import device
from ..runtime.levels import get_level
from ..timing import best_time, synchronizer_for
from . import inputs
from .copies import copies, parameter_names
from .profiling import Tunable
from .search import Result
from .targets import BASELINE_LEVEL, INT8_RATE, predicted_time


def plan_of(
    jitted: Tunable,
    args: tuple[Any, ...],
    tol: float,
    result: Result,
    held_out: float | None,
    measure: bool | None,
    target: str,
    tuned_on: str,
) -> Plan:
    """The plan of a walk's ``result`` on ``args``; ``measure``: time it against all native
    float32 (None: only on a GPU)."""
    base = predicted_time(result.flops, {})
    mine = predicted_time(result.flops, result.levels)
    measured = None
    if measure if measure is not None else device.gpu_available():
        sync = synchronizer_for(args)  # CuPy calls return before the GPU is done
        fp32 = jitted.with_plan(dict.fromkeys(result.levels, BASELINE_LEVEL))
        tuned = jitted.with_plan(result.levels)
        scratch = copies(args, parameter_names(jitted.py_func))  # timed calls may write
        measured = best_time(lambda: fp32(*scratch), sync, 3) / best_time(
            lambda: tuned(*scratch), sync, 3
        )
    ops = jitted.ops
    native = jitted.native_reasons(args) if hasattr(jitted, "native_reasons") else {}
    reports = [
        OpReport(
            op,
            f"{relative_path(ops[op].file)}:{ops[op].line}",
            level,
            get_level(level).relative_cost * result.flops.get(op, 0.0) / INT8_RATE / mine
            if mine
            else 0.0,
            result.contribution.get(op, 0.0),
            native.get(op, ""),
            result.forced.get(op, ""),
        )
        for op, level in result.levels.items()
    ]
    degenerate = inputs.degenerate_reason(args)
    exact = "; ".join(f"{op} was exact at {level}" for op, level in result.exact_ops.items())
    return Plan(
        levels=result.levels,
        function=function_identity(jitted),
        op_hash=op_table_hash(ops),
        signature=signature_of(args),
        device=device.device_name(),
        tol=tol,
        error=result.error,
        predicted_speedup=base / mine if mine else 1.0,
        measured_speedup=measured,
        met_tol=result.met_tol,
        profiling_runs=result.runs,
        ops=reports,
        op_sources=op_sources(ops),
        margin=min(1.0, result.margin),
        held_out_error=held_out,
        tuned_on=tuned_on or inputs.describe(args),
        provisional="; ".join(r for r in (degenerate, exact) if r) if degenerate else "",
        target=target,
    )


def relative_path(file: str) -> str:
    """``file`` relative to the working directory when it lies below it, else its name."""
    path = Path(file)
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name

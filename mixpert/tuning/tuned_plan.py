"""The tuned plan as a ``Plan``: the walk's levels with their record (errors, each op's share of
the time, predicted and measured speed-up, the inputs it was tuned on, the target; for a GPU
plan on NumPy arguments its trip, and the host's own run it must beat: ``trip``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..plans.plan import OpReport, Plan, function_identity, op_sources, op_table_hash, signature_of
from ..runtime import device
from ..runtime.levels import NATIVE_LEVEL, get_level
from ..timing import best_time, synchronizer_for
from . import inputs
from .copies import copies, parameter_names
from .profiling import Profiler, Tunable
from .search import Result
from .targets import BASELINE_LEVEL, INT8_RATE, predicted_time
from .trip import slower_than_host, trip_of


def plan_of(
    jitted: Tunable,
    args: tuple[Any, ...],
    tol: float,
    result: Result,
    held_out: float | None,
    measure: bool | None,
    target: str,
    tuned_on: str,
    prof: Profiler | None = None,
) -> Plan:
    """The plan of a walk's ``result`` on ``args``; ``measure``: time it against all native
    float32 (None: only on a GPU). For the GPU on NumPy arguments (``prof``: the walk's
    profiler, which saw what the calls move), the plan records the trip, and where it is timed
    a plan slower than the host's own run becomes that run (``trip``)."""
    base = predicted_time(result.flops, {})
    mine = predicted_time(result.flops, result.levels)
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
    plan = Plan(
        levels=result.levels,
        function=function_identity(jitted),
        op_hash=op_table_hash(ops),
        signature=signature_of(args),
        device=device.device_name(),
        tol=tol,
        error=result.error,
        predicted_speedup=base / mine if mine else 1.0,
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
    trip = trip_of(jitted, args, prof) if target == "cuda" and prof is not None else None
    if trip is not None:
        plan.trip_bytes, plan.trip_seconds = trip.nbytes, trip.seconds
        plan.gpu_seconds = mine + trip.seconds  # predicted: the products and the trip
    if not (measure if measure is not None else device.gpu_available()):
        return plan
    host, tuned = _timed(jitted, args, plan)
    plan.measured_speedup = host / tuned
    if trip is None:
        return plan
    on_gpu = device.gpu_available()
    plan.host_seconds = host
    if on_gpu:
        plan.gpu_seconds = tuned  # the call as it runs, its trip included
    why = slower_than_host(plan.gpu_seconds or 0.0, host, trip, measured=on_gpu)
    return _on_host(plan, prof, result, why) if why and prof is not None else plan


def _timed(jitted: Tunable, args: tuple[Any, ...], plan: Plan) -> tuple[float, float]:
    """Seconds of a call with every op at native float32 (on NumPy arguments: the host's own
    run) and under ``plan`` as it will run (on NumPy arguments and a GPU: with its trip)."""
    sync = synchronizer_for(args)  # CuPy calls return before the GPU is done
    fp32 = jitted.with_plan(dict.fromkeys(plan.levels, BASELINE_LEVEL))
    tuned = jitted.with_plan(plan)  # type: ignore[arg-type]  # (a Plan: its target counts)
    scratch = copies(args, parameter_names(jitted.py_func))  # timed calls may write
    return best_time(lambda: fp32(*scratch), sync, 3), best_time(lambda: tuned(*scratch), sync, 3)


def _on_host(plan: Plan, prof: Profiler, result: Result, why: str) -> Plan:
    """``plan`` as the host's own run (every op at native float32, ``why`` said), where native
    float32 meets the share of tol the plan was held to; else ``plan`` as it is."""
    levels = dict.fromkeys(plan.levels, NATIVE_LEVEL)
    prof.budget = None  # (the walk's cap: one more run)
    error = prof.error(levels)
    if not error <= plan.tol * plan.margin:
        return plan
    total = sum(result.flops.values())

    def share(report: OpReport) -> float:  # of the time at one level: of the flops
        return result.flops.get(report.op_id, 0.0) / total if total else 0.0

    ops = [
        dataclasses.replace(
            report, level=NATIVE_LEVEL, share=share(report), contribution=0.0, forced_by=""
        )
        for report in plan.ops
    ]
    return dataclasses.replace(
        plan, levels=levels, ops=ops, error=error, predicted_speedup=1.0, on_host=why,
        measured_speedup=1.0,
    )  # fmt: skip


def relative_path(file: str) -> str:
    """``file`` relative to the working directory when it lies below it, else its name."""
    path = Path(file)
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name

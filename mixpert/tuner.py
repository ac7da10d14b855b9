"""The greedy per-op level tuner of MixPert section 3.4 (behind ``mixpert.tune``).

Each *profiling run* executes the jitted function once under a candidate plan and measures its
output error, MixPert Eq. 10 over all floating-point outputs together:
``sqrt(sum ||X - X64||_F^2) / sqrt(sum ||X64||_F^2)``, where X64 comes from the undecorated
Python function run on float64 copies of the inputs, on their device (computed once).

Times come from a cost model: an op's time at a level is
``relative_cost(level) * 2*m*k*n / INT8_RATE`` summed over its calls (shapes recorded in the first
run). ``INT8_RATE`` = 1.4e15 ops/s is one INT8 GEMM's throughput on the H100: level IV sustains
~160 TFLOPS at n = 16384 in ``benchmarks/results/NVIDIA-H100-80GB-HBM3/gemm.json`` and its
relative cost is 9, so 9 x 160e12 ~ 1.4e15. The tuner only compares times, so the constant only
scales the predicted seconds. On a GPU the walk's plan is then checked against measured times:
an op that ran slower at its tuned level than at "auto" (small, skinny and batched shapes, where
the model's shape-free costs are wrong) goes to "auto" where the error allows
(``_auto_where_faster``): the runtime's own float32-grade choice for the op's shape, which
knows the paths the model does not (cuBLAS, fp32-ordered's small-stack, pairs, tall, thin and
split-k kernels, level IV). The tuned plan's speed is then measured (wall time of the function
against all ops at native float32).

The search: start with every op at the most accurate candidate level (if that misses ``tol``,
return it with ``met_tol=False`` and a warning: a tol tighter than float32 can reach selects the
accurate levels rather than failing silently). Visit ops by their share of the time, largest
first, and lower each one rung at a time while the error stays within ``margin * tol`` (default
``DEFAULT_MARGIN``: errors vary between inputs, and the plan must hold on inputs the tuner never
sees). When a lowering breaks it, try raising the op's immediate predecessor in the GEMM graph one
rung instead, keeping the pair only if the error is back within bounds and the total time still
drops. Sweep again until no move helps. Ops that never reached the runtime on the tuning inputs
(matrix-vector products, code not taken) cost no runs and are planned at native float32. Runs are
cached per plan and capped at ops x levels. Profiling runs work on copies of the arguments; the
final contents of arrays the function writes into count as outputs.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import networkx as nx
import numpy as np

from .execution import record_calls
from .metrics import copies, float64_copies, is_float_array, output_error
from .plans.plan import OpReport, Plan, function_identity, op_sources, op_table_hash, signature_of
from .runtime import device
from .runtime.levels import AUTO, LADDER, NATIVE_LEVEL, Level, get_level
from .timing import best_time, synchronizer_for

INT8_RATE = 1.4e15  # ops/s of one INT8 GEMM on the H100 (see module docstring)
# The greedy walk keeps a move while the error on the tuning input stays within MARGIN * tol:
# errors vary between inputs. Measured (benchmarks/tuner_holdout.py, CPU, 20 fresh inputs):
# margin 1 held tol on 50% of them for subspace iteration (worst 4.6 tol) and an RBF predictor
# (worst 2.35 tol); 0.5 on 100% / 95% (worst 1.45 tol); 0.25 on 100% of both (worst 0.33 tol),
# with the same number of profiling runs.
DEFAULT_MARGIN = 0.25
VALIDATION_RETRIES = 3  # halvings of the margin when validation inputs miss tol
BASELINE_LEVEL = NATIVE_LEVEL  # speedups are over every op at native float32
MEASURED_FALLBACK = AUTO.name  # on a GPU, where an op's tuned level measures slower


class Tunable(Protocol):
    """What the tuner needs of a jitted function (``mixpert.jit`` gives one)."""

    py_func: Callable[..., Any]

    @property
    def ops(self) -> Mapping[str, Any]: ...

    @property
    def graph(self) -> nx.DiGraph: ...

    def with_plan(self, plan: Mapping[str, str]) -> Callable[..., Any]: ...


class TolUnreachableWarning(UserWarning):
    """Even the most accurate candidate levels miss tol; the plan uses them anyway."""


def pareto_levels(ladder: Iterable[Level] = LADDER) -> tuple[str, ...]:
    """Levels no other level beats on both cost and expected error (the default candidates)."""
    levels = sorted(ladder, key=lambda lv: (lv.relative_cost, lv.expected_error))
    front: list[str] = []
    best = float("inf")
    for level in levels:
        if level.expected_error < best:
            front.append(level.name)
            best = level.expected_error
    return tuple(front)


# The Pareto front: tf32, I, T6, IV, V, fp64. fp16 (k-blocked on the GPU: 1.3e-6 at cost 20) is
# dominated by V there, and the greedy walk needs error to fall as cost rises; pass it in
# ``candidates`` for data whose lines span more binades than V's 31 bits.
DEFAULT_CANDIDATES = pareto_levels()


# --- profiling -------------------------------------------------------------------------------
@dataclass
class Profiler:
    """Runs the function under candidate plans; caches errors; counts runs."""

    func: Tunable
    args: tuple[Any, ...]
    budget: int | None = None
    on_run: Callable[[], None] | None = None
    reference: Any = None
    runs: int = 0
    errors: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)
    flops: dict[str, float] = field(default_factory=dict)  # op id -> sum of 2*m*k*n

    written: tuple[int, ...] = ()  # arguments the function writes into: outputs too

    def __post_init__(self) -> None:
        reference_args = float64_copies(self.args)
        result = self.func.py_func(*reference_args)
        self.written = tuple(
            i
            for i, (given, ran) in enumerate(zip(self.args, reference_args, strict=True))
            if is_float_array(given) and not _same_values(given, ran)
        )
        self.reference = (result, *(reference_args[i] for i in self.written))

    def error(self, levels: Mapping[str, str]) -> float:
        key = tuple(sorted(levels.items()))
        if key in self.errors:
            return self.errors[key]
        if self.budget is not None and self.runs >= self.budget:
            raise BudgetExhausted
        args = copies(self.args)  # the caller's arrays are never written by a profiling run
        with record_calls() as calls:
            result = self.func.with_plan(dict(levels))(*args)
        outputs = (result, *(args[i] for i in self.written))
        self.runs += 1
        if not self.flops:  # shapes do not depend on levels: learn them from the first run
            for call in calls:
                self.flops[call.op_id] = (
                    self.flops.get(call.op_id, 0.0) + 2.0 * call.m * call.k * call.n
                )
        if self.on_run is not None:
            self.on_run()
        self.errors[key] = output_error(outputs, self.reference)
        return self.errors[key]

    def op_seconds(self, levels: Mapping[str, str]) -> dict[str, float]:
        """Measured seconds of each op under ``levels`` (the second of two runs: the first
        compiles kernels and fills caches); two profiling runs."""
        for _ in range(2):
            with record_calls() as calls:
                self.func.with_plan(dict(levels))(*copies(self.args))
            self.runs += 1
        seconds: dict[str, float] = {}
        for call in calls:
            seconds[call.op_id] = seconds.get(call.op_id, 0.0) + call.seconds
        return seconds


def _same_values(given: Any, ran: Any) -> bool:
    """Whether a float64 copy still holds the values of the argument it was made from."""
    xp = device.cupy_module() if device.is_cupy_array(given) else np
    return bool(xp.array_equal(given.astype(xp.float64), ran, equal_nan=True))


class BudgetExhausted(Exception):
    """The profiling budget (ops x levels) is spent; the tuner keeps its best plan so far."""


def predicted_time(flops: Mapping[str, float], levels: Mapping[str, str]) -> float:
    """Seconds under the cost model (ops missing from ``levels`` count at native float32)."""
    return sum(
        get_level(levels.get(op, BASELINE_LEVEL)).relative_cost * f / INT8_RATE
        for op, f in flops.items()
    )


# --- the greedy search -----------------------------------------------------------------------
@dataclass
class Result:
    levels: dict[str, str]
    error: float
    met_tol: bool
    runs: int
    flops: dict[str, float]
    contribution: dict[str, float]


def _ordered(candidates: Sequence[str]) -> list[str]:
    """Candidates by cost, cheapest first, cut above the most accurate one (dearer is useless)."""
    levels = [get_level(c) for c in dict.fromkeys(candidates)]
    top = min(levels, key=lambda lv: (lv.expected_error, lv.relative_cost))
    return [
        lv.name
        for lv in sorted(levels, key=lambda lv: lv.relative_cost)
        if lv.relative_cost <= top.relative_cost
    ]


def greedy(
    func: Tunable,
    args: Sequence[Any],
    tol: float,
    candidates: Sequence[str] = DEFAULT_CANDIDATES,
    on_run: Callable[[], None] | None = None,
    margin: float = 1.0,
) -> Result:
    """MixPert 3.4's greedy search (see the module docstring); a move is kept while the error
    stays within ``margin * tol``."""
    rungs = _ordered(candidates)
    ops = list(func.ops)
    prof = Profiler(func, tuple(args), budget=max(1, len(ops) * len(rungs)), on_run=on_run)
    rung = dict.fromkeys(ops, len(rungs) - 1)

    def levels_of(r: Mapping[str, int]) -> dict[str, str]:
        return {op: rungs[i] for op, i in r.items()}

    current_error = prof.error(levels_of(rung))
    contribution = dict.fromkeys(ops, 0.0)
    if current_error > tol:
        warnings.warn(
            f"tol={tol:g} is tighter than the most accurate candidate ({rungs[-1]}) reaches "
            f"(error {current_error:.2e}); using {rungs[-1]} for every op",
            TolUnreachableWarning,
            stacklevel=3,
        )
        return Result(levels_of(rung), current_error, False, prof.runs, prof.flops, contribution)

    accept = margin * tol
    graph = func.graph
    # by share of time at the start (all at one level, so by flops); ops that never reached the
    # runtime (matrix-vector sites, branches not taken) have no time to save: they stay native
    tunable = [op for op in ops if prof.flops.get(op, 0.0) > 0]
    order = sorted(tunable, key=lambda op: -prof.flops[op])
    prof.budget = max(1, len(order) * len(rungs))

    def cost(r: Mapping[str, int]) -> float:
        return predicted_time(prof.flops, levels_of(r))

    try:
        improved = True
        while improved:
            improved = False
            for op in order:
                while rung[op] > 0:
                    trial = {**rung, op: rung[op] - 1}
                    err = prof.error(levels_of(trial))
                    if err <= accept:
                        contribution[op] += err - current_error
                        rung, current_error, improved = trial, err, True
                        continue
                    moved = False
                    preds = sorted(
                        (p for p in graph.predecessors(op) if p in rung),
                        key=lambda p: prof.flops.get(p, 0.0),
                    )
                    for pred in preds:  # cheaper predecessors first
                        if rung[pred] >= len(rungs) - 1:
                            continue
                        pair = {**trial, pred: rung[pred] + 1}
                        if cost(pair) >= cost(rung):
                            continue
                        err = prof.error(levels_of(pair))
                        if err <= accept:
                            contribution[op] += err - current_error
                            rung, current_error, improved, moved = pair, err, True, True
                            break
                    if not moved:
                        break
    except BudgetExhausted:
        pass
    levels, current_error = _auto_where_faster(prof, levels_of(rung), current_error, accept)
    idle = dict.fromkeys(set(ops) - set(tunable), BASELINE_LEVEL)  # native, as they ran
    return Result({**levels, **idle}, current_error, True, prof.runs, prof.flops, contribution)


def _auto_where_faster(
    prof: Profiler, levels: dict[str, str], error: float, accept: float
) -> tuple[dict[str, str], float]:
    """On a GPU, the measured check of the cost model: an op whose tuned level ran slower than
    "auto" on the tuning inputs (small, skinny or batched shapes, where packing costs more
    than the INT8 tensor cores save) goes to "auto" where the error allows. The model alone
    cannot see this: its costs do not depend on shape. On the CPU emulation is the oracle and
    is never faster, so the model's plan stands."""
    if not any(device.is_cupy_array(a) for a in prof.args) or not levels:
        return levels, error
    prof.budget = None  # the walk's cap; this check costs at most 4 + len(levels) runs
    fallback = dict.fromkeys(levels, MEASURED_FALLBACK)
    tuned_s, fallback_s = prof.op_seconds(levels), prof.op_seconds(fallback)
    slower = [op for op in levels if tuned_s.get(op, 0.0) > fallback_s.get(op, float("inf"))]
    for op in sorted(slower, key=lambda op: fallback_s[op] - tuned_s[op]):  # largest loss first
        trial = {**levels, op: MEASURED_FALLBACK}
        trial_error = prof.error(trial)
        if trial_error <= accept:
            levels, error = trial, trial_error
    return levels, error


def exhaustive(
    func: Tunable, args: Sequence[Any], tol: float, candidates: Sequence[str]
) -> tuple[dict[str, str], float, int]:
    """The cheapest plan within tol over all level assignments: (levels, error, runs).

    Assignments are tried in order of predicted time, so the first within tol is optimal.
    """
    ops = list(func.ops)
    prof = Profiler(func, tuple(args))
    prof.error(dict.fromkeys(ops, candidates[-1]))  # learn the shapes
    plans = [
        dict(zip(ops, combo, strict=True))
        for combo in itertools.product(candidates, repeat=len(ops))
    ]
    plans.sort(key=lambda p: predicted_time(prof.flops, p))
    for levels in plans:
        err = prof.error(levels)
        if err <= tol:
            return levels, err, prof.runs
    best = min(plans, key=lambda p: prof.error(p))
    return best, prof.error(best), prof.runs


# --- the tuned plan ---------------------------------------------------------------------------
def tune(
    jitted: Tunable,
    args: Sequence[Any],
    tol: float = 1e-6,
    *,
    candidates: Sequence[str] = DEFAULT_CANDIDATES,
    on_run: Callable[[], None] | None = None,
    measure: bool | None = None,
    margin: float = DEFAULT_MARGIN,
    validation: Sequence[Sequence[Any]] = (),
) -> Plan:
    """Tune a ``mixpert.jit`` function on representative ``args``; return a Plan
    (``mixpert.tune`` also takes plain functions). ``margin``: moves are kept while the error
    on ``args`` stays within ``margin * tol`` (room for inputs the tuner does not see).
    ``validation``: further inputs the plan must also keep within tol; when one misses, the
    margin is halved and the search repeated (``VALIDATION_RETRIES`` times at most); the worst
    of their errors is the plan's ``held_out_error``.

    ``measure``: time the plan against all-fp32 (default: only on a GPU, where it means something).
    """
    tol = checked_tol(tol)
    policies = [c for c in candidates if get_level(c).kind == "policy"]
    if policies:
        raise ValueError(f"candidates {policies}: a policy is not a level the tuner can weigh")
    if not 0 < margin <= 1:
        raise ValueError(f"margin={margin!r}: it must lie in (0, 1]")
    args = tuple(args)
    held_out_inputs = [Profiler(jitted, tuple(v)) for v in validation]  # references made once
    runs = 0
    for attempt in range(VALIDATION_RETRIES + 1):
        if attempt:
            margin /= 2  # the last plan missed tol on a validation input: tighten, search again
        result = greedy(jitted, args, tol, candidates, on_run, margin)
        runs += result.runs
        held_out = max((p.error(result.levels) for p in held_out_inputs), default=None)
        if held_out is None or held_out <= tol or not result.met_tol:
            break
    else:
        warnings.warn(
            f"the plan misses tol={tol:g} on a validation input (error {held_out:.2e}) even "
            f"tuned within {margin:g} tol; its held_out_error says so",
            TolUnreachableWarning,
            stacklevel=3,
        )
    result.runs = runs
    base = predicted_time(result.flops, {})
    mine = predicted_time(result.flops, result.levels)
    measured = None
    if measure if measure is not None else device.gpu_available():
        sync = synchronizer_for(args)  # CuPy calls return before the GPU is done
        fp32 = jitted.with_plan(dict.fromkeys(result.levels, BASELINE_LEVEL))
        tuned = jitted.with_plan(result.levels)
        scratch = copies(args)  # timed calls may write into their arguments
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
        )
        for op, level in result.levels.items()
    ]
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
        margin=margin,
        held_out_error=held_out,
    )


def relative_path(file: str) -> str:
    """``file`` relative to the working directory when it lies below it, else its name."""
    path = Path(file)
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name


def checked_tol(tol: Any) -> float:
    """``tol`` as a float, or TypeError/ValueError saying why it cannot be one."""
    if isinstance(tol, (bool, np.bool_)) or not isinstance(
        tol, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"tol={tol!r} is a {type(tol).__name__}; tol must be a positive number")
    value = float(tol)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"tol={tol!r}: tol must be a positive finite number")
    return value

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
first, and lower each one rung at a time while the plan passes the acceptance rule below. When
a lowering breaks it, try raising the op's immediate predecessor in the GEMM graph one rung
instead, keeping the pair only if the rule passes and the total time still drops. Sweep again
until no move helps. Ops that never reached the runtime on the tuning inputs (matrix-vector
products, code not taken) cost no runs and are planned at native float32. Runs are cached per
plan and capped at ops x levels. Profiling runs work on copies of the arguments; the final
contents of arrays the function writes into count as outputs.

**The acceptance rule** (``Rule``; what ``tol`` promises). A plan is accepted when

1. the function's Eq. 10 error on the tuning input is within ``margin_for(spread) * tol``:
   ``spread`` is the bootstrap spread of that error over blocks of the outputs
   (``error_model.error_spread``), so the error of another input of the same size stays within
   tol by ``error_model.Z`` spreads; outputs too small to cut get the smallest margin;
2. every op whose result reaches a discrete step (argmin/argmax/argsort, comparisons, ``where``'s
   condition, casts to integers: ``passes.dataflow``), or feeds an op that does, is float32
   grade: both its own error on the tuning input and the model's error for its level on generic
   data of its size and magnitudes (``error_model.model_error``) are at most the model's error
   of a float32 GEMM summing in k order on it (``error_model.FLOAT32_GRADE``), and at most tol.
   Its decisions then flip about as often as native float32's: for such functions tol bounds
   the continuous outputs measured on the tuning inputs, and the discrete ones are as stable
   as native float32's;
3. every other op whose own error on the tuning input lies far below the model's figure (below
   1/``UNREPRESENTATIVE`` of it: exact, integer, constant or tiny data) has the model's figure
   within tol: a level is never chosen because one input was exact in it.

Then the plan is run on held-out inputs: the ``validation`` inputs given, made up to
``RESAMPLED_INPUTS`` by resamples of the tuning input's rows (``tuning_inputs.resampled``). It
must be within tol on each, and the errors' mean over all inputs, plus ``Z_HELD_OUT`` times
their spread, within tol too; else the share is tightened and the search repeated (its runs are
cached). The plan's ``margin`` is the share its measured error was held to.

Degenerate tuning inputs (``tuning_inputs``) are said in the plan
(``provisional``); a ``tol=`` function then tunes again on its next call with real data.

**Device-aware cost.** ``target`` "cuda" minimises the GPU's time by the cost model above; on
"cpu" (the default where no GPU is usable) emulation is the exact oracle, never a speed-up, so
the candidates are native float32 and float64 (both BLAS at native speed): a tuned function runs
native float32 wherever that meets tol, and says so once.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

import networkx as nx
import numpy as np

from . import tuning_inputs
from .error_model import (
    CV_FLOOR,
    FLOAT32_GRADE,
    error_spread,
    margin_for,
    model_error,
    own_error,
)
from .execution import record_calls
from .execution.product_samples import ProductSample
from .metrics import output_error
from .plans.plan import OpReport, Plan, function_identity, op_sources, op_table_hash, signature_of
from .runtime import device
from .runtime.levels import AUTO, LADDER, NATIVE_LEVEL, Level, get_level
from .timing import best_time, synchronizer_for
from .tuning.copies import copies, float64_copies, float_array_leaves, parameter_names

INT8_RATE = 1.4e15  # ops/s of one INT8 GEMM on the H100 (see module docstring)
DEFAULT_TOL = 1e-6  # ``mixpert.tune`` without tol: about cuBLAS SGEMM's own error at n = 4096
VALIDATION_RETRIES = 3  # tightenings when held-out inputs miss tol
# With fewer validation inputs than this, resamples of the tuning input's rows make up the
# number (``tuning_inputs.resampled``): the plan holds within tol on them too.
RESAMPLED_INPUTS = 6
# Resamples share the tuning input's rows, so their errors spread less than fresh inputs' do
# (the RBF predictor of benchmarks/tuner_holdout.py: fresh inputs reach 3.3x the resamples' mean
# error, whose spread is 0.19 of it): the plan keeps this many of their spreads as room.
Z_HELD_OUT = 8.0
HELD_OUT_MIN_SECONDS = 5.0  # held-out runs may cost what the walk did, or this, if more
RESAMPLE_SEED = 0x7E57
BASELINE_LEVEL = NATIVE_LEVEL  # speedups are over every op at native float32
MEASURED_FALLBACK = AUTO.name  # on a GPU, where an op's tuned level measures slower
# An op whose result reaches a discrete step may err at most what a float32 GEMM summing in k
# order errs on it (``error_model.FLOAT32_GRADE``: what SGEMM's bound 2 k u |A||B| is written
# for), so its decisions flip about as often as native float32's do.
# An op whose own error on the tuning data is below 1/UNREPRESENTATIVE of the model's figure for
# generic data (exact, integer, constant, tiny data) is judged by the model, not the data.
UNREPRESENTATIVE = 4.0
# Where a target has no GPU, emulation is the exact oracle, not a speed-up: native float32 where
# it meets tol, else float64 BLAS, both at native speed.
CPU_CANDIDATES = (NATIVE_LEVEL, "fp64")
Target = Literal["auto", "cpu", "cuda"]
TARGET_ENV = "MIXPERT_TUNE_TARGET"
log = logging.getLogger("mixpert")


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


class NativeOnCpuWarning(UserWarning):
    """No usable GPU: tuned functions run native float32 (or float64) where that meets tol."""


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


def candidates_for(target: str) -> tuple[str, ...]:
    """The levels the walk weighs by default for a resolved target ("cuda" or "cpu")."""
    return DEFAULT_CANDIDATES if target == "cuda" else CPU_CANDIDATES


def walk_budget(ops: int, candidates: Sequence[str]) -> int:
    """Profiling runs one walk over ``ops`` ops may take: ops x rungs."""
    return max(1, ops * len(_ordered(candidates)))


def resolve_target(target: str | None) -> str:
    """ "cpu" or "cuda": the device whose time the plan minimises. "auto" (or None, unless
    ``$MIXPERT_TUNE_TARGET`` names one) is the GPU when one is usable here, else the CPU."""
    target = target or os.environ.get(TARGET_ENV) or "auto"
    if target not in get_args(Target):
        raise ValueError(f"target={target!r}: it must be 'auto', 'cpu' or 'cuda'")
    if target == "auto":
        return "cuda" if device.gpu_available() else "cpu"
    return target


_told_native_on_cpu = False


def _say_native_on_cpu(name: str) -> None:
    """Once per process: what a tol= plan means on a machine without a GPU."""
    global _told_native_on_cpu
    if _told_native_on_cpu:
        return
    _told_native_on_cpu = True
    warnings.warn(
        f"mixpert: no usable GPU ({device.unavailable_reason()}): {name} and other tuned "
        "functions run native float32 where it meets tol (float64 where it does not); "
        "pass target='cuda' (mixpert tune --target cuda) to make the GPU's plan here",
        NativeOnCpuWarning,
        stacklevel=4,
    )


# --- profiling -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trial:
    """One profiling run under a plan: the function's error, its spread between inputs
    (``error_model.error_spread``) and each op's own error."""

    error: float
    spread: float
    own: Mapping[str, float]


@dataclass
class Profiler:
    """Runs the function under candidate plans; caches trials and model errors; counts runs."""

    func: Tunable
    args: tuple[Any, ...]
    budget: int | None = None
    on_run: Callable[[], None] | None = None
    reference: Any = None
    runs: int = 0
    trials: dict[tuple[tuple[str, str], ...], Trial] = field(default_factory=dict)
    flops: dict[str, float] = field(default_factory=dict)  # op id -> sum of 2*m*k*n
    samples: dict[str, list[ProductSample]] = field(default_factory=dict)  # from the first run
    models: dict[tuple[str, str], float] = field(default_factory=dict)

    # the float arrays the function writes into (``float_array_leaves`` of the arguments,
    # nested ones included): their final contents are outputs too
    written: tuple[int, ...] = ()
    names: tuple[str, ...] = field(default=(), init=False)  # the parameters', for refusals

    def __post_init__(self) -> None:
        self.names = parameter_names(self.func.py_func)
        if self.reference is not None:  # given: a held-out input's, kept from an earlier run
            return
        reference_args = float64_copies(self.args, self.names)
        result = self.func.py_func(*reference_args)
        given, ran = float_array_leaves(self.args), float_array_leaves(reference_args)
        self.written = tuple(
            i for i, (g, r) in enumerate(zip(given, ran, strict=True)) if not _same_values(g, r)
        )
        self.reference = (result, *(ran[i] for i in self.written))

    def copied_args(self) -> tuple[Any, ...]:
        """Deep copies of the arguments for one run: the caller's objects are never run on."""
        return copies(self.args, self.names)

    def trial(self, levels: Mapping[str, str]) -> Trial:
        key = tuple(sorted(levels.items()))
        if key in self.trials:
            return self.trials[key]
        if self.budget is not None and self.runs >= self.budget:
            raise BudgetExhausted
        args = self.copied_args()
        with record_calls(samples=True) as calls:
            result = self.func.with_plan(dict(levels))(*args)
        leaves = float_array_leaves(args)
        outputs = (result, *(leaves[i] for i in self.written))
        self.runs += 1
        if not self.flops:  # shapes do not depend on levels: learn them from the first run
            for call in calls:
                self.flops[call.op_id] = (
                    self.flops.get(call.op_id, 0.0) + 2.0 * call.m * call.k * call.n
                )
                if call.sample is not None:
                    self.samples.setdefault(call.op_id, []).append(call.sample)
        if self.on_run is not None:
            self.on_run()
        own: dict[str, list[ProductSample]] = {}
        for call in calls:
            if call.sample is not None:
                own.setdefault(call.op_id, []).append(call.sample)
        self.trials[key] = Trial(
            output_error(outputs, self.reference),
            error_spread(outputs, self.reference),
            {op: own_error(samples) for op, samples in own.items()},
        )
        return self.trials[key]

    def error(self, levels: Mapping[str, str]) -> float:
        """The function's Eq. 10 error under ``levels`` (one profiling run, cached)."""
        return self.trial(levels).error

    def model(self, op: str, level: str) -> float:
        """``error_model.model_error`` of ``level`` on op ``op``'s sampled products (cached)."""
        key = (op, level)
        if key not in self.models:
            self.models[key] = model_error(self.samples.get(op, []), level)
        return self.models[key]

    def op_seconds(self, levels: Mapping[str, str]) -> dict[str, float]:
        """Measured seconds of each op under ``levels`` (the second of two runs: the first
        compiles kernels and fills caches); two profiling runs."""
        for _ in range(2):
            with record_calls() as calls:
                self.func.with_plan(dict(levels))(*self.copied_args())
            self.runs += 1
        seconds: dict[str, float] = {}
        for call in calls:
            seconds[call.op_id] = seconds.get(call.op_id, 0.0) + call.seconds
        return seconds


def _same_values(given: Any, ran: Any) -> bool:
    """Whether a float64 copy still holds the values of the argument it was made from."""
    xp = device.array_module(given)
    return bool(xp.array_equal(given.astype(xp.float64), ran, equal_nan=True))


class BudgetExhausted(Exception):
    """The profiling budget (ops x levels) is spent; the tuner keeps its best plan so far."""


def predicted_time(flops: Mapping[str, float], levels: Mapping[str, str]) -> float:
    """Seconds under the cost model (ops missing from ``levels`` count at native float32)."""
    return sum(
        get_level(levels.get(op, BASELINE_LEVEL)).relative_cost * f / INT8_RATE
        for op, f in flops.items()
    )


# --- the acceptance rule ----------------------------------------------------------------------
@dataclass
class Rule:
    """When a plan is within tol beyond the inputs seen (the module docstring's rule).

    ``margin``: a fixed share of tol for the function's measured error; None computes it from
    the error's spread (``error_model.margin_for``), times ``scale`` (tightened when validation
    inputs miss). ``decisions``: ops whose results reach a discrete step.
    """

    prof: Profiler
    tol: float
    decisions: frozenset[str] = frozenset()
    margin: float | None = None
    scale: float = 1.0
    input_spread: float = 0.0  # the error's spread over held-out inputs, once measured

    def share(self, trial: Trial) -> float:
        """The share of tol the function's measured error may use under ``trial``."""
        spread = max(trial.spread, self.input_spread)
        base = margin_for(spread) if self.margin is None else self.margin
        return base * self.scale

    def budget(self, op: str) -> float:
        """Float32 grade for an op that reaches a decision (at most tol); else tol."""
        if op not in self.decisions:
            return self.tol
        return min(self.tol, self.prof.model(op, FLOAT32_GRADE))

    def op_fits(self, trial: Trial, op: str, level: str) -> bool:
        """Whether ``level`` keeps op ``op`` within its budget beyond the inputs seen."""
        model, own = self.prof.model(op, level), trial.own.get(op, 0.0)
        if op in self.decisions:  # a decision can hide any error: the op answers for itself
            return max(own, model) <= self.budget(op)
        if own * UNREPRESENTATIVE < model:  # the tuning data flattered the level: model it
            return model <= self.budget(op)
        return True  # representative data: the function's measured error decides

    def accepts(self, trial: Trial, levels: Mapping[str, str]) -> bool:
        if not trial.error <= self.share(trial) * self.tol:
            return False
        return all(
            self.op_fits(trial, op, level)
            for op, level in levels.items()
            if op in self.prof.samples
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
    margin: float = 1.0  # the share of tol the final plan's measured error was held to
    exact_ops: dict[str, str] = field(default_factory=dict)  # op -> level it was exact at


def _ordered(candidates: Sequence[str]) -> list[str]:
    """Candidates by cost, cheapest first, cut above the most accurate one (dearer is useless)."""
    levels = [get_level(c) for c in dict.fromkeys(candidates)]
    top = min(levels, key=lambda lv: (lv.expected_error, lv.relative_cost))
    return [
        lv.name
        for lv in sorted(levels, key=lambda lv: lv.relative_cost)
        if lv.relative_cost <= top.relative_cost
    ]


def decision_ops(func: Tunable) -> frozenset[str]:
    """Ops whose results reach a discrete step (argmin, comparisons, integer casts, ...)."""
    found = getattr(func, "decision_ops", None)
    return frozenset(found) if found is not None else frozenset()


def greedy(
    func: Tunable,
    args: Sequence[Any],
    tol: float,
    candidates: Sequence[str] = DEFAULT_CANDIDATES,
    on_run: Callable[[], None] | None = None,
    margin: float | None = None,
    scale: float = 1.0,
    prof: Profiler | None = None,
    input_spread: float = 0.0,
) -> Result:
    """MixPert 3.4's greedy search (see the module docstring); a move is kept while the plan
    passes the acceptance ``Rule``. ``prof``: a profiler of ``args`` whose cached runs a
    repeated search reuses."""
    rungs = _ordered(candidates)
    ops = list(func.ops)
    if prof is None:
        prof = Profiler(func, tuple(args), on_run=on_run)
    prof.budget = prof.runs + walk_budget(len(ops), rungs)
    rule = Rule(prof, tol, decision_ops(func), margin, scale, input_spread)
    rung = dict.fromkeys(ops, len(rungs) - 1)

    def levels_of(r: Mapping[str, int]) -> dict[str, str]:
        return {op: rungs[i] for op, i in r.items()}

    current = prof.trial(levels_of(rung))
    contribution = dict.fromkeys(ops, 0.0)
    if not rule.accepts(current, levels_of(rung)):
        warnings.warn(
            f"tol={tol:g} is tighter than the most accurate candidate ({rungs[-1]}) reaches "
            f"(error {current.error:.2e}); using {rungs[-1]} for every op",
            TolUnreachableWarning,
            stacklevel=3,
        )
        return Result(levels_of(rung), current.error, False, prof.runs, prof.flops, contribution)

    graph = func.graph
    # by share of time at the start (all at one level, so by flops); ops that never reached the
    # runtime (matrix-vector sites, branches not taken) have no time to save: they stay native
    tunable = [op for op in ops if prof.flops.get(op, 0.0) > 0]
    order = sorted(tunable, key=lambda op: -prof.flops[op])
    prof.budget = prof.runs + walk_budget(len(order), rungs)

    def cost(r: Mapping[str, int]) -> float:
        return predicted_time(prof.flops, levels_of(r))

    try:
        improved = True
        while improved:
            improved = False
            for op in order:
                while rung[op] > 0:
                    trial_rungs = {**rung, op: rung[op] - 1}
                    if not _model_allows(rule, op, rungs[trial_rungs[op]]):
                        break  # generic data of this op would break its budget: no run needed
                    trial = prof.trial(levels_of(trial_rungs))
                    if rule.accepts(trial, levels_of(trial_rungs)):
                        contribution[op] += _added(trial.error, current.error)
                        rung, current, improved = trial_rungs, trial, True
                        continue
                    moved = False
                    preds = sorted(
                        (p for p in graph.predecessors(op) if p in rung),
                        key=lambda p: prof.flops.get(p, 0.0),
                    )
                    for pred in preds:  # cheaper predecessors first
                        if rung[pred] >= len(rungs) - 1:
                            continue
                        pair = {**trial_rungs, pred: rung[pred] + 1}
                        if cost(pair) >= cost(rung):
                            continue
                        trial = prof.trial(levels_of(pair))
                        if rule.accepts(trial, levels_of(pair)):
                            contribution[op] += _added(trial.error, current.error)
                            rung, current, improved, moved = pair, trial, True, True
                            break
                    if not moved:
                        break
    except BudgetExhausted:
        pass
    levels, current = _auto_where_faster(prof, rule, levels_of(rung), current)
    idle = dict.fromkeys(set(ops) - set(tunable), BASELINE_LEVEL)  # native, as they ran
    exact = {
        op: level
        for op, level in levels.items()
        if op in current.own and current.own[op] == 0.0 and prof.model(op, level) > 0.0
    }
    return Result(
        {**levels, **idle}, current.error, True, prof.runs, prof.flops, contribution,
        rule.share(current), exact,
    )  # fmt: skip


def _added(error: float, before: float) -> float:
    """The error a move added (0 where both are infinite: a plan file holds no NaN)."""
    added = error - before
    return added if math.isfinite(added) else 0.0


def _model_allows(rule: Rule, op: str, level: str) -> bool:
    """Whether the model alone leaves ``level`` possible for ``op`` (saves a profiling run):
    an op feeding a decision is held to its budget whatever the data."""
    return op not in rule.decisions or rule.prof.model(op, level) <= rule.budget(op)


def _auto_where_faster(
    prof: Profiler, rule: Rule, levels: dict[str, str], current: Trial
) -> tuple[dict[str, str], Trial]:
    """On a GPU, the measured check of the cost model: an op whose tuned level ran slower than
    "auto" on the tuning inputs (small, skinny or batched shapes, where packing costs more
    than the INT8 tensor cores save) goes to "auto" where the rule allows. The model alone
    cannot see this: its costs do not depend on shape. On the CPU emulation is the oracle and
    is never faster, so the model's plan stands."""
    if not any(device.is_cupy_array(a) for a in prof.args) or not levels:
        return levels, current
    prof.budget = None  # the walk's cap; this check costs at most 4 + len(levels) runs
    fallback = dict.fromkeys(levels, MEASURED_FALLBACK)
    tuned_s, fallback_s = prof.op_seconds(levels), prof.op_seconds(fallback)
    slower = [op for op in levels if tuned_s.get(op, 0.0) > fallback_s.get(op, float("inf"))]
    for op in sorted(slower, key=lambda op: fallback_s[op] - tuned_s[op]):  # largest loss first
        trial_levels = {**levels, op: MEASURED_FALLBACK}
        trial = prof.trial(trial_levels)
        if rule.accepts(trial, trial_levels):
            levels, current = trial_levels, trial
    return levels, current


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
    tol: float | None = None,
    *,
    candidates: Sequence[str] | None = None,
    on_run: Callable[[], None] | None = None,
    measure: bool | None = None,
    margin: float | None = None,
    validation: Sequence[Sequence[Any]] = (),
    target: Target | None = None,
    tuned_on: str = "",
) -> Plan:
    """Tune a ``mixpert.jit`` function on representative ``args``; return a Plan
    (``mixpert.tune`` also takes plain functions).

    ``tol``: the bound on the output error against float64 (None: ``DEFAULT_TOL``, said once in
    the log). ``target``: the device whose time the plan minimises ("auto": the GPU when one is
    usable here, else the CPU, where plans run native float32 or float64 BLAS; "cuda" makes the
    GPU's plan anywhere, its errors measured on the exact CPU backend where there is no GPU).
    ``candidates``: the levels to walk (default: the target's). ``margin``: a fixed share of tol
    for the measured error in place of the computed one (``error_model.margin_for``).
    ``validation``: further inputs the plan must also keep within tol; when one misses, the
    share is tightened and the search repeated (``VALIDATION_RETRIES`` times at most); the
    worst of their errors is the plan's ``held_out_error``. ``tuned_on``: the inputs in words,
    for the plan's record. ``measure``: time the plan against all-fp32 (default: only on a GPU).
    """
    if tol is None:
        log.warning("mixpert.tune: no tol given; using tol=%g", DEFAULT_TOL)
        tol = DEFAULT_TOL
    tol = checked_tol(tol)
    where = resolve_target(target)
    if candidates is None:
        candidates = candidates_for(where)
        if where == "cpu" and target in (None, "auto"):
            _say_native_on_cpu(function_identity(jitted))
    policies = [c for c in candidates if get_level(c).kind == "policy"]
    if policies:
        raise ValueError(f"candidates {policies}: a policy is not a level the tuner can weigh")
    if margin is not None and not 0 < margin <= 1:
        raise ValueError(f"margin={margin!r}: it must lie in (0, 1]")
    args = tuple(args)
    prof = Profiler(jitted, args, on_run=on_run)
    # a fixed margin is MixPert's own walk: held out only on the inputs given
    resamples = max(0, RESAMPLED_INPUTS - len(validation)) if margin is None else 0
    held_out_inputs = [
        *(HeldOut(jitted, lambda v=v: tuple(v)) for v in validation),
        *(HeldOut(jitted, _resample(args, i), resample=True) for i in range(resamples)),
    ]
    scale, spread, held_out = 1.0, 0.0, None
    for _ in range(VALIDATION_RETRIES + 1):
        start = time.perf_counter()
        result = greedy(jitted, args, tol, candidates, on_run, margin, scale, prof, spread)
        if not result.met_tol:
            break
        walk = time.perf_counter() - start
        errors = _errors(held_out_inputs, result.levels, max(HELD_OUT_MIN_SECONDS, walk))
        held_out = max(errors, default=None)
        if held_out is None:
            break
        measured = [result.error, *errors]
        mean = float(np.mean(measured))
        spread = float(np.std(measured) / mean) if mean > 0 else 0.0
        reach = mean * (1 + Z_HELD_OUT * max(spread, CV_FLOOR))  # where fresh inputs may go
        if held_out <= tol and (margin is not None or reach <= tol):
            break
        scale *= min(0.9, 0.9 * tol / max(held_out, reach))  # the next walk leaves the room
    else:
        warnings.warn(
            f"after {VALIDATION_RETRIES} tightenings the plan's errors on held-out inputs "
            f"(worst {held_out:.2e}) still leave too little room below tol={tol:g}; its "
            "held_out_error says so",
            TolUnreachableWarning,
            stacklevel=3,
        )
    runs = prof.runs + sum(h.runs for h in held_out_inputs)
    used = sum(1 for h in held_out_inputs if h.resample and h.errors)
    if used and not tuned_on:
        tuned_on = f"{tuning_inputs.describe(args)}, held within tol on {used} resamples"
    result.runs = runs
    return _plan_of(jitted, args, tol, result, held_out, measure, where, tuned_on)


def _resample(args: tuple[Any, ...], index: int) -> Callable[[], tuple[Any, ...]]:
    """The ``index``-th resample of ``args`` (``tuning_inputs.resampled``), made on demand."""
    return lambda: tuning_inputs.resampled(args, np.random.default_rng((RESAMPLE_SEED, index)))


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


def _errors(held_out: Sequence[HeldOut], levels: Mapping[str, str], seconds: float) -> list[float]:
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


def _plan_of(
    jitted: Tunable,
    args: tuple[Any, ...],
    tol: float,
    result: Result,
    held_out: float | None,
    measure: bool | None,
    target: str,
    tuned_on: str,
) -> Plan:
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
        )
        for op, level in result.levels.items()
    ]
    degenerate = tuning_inputs.degenerate_reason(args)
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
        tuned_on=tuned_on or tuning_inputs.describe(args),
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

"""The greedy search of MixPert section 3.4: one plan per walk over the ops' levels.

Start with every op at the most accurate candidate level (if that misses ``tol``, return it with
``met_tol=False`` and a warning: a tol tighter than float32 can reach selects the accurate
levels rather than failing silently). Visit ops by their share of the time, largest first, and
lower each one rung at a time while the plan passes the acceptance ``Rule``. When a lowering
breaks it, try raising the op's immediate predecessor in the GEMM graph one rung instead,
keeping the pair only if the rule passes and the total time (``targets.predicted_time``) still
drops. Sweep again until no move helps. Ops that never reached the runtime on the tuning inputs
(matrix-vector products, code not taken) cost no runs and are planned at native float32. Runs
are cached per plan and capped at ops x levels.

On a GPU the walk's plan is then checked against measured times: an op that ran slower at its
tuned level than at "auto" (small, skinny and batched shapes, where the model's shape-free costs
are wrong) goes to "auto" where the error allows, and so does a whole plan whose call measures
slower than every op at "auto" (``_auto_where_faster``; slower by a margin that timing noise
does not reach): the runtime's own
float32-grade choice for the op's shape, which knows the paths the model does not (cuBLAS,
fp32-ordered's small-stack, pairs, tall, thin and split-k kernels, level IV).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..runtime import device
from ..runtime.levels import AUTO, get_level
from .acceptance import Rule, decision_ops
from .profiling import BudgetExhausted, Profiler, Trial, Tunable
from .targets import BASELINE_LEVEL, DEFAULT_CANDIDATES, predicted_time

MEASURED_FALLBACK = AUTO.name  # on a GPU, where an op's tuned level measures slower
# ... by at least this factor: the check is for shapes where the cost model is far off
# (packing costing far more than the INT8 tensor cores save), and two levels a few
# percent apart swap places between runs of the tuner on timing noise (an MLP's T6 and "auto"
# did). The margin "auto"'s calibration asks of level IV (``runtime.calibration.MARGIN``).
MEASURED_MARGIN = 1.10


class TolUnreachableWarning(UserWarning):
    """Even the most accurate candidate levels miss tol; the plan uses them anyway."""


def walk_budget(ops: int, candidates: Sequence[str]) -> int:
    """Profiling runs one walk over ``ops`` ops may take: ops x rungs."""
    return max(1, ops * len(_ordered(candidates)))


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
    # op -> why it stays above the cheapest candidate: the rule that refused the next cheaper one
    forced: dict[str, str] = field(default_factory=dict)


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
                    if not rule.model_allows(op, rungs[trial_rungs[op]]):
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
    walked = levels_of(rung)
    forced = _refused_below(rule, walked, rungs, order)
    levels, current = _auto_where_faster(prof, rule, walked, current)
    forced = {op: why for op, why in forced.items() if levels[op] == walked[op]}
    idle = dict.fromkeys(set(ops) - set(tunable), BASELINE_LEVEL)  # native, as they ran
    exact = {
        op: level
        for op, level in levels.items()
        if op in current.own and current.own[op] == 0.0 and prof.model(op, level) > 0.0
    }
    return Result(
        {**levels, **idle}, current.error, True, prof.runs, prof.flops, contribution,
        rule.share(current), exact, forced,
    )  # fmt: skip


def _refused_below(
    rule: Rule, levels: Mapping[str, str], rungs: Sequence[str], ops: Sequence[str]
) -> dict[str, str]:
    """Why each of ``ops`` stays above the cheapest rung: the rule that refused its next
    cheaper rung, the other ops as planned. The walk's last sweep tried each such move on this
    very plan, so its figures are cached; none is run here (a move the budget left untried
    gets no reason)."""
    found = {}
    for op in ops:
        index = rungs.index(levels[op])
        if index == 0:
            continue
        lower = {**levels, op: rungs[index - 1]}
        if not rule.model_allows(op, lower[op]):
            why = rule.op_refusal(None, op, lower[op])
        else:
            trial = rule.prof.cached(lower)
            why = "" if trial is None else rule.refusal(trial, lower)
        if why:
            found[op] = f"{lower[op]} refused by {why}"
    return found


def _added(error: float, before: float) -> float:
    """The error a move added (0 where both are infinite: a plan file holds no NaN)."""
    added = error - before
    return added if math.isfinite(added) else 0.0


def _auto_where_faster(
    prof: Profiler, rule: Rule, levels: dict[str, str], current: Trial
) -> tuple[dict[str, str], Trial]:
    """On a GPU, the measured check of the cost model: an op whose tuned level ran slower than
    "auto" on the tuning inputs (small, skinny or batched shapes, where packing costs more
    than the INT8 tensor cores save) goes to "auto" where the rule allows; then a plan whose
    whole call ran slower than every op at "auto" becomes that (slower: by MEASURED_MARGIN).
    The model alone cannot see this: its costs do not depend on shape. On the CPU emulation is
    the oracle and is never faster, so the model's plan stands."""
    if not any(device.is_cupy_array(a) for a in prof.args) or not levels:
        return levels, current
    prof.budget = None  # the walk's cap; this check costs at most 13 + len(levels) runs
    fallback = dict.fromkeys(levels, MEASURED_FALLBACK)
    tuned_s, fallback_s = prof.op_seconds(levels), prof.op_seconds(fallback)
    slower = [
        op
        for op in levels
        if tuned_s.get(op, 0.0) > MEASURED_MARGIN * fallback_s.get(op, float("inf"))
    ]
    for op in sorted(slower, key=lambda op: fallback_s[op] - tuned_s[op]):  # largest loss first
        trial_levels = {**levels, op: MEASURED_FALLBACK}
        trial = prof.trial(trial_levels)
        if rule.accepts(trial, trial_levels):
            levels, current = trial_levels, trial
    # the whole call too: per-op times miss what the levels cost around the products (copies,
    # conversions, launches), so a plan slower than every op at "auto" becomes that
    if levels != fallback and (
        prof.call_seconds(levels) > MEASURED_MARGIN * prof.call_seconds(fallback)
    ):
        trial = prof.trial(fallback)
        if rule.accepts(trial, fallback):
            levels, current = fallback, trial
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

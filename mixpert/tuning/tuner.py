"""The tuner behind ``mixpert.tune``: MixPert section 3.4's greedy per-op level search, held to
``tol`` on inputs it never saw.

Its rooms (this package): ``profiling`` runs the function under candidate plans on ``copies`` of
its arguments; ``error_model`` says what each op's own error and each level's generic error are;
``acceptance`` is the rule a plan must pass (what ``tol`` promises); ``search`` walks the levels
(``targets``: the candidates and cost model of the device the plan is for); ``held_out`` runs
the plan on further inputs (``inputs``: resamples of the tuning input, and whether it can be
trusted); ``tuned_plan`` makes the ``Plan``; ``progress`` shows a first call's tuning.

``tune`` walks, then holds the walk's plan on the held-out inputs: within tol on each, and the
errors' mean over all inputs, plus ``Z_HELD_OUT`` times their spread, within tol too; else the
share of tol is tightened and the walk repeated (its runs are cached). The plan's ``margin`` is
the share its measured error was held to. Degenerate tuning inputs (``inputs``) are said in the
plan (``provisional``); a ``tol=`` function then tunes again on its next call with real data.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..plans.plan import Plan, function_identity
from ..runtime.levels import get_level
from . import inputs
from .error_model import CV_FLOOR
from .held_out import HELD_OUT_MIN_SECONDS, RESAMPLED_INPUTS, HeldOut, errors_on, resample
from .profiling import Profiler, Tunable
from .search import TolUnreachableWarning, greedy
from .targets import Target, candidates_for, resolve_target, say_native_on_cpu
from .tuned_plan import plan_of

DEFAULT_TOL = 1e-6  # ``mixpert.tune`` without tol: about cuBLAS SGEMM's own error at n = 4096
VALIDATION_RETRIES = 3  # tightenings when held-out inputs miss tol
# Resamples share the tuning input's rows, so their errors spread less than fresh inputs' do
# (the RBF predictor of benchmarks/tuner_holdout.py: fresh inputs reach 3.3x the resamples' mean
# error, whose spread is 0.19 of it): the plan keeps this many of their spreads as room.
Z_HELD_OUT = 8.0
log = logging.getLogger("mixpert")


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
            say_native_on_cpu(function_identity(jitted))
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
        *(HeldOut(jitted, resample(args, i), resample=True) for i in range(resamples)),
    ]
    scale, spread, held_out = 1.0, 0.0, None
    for _ in range(VALIDATION_RETRIES + 1):
        start = time.perf_counter()
        result = greedy(jitted, args, tol, candidates, on_run, margin, scale, prof, spread)
        if not result.met_tol:
            break
        walk = time.perf_counter() - start
        errors = errors_on(held_out_inputs, result.levels, max(HELD_OUT_MIN_SECONDS, walk))
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
        tuned_on = f"{inputs.describe(args)}, held within tol on {used} resamples"
    result.runs = runs
    return plan_of(jitted, args, tol, result, held_out, measure, where, tuned_on, prof)


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

"""The greedy tuner against exhaustive search on an MLP (3 ops) and a blocked Cholesky (4 ops).

Exhaustive search runs over the restricted level set CANDIDATES (5^4 = 625 plans at most), tried
in order of predicted time so it stops at the optimum. CPU sizes are small (64, 96) for speed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from tuner_functions import cholesky3, mlp, mlp_inputs, spd_inputs

import mixpert
from mixpert.metrics import output_error
from mixpert.tuning import tuner
from mixpert.tuning.held_out import RESAMPLED_INPUTS
from mixpert.tuning.profiling import Profiler
from mixpert.tuning.search import TolUnreachableWarning, exhaustive
from mixpert.tuning.targets import pareto_levels, predicted_time

CANDIDATES = ("I", "T6", "IV", "V", "fp32")
CASES = {"mlp": (mlp, mlp_inputs), "cholesky": (cholesky3, spd_inputs)}

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Numba's non-contiguous '@' performance note
    JITTED = {name: mixpert.jit(fn) for name, (fn, _) in CASES.items()}


def speedup(func: mixpert.jit, args: tuple, levels: dict[str, str]) -> float:
    prof = Profiler(func, args)
    prof.error(levels)
    return predicted_time(prof.flops, {}) / predicted_time(prof.flops, levels)


@pytest.mark.filterwarnings("ignore::numba.NumbaPerformanceWarning")
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("tol", [1e-4, 1e-5, 1e-6])
def test_greedy_matches_exhaustive_and_holds_on_held_out(name: str, tol: float) -> None:
    func, make = JITTED[name], CASES[name][1]
    args = make(np.random.default_rng(0))
    plan = mixpert.tune(func, args, tol=tol, candidates=CANDIDATES, margin=1.0)  # MixPert's walk
    n_ops = len(func.ops)
    assert n_ops in (3, 4) and set(plan.levels) == set(func.ops)
    assert plan.met_tol and plan.error <= tol
    assert 1 <= plan.profiling_runs <= n_ops * len(CANDIDATES)
    best, best_error, _ = exhaustive(func, args, tol, CANDIDATES)
    assert best_error <= tol
    assert plan.predicted_speedup >= 0.9 * speedup(func, args, best)
    assert plan.predicted_speedup == pytest.approx(speedup(func, args, plan.levels))
    for seed in (11, 12):  # fresh inputs of the same distribution
        held = make(np.random.default_rng(seed))
        assert Profiler(func, held).error(plan.levels) <= tol


@pytest.mark.filterwarnings("ignore::numba.NumbaPerformanceWarning")
def test_unreachable_tol_selects_the_most_accurate_levels_and_warns() -> None:
    func = JITTED["mlp"]
    with pytest.warns(TolUnreachableWarning, match="tighter"):
        plan = mixpert.tune(func, mlp_inputs(np.random.default_rng(0)), tol=1e-12)
    assert not plan.met_tol
    assert set(plan.levels.values()) == {"fp64"}
    assert plan.profiling_runs == 1


def test_loose_tol_lowers_every_op_to_the_cheapest_level() -> None:
    plan = mixpert.tune(
        JITTED["mlp"], mlp_inputs(np.random.default_rng(0)), tol=1e-2, target="cuda"
    )
    assert set(plan.levels.values()) == {"tf32"}
    assert plan.predicted_speedup == pytest.approx(27.0 / 4.1)
    assert sum(op.share for op in plan.ops) == pytest.approx(1.0)


def test_default_candidates_are_the_pareto_front() -> None:
    assert pareto_levels() == ("tf32", "I", "T6", "IV", "V", "fp64")


def test_output_error_is_eq10_over_all_float_outputs() -> None:
    ref = (np.ones((2, 2)), np.full(3, 2.0), 7)
    got = (np.ones((2, 2), np.float32) * 1.5, np.full(3, 2.0, np.float32), 7)
    want = np.sqrt(4 * 0.25 / (4 * 1.0 + 3 * 4.0))
    assert output_error(got, ref) == pytest.approx(want)
    assert output_error((np.array([np.nan]),), (np.array([1.0]),)) == float("inf")


def product_then_matvec(a, b, v):
    return (a @ b) @ v  # the second product is matrix-vector: it never reaches the runtime


def test_ops_that_never_reach_the_runtime_cost_no_runs() -> None:
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((48, 48)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal(48).astype(np.float32)
    func = mixpert.jit(product_then_matvec)
    plan = mixpert.tune(func, (a, b, v), tol=1e-3, candidates=CANDIDATES)
    assert len(plan.levels) == 2
    levels = sorted(plan.levels.values())
    assert levels == sorted(["I", "fp32"])  # the GEMM lowered; the matvec stays native
    held_out = RESAMPLED_INPUTS * (tuner.VALIDATION_RETRIES + 1)  # runs on resamples
    assert plan.profiling_runs <= len(CANDIDATES) + held_out  # walk runs for one op only


@pytest.mark.gpu
def test_gpu_tuner_moves_an_op_slower_than_auto_to_auto() -> None:
    """A stack of 16 x 16 pairs: the walk's emulated level (packing dominates) measures far
    slower than "auto" (fp32-ordered's small-stack kernel), so the plan says "auto"."""
    from mixpert.runtime import device

    cp = device.cupy_module()

    def scores(q, k):
        return q @ k

    rng = np.random.default_rng(3)
    q, k = (cp.asarray(rng.standard_normal((4096, 16, 16)).astype(np.float32)) for _ in range(2))
    plan = mixpert.tune(scores, (q, k), tol=1e-5)
    assert set(plan.levels.values()) == {"auto"}
    assert plan.error <= 1e-5

"""Tuning never touches the caller's arrays; arrays the function writes into count as outputs."""

from __future__ import annotations

import numpy as np
import pytest
from tuner_functions import rbf_inputs, rbf_predict, subspace_inputs, subspace_iteration

import mixpert
from mixpert.metrics import output_error, reference_outputs


def sgd_step(w, x, y, lr):  # an in-place update, as training code writes it
    t = w.dtype.type
    r = x @ w - y
    w -= t(lr) * (x.T @ r) / t(x.shape[0])
    return r


def sgd_update(w, x, y, lr):  # the same, returning nothing: w is its only output
    t = w.dtype.type
    r = x @ w - y
    w -= t(lr) * (x.T @ r) / t(x.shape[0])


def inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    y = (x @ rng.standard_normal((64, 8))).astype(np.float32)
    return w, x, y, 0.1


def test_the_first_call_of_a_tol_function_moves_w_one_step() -> None:
    w, x, y, lr = inputs()
    expected = w.copy()
    sgd_step(expected, x, y, lr)  # plain NumPy: one step
    twice = expected.copy()
    sgd_step(twice, x, y, lr)
    f = mixpert.jit(sgd_step, tol=1e-4)
    f(w, x, y, lr)
    step = np.linalg.norm(expected - inputs()[0])
    assert np.linalg.norm(w - expected) < 1e-3 * step
    assert np.linalg.norm(w - twice) > 0.5 * step
    assert set(f.plans[0].levels.values()) != {"fp64"}  # every profiling run saw the same w


def test_tune_leaves_its_arguments_alone_and_counts_written_ones() -> None:
    w, x, y, lr = inputs(1)
    before = [w.copy(), x.copy(), y.copy()]
    plan = mixpert.tune(sgd_step, (w, x, y, lr), tol=1e-6)
    for got, want in zip((w, x, y), before, strict=True):
        assert np.array_equal(got, want)
    assert plan.met_tol
    # w's final contents are the output: level I's update misses a tight tol, fp64's meets it
    coarse = mixpert.tune(sgd_update, (w, x, y, lr), tol=1e-6, candidates=("I",))
    assert not coarse.met_tol and coarse.error > 1e-6
    exact = mixpert.tune(sgd_update, (w, x, y, lr), tol=1e-6, candidates=("fp64",))
    assert exact.met_tol and np.array_equal(w, before[0])


# ---- tuned plans hold on inputs the tuner did not see ---------------------------------------


@pytest.mark.parametrize(
    ("func", "make"), [(subspace_iteration, subspace_inputs), (rbf_predict, rbf_inputs)]
)
def test_default_plans_hold_on_fresh_inputs(func, make) -> None:
    tol = 1e-4
    jitted = mixpert.jit(func)
    plan = mixpert.tune(jitted, make(np.random.default_rng(0)), tol=tol, target="cuda")
    assert 0 < plan.margin <= 1 and plan.error <= plan.margin * tol
    run = jitted.with_plan(plan)
    ratios = []
    for seed in range(1, 11):
        args = make(np.random.default_rng(seed))
        ratios.append(output_error(run(*args), reference_outputs(func, args)) / tol)
    assert np.mean(np.array(ratios) <= 1) >= 0.95 and max(ratios) <= 1.2


def test_validation_inputs_tighten_the_plan_and_are_recorded() -> None:
    jitted = mixpert.jit(rbf_predict)
    tol = 1e-4
    fresh = [rbf_inputs(np.random.default_rng(seed)) for seed in (5, 6, 7)]
    plan = mixpert.tune(jitted, rbf_inputs(np.random.default_rng(0)), tol=tol, margin=1.0,
                        validation=fresh)  # fmt: skip
    assert plan.held_out_error is not None and plan.held_out_error <= tol
    loose = mixpert.tune(jitted, rbf_inputs(np.random.default_rng(0)), tol=tol, margin=1.0)
    assert loose.held_out_error is None
    with pytest.raises(ValueError, match="margin"):
        mixpert.tune(jitted, fresh[0], tol=tol, margin=1.5)

"""The same function on the same kind of data gets the same plan, whatever the seed; where a rule
forces a dearer level, the plan says which rule, which op and its figures.

Rule 2 holds a product that feeds a decision (here an argmin or argmax) to float32 grade. It
used to compare native float32's own sampled error with the model's figure for float32 summing
in k order: two estimates of one error, so k-means assignments tuned for the CPU got float32 on
some seeds and float64 on others. Float32 arithmetic is now float32 grade by definition.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from tuner_functions import kmeans_step

import mixpert
from mixpert.plans.plan import Plan
from mixpert.tuning.acceptance import Rule
from mixpert.tuning.error_model import FLOAT32_GRADE
from mixpert.tuning.profiling import Profiler, Trial

pytestmark = pytest.mark.filterwarnings(
    "ignore::numba.NumbaPerformanceWarning", "ignore::mixpert.NativeOnCpuWarning"
)
SEEDS = range(6)


def assign_inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((1500, 24)) + 2.0).astype(np.float32)
    return x, x[rng.choice(1500, 12, replace=False)].copy()


def top_label(x, w):
    return (x @ w).argmax(axis=1).astype(np.float32)


def top_label_inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((400, 64)).astype(np.float32),
        rng.standard_normal((64, 16)).astype(np.float32),
    )


CASES = {
    "kmeans assignment": (kmeans_step, assign_inputs),
    "top label": (top_label, top_label_inputs),
}


@pytest.mark.parametrize(("func", "make"), list(CASES.values()), ids=list(CASES))
def test_a_cpu_plan_depends_on_the_kind_of_data_not_the_seed(func, make) -> None:
    jitted = mixpert.jit(func)
    plans = [mixpert.tune(jitted, make(seed), 1e-5, target="cpu") for seed in SEEDS]
    assert [p.levels for p in plans] == [dict.fromkeys(jitted.ops, "fp32")] * len(SEEDS)
    assert all(not r.forced_by for p in plans for r in p.ops)


def test_float32_arithmetic_is_float32_grade_by_definition() -> None:
    """An own error a hair above the in-order figure refuses an emulated level's run, not a
    float32 one ("auto" resolved to fp32 included); tol still holds both."""
    jitted = mixpert.jit(kmeans_step)
    (op,) = jitted.ops
    prof = Profiler(jitted, assign_inputs(0))
    prof.trial({op: "fp32"})  # the op's samples
    rule = Rule(prof, 1e-5, frozenset([op]))
    grade = prof.model(op, FLOAT32_GRADE)

    def trial(own: float, ran: str) -> Trial:
        return Trial(0.0, 0.05, {op: own}, {op: frozenset([ran])})

    above = 1.05 * grade
    assert rule.op_refusal(trial(above, "fp32"), op, "fp32") == ""
    assert rule.op_refusal(trial(above, "fp32"), op, "auto") == ""
    assert rule.op_refusal(trial(above, "fp32-ordered"), op, "fp32-ordered") == ""
    refused = rule.op_refusal(trial(above, "IV"), op, "IV")
    assert refused.startswith(f"rule 2: {op} feeds a decision") and "own error" in refused
    assert rule.op_refusal(trial(0.5 * grade, "IV"), op, "IV") == ""
    assert "over tol" in Rule(prof, 0.5 * grade, frozenset([op])).op_refusal(
        trial(0.9 * grade, "fp32"), op, "fp32"
    )


def test_print_plan_names_the_rule_and_op_that_force_float64(tmp_path) -> None:
    """top_label's labels match float64's at float32 (rule 1 passes: error 0), but its product
    errs ~1.4e-7 there, over tol: rule 2 forces float64, and the plan says so, in its file too;
    files from before the field load as before."""
    jitted = mixpert.jit(top_label)
    (op,) = jitted.ops
    plan = mixpert.tune(jitted, top_label_inputs(0), 1e-7, target="cpu")
    assert plan.levels == {op: "fp64"} and plan.met_tol and plan.error == 0.0
    (report,) = plan.ops
    assert report.forced_by.startswith(f"fp32 refused by rule 2: {op} feeds a decision")
    assert f"not cheaper: fp32 refused by rule 2: {op}" in str(plan)
    loaded = Plan.load(plan.save(tmp_path / "p.json"))
    assert loaded.ops == plan.ops and str(loaded) == str(plan)
    data = json.loads((tmp_path / "p.json").read_text())
    del data["plans"][0]["ops"][0]["forced_by"]  # as a file from before the field
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = Plan.load(tmp_path / "old.json")
    assert old.levels == plan.levels and old.ops[0].forced_by == ""

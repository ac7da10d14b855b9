"""Plans: JSON round trip, running a jitted function with one, stale and mismatched plans."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tuner_functions import mlp, mlp_inputs

import mixpert
from mixpert.plans.files import PlanFileError
from mixpert.plans.plan import Plan, PlanMismatchError, StalePlanError

ARGS = mlp_inputs(np.random.default_rng(0), n=32)
FUNC = mixpert.jit(mlp)
PLAN = mixpert.tune(FUNC, ARGS, tol=1e-5)


def test_round_trip_keeps_everything(tmp_path) -> None:
    path = PLAN.save(tmp_path / "plan.json")
    loaded = Plan.load(path, FUNC)
    assert loaded == PLAN
    assert loaded.function == "mlp" and loaded.signature[0] == "float32[32x32]"
    assert loaded.device == "cpu" and loaded.tol == 1e-5


def test_jit_runs_with_the_plan() -> None:
    tuned = mixpert.jit(mlp, plan=PLAN)
    assert np.array_equal(tuned(*ARGS), FUNC.with_plan(PLAN.levels)(*ARGS))
    assert not np.array_equal(tuned(*ARGS), FUNC.with_plan(dict.fromkeys(PLAN.levels, "I"))(*ARGS))


def test_stale_plan_is_reported(tmp_path) -> None:
    def mlp(x, w1, w2, w3):  # same identity, one matmul edited
        h = np.maximum(x @ w1, np.float32(0))
        return (h @ w2) @ w3

    mlp.__qualname__ = "mlp"
    path = PLAN.save(tmp_path / "plan.json")
    with pytest.raises(StalePlanError, match=r"stale plan for mlp: .*edited: mlp:\d"):
        Plan.load(path, mixpert.jit(mlp))


def test_other_function_or_inputs_are_refused() -> None:
    with pytest.raises(PlanMismatchError):
        PLAN.check(mixpert.jit(lambda a, b: a @ b))
    PLAN.check(FUNC, mlp_inputs(np.random.default_rng(1), n=48))  # other sizes are fine
    with pytest.raises(PlanMismatchError, match="tuned for inputs"):
        PLAN.check(FUNC, [a.astype(np.float64) for a in ARGS])


def test_bad_files_fail_clearly(tmp_path) -> None:
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(PlanFileError, match=r"x.json: field 'format' is 'other'"):
        Plan.load(tmp_path / "x.json")
    data = PLAN.to_json() | {"levels": {"op": "VII"}}
    with pytest.raises(PlanFileError, match="field 'levels' must be an object op id -> known"):
        Plan.from_json(data)


def mixed_chain(x, w, v):
    return (x @ w) @ v


def test_a_site_that_stays_native_is_named_so_in_the_plan_with_why(tmp_path) -> None:
    """Not "fp32": the plan says the op never reaches the runtime with these inputs, and why,
    and the file keeps it; files written before the field load as before."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 32)).astype(np.float32)
    f = mixpert.jit(mixed_chain)
    plan = mixpert.tune(f, (x, x, x.astype(np.float64)), tol=1e-5)
    reports = {op.op_id: op for op in plan.ops}
    assert reports["mixed_chain:0"].native == ""
    assert "float64" in reports["mixed_chain:1"].native
    assert "argument `v`" in reports["mixed_chain:1"].native
    loaded = Plan.load(plan.save(tmp_path / "p.json"))
    assert {op.op_id: op.native for op in loaded.ops} == {k: r.native for k, r in reports.items()}
    data = json.loads((tmp_path / "p.json").read_text())
    for row in data["plans"][0]["ops"]:
        del row["native"]  # as a file from before the field
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert Plan.load(tmp_path / "old.json").levels == plan.levels

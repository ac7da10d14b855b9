"""The tuner counts the trip (``tuning.trip``): a GPU plan tuned on NumPy arguments records the
bytes a call moves and their seconds, shows them, and becomes the host's own run where that is
faster; plan files keep it, and files without it load as before."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import mixpert
from mixpert.plans.files import PlanFileError
from mixpert.runtime.levels import NATIVE_LEVEL
from mixpert.tuning import trip

RNG = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, 0.0)
    h = np.maximum(h @ w2, 0.0)
    return h @ w3


def elements(x, w):
    h = x @ w
    s = 0.0
    for i in range(h.shape[0]):
        s += h[i, 0]
    return h * s


ARGS = (f32(64, 16), *(f32(16, 16) / 4 for _ in range(2)), f32(16, 8) / 4)


def tuned(func, args, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (tol unreachable and the like: not the point here)
        return mixpert.tune(func, args, tol=1e-4, target="cuda", **options)


PLAN = tuned(mlp, ARGS)


def test_a_plan_for_the_gpu_on_numpy_arguments_counts_its_trip() -> None:
    moved = sum(a.nbytes for a in ARGS) + 64 * 8 * 4  # the arguments over, the result back
    assert PLAN.trip_bytes == moved
    assert PLAN.trip_seconds == pytest.approx(moved / trip.BANDWIDTH_WITHOUT_GPU)
    assert PLAN.gpu_seconds is not None and PLAN.gpu_seconds >= PLAN.trip_seconds
    assert PLAN.host_seconds is None and PLAN.on_host == ""  # nothing timed without a GPU
    assert f"  trip: {moved / 2**20:.3g} MiB to the GPU and back a call, predicted " in str(PLAN)


def test_a_body_that_stays_moves_each_products_operands_and_result() -> None:
    x, w = f32(32, 8), f32(8, 4)
    plan = tuned(elements, (x, w))
    assert plan.trip_bytes == 4 * (32 * 8 + 8 * 4 + 32 * 4)


def test_nothing_moves_for_a_plan_for_the_cpu() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = mixpert.tune(mlp, ARGS, tol=1e-4, target="cpu")
    assert plan.trip_bytes is None and plan.trip_seconds is None and "trip:" not in str(plan)


def test_a_plan_slower_than_the_host_runs_natively_there(monkeypatch) -> None:
    monkeypatch.setattr(trip, "BANDWIDTH_WITHOUT_GPU", 1e3)  # a trip of seconds
    plan = tuned(mlp, ARGS, measure=True)
    assert plan.levels == dict.fromkeys(PLAN.levels, NATIVE_LEVEL)
    assert all(report.level == NATIVE_LEVEL for report in plan.ops)
    assert plan.on_host.startswith("the host's own run (") and "beats the GPU's" in plan.on_host
    assert plan.host_seconds is not None and plan.gpu_seconds > plan.host_seconds
    assert plan.error <= plan.tol and plan.predicted_speedup == 1.0
    assert f"  runs natively on the host: {plan.on_host}" in str(plan)
    jitted = mixpert.jit(mlp)
    native = jitted.with_plan(dict.fromkeys(jitted.ops, NATIVE_LEVEL))(*ARGS)
    assert np.array_equal(jitted.with_plan(plan)(*ARGS), native)


def test_a_plan_faster_than_the_host_keeps_its_levels(monkeypatch) -> None:
    monkeypatch.setattr(trip, "BANDWIDTH_WITHOUT_GPU", 1e15)
    plan = tuned(mlp, ARGS, measure=True)
    assert plan.levels == PLAN.levels and plan.on_host == ""
    assert plan.host_seconds is not None and plan.gpu_seconds < plan.host_seconds
    assert ", natively on the host " in str(plan)


def test_plan_files_keep_the_trip_and_read_files_without_it(tmp_path) -> None:
    path = tmp_path / "plans.json"
    PLAN.save(path)
    back = mixpert.Plan.load(path)
    assert back == PLAN and back.trip_bytes == PLAN.trip_bytes
    old = {k: v for k, v in PLAN.to_json().items() if not k.endswith("_seconds")}
    del old["trip_bytes"], old["on_host"]
    path.write_text(json.dumps({"format": "mixpert-plans/2", "plans": [old]}))
    older = mixpert.Plan.load(path)
    assert older.trip_bytes is None and older.on_host == "" and "trip:" not in str(older)
    path.write_text(
        json.dumps({"format": "mixpert-plans/2", "plans": [{**old, "trip_seconds": -1}]})
    )
    with pytest.raises(PlanFileError, match="field 'trip_seconds' must be seconds >= 0 or null"):
        mixpert.Plan.load(path)

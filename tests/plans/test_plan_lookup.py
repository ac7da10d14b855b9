"""``@mixpert.jit(tol=...)`` finds its plan: tune on first call, safe default, raise; plan files
(stale ones refused); and the tune CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from tuner_functions import mlp, mlp_inputs

import mixpert
from mixpert.cli import main

ARGS = mlp_inputs(np.random.default_rng(0), n=32)


def test_tune_on_first_call_saves_and_reuses_the_plan(tmp_path) -> None:
    path = tmp_path / "mlp.plan.json"
    f = mixpert.jit(mlp, tol=1e-5, plan_file=path)
    out = f(*ARGS)
    assert path.exists() and len(f.plan_book.plans) == 1
    plan = f.plan_book.plans[0]
    assert plan.error <= 1e-5 and set(plan.levels) == set(f.ops)
    assert np.array_equal(out, f.with_plan(plan.levels)(*ARGS))
    f(*ARGS)
    assert len(f.plan_book.plans) == 1  # the second call reuses it
    g = mixpert.jit(mlp, tol=1e-5, plan_file=path, on_missing="raise")
    assert np.array_equal(g(*ARGS), out)  # read from the file, no tuning
    looser = mixpert.jit(mlp, tol=1e-7, plan_file=path, on_missing="raise")
    with pytest.raises(mixpert.MissingPlanError, match="no plan"):
        looser(*ARGS)  # the file's plan was tuned for a looser tol than this one asks


def test_default_and_raise_modes(monkeypatch) -> None:
    f = mixpert.jit(mlp, tol=1e-5, on_missing="default")
    assert np.array_equal(f(*ARGS), f.with_plan(dict.fromkeys(f.ops, "fp32"))(*ARGS))
    assert f.plan_book.plans == []
    with pytest.raises(mixpert.MissingPlanError, match="no plan"):
        mixpert.jit(mlp, tol=1e-5, on_missing="raise")(*ARGS)
    with pytest.raises(ValueError, match="on_missing"):
        mixpert.jit(mlp, tol=1e-5, on_missing="never")  # type: ignore[arg-type]
    monkeypatch.setenv("MIXPERT_ON_MISSING_PLAN", "raise")
    with pytest.raises(mixpert.MissingPlanError):
        mixpert.jit(mlp, tol=1e-5)(*ARGS)


def test_an_explicit_plan_wins_and_no_tol_means_no_lookup() -> None:
    f = mixpert.jit(mlp, tol=1e-5, plan={}, on_missing="raise")
    assert f.plan_book is None
    f(*ARGS)  # runs at the default level, no MissingPlanError
    assert mixpert.jit(mlp).plan_book is None


def test_a_stale_plan_file_is_refused(tmp_path) -> None:
    path = tmp_path / "mlp.plan.json"
    mixpert.jit(mlp, tol=1e-5, plan_file=path)(*ARGS)
    data = json.loads(path.read_text())
    sources = data["plans"][0]["op_sources"]
    sources[next(iter(sources))] = "0" * 12  # as if that product had been edited since tuning
    path.write_text(json.dumps(data))
    with pytest.raises(mixpert.StalePlanError, match="stale plan"):
        mixpert.jit(mlp, tol=1e-5, plan_file=path)(*ARGS)


def test_cli_tune_writes_a_plan(tmp_path, monkeypatch) -> None:
    (tmp_path / "fn_cli.py").write_text(
        "import numpy as np\n\ndef f(a, b, c):\n    return (a @ b) @ c\n"
    )
    np.savez(tmp_path / "in.npz", *ARGS[:3])
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main, ["tune", "fn_cli.py:f", "--tol", "1e-5", "--inputs", "in.npz", "--out", "p.json"]
    )
    assert result.exit_code == 0, result.output
    assert "predicted speedup over fp32" in result.output and "wrote p.json" in result.output
    data = json.loads((tmp_path / "p.json").read_text())["plans"][0]
    assert data["function"] == "f" and len(data["levels"]) == 2
    assert data["error"] <= 1e-5 and data["profiling_runs"] <= 2 * 6


@pytest.mark.gpu
def test_tuning_on_the_gpu_with_cupy_inputs() -> None:
    import cupy as cp

    args = tuple(cp.asarray(a) for a in mlp_inputs(np.random.default_rng(1), n=512))
    f = mixpert.jit(mlp, tol=1e-5)
    out = f(*args)  # tunes on the GPU: errors against a CuPy float64 run, times measured
    (plan,) = f.plan_book.plans
    assert plan.device != "cpu" and plan.measured_speedup is not None
    assert plan.error <= 1e-5 and set(plan.levels) == set(f.ops)
    reference = mlp(*(a.astype(cp.float64) for a in args))
    error = float(cp.linalg.norm(out - reference) / cp.linalg.norm(reference))
    assert error == pytest.approx(plan.error, rel=1e-6)  # the run it was tuned on, deterministic

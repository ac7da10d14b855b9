"""``mixpert.autotune``: tune on first call, safe default, raise; plan files; and the tune CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from tuner_functions import mlp, mlp_inputs

import mixpert
from mixpert.autotune import MissingPlanError
from mixpert.cli import main

ARGS = mlp_inputs(np.random.default_rng(0), n=32)


def test_tune_on_first_call_saves_and_reuses_the_plan(tmp_path) -> None:
    path = tmp_path / "mlp.plan.json"
    f = mixpert.autotune(mlp, tol=1e-5, plan_file=path)
    out = f(*ARGS)
    assert path.exists() and len(f.plans) == 1
    assert np.array_equal(out, f.jitted.with_plan(f.plans[0].levels)(*ARGS))
    g = mixpert.autotune(mlp, tol=1e-5, plan_file=path, on_missing="raise")
    assert np.array_equal(g(*ARGS), out)  # read from the file, no tuning


def test_default_and_raise_modes() -> None:
    f = mixpert.autotune(mlp, tol=1e-5, on_missing="default")
    assert np.array_equal(f(*ARGS), f.jitted.with_plan(dict.fromkeys(f.jitted.ops, "fp32"))(*ARGS))
    assert f.plans == []
    with pytest.raises(MissingPlanError, match="no plan"):
        mixpert.autotune(mlp, tol=1e-5, on_missing="raise")(*ARGS)
    with pytest.raises(ValueError, match="on_missing"):
        mixpert.autotune(mlp, tol=1e-5, on_missing="never")  # type: ignore[arg-type]


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
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["function"] == "fn_cli:f" and len(data["levels"]) == 2
    assert data["error"] <= 1e-5 and data["profiling_runs"] <= 2 * 6

"""``mixpert run``: a sample end to end on the CPU, a saved plan reused, and a bad name."""

from __future__ import annotations

import json

from click.testing import CliRunner

from mixpert.cli import main


def test_run_prints_ops_levels_error_and_time(tmp_path) -> None:
    plan = tmp_path / "gemm.plan.json"
    result = CliRunner().invoke(
        main, ["run", "gemm", "--size", "64", "--backend", "cpu", "--save-plan", str(plan)]
    )
    assert result.exit_code == 0, result.output
    for text in ("matmul ops found in gemm", "levels for tol 1e-06", "native float32"):
        assert text in result.output
    assert "mixpert (within tol 1e-06)" in result.output
    assert "speedup over native float32" in result.output
    saved = json.loads(plan.read_text())["plans"][0]
    assert saved["error"] <= 1e-6 and len(saved["levels"]) == 1

    again = CliRunner().invoke(main, ["run", "gemm", "--size", "64", "--plan", str(plan)])
    assert again.exit_code == 0, again.output
    assert saved["levels"].popitem()[1] in again.output


def test_an_unknown_sample_names_the_ones_there() -> None:
    result = CliRunner().invoke(main, ["run", "no_such_sample"])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "gemm" in result.output

"""benchmarks/accuracy.py runs end to end on a tiny size and checks the issue's expectations."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py"


@pytest.fixture(scope="module")
def accuracy():
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("accuracy_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_writes_json_table_and_plot(accuracy, tmp_path: Path) -> None:
    args = ["--sizes", "64", "--levels", "I", "II", "III", "IV", "V", "--out", str(tmp_path)]
    assert accuracy.main([*args, "--datasets", "phi=0.5", "normal"]) == 0
    data = json.loads((tmp_path / "accuracy.json").read_text())
    rows = {(r["dataset"], r["level"]): r["error"] for r in data["results"]}
    assert set(rows) == {
        (d, lv) for d in ("phi=0.5", "normal") for lv in ("numpy-fp32", "I", "II", "III", "IV", "V")
    }
    table = (tmp_path / "accuracy.md").read_text()
    assert "| IV | 8 |" in table and "## Notes" in table
    assert (tmp_path / "accuracy.png").stat().st_size > 10_000
    checks = accuracy.check_expectations(data["results"])
    assert len(checks) == 7 and all(passed for _, passed, _ in checks), checks


def test_expectation_check_reports_misses(accuracy) -> None:
    fake = [
        {"n": 4096, "dataset": "phi=0.5", "level": lv, "error": e}
        for lv, e in [("I", 1e-4), ("II", 2e-4), ("III", 5e-5), ("IV", 6e-7), ("V", 3e-8)]
    ]
    missed = {check for check, passed, _ in accuracy.check_expectations(fake) if not passed}
    assert missed == {"n=4096 phi=0.5: IV <= 5e-07", "n=4096 phi=0.5: I > II"}

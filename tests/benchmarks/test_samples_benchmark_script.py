"""benchmarks/samples_e2e.py end to end on the CPU at the "ci" size: per-sample JSON, the merged
JSON, Markdown table and plot, with the figures the GPU run reports."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "samples_e2e.py"


def test_script_writes_results(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("samples_e2e_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = [
        "samples_e2e.py",
        "gemm",
        "--backend",
        "cpu",
        "--size-key",
        "ci",
        "--out",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    merged = json.loads((tmp_path / "samples.json").read_text())
    (row,) = merged["rows"]
    assert row["sample"] == "gemm" and row["device"] == "cpu" and row["ok"]
    assert row["error"] <= row["tol"] < row["tf32_error"]  # TF32 misses a float32-grade tol
    assert merged["mean_speedup"] == pytest.approx(row["native_seconds"] / row["mixpert_seconds"])
    assert "| gemm | 96 |" in (tmp_path / "samples.md").read_text()
    ops, bound = row["ops"], row["bounds"]  # each product timed inside a call, and the bounds
    assert set(ops) == set(row["levels"]) and all(o["calls"] >= 1 for o in ops.values())
    products = sum(o["native_seconds"] for o in ops.values())
    assert bound["native_product_seconds"] == pytest.approx(products) and products > 0
    assert bound["rest_seconds"] == pytest.approx(row["native_seconds"] - products)
    assert row["int8_ratio"] is None and bound["board_bound"] is None  # a CPU: no INT8 rate
    assert "## What bounds each sample" in (tmp_path / "samples.md").read_text()
    assert (tmp_path / "samples.png").stat().st_size > 0

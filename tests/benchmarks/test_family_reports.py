"""The batched and skinny benchmarks' files, from made-up rows (the runs themselves need a GPU):
the JSON fields the issues name, one Markdown line per shape with every method, a plot."""

from __future__ import annotations

import json
from pathlib import Path

from mixpert.bench import batched as benchmark_batched
from mixpert.bench import skinny as benchmark_skinny


def test_batched_results_carry_the_issue_fields(tmp_path: Path) -> None:
    rows = [
        benchmark_batched.BatchedRow("GPU", batch, 4, 5, 6, name, 0.5, ratio, 1e-7, 2e-7, "IV")
        for batch in (8, 16)
        for name, ratio in zip(benchmark_batched.METHODS, (1.0, 1.5, 0.5), strict=False)
    ]
    path = benchmark_batched.write_results(rows, tmp_path)
    saved = json.loads(path.read_text())["rows"]
    assert len(saved) == len(rows)
    needed = {"batch", "m", "k", "n", "level", "time_ms", "ratio_to_sgemm", "error", "sgemm_error"}
    assert needed <= set(saved[0])
    table = (tmp_path / "batched.md").read_text()
    assert "| 8 x 4x5x6 |" in table and "| 16 x 4x5x6 |" in table
    assert "1.50x / 1.0e-07" in table
    assert (tmp_path / "batched.png").stat().st_size > 0


def test_skinny_results_carry_bandwidth(tmp_path: Path) -> None:
    rows = [
        benchmark_skinny.SkinnyRow("GPU", 64, 32, 8, name, 0.2, 1.0, 1e-7, 1e-6, 900.0, 30.0, "x")
        for name in benchmark_skinny.METHODS
    ]
    path = benchmark_skinny.write_results(rows, tmp_path)
    saved = json.loads(path.read_text())["rows"]
    assert {
        "m",
        "k",
        "n",
        "level",
        "time_ms",
        "ratio_to_sgemm",
        "error",
        "sgemm_error",
        "gbps",
    } <= set(saved[0])
    table = (tmp_path / "skinny.md").read_text()
    line = next(x for x in table.splitlines() if x.startswith("| 64x32x8 |"))
    assert line.count("900 (30%)") == len(benchmark_skinny.METHODS)
    assert "(x)" in line  # auto names the level it ran


def test_measure_calls_reports_each_calls_error_and_shows_skipped_entries(monkeypatch) -> None:
    """The benchmarks' measuring step, with NumPy standing in for CuPy and a fixed clock: the
    error is against the float64 product, and a call that leaves entries unwritten reads NaN."""
    import numpy as np

    from mixpert.bench import gemm as benchmark

    monkeypatch.setattr(benchmark, "gpu_median_seconds", lambda fn, flops: 0.5)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    half_written = np.full((6, 4), np.nan, np.float32)
    half_written[:3] = a[:3] @ b
    calls = {"exact": (lambda: a @ b, "fp32"), "skips rows": (lambda: half_written, "x")}
    measured = benchmark.measure_calls(np, calls, a, b, 1.0)
    seconds, error, routed = measured["exact"]
    assert seconds == 0.5 and routed == "fp32" and 0 < error < 1e-6
    assert np.isnan(measured["skips rows"][1])


def test_method_cells_give_each_methods_time_ratio_and_errors() -> None:
    """The rows' common fields from one measurement: milliseconds, the ratio to SGEMM's time,
    the method's error beside SGEMM's, and what it ran, methods in measuring order."""
    from mixpert.bench import gemm as benchmark

    measured = {"sgemm": (2e-3, 1e-6, "sgemm"), "auto": (5e-4, 2e-7, "IV"), "x": (4e-3, 3e-7, "x")}
    assert benchmark.method_cells(measured) == [
        ("sgemm", 2.0, 1.0, 1e-6, 1e-6, "sgemm"),
        ("auto", 0.5, 4.0, 2e-7, 1e-6, "IV"),
        ("x", 4.0, 0.5, 3e-7, 1e-6, "x"),
    ]

"""benchmarks/power_ceiling.py (GPU only) without a GPU: each level's ceiling is SGEMM's time over
its products' INT8 GEMMs, its share of it the INT8 GEMMs' time over its own, and the table and
plot come from rows of the shape the script writes."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from conftest import gpu_benchmark


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return gpu_benchmark(monkeypatch, "power_ceiling.py")


def measured(n: int, int8_ms: float) -> list[dict]:
    """One size's rows as ``case`` gathers them: SGEMM 100 ms, the INT8 GEMM int8_ms."""
    times = {"sgemm": (100.0, None), "tf32": (20.0, None), "int8 GEMM": (int8_ms, 1),
             "T6": (30.0, 6), "IV": (40.0, 8), "V": (50.0, 10)}  # fmt: skip
    return [
        {"n": n, "method": name, "ran": name, "ms": ms, "products": products,
         "clock_mhz": 1500.0, "power_w": 690.0, "error": None if name == "int8 GEMM" else 1e-6}
        for name, (ms, products) in times.items()
    ]  # fmt: skip


def test_a_levels_ceiling_is_sgemm_over_its_products_int8_gemms(script) -> None:
    rows = {r["method"]: r for r in script.with_ratios(measured(4096, int8_ms=4.0))}
    assert rows["IV"]["ratio_to_sgemm"] == pytest.approx(100.0 / 40.0)
    assert rows["IV"]["ceiling_ratio"] == pytest.approx(100.0 / (8 * 4.0))
    assert rows["IV"]["of_ceiling"] == pytest.approx(8 * 4.0 / 40.0)
    assert rows["V"]["ceiling_ratio"] == pytest.approx(100.0 / (10 * 4.0))
    assert "ceiling_ratio" not in rows["tf32"] and "ceiling_ratio" not in rows["int8 GEMM"]
    assert all(r["sgemm_error"] == 1e-6 for r in rows.values())


def test_table_has_a_row_per_size_and_method(script) -> None:
    rows = script.with_ratios(measured(4096, 4.0)) + script.with_ratios(measured(8192, 5.0))
    text = script.table(rows)
    assert text.count("\n") == 2 + 12 - 1
    assert (
        "| 8192 | IV | 40.000 | 2.50x | 1500 | 690 | 1.0e-06 | 2.50x (8 products) | 1.000 |" in text
    )
    assert "| 4096 | int8 GEMM | 4.000 | 25.00x | 1500 | 690 | - | - | - |" in text


def test_plot_is_written(script, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = script.with_ratios(measured(4096, 4.0)) + script.with_ratios(measured(8192, 5.0))
    script.plot(rows, tmp_path / "power-ceiling.png")
    assert (tmp_path / "power-ceiling.png").stat().st_size > 10_000


def test_the_current_devices_reading_is_found_by_its_pci_bus(script) -> None:
    text = "00000000:18:00.0, 1980, 126.30\n00000000:3B:00.0, 1515, 693.73\n"
    assert script.reading(text, "0000:3b:00.0") == (1515.0, 693.73)
    assert script.reading("00000000:18:00.0, 1455, 690.1\n", "0000:3b:00.0") == (1455.0, 690.1)
    with pytest.raises(RuntimeError, match="no GPU at PCI bus 0000:5e:00.0"):
        script.reading(text, "0000:5e:00.0")

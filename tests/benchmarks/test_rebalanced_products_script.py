"""benchmarks/rebalanced_products.py (GPU only) without a GPU: its operands move k-indices and
leave no line unresolved, and its table and plot come from rows of the shape it writes (the
script and call_overhead.py, which it imports, loaded over a placeholder CuPy)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from conftest import gpu_benchmark

from mixpert.runtime import cpu, equilibrate
from mixpert.runtime.levels import get_level


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    placeholder = ModuleType("cupy")
    placeholder.asarray = np.asarray  # (the operands, built on the host as NumPy arrays)
    placeholder.asnumpy = np.asarray
    return gpu_benchmark(monkeypatch, "rebalanced_products.py", placeholder)


def test_operands_move_most_k_indices_and_leave_no_line_unresolved(script) -> None:
    a, b = script.operands(96, 256, 80, seed=3)
    assert a.dtype == b.dtype == np.float32
    moved = np.count_nonzero(equilibrate.k_exponents(a, b))
    assert moved > 256 // 2
    for level in ("IV", "V"):  # (unresolved lines would time the exact bypass instead)
        assert cpu.unresolved_lines(a, b, get_level(level)) == (0, 0)
    fresh = script.operands(96, 256, 80, seed=4)[0]
    assert not np.array_equal(a, fresh)


def rows() -> list[dict]:
    return [
        {"shape": shape, "level": level, "moved": 700, "k": 1024, "call_us": us,
         "ratio_to_sgemm": 100.0 / us, "error": 4e-7, "sgemm_us": 100.0,
         "sgemm_error": 3e-7, "tf32_ratio_to_sgemm": 5.0, "tf32_error": 2e-4}
        for shape in ("1024x1024x1024", "4096x1024x1024")
        for level, us in (("T6", 50.0), ("IV", 80.0), ("V", 90.0), ("auto", 80.0))
    ]  # fmt: skip


def test_table_has_a_row_per_shape_and_level(script) -> None:
    text = script.table(rows())
    assert text.count("\n") == 2 + 8 - 1
    assert (
        "| 4096x1024x1024 | 700 of 1024 | IV | 80.0 | 1.25x | 4.0e-07 | 3.0e-07 | 5.00x (2.0e-04) |"
        in text
    )


def test_plot_is_written(script, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    script.plot(rows(), tmp_path / "rebalanced-products.png")
    assert (tmp_path / "rebalanced-products.png").stat().st_size > 10_000

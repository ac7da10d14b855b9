"""benchmarks/jit_on_cupy.py (GPU only) without a GPU: its table and plot from rows of the shape
its measurements write (the script and call_overhead.py, which it imports, loaded over a
placeholder CuPy)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from conftest import gpu_benchmark


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return gpu_benchmark(monkeypatch, "jit_on_cupy.py")


def rows() -> list[dict]:
    site = [
        {"kind": "site", "n": n, "way": way, "host_us": us, "over_cupy_us": us - 25.0}
        for n in (256, 1024)
        for way, us in (("cupy a @ b", 25.0), ("jit site, fp32", 31.5), ("jit site, IV", 60.0))
    ]
    levels = {"mlp:1": "fp32", "mlp:2": "IV", "mlp:3": "fp32"}
    mlp = [
        {"kind": "mlp", "w": w, "variant": variant, "levels": levels, "host_us": 90.0,
         "call_us": call, "ratio_to_cupy": 100.0 / call, "error": 3e-7,
         "same_bits_as_jit": True, "replayed": variant == "jit+replay" and w < 2048}
        for w in (512, 1024, 2048)
        for variant, call in (("cupy", 100.0), ("jit", 120.0), ("jit+replay", 60.0))
    ]  # fmt: skip
    return site + mlp


def test_table_names_every_way_and_variant(script) -> None:
    text = script.table(rows())
    assert "| 1024 | jit site, fp32 | 31.5 | +6.5 |" in text
    assert (
        "| 512 | jit+replay | 60.0 | 90.0 | 1.67x | 3.0e-07 | True | 1 fp32, 2 IV, 3 fp32 |" in text
    )
    assert "| 2048 | jit+replay (not replayed) |" in text


def test_plot_is_written(script, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    script.plot(rows(), tmp_path / "jit-on-cupy.png")
    assert (tmp_path / "jit-on-cupy.png").stat().st_size > 10_000

"""``mixpert calibrate``: without a GPU it says there is nothing to calibrate and exits 0; its
tables show each product's times, what "auto" runs there and the thresholds; on a GPU it
measures, saves, and ``--show`` prints what was saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mixpert.cli import main
from mixpert.cli.calibrate import NOTHING_SAVED, print_calibration
from mixpert.runtime import calibration, device
from mixpert.runtime.calibration import Calibration, Identity, Measurement, Row


@pytest.mark.parametrize("args", [[], ["--show"], ["--json"]])
def test_without_a_gpu_there_is_nothing_to_calibrate(monkeypatch, args: list[str]) -> None:
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    monkeypatch.setattr(device, "unavailable_reason", lambda: "no CUDA device found")
    result = CliRunner().invoke(main, ["calibrate", *args])
    assert result.exit_code == 0, result.output
    assert "nothing to calibrate, no usable GPU here (no CUDA device found)" in result.output
    assert "native float32 on the CPU" in result.output


def test_the_tables_show_the_times_the_choices_and_the_thresholds(tmp_path: Path, capsys) -> None:
    rows = (
        Row(1024, 1024, 1024, 0.057, 0.079, 0.654),
        Row(2048, 2048, 2048, 0.342, 0.230, 0.681),
        Row(3072, 3072, 3072, 1.282, 0.545, 0.697),
        Row(4096, 4096, 4096, 2.679, 1.2, 1.081),
    )
    m = Measurement(28.0, 51.0, 1428.0, rows, False, 2.5)
    identity = Identity("NVIDIA H200", "90", 12080, 12080, "14.2.0", "0.1.0")
    path = tmp_path / identity.file_name()
    found = Calibration(identity, m, calibration.derive(m), "2026-11-29T00:00:00Z", path)
    print_calibration(found)
    text = capsys.readouterr().out
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()]
    table = {row[0]: row[1:] for row in cells if row and " x " in row[0]}
    # SGEMM ms, IV ms, x SGEMM, auto's IV ms, x SGEMM, auto runs
    assert table["1024 x 1024 x 1024"] == ["0.057", "0.079", "0.72x", "0.654", "0.09x", "SGEMM"]
    assert table["2048 x 2048 x 2048"][-2:] == ["0.50x", "SGEMM"]  # the direct call: not taken
    assert table["3072 x 3072 x 3072"][-2:] == ["1.84x", "IV"]
    assert table["4096 x 4096 x 4096"][-1] == "IV"
    thresholds = {row[0]: row[1:] for row in cells if row and row[0].endswith("_dim")}
    assert thresholds["min_dim"] == ["3072", "3072"]  # shipped (H100), here
    assert thresholds["large_min_dim"] == ["2048", "never"]  # (no large product measured)
    assert "INT8 28.0x float32" in text and "NVIDIA H200" in text
    assert f"saved in {path}" in text
    assert "level IV from 3072 a side (2048 where it replays one graph" in text


@pytest.mark.gpu
def test_calibrate_then_show(tmp_path: Path, monkeypatch) -> None:
    from mixpert.runtime.cuda import calibrate

    monkeypatch.setenv(calibration.CACHE_DIR, str(tmp_path))
    monkeypatch.setenv(calibration.SWITCH, "1")
    runner = CliRunner()
    try:
        shown = runner.invoke(main, ["calibrate", "--show"])
        assert shown.exit_code == NOTHING_SAVED and "no calibration saved" in shown.output
        measured = runner.invoke(main, ["calibrate", "--json"])
        assert measured.exit_code == 0, measured.output
        data = json.loads(measured.output)
        assert data["format"] == calibration.FORMAT and data["int8_ratio"] > 0
        saved = list(tmp_path.glob("calibration-*.json"))
        assert len(saved) == 1 and json.loads(saved[0].read_text()) == data
        shown = runner.invoke(main, ["calibrate", "--show"])
        assert shown.exit_code == 0 and str(saved[0]) in shown.output.replace("\n", "")
        assert "the crossovers" in shown.output
    finally:
        calibrate.CALIBRATIONS.forget()  # (the suite's products: the shipped crossovers)

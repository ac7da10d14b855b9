"""``mixpert demo``: on a machine without a GPU it shows what is true there (products, graph,
the GPU's plan and why, each level's error and bits on the exact backend) and quotes the GPU's
speed as recorded on a named GPU, never a CPU time as mixpert's speed; with a GPU it measures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mixpert.cli import main
from mixpert.cli.demo import PLAN_LABEL, LevelRun, same_bits
from mixpert.recorded import RECORDED_FILE, DemoDigests, demo_digests, gpu_speeds
from mixpert.runtime import device

ROOT = Path(__file__).resolve().parents[2]  # the repository
no_gpu_only = pytest.mark.skipif(device.gpu_available(), reason="a GPU is usable: demo measures")


@no_gpu_only
def test_demo_without_a_gpu_shows_what_is_true_and_times_nothing() -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        "matmul ops found in mlp",
        "x @ w1 + b1",  # the products the pass found, with their source
        "mlp:0 -> mlp:1",  # and their graph
        "levels for a GPU, tol 0.0001",
        "why this level",
        "Nothing below is timed",
        PLAN_LABEL,
        "not measured here",
    ):
        assert text in out, text
    recorded = demo_digests("mlp", 48, 1)
    assert recorded is not None and f"bits vs the {recorded.gpu}'s" in out
    # the exact backend's INT8 levels and the plan made of them are the GPU's bits; native
    # float32 is the BLAS's own
    assert out.count("the same") >= 5 and "DIFFER" not in out
    for speed in gpu_speeds():
        assert f"recorded on {speed.gpu} on {speed.date}" in out
    # no time taken here is shown as mixpert's speed
    assert "measured here" not in out.replace("not measured here", "")
    assert "time on the CPU" not in out and "speedup over native float32:" not in out


@no_gpu_only
def test_other_inputs_say_the_bits_by_the_contract() -> None:
    result = CliRunner().invoke(main, ["demo", "--size", "16"])
    assert result.exit_code == 0, result.output
    assert "bits on a GPU" in result.output and "the same (by contract)" in result.output


def test_bits_the_same_only_where_the_recorded_digests_agree() -> None:
    recorded = DemoDigests("GPU X", "2026-01-01", "x.json", "s", 8, 1, {"I": "a", "fp32": "b"})
    runs = [
        LevelRun("native float32", ("fp32",), 1e-7, "c"),
        LevelRun("I", ("I",), 1e-5, "a"),
        LevelRun("IV", ("IV",), 1e-7, "d"),
        LevelRun("tf32", ("tf32",), 1e-4, "e"),
        LevelRun(PLAN_LABEL, ("I",), 1e-5, "f"),
    ]
    verdicts = same_bits(runs, recorded)
    assert verdicts["native float32"] == "differ (BLAS sum order)"
    assert verdicts["I"] == "[green]the same[/green]"
    assert verdicts["IV"] == "the same (by contract)"  # not recorded: the numerics contract
    assert verdicts["tf32"] == "may differ (BLAS order)"
    assert verdicts[PLAN_LABEL] == "[green]the same[/green] (level by level)"
    moved = same_bits([LevelRun("I", ("I",), 1e-5, "z")], recorded)
    assert moved["I"] == "[red]DIFFER[/red]"  # an exact level off the GPU's bits is a bug


def test_the_shipped_figures_are_the_results_files() -> None:
    script = ROOT / "benchmarks" / "recorded_figures.py"
    if not script.is_file():
        pytest.skip("not a checkout: benchmarks/ is not here")
    spec = importlib.util.spec_from_file_location("recorded_figures", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def undated(figures: dict) -> dict:  # dates come from git, which a shallow clone lacks
        return {
            key: [{k: v for k, v in run.items() if k != "date"} for run in value]
            if isinstance(value, list)
            else value
            for key, value in figures.items()
        }

    shipped = json.loads(RECORDED_FILE.read_text())
    assert undated(module.recorded()) == undated(shipped)
    assert {speed.gpu for speed in gpu_speeds()} >= {"NVIDIA H200"}


@pytest.mark.gpu
def test_demo_with_a_gpu_measures_there() -> None:
    result = CliRunner().invoke(main, ["demo", "--size", "256"])
    assert result.exit_code in (0, 1), result.output
    assert "time on the GPU (ms)" in result.output and "measured here" in result.output

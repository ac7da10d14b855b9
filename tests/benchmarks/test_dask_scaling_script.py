"""benchmarks/dask_scaling.py's Dask plumbing on the CPU (NumPy chunks, in-process workers):
B made on each worker and registered as copies, blocks on their A block's worker, strong and
weak rows, a streamed strong run, the size reasoning and the report files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed", reason="needs distributed: 'mixpert[dask]'")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dask_scaling.py"


@pytest.fixture
def script(monkeypatch):
    spec = importlib.util.spec_from_file_location("dask_scaling_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # (its dataclass looks itself up)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ARRAYS", "numpy")
    monkeypatch.setattr(module, "BLOCK_ROWS", 32)
    monkeypatch.setattr(module, "MARGIN", 0)
    return module


def no_workspace(level: str, rows: int, n: int) -> int:
    return 0


def test_sizes_grow_while_the_strong_run_fits(script) -> None:
    n = 4 * 128  # with no workspace a worker needs 4 n^2 + 8 n^2 / 4 + 4 * 32 n bytes
    need = 4 * (n * n + 2 * (n // 4) * n + 32 * n)
    top, why = script.largest_size(need, 4, ["IV"], 128, no_workspace, step=128)
    assert top == n and "does not fit" in why[-1] and len(why) == 1 + 4 + 1


@pytest.mark.parametrize("gpus", [2, 1])
def test_bench_size_on_cpu_workers(script, tmp_path: Path, gpus: int) -> None:
    n, levels = 128, ["IV", "fp32"]
    results = script.Results("cpu", [1, 2])
    results.sizes = [n]
    results.plain = {f"{n}/{lv}": {"tflops": 1e-3, "ran": lv, "seconds": 1.0} for lv in levels}
    # one GPU: too little memory to keep A and C, so its strong run streams them
    free = 10**12 if gpus == 2 else 4 * (n * n + 2 * (n // 2) * n + 32 * n)
    with (
        distributed.LocalCluster(
            n_workers=gpus, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,  # fmt: skip
        distributed.Client(cluster) as client,
    ):
        client.amm.stop()
        workers = sorted(client.scheduler_info()["workers"])
        results.workers[gpus] = dict.fromkeys(workers, "cpu")
        script.bench_size(client, workers, 2, n, levels, results, free, no_workspace,
                          False, 0.0, lambda: None)  # fmt: skip
    (placed,) = results.placement
    assert placed["copies"] == gpus and placed["bits_equal"]
    assert placed["method"] == "made on each GPU"
    want = {("strong", n), ("weak", n)} if gpus == 2 else {("strong", n), ("weak", n // 2)}
    assert {(r["scaling"], r["m"]) for r in results.rows} == want
    for r in results.rows:
        assert r["on_a_blocks_worker"] and r["seconds"] > 0, r
        if gpus == 2:
            assert r["c_kept"] and r["blocks_per_worker"] == dict.fromkeys(workers, 2)
            assert r["error"] < 1e-6
        else:
            assert r["c_kept"] == (r["scaling"] == "weak")
    script.report(results, tmp_path)
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert len(saved["rows"]) == len(results.rows)
    assert "| strong | 128 | IV (IV) |" in (tmp_path / "scaling.md").read_text()


@pytest.mark.parametrize("tcp", [True, False])
def test_b_on_every_worker(script, tcp: bool) -> None:
    with (
        distributed.LocalCluster(
            n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,  # fmt: skip
        distributed.Client(cluster) as client,
    ):
        client.amm.stop()
        workers = sorted(client.scheduler_info()["workers"])
        b, record = script.place_b(client, workers, 64, tcp=tcp, timeout=60)
        assert record["copies"] == 3 and record["bits_equal"]
        assert record["gb"] == (2 * 4 * 64 * 64 / 1e9 if tcp else 0)

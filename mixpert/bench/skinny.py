"""The memory-bound-shape benchmark (``mixpert bench --skinny``): tall-and-skinny products and
their kin, every level that can run them and "auto", beside cuBLAS SGEMM and TF32 in one run.

Such products read one large operand and do little arithmetic per byte, so besides the ratio to
SGEMM each row carries the achieved bandwidth, (A + B + C bytes) / time, and its share of the
device-to-device copy bandwidth measured in the same run. Inputs are fresh phi = 0.5 matrices;
errors are ||C - C64||_F / ||C64||_F against a float64 product of the same float32 inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime import LADDER
from ..runtime.levels import AUTO
from ..testdata import gemmul8
from ..timing import gpu_median_seconds
from . import family_report
from .gemm import measure_methods, method_cells, summary

SHAPES = (  # m x k x n (issue 16's list: TSM2R, TSM2L and long-k forms)
    (65536, 4096, 16),
    (65536, 4096, 64),
    (65536, 4096, 128),
    (1048576, 512, 32),
    (1048576, 16, 16),
    (16384, 16384, 64),
    (4096, 65536, 64),
    (32, 262144, 32),
)
QUICK = ((65536, 4096, 16), (1048576, 16, 16), (32, 262144, 32))
LEVELS = tuple(lv.name for lv in LADDER if lv.kind in ("int8", "blocks", "ordered"))
METHODS = ("sgemm", "tf32", *LEVELS, AUTO.name)
PHI = 0.5


@dataclass(frozen=True)
class SkinnyRow:
    gpu: str
    m: int
    k: int
    n: int
    level: str
    time_ms: float
    ratio_to_sgemm: float
    error: float
    sgemm_error: float
    gbps: float
    pct_of_copy: float
    routed_to: str


def copy_gbps(cp: Any, nbytes: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second) for ``nbytes``."""
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    seconds = gpu_median_seconds(lambda: cp.copyto(dst, src), 0.0)
    return 2 * nbytes / seconds / 1e9


def run(quick: bool = False, progress: Callable[[str], None] = print) -> list[SkinnyRow]:
    from ..runtime import device

    cp = device.cupy_module()
    if cp is None:
        raise RuntimeError(f"the skinny benchmark needs a GPU: {device.unavailable_reason()}")
    gpu = device.device_name()
    copy = copy_gbps(cp, 1 << 30)
    progress(f"device-to-device copy: {copy:.0f} GB/s")
    rows: list[SkinnyRow] = []
    for seed, (m, k, n) in enumerate(QUICK if quick else SHAPES):
        rng = cp.random.default_rng(seed)
        a, b = gemmul8(cp, rng, (m, k), PHI), gemmul8(cp, rng, (k, n), PHI)
        flops, nbytes = 2.0 * m * k * n, 4.0 * (m * k + k * n + m * n)
        measured = measure_methods(cp, METHODS, a, b, flops)
        for name, ms, ratio, error, sgemm_error, routed in method_cells(measured):
            gbps = nbytes / measured[name][0] / 1e9
            row = (name, ms, ratio, error, sgemm_error, gbps, 100 * gbps / copy, routed)
            rows.append(SkinnyRow(gpu, m, k, n, *row))
        sgemm_gbps = nbytes / measured["sgemm"][0] / 1e9
        progress(summary(f"{m}x{k}x{n} (SGEMM {sgemm_gbps:.0f} GB/s)", measured))
        del a, b
        cp.get_default_memory_pool().free_all_blocks()
    return rows


FAMILY = family_report.Family(
    name="skinny",
    title="Memory-bound shapes",
    intro="Cells: throughput relative to cuBLAS SGEMM in the same run / error ||C - C64||_F / "
    "||C64||_F / achieved GB/s ((A + B + C bytes) / time) and its % of the device-to-device "
    "copy bandwidth of the same run. `auto` shows the level it routed to.",
    shape_header="m x k x n",
    shape=lambda r: (r.m, r.k, r.n),
    label=lambda s: f"{s[0]}x{s[1]}x{s[2]}",
    cell=lambda r: f"{r.ratio_to_sgemm:.2f}x / {r.error:.1e} / {r.gbps:.0f} ({r.pct_of_copy:.0f}%)",
    panel=("% of device-to-device copy bandwidth", lambda r: r.pct_of_copy, False),
)


def markdown(rows: list[SkinnyRow]) -> str:
    return family_report.markdown(FAMILY, rows)


def write_results(rows: list[SkinnyRow], out_dir: Path) -> Path:
    """skinny.json, skinny.md and skinny.png in ``out_dir``; returns the JSON's path."""
    return family_report.write(FAMILY, rows, out_dir)

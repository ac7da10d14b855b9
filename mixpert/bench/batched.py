"""The batched GPU benchmark (``mixpert bench --batched``): stacks of products, every level
with a stack path and "auto", beside cuBLAS strided-batched SGEMM and TF32 in one run.

Each row is one (batch, m, k, n) and method: its median time, its ratio to the strided-batched
SGEMM of the same inputs (ratios in one run are stable, absolute times are not), and its error
||C - C64||_F / ||C64||_F over the whole stack against a float64 product of the same float32
inputs. Inputs are fresh phi = 0.5 matrices (never zeros). Before the checked call the memory
pool is handed a NaN-filled block of the output's size, so a result that skips an entry shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..runtime import LADDER
from ..runtime.levels import AUTO
from ..testdata import gemmul8
from . import family_report
from .gemm import measure_methods, method_cells, summary

# batch x (m x k x n): the MAGMA seed's small sizes up to large ones, and the two skinny forms.
SHAPES = (
    (4096, 16, 16, 16),
    (4096, 32, 32, 32),
    (1024, 64, 64, 64),
    (1024, 128, 128, 128),
    (256, 256, 256, 256),
    (64, 1024, 64, 1024),
    (64, 1024, 1024, 64),
    (64, 1024, 1024, 1024),
    (16, 4096, 4096, 4096),
)
QUICK = ((4096, 32, 32, 32), (1024, 64, 64, 64), (64, 1024, 1024, 1024))
# Levels with a stack path (cuda.backend.STACK_PRODUCTS); fp16 runs pair by pair and is left out.
LEVELS = tuple(lv.name for lv in LADDER if lv.kind in ("int8", "ordered", "fp64"))
METHODS = ("sgemm", "tf32", *LEVELS, AUTO.name)
PHI = 0.5


@dataclass(frozen=True)
class BatchedRow:
    gpu: str
    batch: int
    m: int
    k: int
    n: int
    level: str
    time_ms: float
    ratio_to_sgemm: float
    error: float
    sgemm_error: float
    routed_to: str


def run(quick: bool = False, progress: Callable[[str], None] = print) -> list[BatchedRow]:
    from ..runtime import device

    cp = device.cupy_module()
    if cp is None:
        raise RuntimeError(f"the batched benchmark needs a GPU: {device.unavailable_reason()}")
    gpu = device.device_name()
    rows: list[BatchedRow] = []
    for seed, (batch, m, k, n) in enumerate(QUICK if quick else SHAPES):
        rng = cp.random.default_rng(seed)
        a = gemmul8(cp, rng, (batch, m, k), PHI)
        b = gemmul8(cp, rng, (batch, k, n), PHI)
        flops = 2.0 * batch * m * k * n
        measured = measure_methods(cp, METHODS, a, b, flops)
        rows += [BatchedRow(gpu, batch, m, k, n, *cells) for cells in method_cells(measured)]
        sgemm_ms = measured["sgemm"][0] * 1e3
        progress(summary(f"{batch} x {m}x{k}x{n} (SGEMM {sgemm_ms:.3f} ms)", measured))
        del a, b
        cp.get_default_memory_pool().free_all_blocks()
    return rows


FAMILY = family_report.Family(
    name="batched",
    title="Batched benchmark",
    intro="Cells: throughput relative to cuBLAS strided-batched SGEMM in the same run / error "
    "||C - C64||_F / ||C64||_F over the stack (phi = 0.5 inputs). `auto` shows the level it "
    "routed to. fp16 has no stack path (it runs pair by pair) and is left out.",
    shape_header="batch x (m x k x n)",
    shape=lambda r: (r.batch, r.m, r.k, r.n),
    label=lambda s: f"{s[0]} x {s[1]}x{s[2]}x{s[3]}",
    cell=lambda r: f"{r.ratio_to_sgemm:.2f}x / {r.error:.1e}",
    panel=("||C - C64||_F / ||C64||_F", lambda r: r.error, True),
)


def markdown(rows: list[BatchedRow]) -> str:
    return family_report.markdown(FAMILY, rows)


def write_results(rows: list[BatchedRow], out_dir: Path) -> Path:
    """batched.json, batched.md and batched.png in ``out_dir``; returns the JSON's path."""
    return family_report.write(FAMILY, rows, out_dir)

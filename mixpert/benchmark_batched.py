"""The batched GPU benchmark (``mixpert bench --batched``): stacks of products, every level
with a stack path and "auto", beside cuBLAS strided-batched SGEMM and TF32 in one run.

Each row is one (batch, m, k, n) and method: its median time, its ratio to the strided-batched
SGEMM of the same inputs (ratios in one run are stable, absolute times are not), and its error
||C - C64||_F / ||C64||_F over the whole stack against a float64 product of the same float32
inputs. Inputs are fresh phi = 0.5 matrices (never zeros). Before the checked call the memory
pool is handed a NaN-filled block of the output's size, so a result that skips an entry shows.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .benchmark import summary
from .runtime import LADDER, get_level
from .runtime.levels import AUTO
from .testdata import gemmul8
from .timing import gpu_median_seconds

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
# Levels with a stack path (cuda.STACK_PRODUCTS); fp16 runs pair by pair and is left out.
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


def _method(cp: Any, name: str, a: Any, b: Any) -> tuple[Callable[[], Any], str]:
    from .runtime import cuda, dispatch

    if name == "sgemm":
        return (lambda: cp.matmul(a, b)), "sgemm"  # cuBLAS strided-batched SGEMM
    if name == "tf32":
        return (lambda: cuda.tf32_product(a, b)), "tf32"
    if name == AUTO.name:
        chosen = dispatch.resolve_level(AUTO, a, b, "cuda")
        return (lambda: dispatch.matmul(a, b, AUTO, "cuda")), chosen.name
    level = get_level(name)
    return (lambda: cuda.matmul_stack(a, b, level)), name


def run(quick: bool = False, progress: Callable[[str], None] = print) -> list[BatchedRow]:
    from .runtime import device

    cp = device.cupy_module()
    if cp is None:
        raise RuntimeError(f"the batched benchmark needs a GPU: {device.unavailable_reason()}")
    gpu = device.device_name()
    rows: list[BatchedRow] = []
    for seed, (batch, m, k, n) in enumerate(QUICK if quick else SHAPES):
        rng = cp.random.default_rng(seed)
        a = gemmul8(cp, rng, (batch, m, k), PHI)
        b = gemmul8(cp, rng, (batch, k, n), PHI)
        reference = cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
        ref_norm = float(cp.linalg.norm(reference))
        flops = 2.0 * batch * m * k * n
        measured: dict[str, tuple[float, float, str]] = {}
        for name in METHODS:
            fn, routed = _method(cp, name, a, b)
            poison = cp.full((batch, m, n), cp.nan, dtype=cp.float32)
            del poison  # the pool hands this NaN-filled block to the next output of its size
            c = fn()
            error = float(cp.linalg.norm(c.astype(cp.float64) - reference)) / ref_norm
            del c
            measured[name] = (gpu_median_seconds(fn, flops), error, routed)
        sgemm_s, sgemm_error, _ = measured["sgemm"]
        for name, (seconds, error, routed) in measured.items():
            rows.append(
                BatchedRow(
                    gpu,
                    batch,
                    m,
                    k,
                    n,
                    name,
                    seconds * 1e3,
                    sgemm_s / seconds,
                    error,
                    sgemm_error,
                    routed,
                )  # fmt: skip
            )
        progress(summary(f"{batch} x {m}x{k}x{n} (SGEMM {sgemm_s * 1e3:.3f} ms)", measured))
        del a, b, reference
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def markdown(rows: list[BatchedRow]) -> str:
    methods = list(dict.fromkeys(r.level for r in rows))
    gpu = rows[0].gpu if rows else "?"
    lines = [
        f"# Batched benchmark on {gpu}",
        "",
        "Cells: throughput relative to cuBLAS strided-batched SGEMM in the same run / error "
        "||C - C64||_F / ||C64||_F over the stack (phi = 0.5 inputs). `auto` shows the level it "
        "routed to. fp16 has no stack path (it runs pair by pair) and is left out.",
        "",
        "| batch x (m x k x n) | SGEMM ms | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for shape in dict.fromkeys((r.batch, r.m, r.k, r.n) for r in rows):
        cells = {r.level: r for r in rows if (r.batch, r.m, r.k, r.n) == shape}
        text = [
            f"{cells[x].ratio_to_sgemm:.2f}x / {cells[x].error:.1e}"
            + (f" ({cells[x].routed_to})" if x == AUTO.name else "")
            for x in methods
        ]
        batch, m, k, n = shape
        lines.append(
            f"| {batch} x {m}x{k}x{n} | {cells['sgemm'].time_ms:.3f} | " + " | ".join(text) + " |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[BatchedRow], path: Path) -> None:
    """Ratio to SGEMM and error per shape, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plot_style import style

    shapes = list(dict.fromkeys((r.batch, r.m, r.k, r.n) for r in rows))
    labels = [f"{b}x{m}x{k}x{n}" for b, m, k, n in shapes]
    fig, (speed, error) = plt.subplots(1, 2, figsize=(14, 5))
    for name in dict.fromkeys(r.level for r in rows):
        mine = {(r.batch, r.m, r.k, r.n): r for r in rows if r.level == name}
        look = style(name)
        speed.plot(labels, [mine[s].ratio_to_sgemm for s in shapes], marker="o", label=name, **look)
        error.plot(labels, [mine[s].error for s in shapes], marker="o", label=name, **look)
    for ax in (speed, error):
        ax.tick_params(axis="x", rotation=45, labelsize=8)
        ax.grid(True, alpha=0.3)
    speed.set_yscale("log", base=2)
    speed.set_ylabel("throughput / cuBLAS strided-batched SGEMM (same run)")
    error.set_yscale("log")
    error.set_ylabel("||C - C64||_F / ||C64||_F")
    speed.legend(fontsize=8, ncol=2)
    fig.suptitle(f"batched products on {rows[0].gpu if rows else ''} (batch x m x k x n)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_results(rows: list[BatchedRow], out_dir: Path) -> Path:
    """batched.json, batched.md and batched.png in ``out_dir``; returns the JSON's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "batched.json"
    payload = {"machine": platform.node(), "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(payload, indent=1))
    (out_dir / "batched.md").write_text(markdown(rows))
    plot(rows, out_dir / "batched.png")
    return path

"""End-to-end benchmark: every sample on the GPU at its "gpu" size, against the same code with
native float32 (CuPy, cuBLAS SGEMM) and with every op at TF32, data resident on the GPU.

Each sample is tuned for its own tol (on inputs from seed 0 at the full size), then measured on
held-out inputs (seed 1): error against the
float64 run of the same code (MixPert Eq. 10), the sample's checks, and best-of-3 times after a
warm-up. Then each product is timed inside a call, natively and at the plan's levels
(``bench.sample_products``), for what bounds the sample: its speedup with products at no cost,
and with every product at the board's INT8 rate (one INT8 GEMM's against SGEMM at
INT8_RATIO_SIDE, measured in the same run). One JSON per sample lands in ``<out>/samples/`` as
soon as it is measured (so a run cut short keeps what it finished); ``--report`` merges them
into ``samples.json``, ``samples.md`` and ``samples.png``.

    python benchmarks/samples_e2e.py [NAME ...] [--out DIR] [--size-key gpu] [--backend cuda]
    python benchmarks/samples_e2e.py --report [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mixpert.bench.gemm import random_inputs, results_folder
from mixpert.bench.sample_products import (
    OpSeconds,
    bounds,
    mixpert_op_seconds,
    native_op_seconds,
)
from mixpert.runtime.device import device_name, exit_without_gpu
from mixpert.samples import Sample, SampleRun, array_module, load_sample, run_sample, sample_paths
from mixpert.timing import gpu_median_seconds

console = Console(width=160)
INT8_RATIO_SIDE = 8192  # a GEMM large enough to run the INT8 tensor cores at their rate


def record(run: SampleRun, size_key: str) -> dict[str, Any]:
    tf32_error, tf32_seconds = run.compared["TF32"]
    return {
        "sample": run.name,
        "size_key": size_key,
        "size": run.size,
        "input_gb": run.input_bytes / 1e9,
        "device": run.device,
        "tol": run.tol,
        "levels": run.plan.levels,
        "tuning_error": run.plan.error,
        "profiling_runs": run.plan.profiling_runs,
        "tune_seconds": run.tune_seconds,
        "predicted_gemm_speedup": run.plan.predicted_speedup,
        "error": run.error,
        "within_tol": run.error <= run.tol,
        "native_error": run.native_error,
        "tf32_error": tf32_error,
        "native_seconds": run.native_seconds,
        "mixpert_seconds": run.mixpert_seconds,
        "tf32_seconds": tf32_seconds,
        "speedup": run.speedup,
        "tf32_speedup": run.native_seconds / tf32_seconds,
        "checks": [
            {"name": c.name, "value": c.value, "limit": c.limit, "ok": c.ok} for c in run.checks
        ],
        "ok": run.ok,
    }


def int8_ratio(n: int = INT8_RATIO_SIDE) -> float:
    """SGEMM's time over cuBLAS's INT8 GEMM's at n x n x n, in this run."""
    import cupy as cp
    from power_ceiling import int8_gemm  # (a GPU benchmark: imported only on a GPU run)

    a, b = random_inputs(cp, n, n, n, "phi0.5", n)
    sgemm = gpu_median_seconds(lambda: a @ b, 2 * n**3)
    int8 = gpu_median_seconds(int8_gemm(n, n + 1), 2 * n**3)
    return sgemm / int8


def product_times(
    sample: Sample, run: SampleRun, backend: str, ratio: float | None
) -> dict[str, Any]:
    """Each op's products timed inside a call, natively and at the plan's levels, on the held-out
    inputs again (``run_sample``'s seed 1), and the bounds they give."""
    xp = array_module(backend)
    args = sample.make_inputs(xp, xp.random.default_rng(1), run.size)
    native, native_wall = native_op_seconds(sample.func, args, xp)
    ran, mixpert_wall = mixpert_op_seconds(sample.func.with_plan(run.plan), args, xp)
    empty = OpSeconds(0, 0.0)
    return {
        "int8_ratio": ratio,
        "timed_native_seconds": native_wall,  # the calls whose products were timed
        "timed_mixpert_seconds": mixpert_wall,
        "ops": {
            op: {
                "level": run.plan.levels.get(op, "auto"),
                "calls": native.get(op, empty).calls,
                "native_seconds": native.get(op, empty).seconds,
                "mixpert_seconds": ran.get(op, empty).seconds,
            }
            for op in sorted({*native, *ran})
        },
        "bounds": bounds(run.native_seconds, native, ran, run.plan.levels, ratio).as_dict(),
    }


def measure(names: list[str], out: Path, size_key: str, backend: str) -> None:
    folder = out / "samples"
    folder.mkdir(parents=True, exist_ok=True)
    ratio = int8_ratio() if backend == "cuda" else None
    if ratio is not None:
        console.print(f"SGEMM / INT8 GEMM at {INT8_RATIO_SIDE}: {ratio:.1f}")
    for name in names:
        sample = load_sample(name)
        size = sample.sizes[size_key]
        console.print(f"[bold]{name}[/bold] at size {size} ({sample.size_doc}), tol {sample.tol:g}")
        start = time.perf_counter()
        run = run_sample(
            sample,
            size,
            backend=backend,
            compare={"TF32": "tf32"},
        )
        row = record(run, size_key)
        try:
            row |= product_times(sample, run, backend, ratio)
        except Exception as error:  # (kept in the row: the run goes on to the next sample)
            row["product_times_error"] = f"{type(error).__name__}: {error}"
        row["wall_seconds"] = time.perf_counter() - start
        (folder / f"{name}.json").write_text(json.dumps(row, indent=2) + "\n")
        console.print(
            f"  speedup {row['speedup']:.2f}x (TF32 {row['tf32_speedup']:.2f}x), error "
            f"{row['error']:.2e} (tol {row['tol']:g}, fp32 {row['native_error']:.2e}, TF32 "
            f"{row['tf32_error']:.2e}), levels {sorted(set(row['levels'].values()))}, "
            f"ok={row['ok']}, {row['wall_seconds']:.0f} s"
        )
        b = row.get("bounds")
        console.print(
            f"  products not timed: {row['product_times_error']}" if b is None else
            f"  products {b['product_share']:.0%} of fp32's time, {_x(b['product_speedup'])} "
            f"faster at the plan's levels; bound with products free {_x(b['free_bound'])}, at "
            f"the board's INT8 rate {_x(b['board_bound'])}"
        )  # fmt: skip
        del run
        if backend == "cuda":
            import cupy

            cupy.get_default_memory_pool().free_all_blocks()


def markdown(rows: list[dict[str, Any]], mean: float) -> str:
    lines = [
        f"# End-to-end samples on {rows[0]['device']}",
        "",
        "Speedup over the same code with native float32 (CuPy / cuBLAS SGEMM), data on the GPU;",
        "errors are MixPert Eq. 10 against the float64 run on held-out inputs.",
        "",
        "| sample | size | inputs (GB) | tol | levels | mixpert error | fp32 error | TF32 error "
        "| fp32 (ms) | mixpert (ms) | speedup | TF32 speedup | checks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        levels = ", ".join(sorted(set(r["levels"].values())))
        checks = "; ".join(
            f"{c['name']} {c['value']:.3g} <= {c['limit']:g} {'ok' if c['ok'] else 'FAIL'}"
            for c in r["checks"]
        ).replace("|", "\\|")  # norms' bars would split the table's cells
        within = "" if r["within_tol"] else " (OVER tol)"
        lines.append(
            f"| {r['sample']} | {r['size']} | {r['input_gb']:.2f} | {r['tol']:g} | {levels} "
            f"| {r['error']:.2e}{within} | {r['native_error']:.2e} | {r['tf32_error']:.2e} "
            f"| {r['native_seconds'] * 1e3:.1f} | {r['mixpert_seconds'] * 1e3:.1f} "
            f"| {r['speedup']:.2f}x | {r['tf32_speedup']:.2f}x | {checks} |"
        )
    geomean = math.exp(sum(math.log(r["speedup"]) for r in rows) / len(rows))
    lines += ["", f"Mean speedup (arithmetic): **{mean:.2f}x**; geometric mean {geomean:.2f}x."]
    return "\n".join(lines + bounds_markdown(rows)) + "\n"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def bounds_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The table of what bounds each sample (rows measured with their products timed)."""
    timed = [r for r in rows if "bounds" in r]  # (rows of runs before the products were timed)
    if not timed:
        return []
    ratios = sorted({r["int8_ratio"] for r in timed if r["int8_ratio"] is not None})
    rate = "no INT8 rate on this device" if not ratios else (
        f"SGEMM / INT8 GEMM = {ratios[0]:.1f}"
        + (f"-{ratios[-1]:.1f}" if len(ratios) > 1 else "")
        + f" at {INT8_RATIO_SIDE}, measured where the samples ran"
    )  # fmt: skip
    lines = [
        "",
        "## What bounds each sample",
        "",
        "Each product timed inside a call (marks on its stream before and after it); the rest is",
        "the fp32 time outside the products, the same work either way. Bounds on the speedup: with",
        "products at no cost (fp32 / rest), and with each product at the board's INT8 rate",
        f"({rate}; an INT8 level's products floor at their INT8 GEMMs at that rate, a native",
        "level's at the time they took).",
        "",
        "| sample | levels | fp32 ms | products in it, ms (share) | rest ms | products at the "
        "plan's levels, ms | products' speedup | speedup | bound: products free | bound: board's "
        "INT8 rate | speedup / that bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in timed:
        b = r["bounds"]
        levels = ", ".join(sorted(set(r["levels"].values())))
        of_bound = "-" if b["board_bound"] is None else f"{r['speedup'] / b['board_bound']:.2f}"
        lines.append(
            f"| {r['sample']} | {levels} | {r['native_seconds'] * 1e3:.1f} "
            f"| {b['native_product_seconds'] * 1e3:.1f} ({b['product_share']:.0%}) "
            f"| {b['rest_seconds'] * 1e3:.1f} | {b['mixpert_product_seconds'] * 1e3:.1f} "
            f"| {_x(b['product_speedup'])} | {r['speedup']:.2f}x | {_x(b['free_bound'])} "
            f"| {_x(b['board_bound'])} | {of_bound} |"
        )
    boards = [r["bounds"]["board_bound"] for r in timed if r["bounds"]["board_bound"] is not None]
    if boards:
        lines += [
            "",
            f"Mean of the bounds at the board's INT8 rate: **{sum(boards) / len(boards):.2f}x** "
            f"over {len(boards)} samples (their speedups' mean: "
            f"{sum(r['speedup'] for r in timed) / len(timed):.2f}x over {len(timed)}).",
        ]
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mixpert.bench.plot_style import COLORS

    names = [r["sample"] for r in rows]
    x = range(len(rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    left.bar([i - 0.2 for i in x], [r["speedup"] for r in rows], 0.4, label="mixpert (tuned)",
             color=COLORS["mixpert"])  # fmt: skip
    left.bar([i + 0.2 for i in x], [r["tf32_speedup"] for r in rows], 0.4, label="TF32",
             color=COLORS["TF32"])  # fmt: skip
    left.axhline(1.0, color=COLORS["fp32"], linestyle="--", linewidth=1, label="native float32")
    bounded = [(i, r["bounds"]["board_bound"]) for i, r in enumerate(rows)
               if r.get("bounds") and r["bounds"]["board_bound"] is not None]  # fmt: skip
    if bounded:
        left.scatter([i - 0.2 for i, _ in bounded], [b for _, b in bounded], marker="_", s=300,
                     color="black", label="bound: products at the board's INT8 rate")  # fmt: skip
    left.set_xticks(list(x), names, rotation=30)
    left.set_ylabel("speedup over native float32")
    left.legend(loc="upper left", fontsize=8)
    for key, label in (("error", "mixpert"), ("native_error", "fp32"), ("tf32_error", "TF32")):
        right.scatter(names, [max(r[key], 1e-17) for r in rows], label=label, color=COLORS[label])
    right.scatter(names, [r["tol"] for r in rows], marker="_", s=400, color="black", label="tol")
    right.set_yscale("log")
    right.set_ylabel("error vs float64 (Eq. 10)")
    right.tick_params(axis="x", rotation=30)
    right.legend()
    fig.suptitle(f"mixpert samples end to end, {rows[0]['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(out: Path) -> None:
    rows = [json.loads(p.read_text()) for p in sorted((out / "samples").glob("*.json"))]
    if not rows:
        raise SystemExit(f"no results under {out / 'samples'}")
    mean = sum(r["speedup"] for r in rows) / len(rows)
    (out / "samples.json").write_text(json.dumps({"mean_speedup": mean, "rows": rows}, indent=2))
    (out / "samples.md").write_text(markdown(rows, mean))
    table = Table("sample", "size", "levels", "error", "tol", "fp32 ms", "mixpert ms", "speedup",
                  "TF32", "ok")  # fmt: skip
    for r in rows:
        table.add_row(
            r["sample"], str(r["size"]), ",".join(sorted(set(r["levels"].values()))),
            f"{r['error']:.1e}", f"{r['tol']:g}", f"{r['native_seconds'] * 1e3:.1f}",
            f"{r['mixpert_seconds'] * 1e3:.1f}", f"{r['speedup']:.2f}x",
            f"{r['tf32_speedup']:.2f}x", str(r["ok"]),
        )  # fmt: skip
    console.print(table)
    console.print(f"mean speedup {mean:.2f}x over {len(rows)} samples")
    try:
        plot(rows, out / "samples.png")
    except ImportError:
        console.print("matplotlib missing: no plot")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="samples (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--size-key", default="gpu")
    parser.add_argument("--backend", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--report", action="store_true", help="only merge the per-sample JSON")
    args = parser.parse_args()
    if args.backend == "cuda" and not args.report:  # (merging needs no GPU)
        exit_without_gpu("benchmarks/samples_e2e.py (or --backend cpu)")
    out = args.out or results_folder(device_name(), Path(__file__).parent / "results")
    if not args.report:
        measure(args.names or [p.stem for p in sample_paths()], out, args.size_key, args.backend)
    report(out)


if __name__ == "__main__":
    main()

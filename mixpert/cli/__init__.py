"""The ``mixpert`` command line: demo, run, levels, bench, inspect, tune."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from .cli_common import CONTEXT, console, print_json, user_errors
from .cli_inspect import inspect as inspect_command
from .cli_run import run as run_command
from .cli_tune import tune as tune_command


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="mixpert", prog_name="mixpert")
def main() -> None:
    """mixpert: float32 GEMMs of NumPy code on INT8/FP16 tensor cores at float32 accuracy.

    Exit status: 0 on success, 1 when a tol is not reached or a check fails, 2 on usage errors.
    """


@main.command("show-config", context_settings=CONTEXT)
def show_config_command() -> None:
    """What mixpert found: versions, CuPy, the GPU, and why a GPU is not used."""
    from .config import show_config

    show_config()


@main.command(context_settings=CONTEXT)
@click.option("--sample", default="mlp", show_default=True, help="a sample in samples/")
@click.option("--size", type=int, default=None, help="default: the sample's demo size")
@click.pass_context
def demo(ctx: click.Context, sample: str, size: int | None) -> None:
    """The main job: one sample end to end (`mixpert run mlp`): ops found, graph, tuned levels,
    error against float64 and time against native float32; the GPU when usable, else the CPU."""
    ctx.invoke(run_command, sample_file=sample, size=size)


@main.command(context_settings=CONTEXT)
@click.option("--n", "size", default=1024, show_default=True, help="square product size")
@click.option("--phi", default=0.5, show_default=True, help="exponent spread of the inputs")
@click.option(
    "--backend", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True
)
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON only")
def levels(size: int, phi: float, backend: str, seed: int, as_json: bool) -> None:
    """One n x n x n product at every level: bits kept, relative cost, error against float64
    (measured here, and as measured on an H100 at n = 8192) and time."""
    from dataclasses import asdict

    from .level_sweep import sweep_levels
    from .runtime import device

    with user_errors("--backend"):
        rows = sweep_levels(size, phi, seed, backend)  # type: ignore[arg-type]
    if as_json:
        print_json([asdict(row) for row in rows])
        return
    where = "GPU" if backend == "cuda" or (backend == "auto" and device.gpu_available()) else "CPU"
    console.print(
        f"[bold]mixpert.matmul[/bold], {size} x {size} x {size}, GEMMul8 inputs "
        f"phi = {phi}, on the {where} ({escape(device.unavailable_reason())})"
    )
    table = Table("level", "products", "bits (A x B)", "relative cost", "error here",
                  "error (H100, n = 8192)", "time (ms)")  # fmt: skip
    for row in rows:
        table.add_row(
            row.level, str(row.products), row.bits, row.relative_cost, f"{row.error:.2e}",
            row.reference_error, f"{row.seconds * 1e3:.1f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        "error = ||C - C64||_F / ||C64||_F (MixPert Eq. 10); bits: significand bits each operand "
        "keeps (INT8 levels: relative to its row's or column's largest entry); relative cost: "
        "time in units of one INT8 GEMM (H100)"
    )


@main.command()
@click.option("--quick", is_flag=True, help="square 1024, 4096, 8192 only")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(),
    default=None,
    help="results folder (default benchmarks/results/<gpu name>)",
)
@click.option(
    "--breakdown-n", default=16384, show_default=True, help="size of the level IV time breakdown"
)
@click.option(
    "--batched",
    is_flag=True,
    help="stacks of products (batch x m x k x n) against cuBLAS strided-batched SGEMM instead",
)
@click.option(
    "--skinny",
    is_flag=True,
    help="memory-bound shapes (tall-and-skinny, long k) with achieved bandwidth instead",
)
def bench(quick: bool, out_dir: str | None, breakdown_n: int, batched: bool, skinny: bool) -> None:
    """Time every level (IV-blocks: with --skinny) beside cuBLAS SGEMM and TF32 on the GPU;
    write JSON and a plot."""
    from pathlib import Path

    from . import bench_report, benchmark, benchmark_batched, benchmark_skinny

    shapes = benchmark_batched if batched else benchmark_skinny if skinny else None
    if shapes is not None:  # one of the shape families: its own table, JSON and plot
        with user_errors(f"mixpert bench --{'batched' if batched else 'skinny'}"):
            family_rows = shapes.run(quick=quick, progress=console.print)
        gpu = family_rows[0].gpu if family_rows else "gpu"
        folder = Path(out_dir) if out_dir else benchmark.results_folder(gpu)
        path = shapes.write_results(family_rows, folder)
        console.print(shapes.markdown(family_rows))
        console.print(f"wrote {path} and its .md and .png")
        return
    with user_errors("mixpert bench"):
        rows = benchmark.run(quick=quick, progress=console.print)
    stages = benchmark.breakdown(breakdown_n)
    gpu = rows[0].gpu if rows else "gpu"
    folder = Path(out_dir) if out_dir else benchmark.results_folder(gpu)
    path = benchmark.write_results(rows, {"breakdown_IV": {"n": breakdown_n, **stages}}, folder)
    console.print(bench_report.table(rows))
    console.print(bench_report.breakdown_table(stages, breakdown_n))
    bench_report.plot(rows, folder / "gemm.png")
    (folder / "gemm.md").write_text(bench_report.markdown(rows, {"n": breakdown_n, **stages}))
    console.print(f"wrote {path} and {folder / 'gemm.png'}")


main.add_command(inspect_command)
main.add_command(tune_command)
main.add_command(run_command)

if __name__ == "__main__":
    main()

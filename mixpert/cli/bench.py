"""``mixpert bench``: the GPU benchmarks (``mixpert.bench``), their tables, JSON, Markdown and
plots, written to ``--out`` or, run from a checkout, to the checkout's benchmarks/results/<gpu>."""

from __future__ import annotations

from pathlib import Path

import click

from .common import SIZE, console, user_errors


def checkout_results() -> Path | None:
    """``benchmarks/results`` of the repository checkout this mixpert is imported from (source
    tree on ``PYTHONPATH`` or an editable install, whose files link back to it); None for an
    installed wheel, which has no such folder beside it."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "benchmarks").is_dir():
        return root / "benchmarks" / "results"
    return None


@click.command("bench")
@click.option("--quick", is_flag=True, help="square 1024, 4096, 8192 only")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(),
    default=None,
    help="results folder; default, when mixpert is run from a checkout of its repository: "
    "<checkout>/benchmarks/results/<gpu name> (whatever the working directory); "
    "required otherwise (an installed mixpert)",
)
@click.option(
    "--breakdown-n",
    type=SIZE,
    default=16384,
    show_default=True,
    help="size of the level IV time breakdown",
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
    from ..bench import batched as batched_bench
    from ..bench import gemm, gemm_report
    from ..bench import skinny as skinny_bench

    where = Path(out_dir) if out_dir else checkout_results()
    if where is None:  # before the GPU time, not after
        raise click.UsageError(
            "--out is required: mixpert is not run from a checkout of its repository "
            "(no benchmarks/ folder beside the package)"
        )

    def folder_for(gpu: str) -> Path:
        return where if out_dir else gemm.results_folder(gpu, where)

    shapes = batched_bench if batched else skinny_bench if skinny else None
    if shapes is not None:  # one of the shape families: its own table, JSON and plot
        with user_errors(f"mixpert bench --{'batched' if batched else 'skinny'}"):
            family_rows = shapes.run(quick=quick, progress=console.print)
        folder = folder_for(family_rows[0].gpu if family_rows else "gpu")
        path = shapes.write_results(family_rows, folder)
        console.print(shapes.markdown(family_rows))
        console.print(f"wrote {path} and its .md and .png")
        return
    with user_errors("mixpert bench"):
        rows = gemm.run(quick=quick, progress=console.print)
    stages = gemm.breakdown(breakdown_n)
    folder = folder_for(rows[0].gpu if rows else "gpu")
    path = gemm.write_results(rows, {"breakdown_IV": {"n": breakdown_n, **stages}}, folder)
    console.print(gemm_report.table(rows))
    console.print(gemm_report.breakdown_table(stages, breakdown_n))
    gemm_report.plot(rows, folder / "gemm.png")
    (folder / "gemm.md").write_text(gemm_report.markdown(rows, {"n": breakdown_n, **stages}))
    console.print(f"wrote {path} and {folder / 'gemm.png'}")

"""``mixpert levels``: one n x n x n product at every level, error and time beside float32."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from .common import CONTEXT, SIZE, console, print_json, usable_backend, user_errors


@click.command("levels", context_settings=CONTEXT)
@click.option("--n", "size", type=SIZE, default=1024, show_default=True, help="square product size")
@click.option(
    "--phi",
    type=click.FloatRange(min=0),
    default=0.5,
    show_default=True,
    help="exponent spread of the inputs",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    callback=usable_backend,
)
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON only")
def levels(size: int, phi: float, backend: str, seed: int, as_json: bool) -> None:
    """One n x n x n product at every level: bits kept, relative cost, error against float64
    (measured here, and as measured on an H100 at n = 8192) and time."""
    from dataclasses import asdict

    from ..bench.levels import sweep_levels
    from ..runtime import device

    with user_errors("mixpert levels"):  # the options were checked while parsing
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

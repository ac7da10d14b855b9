"""``mixpert run samples/<name>.py``: one sample end to end, as a user would see it.

Prints the ops the pass found and their dependency graph, tunes the levels (progress bar over the
profiling runs; or takes ``--plan``), then on fresh held-out inputs prints the error against a
float64 run for native float32 and for mixpert, the sample's own checks, and both times.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table
from tqdm import tqdm

from .cli_common import console, plan_summary, plan_table
from .plan import Plan
from .samples import Sample, SampleRun, load_sample, run_sample, sample_paths


def ops_table(sample: Sample) -> Table:
    table = Table("op", "line", "source", title=f"matmul ops found in {sample.name}")
    for op in sample.func.ops.values():
        table.add_row(f"{op.qualname}:{op.line}", str(op.line), escape(op.source))
    return table


def graph_lines(sample: Sample) -> list[str]:
    """'line 12 -> line 15' for each edge (output of one op reaches the input of the other)."""
    ops, graph = sample.func.ops, sample.func.graph
    name = {op_id: f"{op.qualname}:{op.line}" for op_id, op in ops.items()}
    edges = [f"  {name[a]} -> {name[b]}" for a, b in sorted(graph.edges) if a in name and b in name]
    return edges or ["  (no edges: the ops are independent)"]


def result_table(run: SampleRun) -> Table:
    where = "GPU" if run.device != "cpu" else "CPU"
    table = Table(
        "",
        "error vs float64",
        f"time on the {where} (ms)",
        title=f"{run.name}, size {run.size}, held-out inputs",
    )
    table.add_row("native float32", f"{run.native_error:.2e}", f"{run.native_seconds * 1e3:.1f}")
    verdict = "within" if run.error <= run.tol else "[red]OVER[/red]"
    table.add_row(
        f"mixpert ({verdict} tol {run.tol:g})",
        f"{run.error:.2e}",
        f"{run.mixpert_seconds * 1e3:.1f}",
    )
    return table


@click.command("run")
@click.argument("sample_file", metavar="SAMPLE")
@click.option("--size", type=int, default=None, help="problem size (default: the sample's demo)")
@click.option("--tol", type=float, default=None, help="error bound (default: the sample's)")
@click.option("--tune-size", type=int, default=None, help="tune at this size (default: --size)")
@click.option("--plan", "plan_file", type=click.Path(exists=True), help="use this plan")
@click.option("--save-plan", type=click.Path(), default=None, help="write the tuned plan")
@click.option(
    "--backend", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True
)
@click.option("--seed", default=0, show_default=True)
def run(
    sample_file: str,
    size: int | None,
    tol: float | None,
    tune_size: int | None,
    plan_file: str | None,
    save_plan: str | None,
    backend: str,
    seed: int,
) -> None:
    """Run SAMPLE (samples/<name>.py, or a bare name) end to end: ops, graph, tuned levels,
    error against float64 and time with native float32 and with mixpert."""
    try:
        sample = load_sample(sample_file)
    except (FileNotFoundError, TypeError) as error:
        names = ", ".join(p.stem for p in sample_paths())
        raise click.BadParameter(f"{error} (samples here: {names})") from None
    size = size or sample.sizes["demo"]
    doc = (sys.modules[sample.func.py_func.__module__].__doc__ or "").strip()
    console.print(f"[bold]{escape(doc.splitlines()[0] if doc else sample.name)}[/bold]")
    console.print(f"size {size} ({escape(sample.size_doc)})")
    console.print(ops_table(sample))
    console.print("[bold]GEMM dependency graph[/bold] (edge: output reaches input)")
    console.print("\n".join(graph_lines(sample)), highlight=False)

    plan = Plan.load(plan_file, sample.func) if plan_file else None
    with tqdm(desc="tuning: profiling runs", unit="run", disable=plan is not None) as bar:
        result = run_sample(
            sample,
            size,
            backend=backend,
            tol=tol,
            tune_size=tune_size,
            plan=plan,
            seed=seed,
            on_run=bar.update,
        )
    console.print(plan_table(result.plan, title=f"levels for tol {result.tol:g}"))
    console.print(plan_summary(result.plan))
    console.print(result_table(result))
    for check in result.checks:
        mark = "[green]ok[/green]" if check.ok else "[red]FAILED[/red]"
        console.print(f"  {mark} {escape(check.name)} = {check.value:.3g} (limit {check.limit:g})")
    console.print(
        f"speedup over native float32: {result.speedup:.2f}x measured here"
        + (
            f" (the exact CPU emulation is not fast; cost model on the GPU: "
            f"{result.plan.predicted_speedup:.2f}x for the GEMMs)"
            if result.device == "cpu"
            else ""
        )
    )
    if save_plan:
        console.print(f"wrote {result.plan.save(Path(save_plan))}")
    if not result.ok:
        raise SystemExit(1)

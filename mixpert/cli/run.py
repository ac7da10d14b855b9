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

from ..plans.plan import Plan
from ..samples import Sample, SampleRun, load_sample, run_sample, sample_paths
from .common import (
    CONTEXT,
    SIZE,
    console,
    plan_summary,
    plan_table,
    positive_tol,
    print_json,
    progress,
    usable_backend,
    user_errors,
)


def ops_table(sample: Sample) -> Table:
    table = Table(title=f"matmul ops found in {sample.name}")
    table.add_column("op", overflow="fold")  # never cut
    table.add_column("line")
    table.add_column("source")
    for op_id, op in sample.func.ops.items():
        table.add_row(escape(op_id), str(op.line), escape(op.source))
    return table


def graph_lines(sample: Sample) -> list[str]:
    """'mlp:0 -> mlp:1' for each edge (output of one op reaches the input of the other)."""
    edges = [f"  {a} -> {b}" for a, b in sorted(sample.func.graph.edges)]
    return edges or ["  (no edges: the ops are independent)"]


def run_json(run: SampleRun) -> dict:
    """What ``--json`` prints: the plan, the errors, the checks and the times."""
    return {
        "sample": run.name, "size": run.size, "device": run.device, "tol": run.tol,
        "ok": run.ok, "error": run.error, "native_error": run.native_error,
        "native_seconds": run.native_seconds, "mixpert_seconds": run.mixpert_seconds,
        "speedup": run.speedup, "plan": run.plan.to_json(),
        "checks": [{"name": c.name, "value": c.value, "limit": c.limit, "ok": c.ok}
                   for c in run.checks],
    }  # fmt: skip


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


@click.command("run", context_settings=CONTEXT)
@click.argument("sample_file", metavar="SAMPLE")
@click.option("--size", type=SIZE, default=None, help="problem size (default: the sample's demo)")
@click.option(
    "--tol", type=float, default=None, callback=positive_tol,
    help="error bound, > 0 (default: the sample's)",
)  # fmt: skip
@click.option("--tune-size", type=SIZE, default=None, help="tune at this size (default: --size)")
@click.option("--plan", "plan_file", type=click.Path(exists=True), help="use this plan")
@click.option("--save-plan", type=click.Path(), default=None, help="write the tuned plan")
@click.option(
    "--backend", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
    callback=usable_backend,
)  # fmt: skip
@click.option(
    "--target", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
    help="the device the tuned plan is for (cuda on a CPU: the GPU's plan on the exact CPU "
    "backend; auto: the GPU when usable, else the CPU, where plans run native float32)",
)  # fmt: skip
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON only")
def run(
    sample_file: str,
    size: int | None,
    tol: float | None,
    tune_size: int | None,
    plan_file: str | None,
    save_plan: str | None,
    backend: str,
    target: str,
    seed: int,
    as_json: bool,
) -> None:
    """Run SAMPLE (a sample's name, or path/to/file.py defining SAMPLE) end to end: ops, graph,
    tuned levels, error against float64 and time with native float32 and with mixpert.

    Exits 1 when the error passes tol or a sample's own check fails."""
    try:
        sample = load_sample(sample_file)
    except (FileNotFoundError, TypeError, ValueError) as error:
        names = ", ".join(p.stem for p in sample_paths())
        raise click.BadParameter(f"{error} (samples: {names})", param_hint="SAMPLE") from None
    size = size or sample.sizes["demo"]
    plan = None
    if plan_file:
        with user_errors(f"--plan {plan_file}"):
            plan = Plan.load(plan_file, sample.func)
    if as_json:
        with user_errors(sample.name):
            result = run_sample(sample, size, backend=backend, tol=tol, tune_size=tune_size,
                                plan=plan, seed=seed, target=target)  # fmt: skip
        if save_plan:
            with user_errors("--save-plan"):
                result.plan.save(Path(save_plan))
        print_json(run_json(result))
        raise SystemExit(0 if result.ok else 1)
    doc = (sys.modules[sample.func.py_func.__module__].__doc__ or "").strip()
    console.print(f"[bold]{escape(doc.splitlines()[0] if doc else sample.name)}[/bold]")
    console.print(f"size {size} ({escape(sample.size_doc)})")
    console.print(ops_table(sample))
    console.print("[bold]GEMM dependency graph[/bold] (edge: output reaches input)")
    console.print("\n".join(graph_lines(sample)), highlight=False)

    with (
        progress("tuning: profiling runs", None, plan is None) as advance,
        user_errors(sample.name),
    ):
        result = run_sample(
            sample,
            size,
            backend=backend,
            tol=tol,
            tune_size=tune_size,
            plan=plan,
            seed=seed,
            on_run=advance,
            target=target,
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
        with user_errors("--save-plan"):
            console.print(f"wrote {result.plan.save(Path(save_plan))}")
    if not result.ok:
        raise SystemExit(1)

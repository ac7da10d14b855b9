"""``mixpert demo``: the main job, one sample end to end, saying only what is true where it runs.

With a usable GPU it is ``mixpert run <sample> --target cuda``: tuned for the GPU, then timed
there against the same code with native float32 (CuPy, cuBLAS SGEMM). Without one, nothing is
timed: the exact CPU backend is the GPU's bit-for-bit reference, far slower than native float32,
so it tells what a GPU computes, not how fast. It shows, at the sample's "ci" size (seconds on
the exact backend):

1. the products the compiler pass found and their dependency graph;
2. the plan the tuner makes for a GPU (target "cuda") and, per op, why: the error one rung
   cheaper would have cost;
3. every level on the exact CPU backend on held-out inputs: its error against float64 beside
   native float32's, and whether its bits are the GPU's (digests a GPU recorded for the same
   inputs, ``mixpert.recorded``; for other inputs, what the numerics contract promises);
4. the GPU's speed as recorded on GPUs (``mixpert.recorded``), labelled with GPU, date and file.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click
import numpy as np
from rich.markup import escape
from rich.table import Table

from ..metrics import output_error, reference_outputs
from ..plans.plan import Plan
from ..recorded import DemoDigests, demo_digests, gpu_speeds, output_digest
from ..runtime import device
from ..runtime.levels import NATIVE_LEVEL, get_level
from ..samples import Sample, load_sample, sample_paths
from ..tuning.targets import DEFAULT_CANDIDATES
from ..tuning.tuner import tune
from .common import CONTEXT, SIZE, console, plan_table, progress, user_errors
from .run import graph_lines, ops_table
from .run import run as run_command

TUNING_SEED = 0  # as ``mixpert run``: tuned on seed 0, judged on held-out inputs of seed 1
HELD_OUT_SEED = 1
# Levels whose bits are the same on every backend (docs/numerics.md, "Same bits everywhere"):
# exact integer slice products combined in a fixed order, or float32 FMAs in a fixed order.
# Native products (fp32, tf32, fp64) sum in each BLAS's own order, and fp16 in FP32 on GPUs.
SAME_BITS_KINDS = ("int8", "blocks", "ordered")
PLAN_LABEL = "mixpert: the plan above"


@click.command(context_settings=CONTEXT)
@click.option("--sample", default="mlp", show_default=True, help="a sample in samples/")
@click.option(
    "--size", type=SIZE, default=None,
    help="default: the sample's demo size on a GPU, its ci size (seconds) without one",
)  # fmt: skip
@click.pass_context
def demo(ctx: click.Context, sample: str, size: int | None) -> None:
    """The main job: one sample end to end. With a GPU: ops found, graph, the levels tuned for
    it, error against float64 and time against native float32, measured there. Without one:
    ops, graph, the GPU's plan and why, each level's error and bits on the exact CPU backend
    (the GPU's bits), and the GPU's speed as recorded on GPUs; nothing is timed here."""
    if device.gpu_available():
        ctx.invoke(run_command, sample_file=sample, size=size, target="cuda")
        return
    try:
        loaded = load_sample(sample)
    except (FileNotFoundError, TypeError, ValueError) as error:
        names = ", ".join(p.stem for p in sample_paths())
        raise click.BadParameter(f"{error} (samples: {names})", param_hint="--sample") from None
    size = size or loaded.sizes.get("ci") or loaded.sizes.get("demo")
    if size is None:
        raise click.BadParameter(f"{loaded.name} names no ci size: give one", param_hint="--size")
    with user_errors(loaded.name):
        ok = demo_without_gpu(loaded, size)
    if not ok:
        raise SystemExit(1)


# --- what the CPU demo computes -------------------------------------------------------------
@dataclass(frozen=True)
class LevelRun:
    """The sample with every op at one level (or under the tuned plan) on held-out inputs."""

    label: str
    levels: tuple[str, ...]  # each level the run used, once
    error: float  # Eq. 10 against float64
    digest: str  # mixpert.recorded.output_digest of the outputs


def copied(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh copies of array arguments: a sample may write into its inputs."""
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def cheaper_level(level: str) -> str | None:
    """The next cheaper level the tuner weighs for a GPU (None: ``level`` is the cheapest)."""
    rungs = sorted(DEFAULT_CANDIDATES, key=lambda name: get_level(name).relative_cost)
    index = rungs.index(level)
    return rungs[index - 1] if index > 0 else None


def op_reasons(sample: Sample, plan: Plan, args: tuple[Any, ...]) -> dict[str, str]:
    """Why each op got its level: the tuning error one rung cheaper (one run per op, on the
    tuning inputs) against the share of tol the tuner held the error to."""
    reference = reference_outputs(sample.func.py_func, copied(args))
    budget = plan.margin * plan.tol
    decisions = getattr(sample.func, "decision_ops", frozenset())
    reasons = {}
    for op in plan.ops:
        if op.native:
            reasons[op.op_id] = f"runs native: {op.native}"
            continue
        if op.level not in DEFAULT_CANDIDATES:  # the tuner left it as it ran
            reasons[op.op_id] = f"{op.level}: no product of it reached the runtime here"
            continue
        cheaper = cheaper_level(op.level)
        if cheaper is None:
            reasons[op.op_id] = f"{op.level}: the cheapest level weighed, within tol"
            continue
        levels = {**plan.levels, op.op_id: cheaper}
        error = output_error(sample.func.with_plan(levels)(*copied(args)), reference)
        if error > budget:
            reasons[op.op_id] = f"at {cheaper} the error would be {error:.1e} > {budget:.1e}"
        elif op.op_id in decisions:
            reasons[op.op_id] = (
                f"at {cheaper} the error would be {error:.1e}, within {budget:.1e}, but its "
                "result reaches a decision (argmin, a comparison): it must stay float32-grade"
            )
        else:
            reasons[op.op_id] = (
                f"at {cheaper} the error would be {error:.1e}, within {budget:.1e}, but held-out "
                "inputs or the error model for generic data of its size refuse it"
            )
    return reasons


def level_runs(
    sample: Sample, plan: Plan, args: tuple[Any, ...]
) -> tuple[list[LevelRun], Any, Any]:
    """Native float32, each level the tuner weighs for a GPU and the tuned plan, on ``args``;
    and the tuned plan's outputs and the float64 reference (for the sample's checks)."""
    reference = reference_outputs(sample.func.py_func, copied(args))

    def run(label: str, levels: Mapping[str, str]) -> tuple[LevelRun, Any]:
        outputs = sample.func.with_plan(dict(levels))(*copied(args))
        used = tuple(dict.fromkeys(levels[op] for op in sample.func.ops))
        return LevelRun(label, used, output_error(outputs, reference), output_digest(outputs)), (
            outputs
        )

    rows = [
        run(
            "native float32" if level == NATIVE_LEVEL else level,
            dict.fromkeys(sample.func.ops, level),
        )[0]
        for level in (NATIVE_LEVEL, *DEFAULT_CANDIDATES)
    ]
    tuned, outputs = run(PLAN_LABEL, plan.levels)
    return [*rows, tuned], outputs, reference


def same_bits(runs: list[LevelRun], recorded: DemoDigests | None) -> dict[str, str]:
    """Run label -> whether its bits are the GPU's: by the digests a GPU recorded for these
    inputs at each level the run used, else by the numerics contract."""
    digests = recorded.digests if recorded is not None else {}
    checked = {  # level -> its outputs here are the recorded GPU's, bit for bit
        run.levels[0]: run.digest == digests[run.levels[0]]
        for run in runs
        if run.label != PLAN_LABEL and len(run.levels) == 1 and run.levels[0] in digests
    }
    verdicts = {}
    for run in runs:
        exact = all(get_level(level).kind in SAME_BITS_KINDS for level in run.levels)
        if not all(level in checked for level in run.levels):
            verdicts[run.label] = "the same (by contract)" if exact else "may differ (BLAS order)"
        elif all(checked[level] for level in run.levels):
            verdicts[run.label] = "[green]the same[/green]" + (
                " (level by level)" if run.label == PLAN_LABEL else ""
            )
        else:
            verdicts[run.label] = "[red]DIFFER[/red]" if exact else "differ (BLAS sum order)"
    return verdicts


# --- what the CPU demo prints ---------------------------------------------------------------
def demo_without_gpu(sample: Sample, size: int) -> bool:
    """The demo where no GPU is usable (the module docstring); True when the tuned plan is
    within tol on held-out inputs and the sample's checks pass."""
    doc = (sys.modules[sample.func.py_func.__module__].__doc__ or "").strip()
    console.print(f"[bold]{escape(doc.splitlines()[0] if doc else sample.name)}[/bold]")
    console.print(f"No usable GPU: {escape(device.unavailable_reason())}.")
    console.print(
        "Nothing below is timed: the exact CPU backend computes the GPU's bits, far slower than "
        "native float32, so it shows what a GPU computes, not how fast. The GPU's speed is "
        "quoted as recorded on GPUs."
    )
    console.print(
        f"size {size} ({escape(sample.size_doc)}): small, for seconds on the exact backend"
    )
    console.print(ops_table(sample))
    console.print("[bold]GEMM dependency graph[/bold] (edge: output reaches input)")
    console.print("\n".join(graph_lines(sample)), highlight=False)

    tuning = sample.make_inputs(np, np.random.default_rng(TUNING_SEED), size)
    with progress("tuning for a GPU: profiling runs", None) as advance:
        plan = tune(sample.func, copied(tuning), tol=sample.tol, on_run=advance, measure=False,
                    target="cuda")  # fmt: skip
    reasons = op_reasons(sample, plan, tuning)
    console.print(
        "The tuner's plan for a GPU (target cuda), its errors computed on the exact backend: "
        "it lowers the ops with the largest share of GPU time first, one rung at a time, while "
        f"the tuning error stays within {plan.margin:.2f} x tol = {plan.margin * plan.tol:.1e} "
        "(room for other inputs)."
    )
    console.print(plan_table(plan, title=f"levels for a GPU, tol {plan.tol:g}", why=reasons))
    console.print(
        f"predicted speed-up of the products on a GPU (cost model): {plan.predicted_speedup:.2f}x; "
        f"{plan.profiling_runs} profiling runs"
    )

    args = sample.make_inputs(np, np.random.default_rng(HELD_OUT_SEED), size)
    runs, outputs, reference = level_runs(sample, plan, args)
    recorded = demo_digests(sample.name, size, HELD_OUT_SEED)
    console.print(levels_table(sample, plan, runs, recorded))
    if recorded is not None:
        console.print(
            f"the same: the outputs' SHA-256 digest equals the {escape(recorded.gpu)}'s for the "
            f"same inputs and level ({escape(recorded.source)}, {recorded.date})."
        )
    console.print(
        "INT8-sliced levels and fp32-ordered give the same bits on every backend "
        "(docs/numerics.md); native float32, tf32 and fp64 sum in each BLAS's own order, so "
        "theirs may differ."
    )
    tuned = runs[-1]
    checks = list(sample.checks(args, outputs, reference)) if sample.checks else []
    for check in checks:
        mark = "[green]ok[/green]" if check.ok else "[red]FAILED[/red]"
        console.print(f"  {mark} {escape(check.name)} = {check.value:.3g} (limit {check.limit:g})")
    print_recorded_speed(sample)
    return tuned.error <= plan.tol and all(check.ok for check in checks)


def levels_table(
    sample: Sample, plan: Plan, runs: list[LevelRun], recorded: DemoDigests | None
) -> Table:
    """Each run's error against float64, its GPU speed-up by the cost model, and its bits."""
    gpu_bits = f"bits vs the {recorded.gpu}'s" if recorded is not None else "bits on a GPU"
    table = Table(
        "every op at", "error vs float64", "within tol", "GPU speed-up (cost model)", gpu_bits,
        title=f"{sample.name}: each level on the exact CPU backend, held-out inputs",
    )  # fmt: skip
    native_cost = get_level(NATIVE_LEVEL).relative_cost
    verdicts = same_bits(runs, recorded)
    for run in runs:
        speedup = (
            plan.predicted_speedup
            if run.label == PLAN_LABEL
            else native_cost / get_level(run.levels[0]).relative_cost
        )
        table.add_row(
            escape(run.label),
            f"{run.error:.2e}",
            "yes" if run.error <= plan.tol else "no",
            f"{speedup:.2f}x",
            verdicts[run.label],
        )
    return table


def print_recorded_speed(sample: Sample) -> None:
    """The sample's end-to-end speed as recorded on GPUs, each row naming its GPU and date."""
    records = gpu_speeds()
    table = Table(
        "GPU", "recorded", "size", "levels", "native float32 (ms)", "mixpert (ms)", "speed-up",
        "error vs float64 (mixpert / native)",
        title=f"{sample.name} end to end as recorded on GPUs (not measured here)",
    )  # fmt: skip
    for record in records:
        row = record.samples.get(sample.name)
        if row is None:
            continue
        table.add_row(
            escape(record.gpu), record.date, str(row.size), ", ".join(row.levels),
            f"{row.native_seconds * 1e3:.1f}", f"{row.mixpert_seconds * 1e3:.1f}",
            f"{row.speedup:.2f}x", f"{row.error:.1e} / {row.native_error:.1e}",
        )  # fmt: skip
    if table.row_count:
        console.print(table)
    else:
        console.print(f"no GPU figures are recorded for {escape(sample.name)}")
    for record in records:
        console.print(
            f"recorded on {escape(record.gpu)} on {record.date}: {len(record.samples)} samples, "
            f"mean speed-up over native float32 {record.mean_speedup:.2f}x "
            f"({escape(record.source)})"
        )
    console.print(
        escape(
            "To measure on a GPU: pip install 'mixpert[cuda12]' (or [cuda13]), then mixpert demo."
        )
    )

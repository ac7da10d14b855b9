"""``mixpert tune path/to/file.py:func --tol 1e-5 --inputs args.npz [--out plan.json]``."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tqdm import tqdm

from .cli_inspect import load_function
from .plan import Plan
from .runtime.levels import get_level

console = Console()


def load_inputs(path: str) -> tuple[np.ndarray, ...]:
    """Positional arguments from an .npz: arr_0, arr_1, ... (np.savez order), else file order."""
    with np.load(path) as data:
        names = list(data.files)
        if all(n.startswith("arr_") for n in names):
            names.sort(key=lambda n: int(n[4:]))
        return tuple(data[n] for n in names)


def plan_table(plan: Plan, title: str) -> Table:
    """op, location, level, share of time, contribution to error, op speedup over fp32."""
    table = Table(
        "op",
        "location",
        "level",
        "share of time",
        "contribution to error",
        "op speedup",
        title=title,
        caption=f"tuning error {plan.error:.2e} (tol {plan.tol:g})",
    )
    fp32 = get_level("fp32").relative_cost
    for op in plan.ops:
        table.add_row(
            escape(op.op_id.split(":", 1)[-1]),  # the module is in the title
            escape(Path(op.location).name),
            op.level,
            f"{op.share:.1%}",
            f"{op.contribution:+.2e}",
            f"{fp32 / get_level(op.level).relative_cost:.2f}x",
        )
    return table


def plan_summary(plan: Plan) -> str:
    speed = f"predicted speedup over fp32: {plan.predicted_speedup:.2f}x"
    if plan.measured_speedup is not None:
        speed += f", measured {plan.measured_speedup:.2f}x"
    text = (
        f"{speed}; measured error {plan.error:.2e} (tol {plan.tol:g}); "
        f"{plan.profiling_runs} profiling runs"
    )
    if not plan.met_tol:
        text += "\n[red]tol is tighter than the most accurate level reaches[/red]"
    return text


@click.command("tune")
@click.argument("target")
@click.option("--tol", type=float, required=True, help="output error bound (MixPert Eq. 10)")
@click.option("--inputs", "inputs", type=click.Path(exists=True), required=True, help=".npz")
@click.option("--out", "out", type=click.Path(), default=None, help="plan file (JSON)")
@click.option("--levels", default=None, help="candidate levels, comma separated")
def tune(target: str, tol: float, inputs: str, out: str | None, levels: str | None) -> None:
    """Pick each op's level so the output stays within TOL of float64, as fast as possible."""
    from .jit import MixpertFunction, jit
    from .tuner import DEFAULT_CANDIDATES, _ordered
    from .tuner import tune as run_tune

    func = load_function(target)
    jitted = func if isinstance(func, MixpertFunction) else jit(func)
    args = load_inputs(inputs)
    candidates = tuple(levels.split(",")) if levels else DEFAULT_CANDIDATES
    budget = max(1, len(jitted.ops) * len(_ordered(candidates)))
    with tqdm(total=budget, desc="profiling runs", unit="run") as bar:
        plan = run_tune(jitted, args, tol=tol, candidates=candidates, on_run=lambda: bar.update())
    console.print(plan_table(plan, title=escape(target)))
    console.print(plan_summary(plan))
    if out:
        console.print(f"wrote {plan.save(Path(out))}")

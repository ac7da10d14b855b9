"""``mixpert tune path/to/file.py:func --tol 1e-5 --inputs args.npz [--out plan.json]``."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from tqdm import tqdm

from .cli_common import console, load_function, load_inputs, plan_summary, plan_table


@click.command("tune")
@click.argument("target")
@click.option("--tol", type=float, required=True, help="output error bound (MixPert Eq. 10)")
@click.option("--inputs", "inputs", type=click.Path(exists=True), required=True, help=".npz")
@click.option("--out", "out", type=click.Path(), default=None, help="plan file (JSON)")
@click.option("--levels", default=None, help="candidate levels, comma separated")
def tune(target: str, tol: float, inputs: str, out: str | None, levels: str | None) -> None:
    """Pick each op's level so the output stays within TOL of float64, as fast as possible."""
    from .jit import MixpertFunction, jit
    from .plan_file import check_folder
    from .tuner import DEFAULT_CANDIDATES, _ordered, checked_tol
    from .tuner import tune as run_tune

    try:
        tol = checked_tol(tol)
        if out:
            check_folder(out)  # before any tuning
    except (TypeError, ValueError) as error:  # PlanFileError included: it names the file
        raise click.BadParameter(str(error)) from None
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

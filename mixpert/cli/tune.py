"""``mixpert tune path/to/file.py:func --tol 1e-5 --inputs args.npz [--out plan.json]``."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from .common import (
    CONTEXT,
    console,
    load_function,
    load_inputs,
    plan_summary,
    plan_table,
    print_json,
    progress,
    user_errors,
)


@click.command("tune", context_settings=CONTEXT)
@click.argument("target")
@click.option("--tol", type=float, required=True, help="output error bound (MixPert Eq. 10)")
@click.option(
    "--inputs", type=click.Path(exists=True, dir_okay=False), required=True,
    help=".npz of the arguments (np.savez; named by parameter or in order)",
)  # fmt: skip
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="plan file (JSON)")
@click.option("--levels", default=None, help="candidate levels, comma separated")
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON only")
def tune(
    target: str, tol: float, inputs: str, out: str | None, levels: str | None, as_json: bool
) -> None:
    """Pick each op's level so the output stays within TOL of float64, as fast as possible.

    Exits 1 when TOL is tighter than the most accurate level reaches (the plan then uses it).
    """
    from ..jit import MixpertFunction, jit
    from ..plans import check_folder, read_plans
    from ..runtime.levels import get_level
    from ..tuner import DEFAULT_CANDIDATES, _ordered, checked_tol
    from ..tuner import tune as run_tune

    with user_errors("--tol"):
        tol = checked_tol(tol)
    if out:
        with user_errors("--out"):
            check_folder(out)  # before any tuning
            if Path(out).exists():
                read_plans(out)  # a file that is not a plan file is refused now, not after
    candidates = DEFAULT_CANDIDATES
    if levels:
        with user_errors("--levels"):
            candidates = tuple(get_level(name.strip()).name for name in levels.split(","))
    func = load_function(target)
    jitted = func if isinstance(func, MixpertFunction) else jit(func)
    args = load_inputs(inputs, jitted)
    budget = max(1, len(jitted.ops) * len(_ordered(candidates)))
    with progress("profiling runs", budget, enabled=not as_json) as advance, user_errors(inputs):
        plan = run_tune(jitted, args, tol=tol, candidates=candidates, on_run=advance)
    if out:
        with user_errors("--out"):
            saved = plan.save(Path(out))
    if as_json:
        print_json(plan.to_json())
    else:
        console.print(plan_table(plan, title=escape(target)))
        console.print(plan_summary(plan))
        if out:
            console.print(f"wrote {saved}")
    if not plan.met_tol:
        raise SystemExit(1)

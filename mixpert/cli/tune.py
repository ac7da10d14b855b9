"""``mixpert tune path/to/file.py:func --tol 1e-5 --inputs args.npz [--inputs more.npz ...]
[--target cpu|cuda] [--out plan.json]``.

Several ``--inputs`` (or one generator, ``--inputs path/to/file.py:make`` yielding argument
tuples, ``--count`` of them) tune on the first and hold the plan within tol on the others
(``validation``): the plan records them (``tuned_on``) and the margin used.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.markup import escape

from .common import (
    CONTEXT,
    console,
    load_function,
    load_input_sets,
    naming_the_product,
    plan_summary,
    plan_table,
    positive_tol,
    print_json,
    progress,
    user_errors,
)


def untunable(jitted: Any, args: Sequence[Any]) -> str | None:
    """Why a plan tuned on ``args`` would mean nothing (None: it would not): the function has
    no product, or none of them reaches mixpert with these arguments, which run natively
    whatever the plan says (a tuning error of 0 is then no achievement)."""
    ops = jitted.ops
    if not ops:
        return "the function has no matrix product for mixpert to tune"
    reasons = jitted.native_reasons(args)
    if any(op not in reasons for op in ops):
        return None
    names = list(inspect.signature(jitted.py_func).parameters)
    wide = [
        f"`{names[i] if i < len(names) else i}` {a.dtype}"
        for i, a in enumerate(args)
        if isinstance(a, np.ndarray) and a.dtype.kind in "fc" and a.dtype != np.float32
    ]
    if wide:
        return (
            f"the inputs are not float32 ({', '.join(wide)}): mixpert emulates float32 "
            "products, so every product would run natively and the plan would mean nothing; "
            "cast them with .astype(np.float32) (np.savez(path, a=a.astype(np.float32), ...))"
        )
    why = "; ".join(f"{op}: {reasons[op]}" for op in sorted(ops))
    return f"no product reaches mixpert with these inputs, so the plan would mean nothing ({why})"


@click.command("tune", context_settings=CONTEXT)
@click.argument("target")
@click.option(
    "--tol", type=float, required=True, callback=positive_tol,
    help="output error bound (MixPert Eq. 10), > 0",
)  # fmt: skip
@click.option(
    "--inputs",
    "inputs",
    multiple=True,
    required=True,
    help=".npz of the arguments (np.savez; named by parameter or in order); repeat it for "
    "several inputs, or give path/to/file.py:generator yielding argument tuples",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="inputs taken from a generator",
)
@click.option(
    "--target", "device_target", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
    show_default=True, help="the device whose time the plan minimises (auto: the GPU if usable)",
)  # fmt: skip
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="plan file (JSON)")
@click.option("--levels", default=None, help="candidate levels, comma separated")
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON only")
def tune(
    target: str, tol: float, inputs: tuple[str, ...], count: int, device_target: str,
    out: str | None, levels: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Pick each op's level so the output stays within TOL of float64, as fast as possible.

    Exits 1 when TOL is tighter than the most accurate level reaches (the plan then uses it).
    """
    from ..jit import MixpertFunction, jit
    from ..plans import check_folder, read_plans
    from ..runtime.levels import get_level
    from ..tuning.search import walk_budget
    from ..tuning.targets import candidates_for, resolve_target
    from ..tuning.tuner import checked_tol
    from ..tuning.tuner import tune as run_tune

    with user_errors("--tol"):
        tol = checked_tol(tol)
    if out:
        with user_errors("--out"):
            check_folder(out)  # before any tuning
            if Path(out).exists():
                read_plans(out)  # a file that is not a plan file is refused now, not after
    candidates = None
    if levels:
        with user_errors("--levels"):
            candidates = tuple(get_level(name.strip()).name for name in levels.split(","))
    func = load_function(target)
    jitted = func if isinstance(func, MixpertFunction) else jit(func)
    given = load_input_sets(inputs, count, jitted)
    with user_errors(f"--inputs {inputs[0]}"):
        reason = untunable(jitted, given[0])
    if reason:  # before the tuning, not after a plan of nothing
        raise click.UsageError(f"--inputs {inputs[0]}: {reason}")
    walked = candidates or candidates_for(resolve_target(device_target))
    budget = walk_budget(len(jitted.ops), walked)
    names = ", ".join(inputs) if len(given) == len(inputs) else f"{len(given)} from {inputs[0]}"
    with (
        progress("profiling runs", budget, enabled=not as_json) as advance,
        user_errors(inputs[0]),
        naming_the_product(jitted),
    ):
        plan = run_tune(
            jitted, given[0], tol=tol, candidates=candidates, on_run=advance,
            validation=given[1:], target=device_target,  # type: ignore[arg-type]
            tuned_on=f"{len(given)} input{'s' if len(given) > 1 else ''}: {names}",
        )  # fmt: skip
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

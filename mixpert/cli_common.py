"""What the CLI commands share: loading the named function and its inputs, the plan tables."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .plan import Plan
from .runtime.levels import NATIVE_LEVEL, get_level

console = Console()


def load_function(target: str) -> Any:
    """The object named by ``path/to/file.py:func`` (imported as its dotted module when it can)."""
    path_text, _, name = target.rpartition(":")
    if not path_text or not name:
        raise click.BadParameter(f"{target!r} is not of the form path/to/file.py:func")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise click.BadParameter(f"no file {path_text!r}")
    try:  # a dotted name relative to the working directory keeps op ids as the program sees them
        relative = path.with_suffix("").relative_to(Path.cwd())
        if str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        module = importlib.import_module(".".join(relative.parts))
    except (ValueError, ImportError):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    try:
        return getattr(module, name)
    except AttributeError:
        raise click.BadParameter(f"{path_text} has no {name!r}") from None


def parse_shapes(text: str, seed: int) -> tuple[np.ndarray, ...]:
    """'64x32,32x16' -> random float32 arrays of those shapes (standard normal)."""
    rng = np.random.default_rng(seed)
    shapes = [tuple(int(d) for d in part.split("x")) for part in text.split(",") if part]
    return tuple(rng.standard_normal(shape).astype(np.float32) for shape in shapes)


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
    native = get_level(NATIVE_LEVEL).relative_cost
    for op in plan.ops:
        table.add_row(
            escape(op.op_id.split(":", 1)[-1]),  # the module is in the title
            escape(Path(op.location).name),
            op.level,
            f"{op.share:.1%}",
            f"{op.contribution:+.2e}",
            f"{native / get_level(op.level).relative_cost:.2f}x",
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

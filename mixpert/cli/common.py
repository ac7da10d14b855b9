"""What the CLI commands share: the console, loading the named file and its inputs, user errors,
progress, the plan tables.

Output is written for terminals and pipes alike: when stdout is not a terminal the console is
wide (nothing is cut or wrapped mid-identifier) and progress bars are off.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..plans.plan import Plan
from ..runtime.levels import NATIVE_LEVEL, get_level
from ..source_files import load_module

console = Console() if sys.stdout.isatty() else Console(width=240, soft_wrap=True)
CONTEXT = {"help_option_names": ["-h", "--help"]}
TARGET_MODULE_PREFIX = "_mixpert_target_"


def load_function(target: str) -> Any:
    """The object named by ``path/to/file.py:name``, from exactly that file.

    The file is loaded from its path under a private module name (its top level runs once per
    process), nothing is added to ``sys.path``, and only ``.py`` files are taken.
    """
    path_text, _, name = target.rpartition(":")
    if not path_text or not name.isidentifier():
        raise click.BadParameter(
            f"{target!r} is not of the form path/to/file.py:name", param_hint="TARGET"
        )
    path = Path(path_text)
    if path.suffix != ".py":
        raise click.BadParameter(
            f"{path_text!r} is not a Python file: mixpert loads .py files only",
            param_hint="TARGET",
        )
    if not path.is_file():
        raise click.BadParameter(f"no file {path_text!r}", param_hint="TARGET")
    module = load_file(path.resolve())
    try:
        return getattr(module, name)
    except AttributeError:
        raise click.BadParameter(f"{path_text} has no {name!r}", param_hint="TARGET") from None


def load_file(path: Path) -> Any:
    """The module of file ``path`` under a private name (``source_files``); its errors reported."""
    digest = hashlib.blake2b(str(path).encode(), digest_size=6).hexdigest()
    try:
        return load_module(path, f"{TARGET_MODULE_PREFIX}{path.stem.replace('.', '_')}_{digest}")
    except Exception as error:
        raise click.ClickException(
            f"{path}: running its top level failed: {type(error).__name__}: {error}"
        ) from None


@contextlib.contextmanager
def user_errors(hint: str) -> Iterator[None]:
    """Report what the user's inputs caused (bad values, shapes, plans, no GPU) as one line
    with exit status 2, not a traceback."""
    try:
        yield
    except (ValueError, TypeError, LookupError) as error:
        raise click.UsageError(f"{hint}: {error}") from None
    except (OSError, RuntimeError) as error:
        raise click.UsageError(f"{hint}: {type(error).__name__}: {error}") from None


@contextlib.contextmanager
def progress(
    description: str, total: int | None, enabled: bool = True
) -> Iterator[Callable[[], None]]:
    """A rich progress bar on the console (off when not a terminal); yields its ``advance``."""
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not (enabled and console.is_terminal), transient=True,
    )  # fmt: skip
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout, unstyled (for ``--json``)."""
    click.echo(json.dumps(data, indent=2, default=str))


def parse_shapes(text: str, seed: int) -> tuple[np.ndarray, ...]:
    """'64x32,32x16' -> random float32 arrays of those shapes (standard normal)."""
    rng = np.random.default_rng(seed)
    try:
        shapes = [tuple(int(d) for d in part.split("x")) for part in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(not s or min(s) < 0 for s in shapes):
        raise click.BadParameter(
            f"{text!r}: give shapes as dimensions joined by 'x', separated by commas (64x32,32x16)",
            param_hint="--shapes",
        )
    return tuple(rng.standard_normal(shape).astype(np.float32) for shape in shapes)


def load_input_sets(paths: Sequence[str], count: int, func: Any) -> list[tuple[Any, ...]]:
    """Argument tuples from several .npz files, or ``count`` from one generator
    (``path/to/file.py:name``, a function yielding argument tuples)."""
    if len(paths) == 1 and ":" in paths[0] and not Path(paths[0]).is_file():
        make = load_function(paths[0])
        sets = [tuple(args) for args, _ in zip(make(), range(count), strict=False)]
        if not sets:
            raise click.BadParameter(f"{paths[0]} yielded no inputs", param_hint="--inputs")
        return sets
    for path in paths:
        if not Path(path).is_file():
            raise click.BadParameter(f"no file {path!r}", param_hint="--inputs")
    return [load_inputs(path, func) for path in paths]


def load_inputs(path: str, func: Any = None) -> tuple[np.ndarray, ...]:
    """The arguments in an .npz: by parameter name when the file names them (``np.savez(f,
    x=..., w=...)``), else in ``np.savez`` order (arr_0, arr_1, ...)."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise click.BadParameter(f"{path}: not readable ({error})", param_hint="--inputs") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise click.BadParameter(f"{path}: not an .npz file (np.savez)", param_hint="--inputs")
    with data:
        names = list(data.files)
        if all(n.startswith("arr_") and n[4:].isdigit() for n in names):
            return tuple(data[n] for n in sorted(names, key=lambda n: int(n[4:])))
        signature = inspect.signature(getattr(func, "py_func", func)).parameters
        params = list(signature)
        given = [p for p in params if p in names]
        unknown = sorted(set(names) - set(params))
        required = [p for p, spec in signature.items() if spec.default is spec.empty]
        missing = [p for p in required if p not in names]
        if unknown or missing or given != params[: len(given)]:
            raise click.BadParameter(
                f"{path} names {sorted(names)}; the function takes {params}"
                + (f" (unknown: {unknown})" if unknown else "")
                + (f" (missing: {missing})" if missing else "")
                + ("" if unknown or missing else " (only trailing parameters may be left out)"),
                param_hint="--inputs",
            )
        return tuple(data[p] for p in given)  # the rest take their defaults


def plan_table(plan: Plan, title: str) -> Table:
    """op, location, level, share of time, contribution to error, op speedup over fp32."""
    table = Table(title=title, caption=f"tuning error {plan.error:.2e} (tol {plan.tol:g})")
    for name in ("op", "location"):
        table.add_column(name, overflow="fold")  # never cut
    for name in ("level", "share of time", "contribution to error", "op speedup"):
        table.add_column(name)
    native = get_level(NATIVE_LEVEL).relative_cost
    for op in plan.ops:
        table.add_row(
            escape(op.op_id),
            escape(op.location),
            escape(f"native: {op.native}") if op.native else op.level,  # never reaches it
            f"{op.share:.1%}",
            f"{op.contribution:+.2e}",
            "1.00x" if op.native else f"{native / get_level(op.level).relative_cost:.2f}x",
        )
    return table


def plan_summary(plan: Plan) -> str:
    speed = f"predicted speedup over fp32: {plan.predicted_speedup:.2f}x"
    if plan.measured_speedup is not None:
        speed += f", measured {plan.measured_speedup:.2f}x"
    held_out = (
        f", on held-out inputs {plan.held_out_error:.2e}" if plan.held_out_error is not None else ""
    )
    text = (
        f"{speed}; measured error {plan.error:.2e} (tol {plan.tol:g}, tuned within "
        f"{plan.margin:g} tol){held_out}; {plan.profiling_runs} profiling runs"
    )
    if not plan.met_tol:
        text += "\n[red]tol is tighter than the most accurate level reaches[/red]"
    return text

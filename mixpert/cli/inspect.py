"""``mixpert inspect path/to/file.py:func``: ops, graph, levels, IR around each site, LLVM calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from ..plans.plan import Plan, check_plan_covers
from .common import (
    ARGUMENTS_HELP,
    CONTEXT,
    console,
    load_function,
    naming_the_product,
    parse_shapes,
    print_json,
    user_errors,
)


def known_passes(ctx: click.Context, param: click.Parameter, names: tuple[str, ...]) -> tuple:
    """``--print-ir-after``: 'all' or names of passes the pipelines run (checked while parsing,
    so a typo does not compile and run the function for nothing)."""
    if not names:
        return names
    from numba.core import compiler  # noqa: F401 - registers Numba's passes
    from numba.core.compiler_machinery import _pass_registry

    from ..passes.pipeline import PASS_NAMES

    numba_names = sorted(
        n for n in (cls.name() for cls in _pass_registry._registry) if not n.startswith("mixpert")
    )
    for name in names:
        if name != "all" and name not in PASS_NAMES and name not in numba_names:
            raise click.BadParameter(
                f"{name!r} is no compiler pass: give 'all', one of mixpert's "
                f"({', '.join(PASS_NAMES)}) or of Numba's ({', '.join(numba_names)})"
            )
    return names


@click.command("inspect", context_settings=CONTEXT)
@click.argument("target")
@click.option("--shapes", default=None, help=ARGUMENTS_HELP)
@click.option(
    "--plan", "plan_file", type=click.Path(exists=True), help="a plan file (mixpert tune)"
)
@click.option(
    "--print-ir-after", "ir_after", multiple=True, callback=known_passes,
    help="a compiler pass's name (mixpert-rewrite-matmul, nopython_type_inference, ...), or "
    "'all'; repeat it for several",
)  # fmt: skip
@click.option("--dot", "dot_file", type=click.Path(), help="write the graph as Graphviz DOT")
@click.option("--png", "png_file", type=click.Path(), help="draw the graph (needs matplotlib)")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print ops, graph and levels as JSON only")
def inspect(
    target: str,
    shapes: str | None,
    plan_file: str | None,
    ir_after: tuple[str, ...],
    dot_file: str | None,
    png_file: str | None,
    seed: int,
    as_json: bool,
) -> None:
    """Show the matmul ops mixpert finds in TARGET (path/to/file.py:func) and what it does to them.

    Without --shapes only the untyped pipeline runs (ops, graph, Numba IR); with --shapes the
    function is compiled and run once, adding shapes, predicted cost and LLVM call sites.
    """
    from .. import inspection
    from ..jit import MixpertFunction, jit

    func = load_function(target)
    args = parse_shapes(shapes, seed) if shapes else ()
    if plan_file is not None:  # the lookup `mixpert run --plan` uses
        jitted = func if isinstance(func, MixpertFunction) else jit(func)
        with user_errors(f"--plan {plan_file}"):
            plan = Plan.load(plan_file, jitted, args or None)
            if not args:  # no run checks its coverage (foreign ops, ops left out): here
                check_plan_covers(plan, jitted, stacklevel=2)
            func = jitted.with_plan(plan)
    with user_errors(f"--shapes {shapes}" if shapes else target), naming_the_product(func):
        result = inspection.inspect(func, *args, print_ir_after=list(ir_after) or None)
    if as_json:
        print_json(result.to_json())
        return

    result.print_to(console)  # the one rendering: str(mixpert.inspect(...)) is the same text
    if dot_file:
        Path(dot_file).write_text(result.to_dot())
        console.print(f"DOT written to {escape(dot_file)}")
    if png_file:
        _draw(result, png_file)


def _draw(result: Any, png_file: str) -> None:
    from ..inspection.graph_picture import draw_png

    try:
        tool = draw_png(result.ops, result.graph, png_file)
    except ImportError:
        raise click.ClickException(
            "--png needs Graphviz's dot or matplotlib (pip install 'mixpert[plot]')"
        ) from None
    console.print(f"PNG written to {escape(png_file)} ({tool})")

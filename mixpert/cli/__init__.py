"""The ``mixpert`` command line: demo, run, levels, bench, inspect, tune, calibrate, show-config.

``main`` is the console script (``mixpert = "mixpert.cli:main"``; ``python -m mixpert.cli`` runs
it too). Each command lives in its own module; ``common`` holds what they share. Commands import
the heavy parts (Numba, the compiler passes, CuPy) inside their bodies, so ``mixpert --help``
stays quick.
"""

from __future__ import annotations

import click

from .bench import bench as bench_command
from .calibrate import calibrate as calibrate_command
from .common import CONTEXT, plain_warnings
from .demo import demo as demo_command
from .inspect import inspect as inspect_command
from .levels import levels as levels_command
from .run import run as run_command
from .tune import tune as tune_command


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="mixpert", prog_name="mixpert")
@click.pass_context
def main(ctx: click.Context) -> None:
    """mixpert: float32 GEMMs of NumPy code on INT8/FP16 tensor cores at float32 accuracy.

    Exit status: 0 on success, 1 when a tol is not reached or a check fails, 2 on usage errors.
    """
    ctx.with_resource(plain_warnings())  # for the whole command, its option checks included


@main.command("show-config", context_settings=CONTEXT)
def show_config_command() -> None:
    """What mixpert found: versions, CuPy, the GPU, and why a GPU is not used."""
    from ..config import show_config

    show_config()


main.add_command(demo_command)
main.add_command(levels_command)
main.add_command(bench_command)
main.add_command(inspect_command)
main.add_command(tune_command)
main.add_command(run_command)
main.add_command(calibrate_command)

__all__ = ["main"]

"""The ``mixpert`` command line: demo, run, levels, bench, inspect, tune, show-config.

``main`` is the console script (``mixpert = "mixpert.cli:main"``; ``python -m mixpert.cli`` runs
it too). Each command lives in its own module; ``common`` holds what they share. Commands import
the heavy parts (Numba, the compiler passes, CuPy) inside their bodies, so ``mixpert --help``
stays quick.
"""

from __future__ import annotations

import click

from .bench import bench as bench_command
from .common import CONTEXT, SIZE, plain_warnings
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


@main.command(context_settings=CONTEXT)
@click.option("--sample", default="mlp", show_default=True, help="a sample in samples/")
@click.option("--size", type=SIZE, default=None, help="default: the sample's demo size")
@click.pass_context
def demo(ctx: click.Context, sample: str, size: int | None) -> None:
    """The main job: one sample end to end (`mixpert run mlp`): ops found, graph, tuned levels,
    error against float64 and time against native float32; the GPU when usable, else the CPU,
    where the GPU's plan runs on the exact CPU backend (the oracle the GPU agrees with)."""
    ctx.invoke(run_command, sample_file=sample, size=size, target="cuda")


main.add_command(levels_command)
main.add_command(bench_command)
main.add_command(inspect_command)
main.add_command(tune_command)
main.add_command(run_command)

__all__ = ["main"]

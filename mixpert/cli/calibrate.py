"""``mixpert calibrate``: measure where "auto" emulates on this GPU, save it, print it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.table import Table

from .common import CONTEXT, console, print_json

if TYPE_CHECKING:
    from ..runtime import auto, calibration
    from ..runtime.calibration import Calibration

NOTHING_SAVED = 1  # the exit status of --show where nothing is saved for this GPU's model


@click.command("calibrate", context_settings=CONTEXT)
@click.option("--show", is_flag=True, help="print the calibration saved for this GPU's model")
@click.option("--json", "as_json", is_flag=True, help="print the calibration as JSON only")
@click.pass_context
def calibrate(ctx: click.Context, show: bool, as_json: bool) -> None:
    """Measure where "auto" runs level IV on this GPU (a few seconds), save it for this GPU
    model in the cache folder ($MIXPERT_CACHE_DIR, else $XDG_CACHE_HOME/mixpert, else
    ~/.cache/mixpert) and print it. "auto" measures it itself at its first large product
    where none is saved; MIXPERT_CALIBRATE=0 keeps the shipped crossovers.

    Without a GPU there is nothing to calibrate: it says so and exits 0. --show exits 1
    where nothing is saved for this GPU's model.
    """
    from ..runtime import device

    if not device.gpu_available():
        console.print(
            f"mixpert calibrate: nothing to calibrate, no usable GPU here "
            f'({escape(device.unavailable_reason())}): "auto" runs native float32 on the CPU'
        )
        return
    from ..runtime import auto, calibration
    from ..runtime.cuda import calibrate as on_gpu

    if show:
        found = on_gpu.saved()
        if found is None:
            console.print(
                f"no calibration saved for this {escape(device.device_name())} in "
                f"{escape(str(calibration.cache_dir()))}: `mixpert calibrate` measures one"
            )
            ctx.exit(NOTHING_SAVED)
    else:
        if not as_json:
            console.print(f"measuring on the {escape(device.device_name())} (a few seconds) ...")
        found = on_gpu.recalibrate(auto.CROSSOVERS, auto.EMULATED_ON_GPU)
    if as_json:
        print_json(calibration.to_json(found))
        return
    print_calibration(found)


def print_calibration(found: Calibration) -> None:
    """The calibration as tables: each product's times and what "auto" runs there, then the
    thresholds beside the shipped ones, and where it is saved."""
    from ..runtime import auto, calibration

    who, m = found.identity, found.measurement
    crossovers = calibration.apply(auto.CROSSOVERS, found.thresholds)
    console.print(
        f"[bold]{escape(who.gpu)}[/bold] (sm{who.compute_capability}, driver {who.driver}, CUDA "
        f"runtime {who.cuda_runtime}, CuPy {escape(who.cupy)}, mixpert {escape(who.mixpert)}), "
        f"measured {found.measured_at} in {m.seconds:.1f} s"
    )
    console.print(
        f"INT8 GEMM {m.int8_tops:.0f} TOPS, SGEMM {m.sgemm_tflops:.1f} TFLOPS at "
        f'{calibration.RATE_SIDE}^3: INT8 {m.int8_ratio:.1f}x float32 ("auto" emulates only '
        f"from {calibration.MIN_INT8_RATIO:g}x)"
    )
    if m.rows:
        table = Table(
            "m x k x n", "SGEMM ms", "IV ms", "x SGEMM", "auto's IV ms", "x SGEMM",
            "auto runs", title="level IV against SGEMM (IV: replayed as one graph; auto's IV: "
            + ("replayed, its fallback decided on the GPU)" if m.auto_replays
               else "the direct call, its fallback checked on the host)"),
        )  # fmt: skip
        for row in m.rows:
            table.add_row(
                f"{row.m} x {row.k} x {row.n}", f"{row.sgemm_ms:.3f}", _ms(row.iv_ms),
                _ratio(row.sgemm_ms, row.iv_ms), _ms(row.auto_ms),
                _ratio(row.sgemm_ms, row.auto_ms), _runs(row, crossovers, m.auto_replays),
            )  # fmt: skip
        console.print(table)
    chosen = Table("threshold", "shipped (H100)", "here", title='the crossovers "auto" uses')
    for name in calibration.INT8_RULES:
        shipped, here = getattr(auto.CROSSOVERS, name), getattr(crossovers, name)
        chosen.add_row(name, calibration.shown(shipped), calibration.shown(here))
    console.print(chosen)
    console.print(
        f'"auto": {calibration.describe(found.thresholds)}; level IV taken where it runs at '
        f"least {calibration.MARGIN:g}x SGEMM on the ladder, at that side and every longer one"
    )
    where = f"saved in {found.path}" if found.path is not None else "not saved (see the warning)"
    console.print(escape(where))
    if not calibration.enabled():
        console.print(f'note: {calibration.SWITCH}=0 here: "auto" keeps the shipped crossovers')


def _runs(row: calibration.Row, crossovers: auto.Crossovers, replays: bool) -> str:
    from ..runtime import auto

    m, k, n = row.m, row.k, row.n
    replayed = replays and min(m, k, n) >= crossovers.replayed_min_dim
    return "IV" if auto.emulation_wins(m, k, n, crossovers) or replayed else "SGEMM"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ratio(sgemm: float, level: float | None) -> str:
    return "-" if level is None else f"{sgemm / level:.2f}x"

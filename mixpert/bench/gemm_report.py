"""Tables and plots of GPU benchmark rows (``bench.gemm.Row``), for the terminal and for files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table


def table(rows: Sequence[Any], dist: str = "phi0.5") -> Table:
    """One line per shape: each method's ratio to SGEMM and error."""
    methods = list(dict.fromkeys(r.level for r in rows))
    out = Table(title=f"x cuBLAS SGEMM throughput / error vs float64 ({dist} inputs)")
    out.add_column("m x k x n")
    out.add_column("SGEMM ms")
    for name in methods:
        out.add_column(name)
    shapes = dict.fromkeys((r.m, r.k, r.n) for r in rows if r.dist == dist)
    for m, k, n in shapes:
        cells = {r.level: r for r in rows if (r.m, r.k, r.n, r.dist) == (m, k, n, dist)}
        sgemm_ms = cells["sgemm"].time_ms
        out.add_row(
            f"{m}x{k}x{n}",
            f"{sgemm_ms:.3f}",
            *(f"{cells[x].ratio_to_sgemm:.2f}x {cells[x].error:.1e}" for x in methods),
        )
    return out


def markdown(rows: Sequence[Any], breakdown: dict[str, float] | None = None) -> str:
    """The run as Markdown: per distribution, one line per shape, ratio and error per method."""
    methods = list(dict.fromkeys(r.level for r in rows))
    gpu = rows[0].gpu if rows else "?"
    lines = [
        f"# GEMM benchmark on {gpu}",
        "",
        "Cells: throughput relative to cuBLAS SGEMM in the same run / error against float64 "
        "(||C - C64||_F / ||C64||_F). `auto` shows the level it routed to.",
        "",
    ]
    for dist in dict.fromkeys(r.dist for r in rows):
        lines += [
            f"## {dist} inputs",
            "",
            "| m x k x n | SGEMM ms | " + " | ".join(methods) + " |",
            "|---|---|" + "---|" * len(methods),
        ]
        for m, k, n in dict.fromkeys((r.m, r.k, r.n) for r in rows if r.dist == dist):
            cells = {r.level: r for r in rows if (r.m, r.k, r.n, r.dist) == (m, k, n, dist)}
            text = []
            for name in methods:
                cell = cells[name]
                routed = f" ({cell.routed_to})" if name == "auto" else ""
                text.append(f"{cell.ratio_to_sgemm:.2f}x / {cell.error:.1e}{routed}")
            lines.append(
                f"| {m}x{k}x{n} | {cells['sgemm'].time_ms:.3f} | " + " | ".join(text) + " |"
            )
        lines.append("")
    if breakdown:
        whole = breakdown["whole call"]
        lines += [
            f"## Level IV time breakdown, n = {breakdown.get('n', '?')}",
            "",
            "| stage | ms | share |",
            "|---|---|---|",
        ]
        lines += [
            f"| {name} | {ms:.3f} | {100 * ms / whole:.1f}% |"
            for name, ms in breakdown.items()
            if name != "n"
        ]
    return "\n".join(lines) + "\n"


def breakdown_table(stages: dict[str, float], n: int) -> Table:
    whole = stages["whole call"]
    out = Table(title=f"level IV time breakdown, {n}^3")
    out.add_column("stage")
    out.add_column("ms")
    out.add_column("share of the call")
    for name, ms in stages.items():
        if name == "n":
            continue
        out.add_row(name, f"{ms:.3f}", f"{100 * ms / whole:.1f}%")
    return out


def plot(rows: Sequence[Any], path: Path, dist: str = "phi0.5") -> None:
    """Ratio to SGEMM and error against float64 over square n, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plot_style import style

    square = [r for r in rows if r.shape == "square" and r.dist == dist]
    fig, (speed, error) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in dict.fromkeys(r.level for r in square):
        mine = sorted((r for r in square if r.level == name), key=lambda r: r.n)
        sizes = [r.n for r in mine]
        look = style(name)
        speed.plot(sizes, [r.ratio_to_sgemm for r in mine], marker="o", label=name, **look)
        error.plot(sizes, [r.error for r in mine], marker="o", label=name, **look)
    for ax in (speed, error):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (square n x n x n)")
        ax.grid(True, which="both", alpha=0.3)
    speed.set_ylabel("throughput / cuBLAS SGEMM (same run)")
    error.set_yscale("log")
    error.set_ylabel("||C - C64||_F / ||C64||_F")
    speed.legend(fontsize=8, ncol=2)
    gpu = rows[0].gpu if rows else ""
    fig.suptitle(f"mixpert levels vs cuBLAS on {gpu}, {dist} inputs")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""Tables, plots and files of the shape-family benchmarks (``bench.batched``,
``bench.skinny``): one line per shape, one column per method, ratios to SGEMM of one run."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..runtime.levels import AUTO


@dataclass(frozen=True)
class Family:
    """What differs between the families: names, the shape of a row, a cell, a second panel."""

    name: str  # file stem: <name>.json, <name>.md, <name>.png
    title: str  # "Batched benchmark" (the heading adds "on <gpu>")
    intro: str  # what a cell says
    shape_header: str  # "batch x (m x k x n)"
    shape: Callable[[Any], tuple[int, ...]]  # row -> its shape
    label: Callable[[tuple[int, ...]], str]  # shape -> text
    cell: Callable[[Any], str]  # row -> cell text ("auto" cells add the level they ran)
    panel: tuple[str, Callable[[Any], float], bool]  # second plot: y label, value, log scale


def markdown(family: Family, rows: Sequence[Any]) -> str:
    methods = list(dict.fromkeys(r.level for r in rows))
    gpu = rows[0].gpu if rows else "?"
    lines = [
        f"# {family.title} on {gpu}",
        "",
        family.intro,
        "",
        f"| {family.shape_header} | SGEMM ms | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for shape in dict.fromkeys(family.shape(r) for r in rows):
        cells = {r.level: r for r in rows if family.shape(r) == shape}
        text = [  # "-": a method that does not take this shape (GEMMul8 has no stacks)
            "-" if x not in cells
            else family.cell(cells[x]) + (f" ({cells[x].routed_to})" if x == AUTO.name else "")
            for x in methods
        ]  # fmt: skip
        sgemm_ms = cells["sgemm"].time_ms
        lines.append(f"| {family.label(shape)} | {sgemm_ms:.3f} | " + " | ".join(text) + " |")
    return "\n".join(lines) + "\n"


def plot(family: Family, rows: Sequence[Any], path: Path) -> None:
    """Ratio to SGEMM and the family's second quantity per shape, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plot_style import style

    shapes = list(dict.fromkeys(family.shape(r) for r in rows))
    labels = [family.label(s) for s in shapes]
    ylabel, value, log_scale = family.panel
    fig, (speed, second) = plt.subplots(1, 2, figsize=(14, 5))
    for name in dict.fromkeys(r.level for r in rows):
        mine = {family.shape(r): r for r in rows if r.level == name}
        look = style(name)
        ratios = [mine[s].ratio_to_sgemm if s in mine else float("nan") for s in shapes]
        seconds = [value(mine[s]) if s in mine else float("nan") for s in shapes]
        speed.plot(labels, ratios, marker="o", label=name, **look)
        second.plot(labels, seconds, marker="o", label=name, **look)
    for ax in (speed, second):
        ax.tick_params(axis="x", rotation=45, labelsize=8)
        ax.grid(True, alpha=0.3)
    speed.set_yscale("log", base=2)
    speed.set_ylabel("throughput / cuBLAS SGEMM (same run)")
    if log_scale:
        second.set_yscale("log")
    second.set_ylabel(ylabel)
    speed.legend(fontsize=8, ncol=2)
    fig.suptitle(f"{family.title} on {rows[0].gpu if rows else ''} ({family.shape_header})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(family: Family, rows: Sequence[Any], out_dir: Path) -> Path:
    """<name>.json, <name>.md and <name>.png in ``out_dir``; returns the JSON's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{family.name}.json"
    payload = {"machine": platform.node(), "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(payload, indent=1))
    (out_dir / f"{family.name}.md").write_text(markdown(family, rows))
    plot(family, rows, out_dir / f"{family.name}.png")
    return path

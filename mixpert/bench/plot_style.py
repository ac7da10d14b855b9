"""One look for every plot: a fixed colour per method across panels and figures, baselines
(cuBLAS SGEMM, TF32, native float32) dashed, no internal targets drawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..runtime.levels import LADDER

BASELINES = ("sgemm", "fp32", "tf32", "TF32", "native float32")
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939")  # fmt: skip
_ORDER = ("sgemm", "tf32", *(level.name for level in LADDER if level.emulated), "auto",
          "mixpert", "fp64", "fp32-ordered")  # fmt: skip
COLORS = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(_ORDER)}
COLORS.update({"fp32": COLORS["sgemm"], "native float32": COLORS["sgemm"], "TF32": COLORS["tf32"]})


def style(method: str) -> dict[str, Any]:
    """matplotlib keywords for ``method``: its colour, and a dashed line for a baseline."""
    return {
        "color": COLORS.get(method, "#444444"),
        "linestyle": "--" if method in BASELINES else "-",
    }


def grouped_bars(
    path: Path,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    ylabel: str,
    size: tuple[float, float] = (8, 3.5),
) -> None:
    """One bar per series in each group (ratios: a line at 1), written as a PNG to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=size)
    for i, (label, values) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar([j + offset for j in range(len(groups))], values, width, label=label)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2 if len(series) > 4 else 1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

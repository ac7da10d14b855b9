"""One look for every plot: a fixed colour per method across panels and figures, baselines
(cuBLAS SGEMM, TF32, native float32) dashed, no internal targets drawn."""

from __future__ import annotations

from typing import Any

from .runtime.levels import LADDER

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

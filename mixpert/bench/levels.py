"""``mixpert levels``: one real-sized product at every level, beside native float32."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..metrics import float64_product, relative_error
from ..runtime import LADDER, device, dispatch
from ..testdata import gemmul8
from ..timing import best_time, synchronizer


@dataclass(frozen=True)
class LevelRow:
    level: str
    products: int
    error: float  # measured here
    seconds: float
    bits: str = "24 x 24"  # significand bits kept per operand (Level.bits)
    relative_cost: str = "-"  # in INT8 GEMMs of the same shape (Level.relative_cost)
    reference_error: str = "-"  # Level.expected_error: phi = 0.5, n = 8192, H100


def sweep_levels(
    n: int, phi: float = 0.5, seed: int = 0, backend: dispatch.Backend = "auto"
) -> list[LevelRow]:
    """Error against float64 and time for every level on an n x n x n product."""
    rng = np.random.default_rng(seed)
    a = gemmul8(np, rng, (n, n), phi)
    b = gemmul8(np, rng, (n, n), phi)
    reference = float64_product(a, b)
    chosen = dispatch.choose_backend(a, b, backend)
    xp = device.cupy_module() if chosen == "cuda" else np
    a, b = xp.asarray(a), xp.asarray(b)
    sync = synchronizer(xp)
    label = "numpy float32" if xp is np else "cupy float32"
    rows = []
    for level, product in [
        (None, lambda: xp.matmul(a, b)),
        *(
            (level, lambda lv=level: dispatch.np_matmul_at_level(a, b, lv, chosen))
            for level in LADDER
        ),
    ]:
        try:
            out = product()  # also the warm-up: kernel compilation, handles, workspaces
        except NotImplementedError:  # a level this GPU cannot run (IV-blocks before sm_80)
            rows.append(LevelRow(level.name, level.products, float("nan"), float("nan")))
            continue
        error = relative_error(xp.asarray(out), xp.asarray(reference))
        seconds = best_time(product, sync, 1, warm_up=False)
        if level is None:
            rows.append(LevelRow(label, 1, error, seconds))
            continue
        rows.append(
            LevelRow(
                level.name, level.products, error, seconds, level.bits,
                f"{level.relative_cost:g}", f"{level.expected_error:.1e}",
            )
        )  # fmt: skip
    return rows

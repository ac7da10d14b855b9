"""Input generators for tests, tables and benchmarks (GEMMul8's phi inputs and friends)."""

from __future__ import annotations

from typing import Any


def gemmul8(xp: Any, rng: Any, shape: tuple[int, ...], phi: float = 0.5) -> Any:
    """GEMMul8's test matrix (U - 0.5) * exp(phi * N(0, 1)) as float32, on ``xp``'s device.

    ``xp`` is numpy or cupy and ``rng`` its ``random.default_rng(seed)``; phi widens the
    exponent spread. Drawn and computed in float64, rounded once to float32, so a seed gives
    the same matrix on NumPy whatever the caller (the recorded accuracy tables rely on it).
    """
    u = rng.random(shape) - 0.5
    return (u * xp.exp(phi * rng.standard_normal(shape))).astype(xp.float32)

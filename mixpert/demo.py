"""The main job's demo: one real-sized product at every level, beside native float32."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .runtime import LADDER, device, dispatch


@dataclass(frozen=True)
class DemoRow:
    level: str
    products: int
    error: float
    seconds: float


def gemmul8_matrix(rng: np.random.Generator, shape: tuple[int, int], phi: float) -> np.ndarray:
    """GEMMul8's test matrix (U - 0.5) * exp(phi * N(0, 1)); phi widens the exponent spread."""
    u = rng.random(shape) - 0.5
    return (u * np.exp(phi * rng.standard_normal(shape))).astype(np.float32)


def relative_error(c: Any, reference: np.ndarray) -> float:
    """MixPert's Equation 10: ||C - C64||_F / ||C64||_F."""
    c = np.asarray(c.get() if hasattr(c, "get") else c, dtype=np.float64)
    return float(np.linalg.norm(c - reference) / np.linalg.norm(reference))


def timed(fn: Any, sync: Any) -> tuple[Any, float]:
    fn()  # warm-up: kernel compilation, handles, workspaces
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def run_demo(n: int, phi: float = 0.5, seed: int = 0, backend: str = "auto") -> list[DemoRow]:
    """Error against float64 and time for every level on an n x n x n product."""
    rng = np.random.default_rng(seed)
    a = gemmul8_matrix(rng, (n, n), phi)
    b = gemmul8_matrix(rng, (n, n), phi)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    chosen = dispatch.choose_backend(a, b, backend)  # type: ignore[arg-type]
    if chosen == "cuda":
        cp = device.cupy_module()
        a, b = cp.asarray(a), cp.asarray(b)
        sync = cp.cuda.Device().synchronize
        native = lambda: a @ b  # noqa: E731
    else:
        sync = lambda: None  # noqa: E731
        native = lambda: np.matmul(a, b)  # noqa: E731
    out, seconds = timed(native, sync)
    rows = [
        DemoRow(
            "numpy float32" if chosen == "cpu" else "cupy float32",
            1,
            relative_error(out, reference),
            seconds,
        )
    ]
    for level in LADDER:
        out, seconds = timed(lambda lv=level: dispatch.matmul(a, b, lv, chosen), sync)
        rows.append(DemoRow(level.name, level.products, relative_error(out, reference), seconds))
    return rows

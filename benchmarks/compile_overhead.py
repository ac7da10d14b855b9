"""Compile time of ``mixpert.jit`` against plain ``numba.njit``, and per-call overhead of a site.

Compile time: each measurement runs in a fresh interpreter (Numba's in-process caches of library
overloads would otherwise favour whichever compiles second), compiling a set of NumPy functions
with one decorator, cold (first compile in the process, which includes Numba's own np.dot
overloads) and warm (the same functions again under new dispatchers, after a warm-up).

Per-call overhead: a 4 x 4 x 4 float32 product through the rewritten site, minus the same product
through ``mixpert.matmul`` directly (level IV); and, at level fp32, the jitted call minus plain
``numba.njit`` (the native path's status round trip).

Writes benchmarks/results/compile-overhead.json and .md.
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import textwrap
import timeit
from pathlib import Path

import numba
import numpy as np

RESULTS = Path(__file__).parent / "results"
REPEATS = 5

WORKLOAD = textwrap.dedent(
    """
    import time, numpy as np, numba, mixpert

    def mlp(x, w1, w2, w3):
        h = np.maximum(x @ w1, np.float32(0))
        h = np.maximum(h @ w2, np.float32(0))
        return h @ w3

    def power(a, x, steps):
        for _ in range(steps):
            x = a @ x
            x = x / np.sqrt(np.sum(x * x))
        return x

    def gram(a, b):
        g = np.dot(a.T, a)
        c = a.dot(b)
        return g @ c

    def kmeans_step(x, c):
        d = np.sum(x * x, axis=1).reshape(-1, 1) - 2 * (x @ c.T) + np.sum(c * c, axis=1)
        labels = np.argmin(d, axis=1)
        out = np.zeros_like(c)
        for j in range(c.shape[0]):
            mask = labels == j
            if mask.any():
                out[j] = x[mask].sum(axis=0) / mask.sum()
        return out

    f32 = lambda *s: np.ones(s, np.float32)
    CASES = [
        (mlp, (f32(16, 8), f32(8, 8), f32(8, 8), f32(8, 4))),
        (power, (f32(8, 8), f32(8, 1), 3)),
        (gram, (f32(8, 8), f32(8, 8))),
        (kmeans_step, (f32(32, 4), f32(3, 4))),
    ]

    def compile_all(make):
        start = time.perf_counter()
        for func, args in CASES:
            make(func)(*args)
        return time.perf_counter() - start

    make = {"njit": numba.njit, "mixpert": mixpert.jit}[MODE]
    cold = compile_all(make)
    warm = compile_all(make)
    print(cold, warm)
    """
)


def compile_times(mode: str) -> tuple[float, float]:
    code = f"MODE = {mode!r}\n" + WORKLOAD
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    cold, warm = map(float, out.stdout.split())
    return cold, warm


def per_call_overhead() -> dict[str, float]:
    import mixpert

    a = np.random.default_rng(0).random((4, 4), dtype=np.float32)

    def product(x, y):
        return x @ y

    emulated = mixpert.jit(product)
    emulated.plan = dict.fromkeys(emulated.ops, "IV")
    native = emulated.with_plan(dict.fromkeys(emulated.ops, "fp32"))
    plain = numba.njit(product)
    for f in (emulated, native, plain):
        f(a, a)

    def best(stmt):  # microseconds per call, best of REPEATS batches
        return min(timeit.repeat(stmt, number=2000, repeat=REPEATS)) / 2000 * 1e6

    direct = best(lambda: mixpert.matmul(a, a, level="IV"))
    jitted = best(lambda: emulated(a, a))
    fp32 = best(lambda: native(a, a))
    njit = best(lambda: plain(a, a))
    return {
        "direct_matmul_IV_us": direct,
        "jit_IV_us": jitted,
        "overhead_IV_us": jitted - direct,
        "jit_fp32_us": fp32,
        "njit_us": njit,
        "overhead_fp32_us": fp32 - njit,
    }


def main() -> None:
    runs = {mode: [compile_times(mode) for _ in range(REPEATS)] for mode in ("njit", "mixpert")}
    med = {
        mode: {
            "cold_s": statistics.median(c for c, _ in r),
            "warm_s": statistics.median(w for _, w in r),
        }
        for mode, r in runs.items()
    }
    ratio_cold = med["mixpert"]["cold_s"] / med["njit"]["cold_s"]
    ratio_warm = med["mixpert"]["warm_s"] / med["njit"]["warm_s"]
    overhead = per_call_overhead()
    result = {
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "numba": numba.__version__,
        "functions": ["mlp", "power", "gram", "kmeans_step"],
        "compile": med,
        "compile_ratio_cold": ratio_cold,
        "compile_ratio_warm": ratio_warm,
        "per_call": overhead,
        "targets": {"compile_ratio": 1.3, "per_call_overhead_us": 20.0},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "compile-overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    md = [
        "# mixpert.jit: compile time and per-call overhead",
        "",
        f"CPU, Python {result['python']}, Numba {result['numba']}; medians of {REPEATS} fresh "
        "processes compiling mlp, power, gram, kmeans_step (benchmarks/compile_overhead.py).",
        "",
        "| measure | numba.njit | mixpert.jit | ratio (target <= 1.3) |",
        "|---|---|---|---|",
        f"| compile, cold (s) | {med['njit']['cold_s']:.3f} | {med['mixpert']['cold_s']:.3f} "
        f"| {ratio_cold:.2f} |",
        f"| compile, warm (s) | {med['njit']['warm_s']:.3f} | {med['mixpert']['warm_s']:.3f} "
        f"| {ratio_warm:.2f} |",
        "",
        "| per call, 4 x 4 x 4 float32 (us) | value |",
        "|---|---|",
        f"| mixpert.matmul(level IV), direct | {overhead['direct_matmul_IV_us']:.1f} |",
        f"| jitted site, level IV | {overhead['jit_IV_us']:.1f} |",
        f"| **overhead of the rewritten site (target <= 20)** | "
        f"**{overhead['overhead_IV_us']:.1f}** |",
        f"| jitted site, level fp32 (native status round trip) | {overhead['jit_fp32_us']:.1f} |",
        f"| plain numba.njit | {overhead['njit_us']:.1f} |",
        f"| overhead at fp32 | {overhead['overhead_fp32_us']:.1f} |",
    ]
    (RESULTS / "compile-overhead.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

"""Probe: level fp32-ordered's kernels on long-k and skinny shapes, against cuBLAS SGEMM, in one
run: the default choice, and each kernel forced (split-k over segments, the tile kernel walking
all of k, the tall and thin kernels). Prints a table; used to set
``cuda.fp32_ordered._splits_k``'s crossover and the "auto" rules of
``auto.ordered_kernel_wins`` (the rows after the first ten are the shapes its figures cite:
benchmarks/results/<gpu>/auto-crossovers.txt). A trailing "t" (16x2097152x16t) gives A as
X.T of a C-ordered X, as in X.T @ Y, which split-k reads in place.

    python benchmarks/ordered_long_k.py [MxKxN[t] ...]
"""

from __future__ import annotations

import sys
from typing import Any

from mixpert.runtime import ordered
from mixpert.runtime.cuda import fp32_ordered
from mixpert.runtime.device import exit_without_gpu
from mixpert.testdata import gemmul8
from mixpert.timing import gpu_median_seconds

SHAPES = (
    (32, 262144, 32),
    (64, 131072, 64),
    (128, 65536, 128),
    (256, 65536, 256),
    (4096, 65536, 64),
    (16384, 16384, 64),
    (65536, 4096, 16),
    (1048576, 16, 16),
    (1048576, 32, 32),
    (4194304, 8, 8),
    (16, 262144, 16),  # split-k with outputs of at most 16 x 16 (ordered_chunks_16)
    (16, 2097152, 16, "t"),
    (65536, 4096, 8),  # tall
    (65536, 2048, 16),
    (262144, 1024, 16),
    (1048576, 512, 16),
    (1048576, 7, 5),  # thin, 4-byte loads
)


def main() -> None:
    exit_without_gpu("the long-k probe")
    import cupy as cp

    wanted = [parse(s) for s in sys.argv[1:]]  # e.g. 32x262144x32
    print("m x k x n: x SGEMM (error ratio to SGEMM's) per kernel")
    for seed, (m, k, n, *t) in enumerate(wanted or SHAPES):
        print(measure(cp, m, k, n, seed, transposed=bool(t)), flush=True)


def parse(shape: str) -> tuple:
    """'16x2097152x16t' -> (16, 2097152, 16, "t")."""
    m, k, n = shape.rstrip("t").split("x")
    return (int(m), int(k), int(n), *(("t",) if shape.endswith("t") else ()))


def measure(cp: Any, m: int, k: int, n: int, seed: int, transposed: bool = False) -> str:
    rng = cp.random.default_rng(seed)
    a, b = gemmul8(cp, rng, (m, k)), gemmul8(cp, rng, (k, n))
    if transposed:  # the same values, stored as the transpose of a C-ordered (k, m) matrix
        a = cp.ascontiguousarray(a.T).T
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    r = fp32_ordered.tile_size(m, n)
    runs = {
        "sgemm": lambda: cp.matmul(a, b),
        "default": lambda: fp32_ordered.ordered_product(a, b),
        "tile": lambda: fp32_ordered.ordered_product(a[None], b[None], r),
    }
    if -(-m // 64) <= fp32_ordered.MAX_GRID_YZ:  # split-k's grid y holds the row tiles
        runs["split"] = lambda: fp32_ordered.ordered_split_product(a, b)
    if n <= fp32_ordered.ROWS_MAX_N:
        runs["tall"] = lambda: fp32_ordered.ordered_rows_product(a, b)
    if k <= ordered.CHUNK and n <= fp32_ordered.THIN_MAX_N:
        runs["thin"] = lambda: fp32_ordered.ordered_thin_product(a, b)
    flops = 2.0 * m * k * n
    seconds = {name: gpu_median_seconds(fn, flops) for name, fn in runs.items()}
    errors = {
        name: float(cp.linalg.norm(fn() - ref) / cp.linalg.norm(ref)) for name, fn in runs.items()
    }
    cells = ", ".join(
        f"{name} {seconds['sgemm'] / t:.2f}x ({errors[name] / errors['sgemm']:.2f})"
        for name, t in seconds.items()
    )
    splits = fp32_ordered._splits_k(m, n, k, r)
    layout = ", A transposed" if transposed else ""
    return (f"{m} x {k} x {n}{layout} (segments {-(-k // ordered.SEGMENT)}, split {splits}): "
            f"sgemm {seconds['sgemm'] * 1e3:.3f} ms; {cells}")  # fmt: skip


if __name__ == "__main__":
    main()

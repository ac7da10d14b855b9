"""Would scales per block of k let fewer INT8 products reach float32-grade? (issues 16 and 18), on
the CPU.

The INT8 levels scale each row of A and column of B by one power of two over all of k, so an
entry far below its line's largest keeps few of the slices' bits; level IV needs 8 products to be
float32-grade on phi = 0.5 data and is not on phi >= 1. A kernel that slices A in registers
(issue 16, item 2) would see A one block of k at a time and could take a scale per (row, block)
and per (block, column) instead: each block's exact class sums then need their own scale, so they
are summed in float64 in the kernel (never stored), which no cuBLAS GEMM can do. This script
measured, before any such kernel existed, what that numerics would give (level IV-blocks,
``runtime/blocks.py``, now is one: 8 pairs, blocks of 64; its row beside): the same slicing as
``packer`` (``slice_rows`` on each block), exact class sums per block, each scaled by 2^(ea + eb)
and added in float64, rounded once to float32; no k-rebalancing and no bypass (the block scales
take their place). Errors are MixPert's Eq. 10 against float64 on the accuracy table's six input
distributions, worst over seeds, beside level IV itself and this CPU's float32 BLAS.

    python benchmarks/block_scaled_accuracy.py [--n 1024] [--seeds 2] [--out benchmarks/results/cpu]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import numpy as np

import mixpert
from mixpert.runtime import packer
from mixpert.runtime.levels import LEVELS, triangle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import (  # noqa: E402
    CUBLAS_SGEMM_ERROR,
    Product,
    save_worst,
    worst_errors,
    worst_table,
)

# (name, slices of A, slices of B, largest i + j kept): products = pairs kept.
CONFIGS = (("2x2 i+j<=1", 2, 2, 1), ("I", 2, 2, 2), ("T6", 3, 3, 2), ("IV-like", 3, 3, 3))
BLOCKS = (32, 128, 512)


def block_scaled_product(
    a: np.ndarray, b: np.ndarray, slices_a: int, slices_b: int, max_sum: int, block: int
) -> np.ndarray:
    """a @ b with one scale per (row of A, block of k) and per (block of k, column of B)."""
    (m, k), n = a.shape, b.shape[1]
    pairs = triangle(slices_a, slices_b, max_sum)
    total = np.zeros((m, n), dtype=np.float64)
    for start in range(0, k, block):
        rows = a[:, start : start + block]  # (m, kb): A's lines
        cols = np.ascontiguousarray(b[start : start + block].T)  # (n, kb): B's lines
        ea, eb = packer.scale_exponents(rows, axis=1), packer.scale_exponents(cols, axis=1)
        da = packer.slice_rows(rows, ea, slices_a).astype(np.float64)
        db = packer.slice_rows(cols, eb, slices_b).astype(np.float64)
        scale = np.ldexp(1.0, ea.astype(np.int64)[:, None] + eb.astype(np.int64)[None, :])
        for i, j in pairs:  # each product exact in float64 (|digit products| <= 2^14 x block)
            weight = np.ldexp(1.0, -packer.pair_exponent(i + j))
            total += (da[i] @ db[j].T) * weight * scale
    return total.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    n = args.n
    products: dict[str, Product] = {}
    counts: dict[str, int] = {}  # INT8 products of each
    for name, sa, sb, max_sum in CONFIGS:
        for block in BLOCKS:
            column = f"{name} / {block}"
            products[column] = partial(
                block_scaled_product, slices_a=sa, slices_b=sb, max_sum=max_sum, block=block
            )
            counts[column] = len(triangle(sa, sb, max_sum))
    for level in ("IV", "IV-blocks"):  # (IV-blocks: these scales with blocks of 64, as a level)
        products[f"{level} (level)"] = partial(mixpert.matmul, level=level, backend="cpu")
        counts[f"{level} (level)"] = LEVELS[level].products
    worst = worst_errors(products, n, args.seeds, salt=11)
    sgemm = CUBLAS_SGEMM_ERROR.get(n)
    lines = [
        f"# INT8 slicing with a scale per block of k, n = {n} (CPU)",
        "",
        f"Worst error over {args.seeds} seeds, ||C - C64||_F / ||C64||_F; rows are "
        '"configuration / block of k". cuBLAS SGEMM at this n: '
        + (f"{sgemm:.1e}" if sgemm else "not measured (8.1e-7 at n = 2048)")
        + ". Level IV-blocks is IV-like / 64 with each block's class sums joined exactly"
        + " (runtime/blocks.py; one GPU kernel); the other configurations have no kernel.",
        "",
        *worst_table(worst, "scales", counts),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        save_worst(args.out, "block-scaled", text, worst, "scales", n)


if __name__ == "__main__":
    main()

"""Is there a 7-product INT8 level at float32-grade? (issue 18, item 3), on the CPU oracle.

Level IV runs 8 slice products (3 x 3 slices, i + j <= 3). With the packer's slice widths fixed
(7 + 8 (s - 1) bits), the 7-product candidates are IV without one of its weight-3 pairs, and the
asymmetric 2 x 4 and 4 x 2 slicings with i + j <= 3. Each is measured, beside IV, V and this
CPU's float32 BLAS, on the accuracy table's six input distributions (``benchmarks/accuracy.py``)
with the error of MixPert's Eq. 10 against float64, and set against cuBLAS SGEMM's error at the
same n (``accuracy.CUBLAS_SGEMM_ERROR``): a level is float32-grade where its error is at most
SGEMM's. The CPU oracle gives every GPU level's bits, so these errors are the GPU's.

    python benchmarks/seven_products.py [--n 1024] [--out benchmarks/results/cpu]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import mixpert
from mixpert.runtime.levels import LEVELS, Level, triangle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import CUBLAS_SGEMM_ERROR, save_worst, worst_errors, worst_table  # noqa: E402


def without(level: Level, pair: tuple[int, int], name: str) -> Level:
    pairs = tuple(p for p in level.pairs if p != pair)
    return Level(name, "int8", level.a_slices, level.b_slices, pairs, bypass_wide=True)


# The asymmetric slicings run without the exact bypass: with 15 bits on one side its rule
# flags nearly every line, and a level that recomputes every line exactly is no 7-product level.
CANDIDATES = (
    without(LEVELS["IV"], (2, 1), "IV - (2,1)"),
    without(LEVELS["IV"], (1, 2), "IV - (1,2)"),
    Level("2x4", "int8", 2, 4, triangle(2, 4, 3)),
    Level("4x2", "int8", 4, 2, triangle(4, 2, 3)),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    n = args.n
    levels = (LEVELS["IV"], *CANDIDATES, LEVELS["V"])
    products = {lv.name: partial(mixpert.matmul, level=lv, backend="cpu") for lv in levels}
    worst = worst_errors(products, n, args.seeds, salt=7)
    sgemm = CUBLAS_SGEMM_ERROR.get(n)
    lines = [
        f"# 7-product INT8 levels against float32-grade, n = {n} (CPU oracle)",
        "",
        f"Worst error over {args.seeds} seeds, ||C - C64||_F / ||C64||_F. cuBLAS SGEMM at this n: "
        + (f"{sgemm:.1e}" if sgemm else "not measured")
        + " (H200, random inputs). A cell is marked * where the error exceeds SGEMM's.",
        "",
        *worst_table(worst, "level", {lv.name: len(lv.pairs) for lv in levels}, sgemm),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        save_worst(args.out, "seven-products", text, worst, "level", n)


if __name__ == "__main__":
    main()

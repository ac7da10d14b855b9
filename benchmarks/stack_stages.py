"""Where a stack's time goes on the GPU: the in-order kernel alone against the whole call
(dispatch overhead), and the stages of a level-IV stack (k-exponents, packs, the strided-batched
INT8 GEMMs, combine) against cuBLAS strided-batched SGEMM; prints a table, writes JSON.

    python benchmarks/stack_stages.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cupy as cp

from mixpert.runtime import LEVELS, dispatch
from mixpert.runtime.cuda import backend, fp32_ordered, packs, sliced
from mixpert.testdata import gemmul8
from mixpert.timing import gpu_median_seconds

SMALL = ((4096, 16, 16, 16), (4096, 32, 32, 32), (1024, 64, 64, 64), (1024, 128, 128, 128))
LARGE = ((64, 1024, 1024, 1024), (16, 4096, 4096, 4096))


def ms(fn, flops: float) -> float:
    return gpu_median_seconds(fn, flops) * 1e3


def small_row(rng, count: int, m: int, k: int, n: int) -> dict:
    a, b = gemmul8(cp, rng, (count, m, k), 0.5), gemmul8(cp, rng, (count, k, n), 0.5)
    flops = 2.0 * count * m * k * n
    ordered = LEVELS["fp32-ordered"]
    return {
        "shape": f"{count} x {m}x{k}x{n}",
        "sgemm": ms(lambda: cp.matmul(a, b), flops),
        "kernel": ms(lambda: fp32_ordered.ordered_product(a, b), flops),
        "stack_product_at_level": ms(lambda: backend.stack_product_at_level(a, b, ordered), flops),
        "dispatch": ms(lambda: dispatch.np_matmul_at_level(a, b, ordered), flops),
        "auto": ms(lambda: dispatch.np_matmul_at_level(a, b, "auto"), flops),
    }


def large_row(rng, count: int, m: int, k: int, n: int) -> dict:
    level = LEVELS["IV"]
    a, b = gemmul8(cp, rng, (count, m, k), 0.5), gemmul8(cp, rng, (count, k, n), 0.5)
    flops = 2.0 * count * m * k * n
    a_tops, b_tops = packs.a_tops(a), packs.b_tops(b)  # as int8_product_stack takes them
    kexp = packs.exponents_from_tops(a_tops.k, b_tops.k)

    def pack_a() -> packs.PackedOperand:
        lines, wide = a.reshape(-1, k), level.bypass_wide
        return packs.pack_int8(
            lines, kexp, packs.A_SIDE, level.a_slices, False, wide, count, a_tops
        )

    def pack_b() -> packs.PackedOperand:
        return packs.pack_int8_columns(b, kexp, level.b_slices, True, level.bypass_wide, b_tops)

    a_pack, b_pack = pack_a(), pack_b()
    sums = sliced.int8_class_sums(a_pack, b_pack, level)
    return {
        "shape": f"{count} x {m}x{k}x{n}",
        "sgemm": ms(lambda: cp.matmul(a, b), flops),
        "IV stack": ms(lambda: sliced.int8_product_stack(a, b, level), flops),
        "IV pair by pair": ms(
            lambda: [sliced.int8_product(a[i], b[i], level) for i in range(count)], flops
        ),
        "k-exponents": ms(lambda: packs.k_exponents(a, b), flops),
        "pack A": ms(pack_a, flops),
        "pack B": ms(pack_b, flops),
        "INT8 GEMMs (strided batched)": ms(
            lambda: sliced.int8_class_sums(a_pack, b_pack, level), flops
        ),
        "combine + bypass": ms(
            lambda: sliced._combine_int8(sums, a_pack, b_pack, a, b, level), flops
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = cp.random.default_rng(5)
    rows = []
    for shape in SMALL:
        rows.append(small_row(rng, *shape))
        print(rows[-1], flush=True)
    for shape in LARGE:
        rows.append(large_row(rng, *shape))
        print(rows[-1], flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stack_stages.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Which tile the fused INT8 kernel should use (``cuda.fused.TILE``), and how its products
compare with the class-sum pipeline they replace: the same packs, timed as products alone
(slice products and combine), in TOPS of slice products (2 m n k a product, ``pairs`` of them).

Also one plain INT8 GEMM (one slice pair) in Triton beside cuBLAS's, in the same run: the
technology first, on its own.

    python benchmarks/fused_tiles.py [--sizes 4096 8192 16384] [--out DIR]      (GPU only)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/fused_tiles.py")

import cupy as cp

from mixpert.bench.gemm import random_inputs
from mixpert.runtime import get_level
from mixpert.runtime.cuda import fused, sliced
from mixpert.runtime.cuda.packs import pack_a, pack_b, tops_and_exponents
from mixpert.runtime.levels import Level
from mixpert.timing import gpu_median_seconds

CANDIDATES = (
    fused.Tile(128, 64, 128, 8, 3),
    fused.Tile(128, 64, 64, 8, 4),
    fused.Tile(128, 64, 128, 8, 3, group_m=16),
    fused.Tile(64, 64, 128, 4, 4),
    fused.Tile(128, 32, 128, 4, 3),
    fused.Tile(64, 128, 128, 8, 3),
)


# One slice of each operand, one pair: a plain INT8 GEMM (and its combine) in either technology.
PLAIN = Level("plain", "int8", 1, 1, ((0, 0),))


def measure(n: int, level_name: str, tiles: tuple[fused.Tile, ...]) -> list[dict]:
    level = PLAIN if level_name == PLAIN.name else get_level(level_name)
    a, b = random_inputs(cp, n, n, n, "phi0.5", n)
    a_top, b_top, kexp = tops_and_exponents(a, b)
    a_pack, b_pack = pack_a(a, kexp, level, a_top), pack_b(b, kexp, level, b_top)
    ops = 2.0 * n**3 * len(level.pairs)
    c = cp.empty((1, n, n), dtype=cp.float32)

    def pipeline() -> None:
        sums = sliced.int8_class_sums(a_pack, b_pack, level)
        sliced._combine_int8(sums, a_pack, b_pack, a, b, level, c[0])

    reference = cp.empty_like(c)
    with fused.switched("0"):
        pipeline()
        reference[...] = c
    rows = []
    seconds = gpu_median_seconds(pipeline, ops)
    rows.append({"n": n, "level": level_name, "method": "class sums + combine (cuBLAS)",
                 "ms": seconds * 1e3, "tops": ops / seconds / 1e12, "same_bits": True})  # fmt: skip
    for tile in tiles:
        try:
            c.fill(cp.nan)
            fused.product(a_pack, b_pack, level, c, tile)
            same = bool((c.view(cp.uint32) == reference.view(cp.uint32)).all())
            seconds = gpu_median_seconds(
                lambda t=tile: fused.product(a_pack, b_pack, level, c, t), ops
            )
        except Exception as error:  # a tile this GPU cannot hold: say so, go on
            print(f"  {tile}: {type(error).__name__}: {error}", flush=True)
            continue
        rows.append({"n": n, "level": level_name, "method": f"fused {tile}", "ms": seconds * 1e3,
                     "tops": ops / seconds / 1e12, "same_bits": same})  # fmt: skip
    for row in rows:
        print(f"n = {n} {level_name}: {row['method']}: {row['ms']:.2f} ms, {row['tops']:.0f} TOPS,"
              f" same bits {row['same_bits']}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192, 16384])
    parser.add_argument("--levels", nargs="*", default=["plain", "IV", "V"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = [row for n in args.sizes for lv in args.levels for row in measure(n, lv, CANDIDATES)]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"gpu": device.device_name(), "rows": rows}
        (args.out / "fused-tiles.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()

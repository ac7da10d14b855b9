"""What IV-blocks's exact recomputation of flagged rows costs on the GPU (``blocks_bypass_rows``).

A row of A whose entries span more binades than its blocks' slices resolve (or that holds a
NaN or Inf) is listed by the rows kernel and recomputed in order in float64, a serial chain of
k steps per output entry. Real data has such rows: a few outliers, a NaN, a badly scaled
feature. On issue 16's tall shapes, with 0, a few, many and all rows made unresolved (every
other entry of the row scaled by 2^-90), IV-blocks and "auto" beside cuBLAS SGEMM and TF32 in
one run, fresh phi = 0.5 inputs, errors against float64. Writes blocks-flagged-rows.{json,md,png}.

    python benchmarks/blocks_flagged_rows.py [--out benchmarks/results/<gpu>] [--quick]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/blocks_flagged_rows.py")

from mixpert.bench import family_report  # noqa: E402
from mixpert.bench.gemm import measure_methods, method_cells, summary  # noqa: E402
from mixpert.testdata import gemmul8  # noqa: E402

SHAPES = ((65536, 4096, 16), (65536, 4096, 64), (16384, 16384, 64), (1048576, 512, 32))
WIDE_ROWS = (0, 2, 256, -1)  # unresolved rows, evenly spaced; -1: every row
METHODS = ("sgemm", "tf32", "IV-blocks", "auto")
DEEP_SCALE = 2.0**-90  # every other entry of a wide row: far below its block's top


@dataclass(frozen=True)
class FlaggedRow:
    gpu: str
    m: int
    k: int
    n: int
    wide_rows: int
    level: str
    time_ms: float
    ratio_to_sgemm: float
    error: float
    sgemm_error: float
    routed_to: str


def inputs(cp: Any, m: int, k: int, n: int, wide: int, seed: int) -> tuple[Any, Any]:
    """Fresh phi = 0.5 operands, ``wide`` of A's rows (all of them for -1) made unresolved."""
    rng = cp.random.default_rng(seed)
    a, b = gemmul8(cp, rng, (m, k), 0.5), gemmul8(cp, rng, (k, n), 0.5)
    if wide < 0:
        a[:, ::2] *= cp.float32(DEEP_SCALE)
    elif wide:
        a[cp.arange(wide) * (m // wide), ::2] *= cp.float32(DEEP_SCALE)
    return a, b


def run(quick: bool = False) -> list[FlaggedRow]:
    cp = device.cupy_module()
    gpu = device.device_name()
    rows: list[FlaggedRow] = []
    for seed, (m, k, n) in enumerate(SHAPES[1:2] if quick else SHAPES):
        for wide in WIDE_ROWS:
            a, b = inputs(cp, m, k, n, wide, seed)
            measured = measure_methods(cp, METHODS, a, b, 2.0 * m * k * n)
            listed = m if wide < 0 else wide
            rows += [FlaggedRow(gpu, m, k, n, listed, *cells) for cells in method_cells(measured)]
            print(summary(f"{m}x{k}x{n}, {'all' if wide < 0 else wide} wide rows", measured))
            del a, b
            cp.get_default_memory_pool().free_all_blocks()
    return rows


FAMILY = family_report.Family(
    name="blocks-flagged-rows",
    title="IV-blocks with unresolved rows",
    intro="Cells: throughput relative to cuBLAS SGEMM in the same run / error ||C - C64||_F / "
    "||C64||_F. The unresolved rows are recomputed exactly, in order; `auto` shows the level it "
    "routed to (it takes SGEMM where its sample says most of C would be recomputed).",
    shape_header="m x k x n, unresolved rows",
    shape=lambda r: (r.m, r.k, r.n, r.wide_rows),
    label=lambda s: f"{s[0]}x{s[1]}x{s[2]}, {s[3]}",
    cell=lambda r: f"{r.ratio_to_sgemm:.2f}x / {r.error:.1e}",
    panel=("time (ms)", lambda r: r.time_ms, True),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="one shape")
    args = parser.parse_args()
    rows = run(args.quick)
    print(family_report.markdown(FAMILY, rows))
    if args.out:
        print(f"wrote {family_report.write(FAMILY, rows, args.out)}")


if __name__ == "__main__":
    main()

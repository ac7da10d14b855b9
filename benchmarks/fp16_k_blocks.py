"""The FP16 path's k-blocking on the GPU: error and time against cuBLAS SGEMM, per block size.

The tensor cores sum FP16 products in FP32; LE-GEMM and SGEMM-cube accumulate blocks of k
outside them. For each k block (and none), the Eq. 10 error against float64 and the time over
SGEMM in the same run, beside level IV. Writes JSON and Markdown under --out (GPU only).

    python benchmarks/fp16_k_blocks.py [--out benchmarks/results/<gpu>]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mixpert.bench.gemm import results_folder
from mixpert.runtime import device

device.exit_without_gpu("benchmarks/fp16_k_blocks.py")

import cupy as cp

from mixpert.runtime import get_level
from mixpert.runtime.cuda import backend, sliced
from mixpert.testdata import gemmul8
from mixpert.timing import gpu_median_seconds

BLOCKS = (512, 1024, 2048, 4096, None)  # None: the whole k in the tensor cores


def error(c: cp.ndarray, ref: cp.ndarray) -> float:
    return float(cp.linalg.norm(c.astype(cp.float64) - ref) / cp.linalg.norm(ref))


def measure(n: int, dist: str) -> dict:
    rng = cp.random.default_rng(n)
    if dist == "normal":
        a, b = (rng.standard_normal((n, n), dtype=cp.float32) for _ in range(2))
    else:
        a, b = (gemmul8(cp, rng, (n, n), 0.5) for _ in range(2))
    ref = cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
    flops = 2.0 * n**3
    sgemm = gpu_median_seconds(lambda: cp.matmul(a, b), flops)
    row: dict = {"n": n, "dist": dist, "sgemm_error": error(cp.matmul(a, b), ref)}
    iv = get_level("IV")
    row["IV"] = (
        error(backend.product_at_level(a, b, iv), ref),
        sgemm / gpu_median_seconds(lambda: backend.product_at_level(a, b, iv), flops),
    )
    for block in BLOCKS:
        kb = block or 10**9
        row[f"fp16/{block or 'none'}"] = (
            error(sliced.fp16_product(a, b, kb), ref),
            sgemm / gpu_median_seconds(lambda kb=kb: sliced.fp16_product(a, b, kb), flops),
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192, 16384])
    args = parser.parse_args()
    out = args.out or results_folder(device.device_name(), Path(__file__).parent / "results")
    rows = []
    for n in args.sizes:
        for dist in ("phi0.5", "normal"):
            rows.append(measure(n, dist))
            print(json.dumps(rows[-1]), flush=True)
            cp.get_default_memory_pool().free_all_blocks()
    out.mkdir(parents=True, exist_ok=True)
    (out / "fp16-k-blocks.json").write_text(json.dumps(rows, indent=1))
    header = " | ".join(f"fp16 kb={b or 'none'} error / x" for b in BLOCKS)
    lines = [
        "# FP16 path: k-block size against error and speed (x SGEMM, same run)",
        "",
        f"| n | data | SGEMM error | IV error / x | {header} |",
        "|---" * (4 + len(BLOCKS)) + "|",
    ]
    for r in rows:
        pairs = [r[f"fp16/{b or 'none'}"] for b in BLOCKS]
        cells = [f"{e:.1e} / {x:.2f}" for e, x in pairs]
        iv = f"{r['IV'][0]:.1e} / {r['IV'][1]:.2f}"
        lines.append(
            f"| {r['n']} | {r['dist']} | {r['sgemm_error']:.1e} | {iv} | "
            + " | ".join(cells)
            + " |"
        )
    (out / "fp16-k-blocks.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

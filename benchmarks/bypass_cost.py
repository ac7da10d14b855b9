"""What the unresolved-line bypass costs on the GPU (``runtime/bypass.py``).

For narrow data (N(0,1), phi = 0.5, phi = 1) no line is bypassed, so the only cost is counting
deep entries in the pack kernels: IV with the bypass against the same slices without it, beside
cuBLAS SGEMM, in one run. For phi = 2 data (every line bypassed) and one outlier column, the
time and the worst ratio to SGEMM's componentwise bound. Writes JSON and Markdown (GPU only).

    python benchmarks/bypass_cost.py [--out benchmarks/results/<gpu>] [--sizes 8192]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/bypass_cost.py")

import cupy as cp

from mixpert.runtime import LEVELS
from mixpert.runtime.cuda import backend
from mixpert.testdata import gemmul8
from mixpert.timing import gpu_median_seconds

U = 2.0**-24


def inputs(n: int, dist: str) -> tuple[cp.ndarray, cp.ndarray]:
    rng = cp.random.default_rng(n)
    if dist == "normal":
        return tuple(rng.standard_normal((n, n), dtype=cp.float32) for _ in range(2))
    if dist == "outlier-column":
        a = rng.standard_normal((n, n), dtype=cp.float32)
        a[:, 3] *= cp.float32(1e6)
        return a, rng.standard_normal((n, n), dtype=cp.float32)
    phi = float(dist.split("=")[1])
    return tuple(gemmul8(cp, rng, (n, n), phi) for _ in range(2))


def bound_ratio(c: cp.ndarray, a: cp.ndarray, b: cp.ndarray) -> float:
    a64, b64 = a.astype(cp.float64), b.astype(cp.float64)
    err = cp.abs(c.astype(cp.float64) - a64 @ b64)
    bound = 2 * a.shape[1] * U * (cp.abs(a64) @ cp.abs(b64))
    return float(cp.max(err / cp.maximum(bound, 1e-300)))


def measure(n: int, dist: str) -> dict:
    a, b = inputs(n, dist)
    flops = 2.0 * n**3
    sgemm = gpu_median_seconds(lambda: cp.matmul(a, b), flops)
    row: dict = {"n": n, "dist": dist, "sgemm_ratio_to_bound": bound_ratio(cp.matmul(a, b), a, b)}
    iv = LEVELS["IV"]
    plain = dataclasses.replace(iv, name="IV-no-bypass", bypass_wide=False)
    seconds = {iv.name: float("inf"), plain.name: float("inf")}
    for _ in range(3):  # interleaved: clock drift hits both alike
        for level in (iv, plain):
            once = gpu_median_seconds(
                lambda level=level: backend.product_at_level(a, b, level), flops
            )
            seconds[level.name] = min(seconds[level.name], once)
    for level in (iv, plain):
        row[level.name] = {
            "speedup_vs_sgemm": sgemm / seconds[level.name],
            "ratio_to_bound": bound_ratio(backend.product_at_level(a, b, level), a, b),
        }
    row["bypass_cost"] = row["IV-no-bypass"]["speedup_vs_sgemm"] / row["IV"]["speedup_vs_sgemm"] - 1
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=[8192])
    parser.add_argument("--wide-size", type=int, default=4096)
    args = parser.parse_args()
    rows = [measure(n, d) for n in args.sizes for d in ("normal", "phi=0.5", "phi=1")]
    rows += [measure(args.wide_size, d) for d in ("phi=2", "outlier-column")]
    lines = [
        "| n | data | IV / SGEMM | IV without bypass / SGEMM | cost | IV / bound | "
        "no bypass / bound | SGEMM / bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        iv, plain = r["IV"], r["IV-no-bypass"]
        lines.append(
            f"| {r['n']} | {r['dist']} | {iv['speedup_vs_sgemm']:.2f}x | "
            f"{plain['speedup_vs_sgemm']:.2f}x | {100 * r['bypass_cost']:+.1f}% | "
            f"{iv['ratio_to_bound']:.3g} | {plain['ratio_to_bound']:.3g} | "
            f"{r['sgemm_ratio_to_bound']:.3g} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bypass_cost.json").write_text(json.dumps(rows, indent=1))
        (args.out / "bypass_cost.md").write_text(f"# {device.device_name()}\n\n{table}\n")


if __name__ == "__main__":
    main()

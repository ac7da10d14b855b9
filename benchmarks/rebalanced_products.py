"""Products whose k-indices move (GPU only): A's columns and B's rows lie binades apart, as
activations against weights or features of different units do, so ``equilibrate`` rebalances
them (exactly, by powers of two) before the slices. The packers' per-entry work on such lines is
what this measures; the square benchmarks' phi = 0.5 data never move a k-index.

Inputs: A = N(0, 1) with column j scaled by 2^s_j, B = N(0, 1) with row j scaled by
2^(r_j - s_j), s_j uniform in [-SPREAD, SPREAD] and r_j in [-3, 3] binades (every k-index of
|s_j| > 2 moves); fresh per shape. Per product: us per call (calls back to back, one sync at the
end; the plans replay), its ratio to cuBLAS SGEMM and TF32's in the same run, and the error
against float64 (outputs poisoned with NaN before each checked call).

    python benchmarks/rebalanced_products.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mixpert.runtime.device import device_name, exit_without_gpu

exit_without_gpu("benchmarks/rebalanced_products.py")

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from call_overhead import checked, timed  # noqa: E402

import mixpert  # noqa: E402
from mixpert.bench.gemm import results_folder  # noqa: E402
from mixpert.bench.plot_style import grouped_bars  # noqa: E402
from mixpert.runtime import equilibrate  # noqa: E402

SHAPES = ((1024, 1024, 1024), (4096, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096))
LEVELS = ("T6", "IV", "V", "auto")
SPREAD = 8  # binades either way of A's column scales


def operands(m: int, k: int, n: int, seed: int) -> tuple[cp.ndarray, cp.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.integers(-SPREAD, SPREAD + 1, size=k)
    r = rng.integers(-3, 4, size=k)
    a = rng.standard_normal((m, k)) * np.exp2(s)[None, :]
    b = rng.standard_normal((k, n)) * np.exp2(r - s)[:, None]
    return cp.asarray(a.astype(np.float32)), cp.asarray(b.astype(np.float32))


def case(m: int, k: int, n: int) -> list[dict[str, Any]]:
    a, b = operands(m, k, n, m + 3 * k + 7 * n)
    moved = int(np.count_nonzero(equilibrate.k_exponents(cp.asnumpy(a), cp.asnumpy(b))))
    reps = max(20, min(200, int(4e10 / (2 * m * k * n))))
    sgemm_error = checked(lambda: a @ b, a, b)
    sgemm_us = timed(lambda: a @ b, reps)[1]
    tf32_error = checked(lambda: mixpert.matmul(a, b, level="tf32"), a, b)
    tf32_us = timed(lambda: mixpert.matmul(a, b, level="tf32"), reps)[1]
    label = f"{m}x{k}x{n}"
    print(f"{label} ({moved} of {k} k-indices move): SGEMM {sgemm_us:.1f} us, err "
          f"{sgemm_error:.1e}; TF32 {sgemm_us / tf32_us:.2f}x, err {tf32_error:.1e}",
          flush=True)  # fmt: skip
    rows = []
    for level in LEVELS:
        err = checked(lambda level=level: mixpert.matmul(a, b, level=level), a, b)
        call_us = timed(lambda level=level: mixpert.matmul(a, b, level=level), reps)[1]
        rows.append({
            "shape": label, "level": level, "moved": moved, "k": k, "call_us": call_us,
            "ratio_to_sgemm": sgemm_us / call_us, "error": err, "sgemm_us": sgemm_us,
            "sgemm_error": sgemm_error, "tf32_ratio_to_sgemm": sgemm_us / tf32_us,
            "tf32_error": tf32_error,
        })  # fmt: skip
        print(f"  {level:5s} {call_us:9.1f} us  {sgemm_us / call_us:5.2f}x SGEMM  err {err:.1e}",
              flush=True)  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| shape | k-indices moved | level | us a call | x SGEMM | error | SGEMM error | "
             "TF32 x SGEMM (error) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['moved']} of {r['k']} | {r['level']} | {r['call_us']:.1f} | "
            f"{r['ratio_to_sgemm']:.2f}x | {r['error']:.1e} | {r['sgemm_error']:.1e} | "
            f"{r['tf32_ratio_to_sgemm']:.2f}x ({r['tf32_error']:.1e}) |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib  # noqa: F401  (no plot without it)
    except ImportError:
        return
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    ratio = {(r["shape"], r["level"]): r["ratio_to_sgemm"] for r in rows}
    series = {level: [ratio[shape, level] for shape in shapes] for level in LEVELS}
    series["TF32"] = [next(r["tf32_ratio_to_sgemm"] for r in rows if r["shape"] == shape)
                      for shape in shapes]  # fmt: skip
    grouped_bars(path, f"products whose k-indices move, {device_name()}", shapes, series,
                 "x cuBLAS SGEMM")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    folder = results_folder(device_name(), args.out or Path(__file__).parent / "results")
    folder.mkdir(parents=True, exist_ok=True)
    rows = [row for shape in (SHAPES[:2] if args.quick else SHAPES) for row in case(*shape)]
    (folder / "rebalanced-products.json").write_text(json.dumps(rows, indent=1))
    (folder / "rebalanced-products.md").write_text(
        f"# Products whose k-indices move ({device_name()})\n\n" + table(rows) + "\n"
    )
    plot(rows, folder / "rebalanced-products.png")
    print(table(rows), flush=True)


if __name__ == "__main__":
    main()

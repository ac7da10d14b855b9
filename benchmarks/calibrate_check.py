"""Calibrates "auto" on this GPU (``runtime/calibration.py``, what ``mixpert calibrate`` runs)
and checks what it promises: with the measured crossovers, "auto" at least 0.97x cuBLAS SGEMM
on every shape, the ladder's sides, the sides between them and large products alike.

Prints the calibration's tables (each product's SGEMM, level IV replayed and "auto"'s level IV
route times, the thresholds chosen beside the shipped ones), then per checked shape the level
"auto" took and its time against SGEMM's and level IV's (``mixpert.timing``: bursts of calls
back to back, the median). Writes ``calibration.json`` (the calibration as saved, and the
checks) to ``benchmarks/results/<gpu>/`` (spaces as dashes). The calibration is also saved in
the user's cache folder, where "auto" reads it from then on.

    python benchmarks/calibrate_check.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from mixpert.runtime.device import device_name, exit_without_gpu

exit_without_gpu("benchmarks/calibrate_check.py")
os.environ["MIXPERT_CALIBRATE"] = "1"  # (what is checked is the measured crossovers)

import cupy as cp  # noqa: E402

import mixpert  # noqa: E402
from mixpert.bench.gemm import results_folder  # noqa: E402
from mixpert.cli.calibrate import print_calibration  # noqa: E402
from mixpert.runtime import auto, calibration, dispatch  # noqa: E402
from mixpert.runtime.cuda import calibrate  # noqa: E402
from mixpert.timing import gpu_median_seconds  # noqa: E402

FLOOR = 0.97  # "auto" against SGEMM, on every shape
SQUARES = (1024, 1536, 2048, 2560, 3072, 3584, 4096, 6144)  # the ladder and between its rungs
LARGE = ((2048, 16384, 2048), (16384, 2048, 2048), (1536, 12288, 1536), (2048, 2048, 16384))


def check(m: int, k: int, n: int) -> dict[str, Any]:
    """One shape: the level "auto" takes, and its time, SGEMM's and level IV's (ms)."""
    a, b = calibrate._operands(m, k, n, m + 3 * k + 7 * n)
    flops = 2.0 * m * k * n
    level = dispatch.resolve_level("auto", a, b, "cuda").name
    times = {
        "sgemm": gpu_median_seconds(lambda: cp.matmul(a, b), flops),
        "auto": gpu_median_seconds(lambda: mixpert.matmul(a, b, level="auto"), flops),
        "iv": gpu_median_seconds(lambda: mixpert.matmul(a, b, level="IV"), flops),
    }
    return {
        "m": m, "k": k, "n": n, "auto_level": level,
        **{f"{name}_ms": seconds * 1e3 for name, seconds in times.items()},
        "auto_x_sgemm": times["sgemm"] / times["auto"],
        "iv_x_sgemm": times["sgemm"] / times["iv"],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=default, help="results base folder")
    args = parser.parse_args()

    began = time.perf_counter()
    found = calibrate.recalibrate(auto.CROSSOVERS, auto.EMULATED_ON_GPU)
    print_calibration(found)
    print(f"\ncalibration: {found.measurement.seconds:.1f} s\n")
    print(f"{'m x k x n':>22}  auto runs  SGEMM ms   auto ms  x SGEMM     IV ms  x SGEMM")
    checks = []
    for shape in [(s, s, s) for s in SQUARES] + list(LARGE):
        row = check(*shape)
        checks.append(row)
        print(
            f"{' x '.join(map(str, shape)):>22}  {row['auto_level']:>9}  {row['sgemm_ms']:8.3f}"
            f"  {row['auto_ms']:8.3f}  {row['auto_x_sgemm']:6.2f}x  {row['iv_ms']:8.3f}"
            f"  {row['iv_x_sgemm']:6.2f}x" + ("  < FLOOR" if row["auto_x_sgemm"] < FLOOR else "")
        )
    below = [r for r in checks if r["auto_x_sgemm"] < FLOOR]
    worst = min(checks, key=lambda r: r["auto_x_sgemm"])
    print(
        f'\n"auto" at least {FLOOR}x SGEMM on every shape: {"yes" if not below else "NO"} '
        f"(lowest {worst['auto_x_sgemm']:.2f}x at {worst['m']} x {worst['k']} x {worst['n']}, "
        f"{worst['auto_level']})"
    )
    out = results_folder(device_name(), args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "calibration.json"
    payload = {
        "calibration": calibration.to_json(found),
        "saved_in": str(found.path),
        "checks": checks,
        "floor": FLOOR,
        "floor_met": not below,
        "seconds": time.perf_counter() - began,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

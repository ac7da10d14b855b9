"""Before and after measuring the INT8 GEMM algorithm per shape (``runtime.cuda.tn_gemm``), one run.

Level IV with every INT8 GEMM through ``cublasGemmEx`` (``MIXPERT_INT8_GEMM=cublas``, the
previous behaviour) and with each shape's measured-fastest algorithm, beside cuBLAS SGEMM and
TF32, on 2-D products and stacks (phi = 0.5 inputs, NaN-poisoned outputs, median times).
Prediction from ``benchmarks/lt_probe``: the 16 x 4096^3 stack's GEMMs 1.44x faster (17 of its
~27 ms), n = 8192 a few percent, n = 16384 unchanged. Writes ``int8-gemm-choice.{json,md,png}``.

    python benchmarks/int8_gemm_choice.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import mixpert
from mixpert.bench.gemm import measure_calls, results_folder
from mixpert.bench.plot_style import grouped_bars
from mixpert.runtime.device import device_name, exit_without_gpu
from mixpert.testdata import gemmul8

# (batch, m, k, n); batch 1: a 2-D product
SHAPES = (
    (1, 4096, 4096, 4096),
    (1, 8192, 8192, 8192),
    (1, 16384, 16384, 16384),
    (256, 256, 256, 256),
    (64, 1024, 1024, 1024),
    (16, 4096, 4096, 4096),
)


def iv(cublas_only: bool) -> Any:
    from mixpert.runtime.cuda import tn_gemm

    def run(a: Any, b: Any) -> Any:
        if cublas_only:
            os.environ["MIXPERT_INT8_GEMM"] = "cublas"
            tn_gemm._chosen.clear()  # nothing chosen: every GEMM through cublasGemmEx
        try:
            return mixpert.matmul(a, b, level="IV")
        finally:
            os.environ.pop("MIXPERT_INT8_GEMM", None)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    exit_without_gpu("the INT8 GEMM choice benchmark")
    import cupy as cp

    from mixpert.runtime.cuda import tn_gemm

    device = device_name()
    out = args.out or results_folder(device, Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed, (batch, m, k, n) in enumerate(SHAPES):
        rng = cp.random.default_rng(seed)
        lead = (batch,) if batch > 1 else ()
        a = gemmul8(cp, rng, (*lead, m, k), 0.5)
        b = gemmul8(cp, rng, (*lead, k, n), 0.5)
        tf32 = lambda a=a, b=b: mixpert.matmul(a, b, level="tf32")  # noqa: E731
        calls = {
            "sgemm": (lambda a=a, b=b: cp.matmul(a, b), "cuBLAS"),
            "tf32": (tf32, "cuBLAS TF32"),
            "IV cublasGemmEx": (lambda a=a, b=b: iv(True)(a, b), "IV"),
            "IV measured choice": (lambda a=a, b=b: iv(False)(a, b), "IV"),
        }
        timings = measure_calls(cp, calls, a, b, 2.0 * batch * m * k * n)
        sgemm = timings["sgemm"][0]
        for name, (seconds, error, _) in timings.items():
            rows.append({"batch": batch, "m": m, "k": k, "n": n, "method": name,
                         "time_ms": seconds * 1e3, "ratio_to_sgemm": sgemm / seconds,
                         "error": error, "sgemm_error": timings["sgemm"][1]})  # fmt: skip
        cells = ", ".join(f"{r['method']} {r['ratio_to_sgemm']:.2f}x" for r in rows[-4:])
        print(f"{batch} x {m}x{k}x{n}: {cells}", flush=True)
        del a, b
        cp.get_default_memory_pool().free_all_blocks()
    chosen = {str(shape): how for shape, how in tn_gemm.chosen_algorithms().items()}
    (out / "int8-gemm-choice.json").write_text(
        json.dumps({"device": device, "rows": rows, "chosen": chosen}, indent=1)
    )
    text = markdown(rows, device)
    (out / "int8-gemm-choice.md").write_text(text)
    plot(rows, device, out / "int8-gemm-choice.png")
    print(text)


def markdown(rows: list[dict[str, Any]], device: str) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = [
        f"# INT8 GEMM algorithm per shape ({device})",
        "",
        "x SGEMM (error) in one run; level IV with cublasGemmEx only (before) and with the "
        "measured-fastest algorithm per shape (after).",
        "",
        "| batch x (m x k x n) | " + " | ".join(methods) + " |",
        "|---" * (len(methods) + 1) + "|",
    ]
    shapes = dict.fromkeys((r["batch"], r["m"], r["k"], r["n"]) for r in rows)
    for shape in shapes:
        cells = {r["method"]: r for r in rows if (r["batch"], r["m"], r["k"], r["n"]) == shape}
        text = [f"{cells[m]['ratio_to_sgemm']:.2f}x ({cells[m]['error']:.1e})" for m in methods]
        lines.append(
            f"| {shape[0]} x {shape[1]}x{shape[2]}x{shape[3]} | " + " | ".join(text) + " |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], device: str, path: Path) -> None:
    shapes = list(dict.fromkeys((r["batch"], r["m"], r["k"], r["n"]) for r in rows))
    labels = [f"{s[0]}x{s[1]}^3" if s[0] > 1 else f"{s[1]}^3" for s in shapes]
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m != "sgemm"]
    ratio = {(r["method"], (r["batch"], r["m"], r["k"], r["n"])): r["ratio_to_sgemm"] for r in rows}
    series = {m: [ratio[m, s] for s in shapes] for m in methods}
    title = f"INT8 GEMM algorithm choice ({device})"
    grouped_bars(path, title, labels, series, "x cuBLAS SGEMM")


if __name__ == "__main__":
    main()

"""The INT8 GEMM algorithm per shape (``runtime.cuda.tn_gemm``), three ways in one run.

Level IV with every INT8 GEMM through ``cublasGemmEx`` (``MIXPERT_INT8_GEMM=cublas``), with
each shape's measured-fastest cuBLAS or cuBLASLt algorithm (``MIXPERT_INT8_GEMM=cublaslt``), and
as shipped, mixpert's wgmma kernel among the candidates (``wgmma_gemm``, Hopper), beside cuBLAS
SGEMM and TF32, on 2-D products and stacks (phi = 0.5 inputs, NaN-poisoned outputs, median
times). Level IV as shipped runs the fused kernel where it wins; "IV (sums)" is its class-sum
pipeline alone (``MIXPERT_FUSED=0``), whose GEMMs are the ones chosen here. Writes
``int8-gemm-choice.{json,md,png}``.

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


def iv_sums(engines: str | None) -> Any:
    """Level IV's class-sum pipeline (``MIXPERT_FUSED=0``, uncached: a replayed graph keeps the
    GEMMs it was captured with) with ``MIXPERT_INT8_GEMM=engines`` (None: as shipped), each
    way with its own table of chosen algorithms (made at its first call, outside the timing)."""
    from mixpert.runtime.cuda import tn_gemm

    chosen: dict[Any, Any] = {}
    switches = {"MIXPERT_INT8_GEMM": engines, "MIXPERT_FUSED": "0", "MIXPERT_PLAN_CACHE": "0"}

    def run(a: Any, b: Any) -> Any:
        for name, value in switches.items():
            if value is not None:
                os.environ[name] = value
        shipped, tn_gemm._chosen = tn_gemm._chosen, chosen
        try:
            return mixpert.matmul(a, b, level="IV")
        finally:
            tn_gemm._chosen = shipped
            for name in switches:
                os.environ.pop(name, None)

    return run


def on(run: Any, a: Any, b: Any) -> Any:
    """``run(a, b)`` as a call of no arguments (a function: the profiler reads its name)."""

    def call() -> Any:
        return run(a, b)

    return call


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
            "IV (sums) cublasGemmEx": (on(iv_sums("cublas"), a, b), "IV"),
            "IV (sums) cuBLAS choice": (on(iv_sums("cublaslt"), a, b), "IV"),
            "IV (sums) with wgmma": (on(iv_sums(None), a, b), "IV"),
            "IV": (lambda a=a, b=b: mixpert.matmul(a, b, level="IV"), "IV"),
        }
        timings = measure_calls(cp, calls, a, b, 2.0 * batch * m * k * n)
        sgemm = timings["sgemm"][0]
        for name, (seconds, error, _) in timings.items():
            rows.append({"batch": batch, "m": m, "k": k, "n": n, "method": name,
                         "time_ms": seconds * 1e3, "ratio_to_sgemm": sgemm / seconds,
                         "error": error, "sgemm_error": timings["sgemm"][1]})  # fmt: skip
        cells = ", ".join(f"{r['method']} {r['ratio_to_sgemm']:.2f}x" for r in rows[-6:])
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
        "x SGEMM (error) in one run; level IV's class-sum pipeline with cublasGemmEx only, "
        "with cuBLAS's measured-fastest algorithm per shape, and with mixpert's wgmma kernel "
        "among the candidates; level IV as shipped.",
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

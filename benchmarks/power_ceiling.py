"""What bounds the large emulated products: the GPU's power, measured (issue 45).

An INT8 level runs a fixed number of INT8 products (level IV: 8), so its speed over SGEMM can
be no more than SGEMM's time over that many of cuBLAS's own INT8 GEMMs of the same shape, run
the way the level's are: back to back, for seconds. This script measures that ceiling and each
level against it in one run: cuBLAS SGEMM, TF32, cuBLAS's INT8 GEMM (``tn_gemm``, n x n x n) and
the levels, each enqueued back to back for ``--seconds`` while ``nvidia-smi`` samples the SM
clock and the board's power (a burst of a few calls runs at the boost clock and reads faster
than any sustained use; the INT8 tensor cores at full rate draw the board's limit and clock
down). Per method: ms a call, the ratio to SGEMM, the clock and power it ran at, the error
against float64 (MixPert Eq. 10, into a NaN-poisoned output) and, for the levels, the fraction
of the ceiling reached: (products x the INT8 GEMM's ms) / the level's ms. Inputs: fresh random
data per size (phi = 0.5, as ``fused_anchors``); the INT8 GEMM's result is checked exactly.

    python benchmarks/power_ceiling.py [--sizes 4096 8192 16384] [--seconds 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from mixpert.runtime.device import device_name, exit_without_gpu

exit_without_gpu("benchmarks/power_ceiling.py")

import cupy as cp  # noqa: E402
from call_overhead import checked  # noqa: E402

from mixpert.bench.gemm import method_fn, random_inputs, results_folder  # noqa: E402
from mixpert.runtime.levels import get_level  # noqa: E402

SIZES = (4096, 8192, 16384)
LEVELS = ("T6", "IV", "V")
INT8 = "int8 GEMM"
SAMPLE_EVERY = 0.1  # seconds between nvidia-smi samples
SETTLE = 0.5  # seconds of a run left unsampled: the clock falls from its boost value first


def sampler() -> Callable[[], tuple[float, float]] | None:
    """(SM clock in MHz, board power in W) of the current device now, from nvidia-smi; None
    where it is missing."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = [smi, "--query-gpu=pci.bus_id,clocks.sm,power.draw", "--format=csv,noheader,nounits"]
    bus = cp.cuda.runtime.deviceGetPCIBusId(cp.cuda.runtime.getDevice())

    def sample() -> tuple[float, float]:
        return reading(subprocess.run(query, capture_output=True, text=True).stdout, bus)

    return sample


def reading(text: str, bus: str) -> tuple[float, float]:
    """(clock, power) from nvidia-smi's lines of "bus id, clock, power": the line of PCI bus
    ``bus`` (nvidia-smi's numbering need not be CUDA's: CUDA_VISIBLE_DEVICES reorders the
    latter; its bus ids carry a longer domain), or the only line."""
    lines = [[field.strip() for field in line.split(",")] for line in text.strip().splitlines()]
    place = bus.lower().split(":", 1)[-1]  # bus:device.function, without the domain
    mine = [line for line in lines if line[0].lower().endswith(place)]
    if len(mine) != 1:
        mine = lines if len(lines) == 1 else []
    if not mine:
        raise RuntimeError(f"nvidia-smi lists no GPU at PCI bus {bus}: {text!r}")
    return float(mine[0][1]), float(mine[0][2])


def sustained(
    call: Callable[[], Any], seconds: float, sample: Callable[[], tuple[float, float]] | None
) -> tuple[float, float | None, float | None]:
    """(ms a call, median SM clock, median power) of ``call`` enqueued back to back for about
    ``seconds`` of GPU time, sampled from a thread while the GPU runs the queue (the enqueuing
    itself can last nearly as long: a full launch queue holds the host back)."""
    call()
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    call()
    end.record()
    end.synchronize()
    calls = max(3, round(seconds * 1e3 / cp.cuda.get_elapsed_time(start, end)))
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sampling() -> None:
        if done.wait(SETTLE):
            return
        while not done.is_set():
            samples.append(sample())
            done.wait(SAMPLE_EVERY)

    sampler_thread = threading.Thread(target=sampling, daemon=True) if sample else None
    if sampler_thread is not None:
        sampler_thread.start()
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    done.set()
    if sampler_thread is not None:
        sampler_thread.join()
    ms = cp.cuda.get_elapsed_time(start, end) / calls
    if not samples:
        return ms, None, None
    return ms, median(c for c, _ in samples), median(p for _, p in samples)


def int8_gemm(n: int, seed: int) -> Callable[[], cp.ndarray]:
    """cuBLAS's INT8 GEMM of n x n x n random int8 operands (INT32 C), as the levels' products
    run it; its result checked exactly once (int8 sums are exact in float64)."""
    from mixpert.runtime.cuda import tn_gemm

    rng = cp.random.default_rng(seed)
    a = rng.integers(-128, 128, (n, n), dtype=cp.int8)
    b = rng.integers(-128, 128, (n, n), dtype=cp.int8)
    c = cp.full((n, n), -(2**31), dtype=cp.int32)  # poison: no INT32 sum of these reaches it
    shape = tn_gemm.Gemm(n, n, n, n, n)

    def call() -> cp.ndarray:  # (a b^T column-major: row-major, c = b a^T)
        tn_gemm.gemm(shape, a.data.ptr, b.data.ptr, c.data.ptr, False)
        return c

    exact = b.astype(cp.float64) @ a.T.astype(cp.float64)
    if not bool(cp.array_equal(call().astype(cp.float64), exact)):
        raise RuntimeError(f"cuBLAS's INT8 GEMM at n = {n}: a wrong result")
    return call


def case(n: int, seconds: float, sample: Callable[[], tuple[float, float]] | None) -> list[dict]:
    """Every method at n x n x n, sustained, one after another."""
    a, b = random_inputs(cp, n, n, n, "phi0.5", n)
    rows = []
    for name in ("sgemm", "tf32", INT8, *LEVELS):
        if name == INT8:
            call, ran, err, products = int8_gemm(n, n + 1), INT8, None, 1
        else:
            call, ran = method_fn(cp, name, a, b)
            err = checked(call, a, b)
            products = len(get_level(name).pairs) if name in LEVELS else None
        ms, clock, power = sustained(call, seconds, sample)
        rows.append({"n": n, "method": name, "ran": ran, "ms": ms, "products": products,
                     "clock_mhz": clock, "power_w": power, "error": err})  # fmt: skip
        del call
        cp.get_default_memory_pool().free_all_blocks()
    return with_ratios(rows)


def with_ratios(rows: list[dict]) -> list[dict]:
    """One size's rows with ratio_to_sgemm, sgemm_error and, for the levels, ceiling_ratio (SGEMM
    over their products' INT8 GEMMs) and of_ceiling (the level's share of it)."""
    by_method = {r["method"]: r for r in rows}
    sgemm, int8 = by_method["sgemm"], by_method[INT8]
    for r in rows:
        r["ratio_to_sgemm"] = sgemm["ms"] / r["ms"]
        r["sgemm_error"] = sgemm["error"]
        if r["method"] in LEVELS:
            ceiling = r["products"] * int8["ms"]
            r["ceiling_ratio"] = sgemm["ms"] / ceiling
            r["of_ceiling"] = ceiling / r["ms"]
    return rows


def cell(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def table(rows: list[dict]) -> str:
    lines = [
        "| n | method | ms a call | x SGEMM | SM clock (MHz) | power (W) | error | "
        "ceiling (products x INT8 GEMM) | of the ceiling |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ceiling = r.get("ceiling_ratio")
        ceiling_cell = "-" if ceiling is None else f"{ceiling:.2f}x ({r['products']} products)"
        lines.append(
            f"| {r['n']} | {r['method']} | {r['ms']:.3f} | {r['ratio_to_sgemm']:.2f}x | "
            f"{cell(r['clock_mhz'], '.0f')} | {cell(r['power_w'], '.0f')} | "
            f"{cell(r['error'], '.1e')} | "
            f"{ceiling_cell} | "
            f"{cell(r.get('of_ceiling'), '.3f')} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["n"] for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in ("tf32", *LEVELS):
        mine = {r["n"]: r for r in rows if r["method"] == name}
        line = ax.plot(sizes, [mine[n]["ratio_to_sgemm"] for n in sizes], "o-", label=name)[0]
        if name in LEVELS:
            ceiling = [mine[n]["ceiling_ratio"] for n in sizes]
            products = mine[sizes[0]]["products"]
            label = f"{name}'s ceiling ({products} INT8 GEMMs)"
            ax.plot(sizes, ceiling, "--", color=line.get_color(), label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_xlabel("n (n x n x n, phi = 0.5)")
    ax.set_ylabel("speed over cuBLAS SGEMM, sustained")
    ax.set_title("INT8 levels against their power-bound ceiling")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--seconds", type=float, default=2.0, help="GPU time a method runs")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    sample = sampler()
    rows = []
    for n in args.sizes:
        rows += case(n, args.seconds, sample)
        print(table([r for r in rows if r["n"] == n]), flush=True)
    folder = results_folder(device_name(), args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "power-ceiling.json").write_text(json.dumps({"rows": rows}, indent=1))
    (folder / "power-ceiling.md").write_text(table(rows) + "\n")
    plot(rows, folder / "power-ceiling.png")
    print(table(rows))


if __name__ == "__main__":
    main()

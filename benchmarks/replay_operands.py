"""A replayed product's operands, two ways (issue 46): copied into the plan's buffers and the
result copied out (``CapturedProduct(read_in_place=False)``), against the graph's node
parameters pointed at the caller's arrays each call (``graph_operands``, as shipped).

Per n (square products, and a 64-pair stack of 256^3) and level: host us to enqueue a call
behind a long GEMM, us per call back to back, the ratio to cuBLAS SGEMM in the same run, and
whether both ways give the same bits on fresh data at new addresses (outputs poisoned first).

    python benchmarks/replay_operands.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mixpert.runtime.device import device_name, exit_without_gpu

exit_without_gpu("benchmarks/replay_operands.py")

import cupy as cp
from call_overhead import host_us, operands, timed

from mixpert.bench.gemm import results_folder
from mixpert.runtime.cuda.captured import CapturedProduct
from mixpert.runtime.levels import get_level

SIZES = (256, 512, 1024, 1536, 2048, 3072, 4096)
LEVELS = ("IV", "T6")
STACK = (64, 256)
WAYS = {"copies": False, "in place": True}


def same_bits(planned: dict[str, CapturedProduct], shape: tuple[int, ...]) -> bool:
    """Both ways give one result on three fresh operand pairs at new addresses."""
    for seed in range(3):
        spacer = cp.empty(1 + 4096 * seed, dtype=cp.float32)  # (moves the next allocations)
        a, b = operands(shape, 10 + seed), operands(shape, 20 + seed)
        results = []
        for plan in planned.values():
            out = cp.full(plan.out_shape, cp.nan, dtype=cp.float32)
            out[...] = plan(a, b)
            results.append(out)
        del spacer
        if not cp.array_equal(results[0].view(cp.uint32), results[1].view(cp.uint32)):
            return False
    return True


def case(label: str, shape: tuple[int, ...], level: str) -> list[dict[str, Any]]:
    count = shape[0] if len(shape) > 2 else 1
    m, k = shape[-2:]
    planned = {
        way: CapturedProduct(m, k, k, get_level(level), count=count, read_in_place=in_place)
        for way, in_place in WAYS.items()
    }
    a, b = operands(shape, 1), operands(shape, 2)
    reps = max(20, min(300, int(4e10 / (2 * k**3 * count))))
    sgemm = timed(lambda: a @ b, reps)[1]
    same = same_bits(planned, shape)
    rows = []
    for way, plan in planned.items():
        call = min(timed(lambda plan=plan: plan(a, b), reps)[1] for _ in range(3))
        host = min(host_us(lambda plan=plan: plan(a, b)) for _ in range(3))
        rows.append({
            "n": label, "level": level, "way": way, "in_place": plan.reads_in_place,
            "host_us": host, "call_us": call, "sgemm_us": sgemm, "ratio_to_sgemm": sgemm / call,
            "same_bits": same,
        })  # fmt: skip
        print(f"{label:>10s} {level:3s} {way:8s} host {host:6.1f} us  call {call:8.1f} us  "
              f"{sgemm / call:5.2f}x SGEMM  same bits {same}", flush=True)  # fmt: skip
        plan.release()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| n | level | host us (copies) | host us (in place) | x SGEMM (copies) | "
             "x SGEMM (in place) | same bits |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    index = {(r["n"], r["level"], r["way"]): r for r in rows}
    for n, level in dict.fromkeys((r["n"], r["level"]) for r in rows):
        copies, in_place = index[n, level, "copies"], index[n, level, "in place"]
        lines.append(
            f"| {n} | {level} | {copies['host_us']:.1f} | {in_place['host_us']:.1f} | "
            f"{copies['ratio_to_sgemm']:.2f}x | {in_place['ratio_to_sgemm']:.2f}x | "
            f"{in_place['same_bits'] and in_place['in_place']} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for level in LEVELS:
        for way, style in (("copies", ":"), ("in place", "-")):
            pts = [r for r in rows if r["level"] == level and r["way"] == way and r["n"].isdigit()]
            xs = [int(r["n"]) for r in pts]
            label = f"{level} {way}"
            axes[0].plot(xs, [r["host_us"] for r in pts], style, marker="o", label=label)
            axes[1].plot(xs, [r["ratio_to_sgemm"] for r in pts], style, marker="o", label=label)
    axes[0].set(xscale="log", xlabel="n", ylabel="host us per call", title="host time")
    axes[1].set(xscale="log", xlabel="n", ylabel="x cuBLAS SGEMM", title="calls back to back")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"replayed product: operands copied vs read in place, {device_name()}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    folder = results_folder(device_name(), args.out or Path(__file__).parent / "results")
    folder.mkdir(parents=True, exist_ok=True)
    count, side = STACK
    cases = [(str(n), (n, n)) for n in (SIZES[:5] if args.quick else SIZES)]
    cases.append((f"{count}x{side}^3", (count, side, side)))
    rows = [row for label, shape in cases for level in LEVELS for row in case(label, shape, level)]
    (folder / "replay-operands.json").write_text(json.dumps(rows, indent=1))
    (folder / "replay-operands.md").write_text(
        f"# Replayed product: operands copied vs read in place ({device_name()})\n\n"
        + table(rows)
        + "\n"
    )
    plot(rows, folder / "replay-operands.png")
    print(table(rows))


if __name__ == "__main__":
    main()

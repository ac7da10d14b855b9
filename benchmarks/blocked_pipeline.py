"""Blocked class sums, and what the wide-range handling costs, in one run on the GPU.

At each size, on N(0,1) and phi = 0.5 inputs (no line needs special handling there), beside
cuBLAS SGEMM and TF32:

- ``IV``: as shipped: class sums and combine per block of A's rows (``cuda.sliced.sum_blocking``);
- ``IV one block``: every row in one block (the path before blocks);
- ``IV no rebalancing``: all-zero k-exponents (every k-index kept; the tops passes stay);
- ``IV no wide-range handling``: no rebalancing and no deep-entry count in the pack kernels:
  the cost of issue 11's handling is this row's time against ``IV``'s (since the tops read
  also gives the packers their lines' maxima, it is left out of that cost: results before
  ``cuda.packs.OperandTops`` counted it);
- ``V``: the floor-grade level, as shipped.

Blocks run the same GEMMs (``gemm_tn`` cuts A into ``workspace.gemm_row_block`` rows) and one
combine launch per block: predicted within noise. Rounds are interleaved so clock drift hits every
variant alike; each variant keeps its best median. Writes ``blocked-pipeline.json``, ``.md``
and ``.png``.

    python benchmarks/blocked_pipeline.py [--out DIR] [--sizes 4096 8192 16384]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from mixpert.bench.gemm import measure_calls, random_inputs, results_folder
from mixpert.bench.plot_style import grouped_bars
from mixpert.runtime import device, get_level

DISTRIBUTIONS = ("normal", "phi0.5")


@contextlib.contextmanager
def one_block() -> Iterator[None]:
    """Every row of A in one block of class sums (the path before blocks)."""
    from mixpert.runtime.cuda import sliced

    original = sliced.sum_blocking

    def whole(level: Any, m: int, k: int, n: int, count: int = 1) -> tuple[int, int]:
        return (m if count == 1 else count), original(level, m, k, n, count)[1]

    with mock.patch.object(sliced, "sum_blocking", whole):
        yield


@contextlib.contextmanager
def no_rebalancing() -> Iterator[None]:
    """All-zero k-exponents: every k-index kept where it is. (The one read of each operand
    stays: it also gives the packers their lines' maxima, ``cuda.packs.OperandTops``.)"""
    import cupy as cp

    from mixpert.runtime.cuda import sliced

    def zeros(a_top: Any, b_top: Any) -> Any:
        return cp.zeros((a_top.shape[0], a_top.shape[1] + 1), dtype=cp.int32)

    with mock.patch.object(sliced, "exponents_from_tops", zeros):
        yield


def variants(cp: Any, a: Any, b: Any) -> dict[str, tuple[Callable[[], Any], str]]:
    from mixpert.runtime.cuda import backend, native

    iv, v = get_level("IV"), get_level("V")
    plain = dataclasses.replace(iv, name="IV-plain", bypass_wide=False)

    def under(context: Callable[[], Any], level: Any) -> Callable[[], Any]:
        def call() -> Any:
            with context():
                return backend.product_at_level(a, b, level)

        return call

    return {
        "sgemm": ((lambda: cp.matmul(a, b)), "sgemm"),
        "tf32": ((lambda: native.tf32_product(a, b)), "tf32"),
        "IV": ((lambda: backend.product_at_level(a, b, iv)), "IV"),
        "IV one block": (under(one_block, iv), "IV"),
        "IV no rebalancing": (under(no_rebalancing, iv), "IV"),
        "IV no wide-range handling": (under(no_rebalancing, plain), "IV"),
        "V": ((lambda: backend.product_at_level(a, b, v)), "V"),
    }


def measure(cp: Any, n: int, dist: str) -> dict[str, Any]:
    a, b = random_inputs(cp, n, n, n, dist, seed=n)
    calls = variants(cp, a, b)
    first = measure_calls(cp, calls, a, b, 2.0 * n**3)  # interleaved rounds, best median
    seconds = {name: t for name, (t, _, _) in first.items()}
    row: dict[str, Any] = {"n": n, "dist": dist, "sgemm_error": first["sgemm"][1]}
    row["variants"] = {
        name: {
            "time_ms": 1e3 * seconds[name],
            "ratio_to_sgemm": seconds["sgemm"] / seconds[name],
            "error": first[name][1],
        }
        for name in calls
    }
    iv = seconds["IV"]
    row["blocking_cost"] = iv / seconds["IV one block"] - 1
    row["wide_range_cost"] = iv / seconds["IV no wide-range handling"] - 1
    row["rebalancing_cost"] = iv / seconds["IV no rebalancing"] - 1
    return row


def markdown(rows: list[dict[str, Any]], name: str) -> str:
    names = list(rows[0]["variants"])
    lines = [
        f"# Blocked class sums and the wide-range handling's cost ({name})",
        "",
        "x cuBLAS SGEMM in one run (best median of the rounds); error: ||C - C64|| / ||C64||.",
        "",
        "| n | data | " + " | ".join(names) + " | blocking cost | wide-range cost | SGEMM error |",
        "|---|---|" + "---|" * (len(names) + 3),
    ]
    for r in rows:
        cells = " | ".join(
            f"{r['variants'][k]['ratio_to_sgemm']:.2f}x ({r['variants'][k]['error']:.1e})"
            for k in names
        )
        lines.append(
            f"| {r['n']} | {r['dist']} | {cells} | {100 * r['blocking_cost']:+.1f}% | "
            f"{100 * r['wide_range_cost']:+.1f}% | {r['sgemm_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], name: str, path: Path) -> None:
    shown = [k for k in rows[0]["variants"] if k != "sgemm"]
    series = {k: [r["variants"][k]["ratio_to_sgemm"] for r in rows] for k in shown}
    groups = [f"{r['n']}\n{r['dist']}" for r in rows]
    title = f"Blocked class sums, wide-range handling ({name})"
    grouped_bars(path, title, groups, series, "speed-up over cuBLAS SGEMM", size=(9, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192, 16384])
    args = parser.parse_args()
    device.exit_without_gpu("benchmarks/blocked_pipeline.py")
    cp = device.cupy_module()
    name = device.device_name()
    rows = []
    for n in args.sizes:
        for dist in DISTRIBUTIONS:
            rows.append(measure(cp, n, dist))
            print(markdown(rows[-1:], name).splitlines()[-1], flush=True)
            cp.get_default_memory_pool().free_all_blocks()
    table = markdown(rows, name)
    print(table)
    out = args.out or results_folder(name, Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "blocked-pipeline.json").write_text(json.dumps(rows, indent=1))
    (out / "blocked-pipeline.md").write_text(table)
    plot(rows, name, out / "blocked-pipeline.png")


if __name__ == "__main__":
    main()

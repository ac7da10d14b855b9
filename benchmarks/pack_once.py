"""Pack once: what keeping the packs of loop-invariant operands saves, on the samples that have
such operands and on a loop of products with one shared operand, in one run on the GPU.

Each function runs with data resident on the GPU under three plans in the same run: native
float32 everywhere (cuBLAS SGEMM), level IV everywhere with packs kept (the default), and level
IV everywhere with nothing kept (the function's invariance table emptied). The prediction for a
kept operand is what its packing costs, once per product after the first: for k-means at its
GPU size (x: 262144 x 2048) two packs of 2 GiB of points per iteration, ~1 ms each at copy
bandwidth, against ~11 ms of INT8 products per product. Outputs are checked to be the same bits
with and without kept packs. Writes ``pack-once.json``, ``.md`` and ``.png``.

    python benchmarks/pack_once.py [--out DIR] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

import mixpert
from mixpert.bench.gemm import results_folder
from mixpert.bench.plot_style import grouped_bars
from mixpert.jit import MixpertFunction
from mixpert.runtime.device import device_name, exit_without_gpu
from mixpert.samples import load_sample
from mixpert.timing import best_time

SAMPLES = ("kmeans", "knn", "subspace")


@mixpert.jit
def shared_weights(x, ws):
    """A loop of products sharing their left operand (a batch of inputs through many layers)."""
    out = x @ ws[0]
    for i in range(1, ws.shape[0]):
        out = out + x @ ws[i]
    return out


def shared_weights_inputs(cp: Any, rng: Any, n: int) -> tuple[Any, ...]:
    return rng.standard_normal((n, n), dtype=cp.float32), rng.standard_normal(
        (8, n, n), dtype=cp.float32
    )


def every_op(f: MixpertFunction, level: str) -> dict[str, str]:
    return {op_id: level for op_id in f.ops}


def measure(name: str, f: MixpertFunction, args: tuple[Any, ...], repeats: int) -> dict[str, Any]:
    import cupy as cp

    sync = cp.cuda.Device().synchronize
    native = f.with_plan(every_op(f, "fp32"))
    kept = f.with_plan(every_op(f, "IV"))
    unkept = f.with_plan(every_op(f, "IV"))
    unkept._invariance = {}  # nothing kept: what every call did before packs were kept
    seconds = {
        label: best_time(lambda g=g: g(*args), sync, repeats)
        for label, g in (("native", native), ("kept", kept), ("not kept", unkept))
    }
    same = all(
        bool(cp.array_equal(x, y))
        for x, y in zip(_outputs(kept(*args)), _outputs(unkept(*args)), strict=True)
    )
    invariant = {op.op_id: op.invariant for op in f.ops.values() if any(op.invariant)}
    return {
        "function": name,
        "shapes": [list(a.shape) for a in args if hasattr(a, "shape")],
        "invariant_operands": {
            k: "".join("AB"[i] for i in (0, 1) if v[i]) for k, v in invariant.items()
        },
        "native_ms": 1e3 * seconds["native"],
        "iv_kept_ms": 1e3 * seconds["kept"],
        "iv_not_kept_ms": 1e3 * seconds["not kept"],
        "kept_speedup": seconds["not kept"] / seconds["kept"],
        "kept_vs_native": seconds["native"] / seconds["kept"],
        "same_bits": same,
    }


def _outputs(result: Any) -> tuple[Any, ...]:
    return tuple(result) if isinstance(result, tuple) else (result,)


def markdown(rows: list[dict[str, Any]], device: str) -> str:
    lines = [
        f"# Pack once ({device})",
        "",
        "Every op at level IV, packs of loop-invariant operands kept (the default) or not; "
        "native float32 (cuBLAS SGEMM) in the same run. Best of the repeats, data on the GPU.",
        "",
        "| function | kept operands | native ms | IV not kept ms | IV kept ms | kept speed-up "
        "| IV kept vs native | same bits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kept = ", ".join(f"{k}: {v}" for k, v in r["invariant_operands"].items())
        lines.append(
            f"| {r['function']} | {kept} | {r['native_ms']:.2f} | {r['iv_not_kept_ms']:.2f} | "
            f"{r['iv_kept_ms']:.2f} | {r['kept_speedup']:.3f}x | {r['kept_vs_native']:.2f}x | "
            f"{r['same_bits']} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], device: str, path: Path) -> None:
    """Speed-up over native float32 per function, IV with and without kept packs."""
    series = {
        label: [r["native_ms"] / r[key] for r in rows]
        for key, label in (("iv_not_kept_ms", "IV, nothing kept"),
                           ("iv_kept_ms", "IV, invariant packs kept"))
    }  # fmt: skip
    grouped_bars(path, f"Pack once ({device})", [r["function"] for r in rows], series,
                 "speed-up over native float32", size=(7, 3.5))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", nargs="*", default=list(SAMPLES))
    args = parser.parse_args()
    exit_without_gpu("the pack-once benchmark")
    import cupy as cp

    device = device_name()
    out = args.out or results_folder(device, Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    rng = cp.random.default_rng(1)
    rows.append(
        measure(
            "shared_weights", shared_weights, shared_weights_inputs(cp, rng, 4096), args.repeats
        )
    )
    print(rows[-1], flush=True)
    for name in args.samples:
        sample = load_sample(name)
        inputs = sample.make_inputs(cp, cp.random.default_rng(1), sample.sizes["gpu"])
        rows.append(measure(name, sample.func, inputs, args.repeats))
        print(rows[-1], flush=True)
    (out / "pack-once.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    text = markdown(rows, device)
    (out / "pack-once.md").write_text(text)
    plot(rows, device, out / "pack-once.png")
    print(text)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

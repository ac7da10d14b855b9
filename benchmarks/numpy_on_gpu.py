"""NumPy code on a GPU (issue 47): a ``@mixpert.jit`` function called with NumPy arrays, before
one trip (``MIXPERT_ONE_TRIP=0``: each product's operands over and result back, the rest on the
host) and after (the arguments over once, the body on the GPU, the results back once), beside
NumPy on the host, ``numba.njit``, the same function at the same plan on CuPy arrays already on
the GPU, and the copies alone.

Cases: the 3-layer MLP (x: 4w x w, weights w x w, float32; h = max(x @ w1, 0), h = max(h @ w2, 0),
h @ w3) at w = 512, 1024, 2048, 4096, and two samples with their NumPy inputs: ``bert_ffn``
(w tokens: GELU and LayerNorm around two products) and ``kmeans`` (K = w clusters: a loop of
whole-array steps). Each case is tuned once for the GPU (target "cuda", tol 1e-4) on its NumPy
arguments; "before" and "after" run that plan (a plan the host's own run beats runs there, and
says so). Times: best of several calls after a warm-up, wall clock, the GPU synchronised.
``resident_ms``: the plan on CuPy copies already on the GPU; ``copies_ms``: the arguments over
and the results back through mixpert's staging buffers (``runtime.cuda.transfers``), timed alone.
Each "after" result is checked bit for bit against the resident one.

Rows ``{"case", "w", "mode", "numpy_ms", "njit_ms", "mixpert_ms", "resident_ms", "copies_ms"}``
(with the plan's ``levels``, where the ``body`` ran and whether the result had the resident
``bits``) in ``<out>/<gpu>/numpy-on-gpu.json``, a table (``.md``) and a plot (``.png``) beside
it. ``--case`` runs some cases only (``mlp``, ``mlp:2048``, ``kmeans``...), their rows replacing
the same cases' in the file: a run can be split to fit a time limit.

    python benchmarks/numpy_on_gpu.py [--out benchmarks/results] [--quick] [--case NAME[:W]]...
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np

import mixpert
from mixpert import one_trip
from mixpert.bench.gemm import results_folder
from mixpert.bench.plot_style import grouped_bars
from mixpert.runtime import device
from mixpert.samples import load_sample

MLP_WIDTHS = (512, 1024, 2048, 4096)
SAMPLES = {"bert_ffn": (2048, 8192), "kmeans": (256, 512)}
TOL = 1e-4
SECONDS = 2.0  # per measured mode: as many calls as fit, 3 to 20


def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, np.float32(0))  # (a Python 0.0 makes h float64 in Numba)
    h = np.maximum(h @ w2, np.float32(0))
    return h @ w3


def mlp_inputs(w: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(w)
    x = rng.standard_normal((4 * w, w), dtype=np.float32)
    return (
        x,
        *(rng.standard_normal((w, w), dtype=np.float32) / np.float32(w**0.5) for _ in range(3)),
    )


def best_ms(call: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Best wall-clock milliseconds of ``call`` (synchronised), after a warm-up call."""
    start = time.perf_counter()
    call()
    sync()
    first = time.perf_counter() - start
    best = first
    for _ in range(max(3, min(20, int(SECONDS / max(first, 1e-6))))):
        start = time.perf_counter()
        call()
        sync()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def leaves(value: Any) -> list[Any]:
    """The arrays in ``value`` and its tuples and lists."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in leaves(v)]
    return [value] if hasattr(value, "dtype") and hasattr(value, "shape") else []


def same_bits(x: Any, y: Any) -> bool:
    xs, ys = leaves(x), leaves(y)
    if len(xs) != len(ys):
        return False
    for a, b in zip(xs, ys, strict=True):
        a, b = np.asarray(device.to_host(a)), np.asarray(device.to_host(b))
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if not np.array_equal(np.ascontiguousarray(a).view(np.uint8).reshape(-1),
                              np.ascontiguousarray(b).view(np.uint8).reshape(-1)):  # fmt: skip
            return False
    return True


def one_case(
    label: str, w: int, func: Callable[..., Any], jitted: Any, args: tuple[Any, ...]
) -> list[dict[str, Any]]:
    """Rows before and after for one case."""
    import cupy as cp

    from mixpert.runtime.cuda import transfers

    sync = cp.cuda.Device().synchronize
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (tol unreachable, resamples: said in the plan)
        plan = mixpert.tune(jitted, args, tol=TOL, target="cuda")
    run = jitted.with_plan(plan)
    numpy_ms = best_ms(lambda: func(*args), sync)
    plain = numba.njit(func)
    njit_ms = best_ms(lambda: plain(*args), sync)
    on_device = tuple(cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
    resident = run(*on_device)
    resident_ms = best_ms(lambda: run(*on_device), sync)

    def copies() -> None:
        for a in args:
            if isinstance(a, np.ndarray):
                transfers.to_device(a)
        for r in leaves(resident):
            transfers.to_host(r)

    copies_ms = best_ms(copies, sync)
    bits = same_bits(run(*args), resident)
    body = f"on the host: {plan.on_host}" if plan.on_host else str(run.placement_for(*args))
    rows = []
    for mode in ("before", "after"):
        if mode == "before":
            os.environ[one_trip.ENV] = "0"
        else:
            os.environ.pop(one_trip.ENV, None)
        rows.append({
            "case": label, "w": w, "mode": mode, "numpy_ms": numpy_ms, "njit_ms": njit_ms,
            "mixpert_ms": best_ms(lambda: run(*args), sync), "resident_ms": resident_ms,
            "copies_ms": copies_ms, "levels": dict(plan.levels), "body": body, "bits": bits,
        })  # fmt: skip
    os.environ.pop(one_trip.ENV, None)
    print(table_line(rows[0], rows[1]), flush=True)
    return rows


def table_line(before: dict[str, Any], after: dict[str, Any]) -> str:
    levels = ", ".join(f"{op} {level}" for op, level in after["levels"].items())
    bound = after["resident_ms"] + after["copies_ms"]
    return (
        f"| {after['case']} | {after['w']} | {after['numpy_ms']:.3g} | {after['njit_ms']:.3g} | "
        f"{before['mixpert_ms']:.3g} | {after['mixpert_ms']:.3g} | {after['resident_ms']:.3g} | "
        f"{after['copies_ms']:.3g} | {after['numpy_ms'] / after['mixpert_ms']:.2f}x | "
        f"{after['mixpert_ms'] / bound:.2f} | {'yes' if after['bits'] else 'NO'} | {levels} | "
        f"{after['body']} |"
    )


Case = tuple[str, int, Callable[..., Any], Any, tuple[Any, ...]]


def cases(quick: bool, wanted: list[str]) -> list[Case]:
    """The cases to run (``wanted``: names or name:w; none: all), inputs made as they come."""
    sizes = {"mlp": MLP_WIDTHS, **SAMPLES}

    def chosen(name: str, w: int) -> bool:
        return not wanted or name in wanted or f"{name}:{w}" in wanted

    found = []
    for name, widths in sizes.items():
        for w in widths[: 1 if name in SAMPLES else 2] if quick else widths:
            if not chosen(name, w):
                continue
            if name == "mlp":
                found.append((name, w, mlp, mixpert.jit(mlp), mlp_inputs(w)))
                continue
            sample = load_sample(name)
            args = sample.make_inputs(np, np.random.default_rng(w), w)
            found.append((name, w, sample.func.py_func, sample.func, tuple(args)))
    return found


HEADER = (
    "| case | w | NumPy ms | njit ms | before ms | after ms | resident ms | copies ms | "
    "after x NumPy | after / (resident + copies) | after = resident bits | levels | body |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Speed-up over NumPy on the host of each way, per case."""
    after = [r for r in rows if r["mode"] == "after"]
    before = {(r["case"], r["w"]): r for r in rows if r["mode"] == "before"}
    groups = [f"{r['case']} {r['w']}" for r in after]
    series = {
        "numba.njit": [r["numpy_ms"] / r["njit_ms"] for r in after],
        "mixpert before": [
            r["numpy_ms"] / before[(r["case"], r["w"])]["mixpert_ms"] for r in after
        ],
        "mixpert after": [r["numpy_ms"] / r["mixpert_ms"] for r in after],
        "resident + copies": [r["numpy_ms"] / (r["resident_ms"] + r["copies_ms"]) for r in after],
    }
    grouped_bars(path, f"NumPy arguments on {device.device_name()}", groups, series,
                 "speed-up over NumPy on the host", size=(11, 4))  # fmt: skip


def main() -> None:
    device.exit_without_gpu("benchmarks/numpy_on_gpu.py")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--quick", action="store_true", help="the smaller sizes only")
    parser.add_argument("--case", action="append", default=[], help="NAME or NAME:W (repeat)")
    options = parser.parse_args()
    folder = results_folder(device.device_name(), options.out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "numpy-on-gpu.json"
    print(f"{device.device_name()}, {os.cpu_count()} host cores, numba {numba.__version__}")
    print(HEADER, flush=True)
    rows: list[dict[str, Any]] = []
    for label, w, func, jitted, args in cases(options.quick, options.case):
        rows += one_case(label, w, func, jitted, args)
        write(folder, rows, partial=bool(options.case))  # a run cut short keeps what it did
    print(f"wrote {path}, numpy-on-gpu.md and numpy-on-gpu.png")


def write(folder: Path, rows: list[dict[str, Any]], partial: bool) -> None:
    """numpy-on-gpu.json, .md and .png in ``folder``; ``partial`` (a part of the run): the
    other cases' rows already in the file stay."""
    path = folder / "numpy-on-gpu.json"
    if partial and path.exists():
        ran = {(r["case"], r["w"]) for r in rows}
        rows = [r for r in json.loads(path.read_text()) if (r["case"], r["w"]) not in ran] + rows
    order = {name: i for i, name in enumerate(["mlp", *SAMPLES])}
    rows = sorted(rows, key=lambda r: (order.get(r["case"], 99), r["w"], r["mode"] != "before"))
    path.write_text(json.dumps(rows, indent=1) + "\n")
    pairs = list(zip(rows[::2], rows[1::2], strict=True))
    (folder / "numpy-on-gpu.md").write_text(
        f"# NumPy arguments on {device.device_name()} (benchmarks/numpy_on_gpu.py)\n\n"
        f"{os.cpu_count()} host cores; tol {TOL:g}, target cuda; times in ms, best of several "
        "calls; before: MIXPERT_ONE_TRIP=0.\n\n"
        + HEADER
        + "\n"
        + "\n".join(table_line(b, a) for b, a in pairs)
        + "\n"
    )
    plot(rows, folder / "numpy-on-gpu.png")


if __name__ == "__main__":
    main()

"""What one emulated product costs the host and the whole call, before and after the plan cache
(issue 46): every INT8 level and "auto" on CuPy arrays at mid sizes and on a 64-pair stack of
256^3, beside cuBLAS SGEMM and TF32 in the same run; then a 3-layer MLP under ``@mixpert.jit``
on CuPy arrays against plain CuPy.

"before" is the uncached path (``MIXPERT_PLAN_CACHE=0``), "after" the shipped one (a product of a
signature seen before replays one CUDA graph). Per call: ``host_us``, the host time to enqueue one
call while the GPU still runs a long GEMM queued first (so the calls' own GPU work never makes
the host wait on a full launch queue); ``host_us_back_to_back``, the same with calls back to
back and no sync (where the GPU's work is the longer, the host waits for it there, and the
figure is the GPU's); ``call_us``, the time per call of calls back to back with one sync at the
end, its ratio to SGEMM's; and the error against float64 (MixPert Eq. 10). Inputs:
fresh random data per size (rows scaled by e^N(0, 0.5^2): phi = 0.5), the output poisoned (NaN)
before each checked call.

    python benchmarks/call_overhead.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mixpert.runtime.device import device_name, exit_without_gpu

exit_without_gpu("benchmarks/call_overhead.py")

import cupy as cp
import numpy as np

import mixpert
from mixpert.bench.gemm import results_folder
from mixpert.runtime import plan_cache

SIZES = (256, 512, 1024, 1536, 2048, 3072, 4096)
LEVELS = ("I", "II", "III", "T6", "IV", "V", "IV-blocks", "auto")
STACK = (64, 256)  # pairs, side
MLP_WIDTHS = (512, 1024, 2048)
MLP_TOL = 1e-4


def operands(shape: tuple[int, ...], seed: int) -> cp.ndarray:
    rng = np.random.default_rng(seed)
    rows = np.exp(0.5 * rng.standard_normal((*shape[:-1], 1)))
    return cp.asarray((rng.standard_normal(shape) * rows).astype(np.float32))


def timed(call: Callable[[], Any], reps: int) -> tuple[float, float]:
    """(host us to enqueue a call, us per call back to back with one sync at the end)."""
    for _ in range(3):
        call()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        call()
    host = time.perf_counter() - start
    cp.cuda.Device().synchronize()
    whole = time.perf_counter() - start
    return host / reps * 1e6, whole / reps * 1e6


MIN_REPS = 50  # calls back to back a timing averages, at least: short calls vary call to call
HELD_CALLS = 48  # calls enqueued behind the long GEMM: well within the launch queue
LONG_GEMM_SIDE = 8192  # its GEMM keeps the GPU busy for longer than they take to enqueue


@functools.cache
def _long_gemm() -> Callable[[], Any]:
    a = operands((LONG_GEMM_SIDE, LONG_GEMM_SIDE), 0)
    return lambda: a @ a


HOST_BURSTS = 3  # bursts a host time is the least of (a burst's average is one sample)


def host_us(call: Callable[[], Any]) -> float:
    """Host us to enqueue one call behind a long GEMM: what a call costs the host alone. The
    least of HOST_BURSTS bursts: interference (a collection, another process) only adds, and
    single bursts read up to three times their neighbours (call-overhead.json, 2048 and 4096)."""
    call()
    cp.cuda.Device().synchronize()
    least = float("inf")
    for _ in range(HOST_BURSTS):
        _long_gemm()()
        start = time.perf_counter()
        for _ in range(HELD_CALLS):
            call()
        least = min(least, time.perf_counter() - start)
        cp.cuda.Device().synchronize()
    return least / HELD_CALLS * 1e6


def error(c: cp.ndarray, a: cp.ndarray, b: cp.ndarray) -> float:
    exact = a.astype(cp.float64) @ b.astype(cp.float64)
    return float(cp.linalg.norm(c.astype(cp.float64) - exact) / cp.linalg.norm(exact))


def checked(product: Callable[[], cp.ndarray], a: cp.ndarray, b: cp.ndarray) -> float:
    """The product's error, computed into a poisoned output (a result left unwritten shows)."""
    out = cp.full((*a.shape[:-1], b.shape[-1]), np.nan, dtype=cp.float32)
    out[...] = product()
    return error(out, a, b)


def mode(name: str) -> None:
    if name == "before":
        os.environ[plan_cache.SWITCH] = "0"
    else:
        os.environ.pop(plan_cache.SWITCH, None)
    mixpert.clear_cache()


def products(quick: bool) -> list[dict[str, Any]]:
    count, side = STACK
    cases = [(str(n), (n, n)) for n in (SIZES[:4] if quick else SIZES)]
    cases.append((f"{count}x{side}^3", (count, side, side)))
    rows = [row for label, shape in cases for row in case(label, shape)]
    mode("after")
    return rows


def case(label: str, shape: tuple[int, ...]) -> list[dict[str, Any]]:
    """Every level before and after on one product (a @ b, both of ``shape``)."""
    a, b = operands(shape, 1), operands(shape, 2)
    pairs = shape[0] if len(shape) > 2 else 1
    reps = max(MIN_REPS, min(200, int(4e10 / (2 * shape[-1] ** 3 * pairs))))
    sgemm_error = checked(lambda: a @ b, a, b)
    sgemm_call = timed(lambda: a @ b, reps)[1]
    sgemm_host = host_us(lambda: a @ b)
    tf32_error = checked(lambda: mixpert.matmul(a, b, level="tf32"), a, b)
    tf32_call = timed(lambda: mixpert.matmul(a, b, level="tf32"), reps)[1]
    print(f"{label}: SGEMM {sgemm_call:.1f} us/call (host {sgemm_host:.1f}), err "
          f"{sgemm_error:.1e}; TF32 {sgemm_call / tf32_call:.2f}x, err {tf32_error:.1e}",
          flush=True)  # fmt: skip
    rows = []
    for level in LEVELS:
        for when in ("before", "after"):
            mode(when)
            try:
                err = checked(lambda level=level: mixpert.matmul(a, b, level=level), a, b)
                product = functools.partial(mixpert.matmul, a, b, level=level)
                back_to_back, call = timed(product, reps)
                host = host_us(product)
            except (NotImplementedError, MemoryError, ValueError) as why:
                print(f"  {level} {when}: not run ({why})", flush=True)
                continue
            plans = replay_kinds()
            rows.append({
                "n": label, "level": level, "mode": when, "host_us": host,
                "host_us_back_to_back": back_to_back, "call_us": call,
                "ratio_to_sgemm": sgemm_call / call, "error": err, "sgemm_error": sgemm_error,
                "sgemm_us": sgemm_call, "tf32_ratio_to_sgemm": sgemm_call / tf32_call,
                "tf32_error": tf32_error, "plans": plans,
            })  # fmt: skip
            print(f"  {level:9s} {when:6s} host {host:7.1f} us  call {call:8.1f} us  "
                  f"{sgemm_call / call:5.2f}x SGEMM  err {err:.1e}  plans {plans}",
                  flush=True)  # fmt: skip
    return rows


def replay_kinds() -> list[str]:
    """How each plan the calls made replays: "in place" (operands and output rebound), "copies"
    (through the plan's buffers), "refused" (no plan: the product runs uncached) and its kind
    (CapturedProduct, CapturedSgemm). What explains a host time, read beside it."""
    from mixpert.runtime.cuda import backend

    cache = backend._plans.get(cp.cuda.runtime.getDevice())
    found = []
    for plan in [] if cache is None else list(cache._plans.values()):
        if plan is None:
            found.append("refused")
        else:
            how = "in place" if plan.reads_in_place else "copies"
            found.append(f"{type(plan).__name__} {how}")
    return found


def host_floor(n: int = 1024) -> list[dict[str, Any]]:
    """Host us per call of each layer of a replayed level-IV product at ``n``, beside CuPy's
    own calls: what bounds the host time of a call."""
    from mixpert.runtime.cuda import backend
    from mixpert.runtime.levels import get_level

    a, b = operands((n, n), 1), operands((n, n), 2)
    level = get_level("IV")
    mode("after")
    mixpert.matmul(a, b, level="IV")
    cache = backend._plans[cp.cuda.Device().id]
    graph = next(plan for plan in cache._plans.values() if plan is not None)
    stream = cp.cuda.get_current_stream()
    with mixpert.MatmulPlan(a, b, level="IV") as planned:
        layers = {
            "cupy a @ b (SGEMM)": lambda: a @ b,
            "cupy.empty (the result)": lambda: cp.empty((n, n), dtype=cp.float32),
            "one memcpyAsync (an operand)": lambda: cp.cuda.runtime.memcpyAsync(
                graph.a.data.ptr, a.data.ptr, a.nbytes, 3, stream.ptr
            ),
            "graph.launch": lambda: graph._graph.launch(stream),
            "CapturedProduct call (copies + launch)": lambda: graph(a, b),
            "backend.captured_product (+ cache lookup)": lambda: backend.captured_product(
                a, b, level
            ),
            "MatmulPlan.execute": lambda: planned.execute(a, b),
            "mixpert.matmul(level='IV')": lambda: mixpert.matmul(a, b, level="IV"),
        }
        rows = [{"n": n, "layer": name, "host_us": host_us(call),
                 "host_us_back_to_back": timed(call, 300)[0]}
                for name, call in layers.items()]  # fmt: skip
    for row in rows:
        print(f"  host floor n={n}: {row['layer']:45s} {row['host_us']:6.1f} us", flush=True)
    return rows


def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, np.float32(0))
    h = np.maximum(h @ w2, np.float32(0))
    return h @ w3


def mlps(quick: bool) -> list[dict[str, Any]]:
    rows = [row for w in (MLP_WIDTHS[:2] if quick else MLP_WIDTHS) for row in mlp_case(w)]
    mode("after")
    return rows


def mlp_case(w: int) -> list[dict[str, Any]]:
    """The jitted MLP (x: 4w x w, weights w x w) tuned for the GPU at MLP_TOL, against plain
    CuPy, before and after."""
    rng = np.random.default_rng(w)
    x = cp.asarray(rng.standard_normal((4 * w, w)).astype(np.float32))
    ws = [cp.asarray((rng.standard_normal((w, w)) / np.sqrt(w)).astype(np.float32))
          for _ in range(3)]  # fmt: skip
    plan = mixpert.tune(mlp, (x, *ws), tol=MLP_TOL, target="cuda")
    jitted = mixpert.jit(mlp, plan=plan)
    plain_call = timed(lambda: mlp(x, *ws), 50)[1]
    plain_host = host_us(lambda: mlp(x, *ws))  # (beside the jit's: what its layers add, net)
    rows = []
    for when in ("before", "after"):
        mode(when)
        call = timed(lambda: jitted(x, *ws), 50)[1]
        host = host_us(lambda: jitted(x, *ws))
        rows.append({"w": w, "mode": when, "levels": dict(plan.levels), "host_us": host,
                     "call_us": call, "cupy_us": plain_call, "cupy_host_us": plain_host,
                     "ratio_to_cupy": plain_call / call})  # fmt: skip
        print(f"MLP w={w} {when}: {call:.1f} us/call (host {host:.1f}) vs CuPy {plain_call:.1f} "
              f"(host {plain_host:.1f}): {plain_call / call:.2f}x  levels {dict(plan.levels)}",
              flush=True)  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| n | level | host us before | host us after | x SGEMM before | x SGEMM after | "
             "error | SGEMM error |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    index = {(r["n"], r["level"], r["mode"]): r for r in rows}
    for n, level in dict.fromkeys((r["n"], r["level"]) for r in rows):
        before, after = index.get((n, level, "before")), index.get((n, level, "after"))
        if before is None or after is None:
            continue
        lines.append(
            f"| {n} | {level} | {before['host_us']:.1f} | {after['host_us']:.1f} | "
            f"{before['ratio_to_sgemm']:.2f}x | {after['ratio_to_sgemm']:.2f}x | "
            f"{after['error']:.1e} | {after['sgemm_error']:.1e} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    squares = [r for r in rows if r["n"].isdigit()]
    for level in LEVELS:
        for when, style in (("before", ":"), ("after", "-")):
            pts = [(int(r["n"]), r) for r in squares if r["level"] == level and r["mode"] == when]
            if not pts:
                continue
            xs = [p[0] for p in pts]
            axes[0].plot(
                xs, [p[1]["host_us"] for p in pts], style, marker="o", label=f"{level} {when}"
            )
            label = f"{level} {when}"
            axes[1].plot(xs, [p[1]["ratio_to_sgemm"] for p in pts], style, marker="o", label=label)
    axes[0].set(xscale="log", yscale="log", xlabel="n", ylabel="host us per call",
                title="host time to enqueue one product")  # fmt: skip
    axes[1].set(xscale="log", xlabel="n", ylabel="x cuBLAS SGEMM", title="calls back to back")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle(f"mixpert.matmul per call, {device_name()}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    folder = results_folder(device_name(), args.out or Path(__file__).parent / "results")
    folder.mkdir(parents=True, exist_ok=True)
    rows = products(args.quick)
    (folder / "call-overhead.json").write_text(json.dumps(rows, indent=1))
    (folder / "call-overhead.md").write_text(
        f"# mixpert.matmul per call, before and after the plan cache ({device_name()})\n\n"
        + table(rows)
        + "\n"
    )
    plot(rows, folder / "call-overhead.png")
    print(table(rows), flush=True)
    (folder / "call-overhead-floor.json").write_text(json.dumps(host_floor(), indent=1))
    mlp_rows = mlps(args.quick)
    (folder / "call-overhead-mlp.json").write_text(json.dumps(mlp_rows, indent=1))


if __name__ == "__main__":
    main()

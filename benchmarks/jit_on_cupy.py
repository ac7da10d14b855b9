"""``@mixpert.jit`` on CuPy arrays (issue 46, item 5): what a site costs the host over CuPy's own
``a @ b``, and a jitted 3-layer MLP against plain CuPy, with and without whole-call replay
(``mixpert.jit(replay=True)``), all in one run.

Sites: a jitted ``x @ w`` whose plan runs it natively (fp32) or at level IV, beside CuPy's
``a @ b``, ``mixpert.matmul`` and ``MatmulPlan.execute``; host us to enqueue one call (calls back
to back, no sync; ``call_overhead.timed``). MLP: ``call_overhead.mlp`` (x: 4w x w, weights
w x w, w = 512, 1024, 2048), tuned for the GPU at tol 1e-4, as plain CuPy, jitted, and jitted
with replay: host us and us per call back to back, the ratio to CuPy, the error against float64
and whether the replayed bits equal the jitted call's. Fresh random inputs for every width (and
new ones at new addresses for the checks), outputs poisoned (NaN) before each checked call.

    python benchmarks/jit_on_cupy.py [--out DIR] [--quick]

Writes benchmarks/results/<gpu>/jit-on-cupy.json, .md and, with matplotlib, .png.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mixpert.runtime.device import device_name, exit_without_gpu

exit_without_gpu("benchmarks/jit_on_cupy.py")

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from call_overhead import MLP_TOL, MLP_WIDTHS, mlp, operands, timed  # noqa: E402

import mixpert  # noqa: E402
from mixpert import replay  # noqa: E402
from mixpert.bench.gemm import results_folder  # noqa: E402

SITE_SIZES = (256, 1024)
VARIANTS = ("cupy", "jit", "jit+replay")


def one(x, w):
    return x @ w


def sites(quick: bool) -> list[dict[str, Any]]:
    """Host us of one product by each way there is, per size."""
    return [row for n in (SITE_SIZES[:1] if quick else SITE_SIZES) for row in site_case(n)]


def site_case(n: int) -> list[dict[str, Any]]:
    a, b = operands((n, n), 3 * n), operands((n, n), 3 * n + 1)
    native, emulated = at("fp32", one), at("IV", one)
    replayed = at("fp32", one, replay=True)
    with mixpert.MatmulPlan(a, b, level="IV") as planned:
        ways: dict[str, Callable[[], Any]] = {
            "cupy a @ b": lambda: a @ b,
            "jit site, fp32": lambda: native(a, b),
            "jit site, fp32, replayed": lambda: replayed(a, b),
            "mixpert.matmul(level='fp32')": lambda: mixpert.matmul(a, b, level="fp32"),
            "jit site, IV": lambda: emulated(a, b),
            "mixpert.matmul(level='IV')": lambda: mixpert.matmul(a, b, level="IV"),
            "MatmulPlan.execute (IV)": lambda: planned.execute(a, b),
        }
        rows = [{"kind": "site", "n": n, "way": name, "host_us": timed(call, 300)[0]}
                for name, call in ways.items()]  # fmt: skip
    for row in rows:
        row["over_cupy_us"] = row["host_us"] - rows[0]["host_us"]
        print(f"site n={n}: {row['way']:30s} {row['host_us']:7.1f} us "
              f"({row['over_cupy_us']:+.1f} over CuPy)", flush=True)  # fmt: skip
    return rows


def at(level: str, func: Any, **options: Any) -> Any:
    jitted = mixpert.jit(func, **options)
    return jitted.with_plan(dict.fromkeys(jitted.ops, level))


def mlp64(x: cp.ndarray, *ws: cp.ndarray) -> cp.ndarray:
    return mlp(x.astype(cp.float64), *(w.astype(cp.float64) for w in ws))


def checked(call: Callable[[], cp.ndarray], shape: tuple[int, int]) -> cp.ndarray:
    """The call's result written into a poisoned output (a result left unwritten shows)."""
    out = cp.full(shape, np.nan, dtype=cp.float32)
    out[...] = call()
    return out


def error(c: cp.ndarray, exact: cp.ndarray) -> float:
    return float(cp.linalg.norm(c.astype(cp.float64) - exact) / cp.linalg.norm(exact))


def same_bits(x: cp.ndarray, y: cp.ndarray) -> bool:
    return bool(cp.array_equal(x.view(cp.uint32), y.view(cp.uint32)))


def mlps(quick: bool) -> list[dict[str, Any]]:
    return [row for w in (MLP_WIDTHS[:2] if quick else MLP_WIDTHS) for row in mlp_case(w)]


def mlp_case(w: int) -> list[dict[str, Any]]:
    """Plain CuPy, the jitted MLP and the jitted MLP replayed, one width, one plan."""
    x = operands((4 * w, w), w)
    ws = [operands((w, w), w + i) / np.float32(np.sqrt(w)) for i in (1, 2, 3)]
    plan = mixpert.tune(mlp, (x, *ws), tol=MLP_TOL, target="cuda")
    jitted = mixpert.jit(mlp, plan=plan)
    replayed = mixpert.jit(mlp, plan=plan, replay=True)
    calls = {"cupy": mlp, "jit": jitted, "jit+replay": replayed}
    reps = max(20, min(200, int(2e10 / (2 * 4 * w**3 * 3))))
    timings = {name: timed(lambda call=call: call(x, *ws), reps) for name, call in calls.items()}
    # the checks: fresh inputs at new addresses (the graph copies them in), outputs poisoned
    fresh = operands((4 * w, w), 7 * w)
    exact = mlp64(fresh, *ws)
    results = {name: checked(lambda call=call: call(fresh, *ws), (4 * w, w))
               for name, call in calls.items()}  # fmt: skip
    graphs = [e for k, e in replay._calls._plans.items() if k[0] is replayed._replays]
    cupy_call = timings["cupy"][1]
    rows = []
    for name in VARIANTS:
        host, call = timings[name]
        rows.append({
            "kind": "mlp", "w": w, "variant": name, "levels": dict(plan.levels),
            "host_us": host, "call_us": call, "ratio_to_cupy": cupy_call / call,
            "error": error(results[name], exact),
            "same_bits_as_jit": same_bits(results[name], results["jit"]),
            "replayed": name == "jit+replay" and any(e is not None for e in graphs),
        })  # fmt: skip
        print(f"MLP w={w} {name:10s}: {call:8.1f} us/call (host {host:7.1f}) "
              f"{cupy_call / call:5.2f}x CuPy  err {rows[-1]['error']:.1e}  "
              f"bits = jit's: {rows[-1]['same_bits_as_jit']}", flush=True)  # fmt: skip
    print(f"  levels {dict(plan.levels)}; replayed: {rows[-1]['replayed']}", flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| n | way | host us | over CuPy's a @ b |", "|---|---|---|---|"]
    lines += [f"| {r['n']} | {r['way']} | {r['host_us']:.1f} | {r['over_cupy_us']:+.1f} |"
              for r in rows if r["kind"] == "site"]  # fmt: skip
    lines += ["", "| w | variant | us per call | host us | x CuPy | error | bits = jit's "
              "| levels |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if r["kind"] != "mlp":
            continue
        levels = ", ".join(f"{op.rsplit(':', 1)[-1]} {lv}" for op, lv in r["levels"].items())
        missed = r["variant"] == "jit+replay" and not r["replayed"]
        variant = r["variant"] + (" (not replayed)" if missed else "")
        lines.append(
            f"| {r['w']} | {variant} | {r['call_us']:.1f} | {r['host_us']:.1f} | "
            f"{r['ratio_to_cupy']:.2f}x | {r['error']:.1e} | {r['same_bits_as_jit']} | {levels} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    site_rows = [r for r in rows if r["kind"] == "site"]
    names = list(dict.fromkeys(r["way"] for r in site_rows))
    for k, n in enumerate(sorted({r["n"] for r in site_rows})):
        values = [next(r["host_us"] for r in site_rows if r["n"] == n and r["way"] == name)
                  for name in names]  # fmt: skip
        axes[0].barh([i + 0.4 * k for i in range(len(names))], values, height=0.4, label=f"n={n}")
    axes[0].set_yticks(range(len(names)), names, fontsize=7)
    axes[0].set(xlabel="host us per call", title="one product, calls back to back")
    axes[0].legend()
    mlp_rows = [r for r in rows if r["kind"] == "mlp"]
    for variant in VARIANTS:
        pts = [(r["w"], r["ratio_to_cupy"]) for r in mlp_rows if r["variant"] == variant]
        axes[1].plot(*zip(*pts, strict=True), marker="o", label=variant)
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set(xscale="log", xlabel="w (x: 4w x w, weights w x w)", ylabel="x plain CuPy",
                title="3-layer MLP, tuned at tol 1e-4")  # fmt: skip
    axes[1].legend()
    fig.suptitle(f"@mixpert.jit on CuPy arrays, {device_name()}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    folder = results_folder(device_name(), args.out or Path(__file__).parent / "results")
    folder.mkdir(parents=True, exist_ok=True)
    rows = sites(args.quick) + mlps(args.quick)
    (folder / "jit-on-cupy.json").write_text(json.dumps(rows, indent=1))
    text = table(rows)
    (folder / "jit-on-cupy.md").write_text(
        f"# @mixpert.jit on CuPy arrays ({device_name()})\n\n{text}\n"
    )
    plot(rows, folder / "jit-on-cupy.png")
    print(text, flush=True)


if __name__ == "__main__":
    main()

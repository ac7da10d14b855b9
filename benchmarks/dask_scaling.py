"""mixpert on Dask arrays across GPUs: strong and weak scaling of ``mixpert.matmul``.

One worker per GPU (``mixpert.clusters.gpu_cluster``), each asked from inside which GPU it
uses. A is cut into row blocks of BLOCK_ROWS made on the workers, each GPU a contiguous share;
B is one chunk resident on every worker before the clock starts (made on each GPU from one
seed, bits checked equal; over Dask's TCP comms once, timed apart, as placement); each output
block is one task, and the run checks it ran on the worker holding its A block. Strong scaling:
C = A @ B with m = n on each GPU count; weak: m = n g / G rows (G the most GPUs asked for), the
same rows per GPU. Levels IV, auto and native float32; n = 32768, 65536 and the largest n whose
strong run fits G GPUs (the reasoning is printed). A strong run that cannot keep A and C on one
GPU streams them (A's blocks made in the graph, C's checked and dropped: the same tasks). The
reference is one plain ``mixpert.matmul`` of one block on one GPU. Results are rewritten after
every run under --out (scaling.json, scaling.md, scaling.png): a run cut short keeps its rows.

What the first 4-GPU run hit, and what this version does instead:
- each fresh worker tunes its INT8 GEMMs at the first product of a shape (``tn_gemm``: nine
  algorithms timed), ~1 s inside the timed region; the plain call's warm-up hid it. Each worker
  now runs one product of the real block shape before the clock.
- ``client.replicate`` copied B (17 GB) over TCP while the Active Memory Manager's
  ReduceReplicas dropped copies no task waited on (every 2 s): on 4 GPUs the copying never ended.
  The AMM is stopped and B is made on each GPU; the TCP copy is timed once, with a timeout.
- every phase has a timeout and prints a line as it goes: a stall names its phase.

    python benchmarks/dask_scaling.py --out benchmarks/results/<gpu>x4 --gpus 1 2 4
"""

from __future__ import annotations

import argparse
import importlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

import mixpert
from mixpert.runtime import device

if __name__ == "__main__":  # not in spawned workers: they must not touch CUDA before pinning
    device.exit_without_gpu("benchmarks/dask_scaling.py")

T = TypeVar("T")
GB = 1e9
GiB = 1 << 30
BLOCK_ROWS = 8192  # rows of A per chunk (and per output block): one task each
SIZE_STEP = 16384  # candidate sizes for the largest n (n / 4 rows per GPU: whole 4096-row GEMMs)
MARGIN = 3 * GiB  # per GPU: CUDA context, cuBLAS handles, the memory pool's rounding
EMULATED = "IV"  # "auto" is given level IV's workspace: where that does not fit it runs fp32
ARRAYS = "cupy"  # the workers' array module ("numpy": the CPU test of this script)
T0 = time.perf_counter()


def say(line: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {line}", flush=True)


class Stalled(RuntimeError):
    """A phase that did not finish within its timeout."""


def within(seconds: float, phase: str, fn: Callable[[], T]) -> T:
    """``fn()``, or Stalled naming ``phase`` after ``seconds`` (fn left running in a daemon
    thread: a hung Dask call cannot be interrupted, only abandoned)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as error:  # handed to the caller
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise Stalled(f"{phase}: nothing back after {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---- on the workers (cupy imported there: after the worker's pinning) ----------------------


def _xp() -> Any:
    return importlib.import_module(ARRAYS)


def make_block(seed: int, shape: tuple[int, int]) -> Any:
    return _xp().random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def synchronize() -> None:
    if ARRAYS == "cupy":
        _xp().cuda.Device().synchronize()


def free_bytes() -> int:
    """Device memory free to this process: free on the GPU plus what CuPy's pool holds."""
    if ARRAYS != "cupy":
        return 1 << 40
    cp = _xp()
    return int(cp.cuda.runtime.memGetInfo()[0] + cp.get_default_memory_pool().free_bytes())


def release_memory() -> None:
    if ARRAYS == "cupy":
        _xp().get_default_memory_pool().free_all_blocks()


def checksum(x: Any) -> int:
    """The float32 bits summed as integers: equal copies give equal sums."""
    return int(x.view(np.uint32).sum(dtype=np.uint64))  # (no copy: B may be 40 GB)


def key_checksum(key: Any, dask_worker: Any) -> int:
    return checksum(dask_worker.data[key])


def own_copy(key: Any, seed: int, shape: tuple[int, int], dask_worker: Any) -> int:
    """Make B on this worker from its seed and hold it as a copy of ``key`` (as scattered data
    is held): B resident with no byte over TCP. The scheduler is told next (``add_keys``)."""
    x = make_block(seed, shape)
    synchronize()
    dask_worker.update_data({key: x})
    return checksum(x)


def warm(b: Any, rows: int, level: str) -> tuple[str, float]:
    """One product of the run's block shape on this worker before the clock (kernels built,
    INT8 GEMMs tuned): the level it ran at and its seconds."""
    from mixpert.runtime.dispatch import resolve_level

    a = make_block(99, (rows, b.shape[0]))
    backend = "cuda" if ARRAYS == "cupy" else "cpu"
    ran = resolve_level(level, a, b, backend).name
    start = time.perf_counter()
    mixpert.matmul(a, b, level=level)
    synchronize()
    return ran, time.perf_counter() - start


def block_error(a: Any, b: Any, c: Any, corner: int = 1024) -> float:
    """Normwise error of a block's corner against float64, on the worker holding them."""
    xp = _xp()
    ref = a[:corner].astype(np.float64) @ b[:, :corner].astype(np.float64)
    return float(xp.linalg.norm(c[:corner, :corner] - ref) / xp.linalg.norm(ref))


def corner(c: Any) -> Any:
    """A streamed run keeps one entry of each C block."""
    return c[:1, :1].copy()


# ---- memory and sizes ----------------------------------------------------------------------

Workspace = Callable[[str, int, int], int]  # (level, rows, n) -> bytes of one block's product


def gpu_workspace(level: str, rows: int, n: int) -> int:
    """Device bytes one (rows x n) @ (n x n) product allocates besides its operands and result
    (``runtime.cuda.backend.workspace_bytes``; native float32: cuBLAS's own, small)."""
    from mixpert.runtime.cuda.backend import workspace_bytes
    from mixpert.runtime.levels import get_level

    return 0 if level == "fp32" else workspace_bytes(get_level(EMULATED), rows, n, n)


def needed_bytes(
    n: int, rows_per_gpu: int, level: str, workspace: Workspace, streamed: bool = False
) -> int:
    """Device bytes one worker needs: B, its share of A and C (streamed: a few blocks of each
    in flight), one task's product and its block of C."""
    rows = min(BLOCK_ROWS, rows_per_gpu)
    share = 3 * rows * n if streamed else 2 * rows_per_gpu * n
    return 4 * (n * n + share + rows * n) + workspace(level, rows, n) + MARGIN


def largest_size(
    free: int, gpus: int, levels: list[str], start: int, workspace: Workspace, step: int = SIZE_STEP
) -> tuple[int, list[str]]:
    """The largest multiple of ``step`` from ``start`` up whose strong run at every level fits
    ``gpus`` GPUs with ``free`` bytes each (0 if none), and the lines that say why."""
    lines = [
        f"free per GPU: {free / GiB:.1f} GiB; a worker needs 4 n^2 (B) + 8 n^2 / {gpus} "
        f"(its A and C) + a block's product and output + {MARGIN / GiB:.0f} GiB"
    ]
    best, n = 0, start
    while True:
        need = max(needed_bytes(n, n // gpus, lv, workspace) for lv in levels)
        fits = need <= free
        lines.append(f"n = {n}: {need / GiB:.1f} GiB per GPU: {'fits' if fits else 'does not fit'}")
        if not fits:
            return best, lines
        best, n = n, n + step


# ---- one cluster ---------------------------------------------------------------------------


@dataclass
class Results:
    """Everything measured, written after every run."""

    device: str
    gpus: list[int]
    sizes: list[int] = field(default_factory=list)
    size_reasoning: list[str] = field(default_factory=list)
    plain: dict[str, dict[str, Any]] = field(default_factory=dict)  # "n/level" -> rate, ran
    workers: dict[int, dict[str, str]] = field(default_factory=dict)  # gpus -> address -> GPU
    placement: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)


def shares(m: int, gpus: int) -> list[int]:
    """Rows of A per GPU: contiguous shares, as even as whole rows allow."""
    return [m * (i + 1) // gpus - m * i // gpus for i in range(gpus)]


def blocks_of(rows: int) -> list[int]:
    return [min(BLOCK_ROWS, rows - s) for s in range(0, rows, BLOCK_ROWS)]


@dataclass
class Share:
    """One worker's rows of A: the blocks made there (persisted when resident) and A_w."""

    worker: str
    blocks: list[Any]
    a: Any


def make_a(client: Any, workers: list[str], m: int, n: int, resident: bool) -> list[Share]:
    """A (m x n) in row blocks, each GPU's contiguous share made on it."""
    import dask
    import dask.array as da

    meta = _xp().empty((0, 0), dtype=np.float32)
    out, seed = [], 1
    for worker, rows in zip(workers, shares(m, len(workers)), strict=True):
        blocks = []
        for r in blocks_of(rows):
            lazy = da.from_delayed(
                dask.delayed(make_block)(seed, (r, n)), (r, n), np.float32, meta=meta
            )
            blocks.append(client.persist(lazy, workers=[worker]) if resident else lazy)
            seed += 1
        out.append(Share(worker, blocks, da.concatenate(blocks)))
    return out


def place_b(client: Any, workers: list[str], n: int, tcp: bool, timeout: float) -> tuple[Any, dict]:
    """B (n x n) on every worker: made on the first, then copied over TCP (``tcp``) or made on
    each from the same seed and registered as copies. Returns B and the placement record."""
    import dask
    import dask.array as da
    from distributed import futures_of, wait

    meta = _xp().empty((0, 0), dtype=np.float32)
    lazy = da.from_delayed(dask.delayed(make_block)(0, (n, n)), (n, n), np.float32, meta=meta)
    b = client.persist(lazy, workers=workers[:1])
    within(timeout, "B made on the first GPU", lambda: wait(b))
    (future,) = futures_of(b)
    start = time.perf_counter()
    others = workers[1:]
    if others and tcp:
        within(timeout, "B copied over TCP", lambda: client.replicate([future]))
    elif others:
        key = future.key

        def copies() -> None:
            client.run(own_copy, key, 0, (n, n), workers=others)
            for worker in others:  # the scheduler learns of each copy
                client.sync(client.scheduler.add_keys, worker=worker, keys=[key])

        within(timeout, "B made on each GPU", copies)
    seconds = time.perf_counter() - start
    sums = within(timeout, "B's copies checked", lambda: client.run(key_checksum, future.key))
    moved = 4 * n * n * len(others) if tcp else 0
    record = {
        "gpus": len(workers),
        "n": n,
        "method": "TCP copy" if tcp else "made on each GPU",
        "gb": moved / GB,
        "seconds": seconds,
        "gb_per_s": moved / GB / seconds if moved else None,
        "copies": len(client.who_has([future])[future.key]),
        "bits_equal": len(set(sums.values())) == 1,
    }
    if not record["bits_equal"]:
        raise RuntimeError(f"B's copies differ between workers: {sums}")
    return b, record


def timed_product(
    client: Any, parts: list[Share], b: Any, level: str, keep: bool, timeout: float
) -> tuple[float, list[Any]]:
    """Seconds of C = mixpert.matmul(A, B) persisted on the workers, kernels done: each
    worker's rows C_w = mixpert.matmul(A_w, B) persisted there (its tasks restricted to the
    worker holding A_w: the scheduler would weigh data against queue lengths), and the C_w
    (kept) or one entry of each of their blocks (streamed)."""
    from distributed import wait

    start = time.perf_counter()
    pieces = []
    for part in parts:
        c = mixpert.matmul(part.a, b, level=level)
        if not keep:
            c = c.map_blocks(corner, chunks=(1, 1))
        pieces.append(client.persist(c, workers=[part.worker]))
    within(timeout, f"C = A @ B at {level}", lambda: wait(pieces))
    within(timeout, "kernels finished", lambda: client.run(synchronize))
    return time.perf_counter() - start, pieces


def placement_of(client: Any, parts: list[Share], pieces: list[Any]) -> dict[str, int]:
    """Output blocks per worker, counted only where they sit with their A blocks."""
    counts: dict[str, int] = {}
    for part, c in zip(parts, pieces, strict=True):
        who = client.who_has(c)
        home = sum(who.get(row[0], [None])[0] == part.worker for row in c.__dask_keys__())
        counts[part.worker] = counts.get(part.worker, 0) + home
    return counts


def first_block_error(client: Any, parts: list[Share], pieces: list[Any], b: Any) -> float:
    """``block_error`` of C's first block, on the worker holding it."""
    from distributed import futures_of

    (fa,) = futures_of(parts[0].blocks[0])
    first = pieces[0].__dask_keys__()[0][0]
    fc = next(f for f in futures_of(pieces[0]) if f.key == first)
    run = client.submit(block_error, fa, b, fc, workers=[parts[0].worker], pure=False)
    return within(120, "error check", lambda: run.result())


def estimate(flops: float, gpus: int, rate: float) -> float:
    return flops / (gpus * rate * 1e12) + 1.0


def bench_size(
    client: Any,
    workers: list[str],
    most: int,
    n: int,
    levels: list[str],
    results: Results,
    free: int,
    workspace: Workspace,
    tcp: bool,
    deadline: float,
    save: Callable[[], None],
) -> None:
    """Strong and weak runs at size n on this cluster's workers, each level."""
    from distributed import futures_of, wait

    g = len(workers)
    plans = [("strong", n), ("weak", n * g // most)]
    if g == most:
        plans = plans[:1]  # weak is strong here
    try:
        b, record = place_b(client, workers, n, tcp and g > 1, timeout=90 if tcp else 300)
    except Stalled as stall:  # the TCP copy: say so, and make B on each GPU instead
        moved = 4 * n * n * (g - 1) / GB
        results.placement.append({"gpus": g, "n": n, "method": "TCP copy", "gb": moved,
                                  "seconds": None, "gb_per_s": None, "copies": None,
                                  "bits_equal": None, "stalled": str(stall)})  # fmt: skip
        say(f"TCP copy of B stalled ({stall}): B made on each GPU instead")
        b, record = place_b(client, workers, n, False, timeout=300)
    results.placement.append(record)
    say(
        f"B on {record['copies']} GPU(s) ({record['method']}): {record['seconds']:.1f} s"
        + (f", {record['gb_per_s']:.2f} GB/s" if record["gb_per_s"] else "")
    )
    (b_future,) = futures_of(b)
    for level in levels:
        rate = results.plain[f"{n}/{level}"]["tflops"]
        if deadline and time.perf_counter() - T0 > deadline:
            say(f"skip n = {n} {level} on {g} GPU(s): past the deadline")
            results.skipped.append({"gpus": g, "n": n, "m": 0, "level": level,
                                    "scaling": "-", "why": "past the deadline"})  # fmt: skip
            continue
        warm_rows = min(BLOCK_ROWS, n // most)  # the blocks' rows in every run
        runs = [
            client.submit(warm, b_future, warm_rows, level, workers=[w], pure=False)
            for w in workers
        ]
        warmed = within(120, f"warm-up at {level}", lambda runs=runs: client.gather(runs))
        say(
            f"{g} GPU(s), n = {n}, {level}: warm-up {max(s for _, s in warmed):.1f} s, "
            f"ran {sorted({r for r, _ in warmed})}"
        )
        for scaling, m in plans:
            per_gpu = max(shares(m, g))
            keep = needed_bytes(n, per_gpu, level, workspace) <= free
            run = {"gpus": g, "n": n, "m": m, "level": level, "scaling": scaling}
            if not keep and (g > 1 or needed_bytes(n, per_gpu, level, workspace, True) > free):
                results.skipped.append({**run, "why": "does not fit"})
                say(f"skip {scaling} m = {m}: does not fit")
                continue
            flops = 2.0 * m * n * n
            guess = estimate(flops, g, rate)
            if deadline and time.perf_counter() - T0 + guess > deadline:
                results.skipped.append({**run, "why": f"time (~{guess:.0f} s)"})
                say(f"skip {scaling} m = {m}: ~{guess:.0f} s would pass the deadline")
                continue
            parts = make_a(client, workers, m, n, resident=keep)
            if keep:
                within(300, "A made on the GPUs", lambda parts=parts: wait([p.a for p in parts]))
            seconds, pieces = timed_product(client, parts, b, level, keep, max(120, 5 * guess))
            counts = placement_of(client, parts, pieces)
            placed = sum(counts.values()) == sum(len(p.blocks) for p in parts)
            error = first_block_error(client, parts, pieces, b_future) if keep else None
            tflops = flops / seconds / 1e12
            row = {
                "scaling": scaling,
                "gpus": g,
                "n": n,
                "m": m,
                "k": n,
                "level": level,
                "ran": sorted({r for r, _ in warmed}),
                "c_kept": keep,
                "seconds": seconds,
                "tflops": tflops,
                "tflops_per_gpu": tflops / g,
                "plain_tflops": rate,
                "per_gpu_vs_plain": tflops / g / rate,
                "error": error,
                "on_a_blocks_worker": placed,
                "blocks_per_worker": counts,
            }
            results.rows.append(row)
            if g == most:  # the weak run on the most GPUs is this one
                results.rows.append({**row, "scaling": "weak"})
            say(
                f"{scaling} {g} GPU(s) n = {n} m = {m} {level}: {seconds:.2f} s, "
                f"{tflops:.1f} TFLOP/s ({tflops / g / rate:.2f} of the plain call per GPU)"
                + ("" if placed else f", blocks misplaced: {counts}")
            )
            del parts, pieces
            save()
        client.run(release_memory)
    del b
    client.run(release_memory)


# ---- the plain call, the report ------------------------------------------------------------


def plain_rate(n: int, level: str) -> dict[str, Any]:
    """TFLOP/s of one plain mixpert.matmul of one row block on GPU 0 (the per-GPU reference),
    after one warm-up call; best of two when a call takes under 2 s."""
    from mixpert.runtime.dispatch import resolve_level
    from mixpert.timing import best_time

    cp = _xp()
    x, y = make_block(1, (BLOCK_ROWS, n)), make_block(0, (n, n))
    sync = cp.cuda.Device().synchronize
    start = time.perf_counter()
    mixpert.matmul(x, y, level=level)
    sync()
    first = time.perf_counter() - start
    seconds = best_time(
        lambda: mixpert.matmul(x, y, level=level), sync, 2 if first < 2 else 1, warm_up=False
    )
    ran = resolve_level(level, x, y, "cuda").name
    x = y = None  # (the pool's blocks go back to the device for the workers)
    cp.get_default_memory_pool().free_all_blocks()
    return {"tflops": 2.0 * BLOCK_ROWS * n * n / seconds / 1e12, "ran": ran, "seconds": seconds}


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Strong speedup over the 1-GPU run, and weak efficiency, per (n, level, GPUs)."""
    one = {(r["scaling"], r["n"], r["level"]): r for r in rows if r["gpus"] == 1}
    out = []
    for r in rows:
        base = one.get((r["scaling"], r["n"], r["level"]))
        if base is None or r["gpus"] == 1:
            continue
        value = (
            base["seconds"] / r["seconds"]
            if r["scaling"] == "strong"
            else r["tflops_per_gpu"] / base["tflops_per_gpu"]
        )
        out.append(
            {
                "scaling": r["scaling"],
                "n": r["n"],
                "level": r["level"],
                "gpus": r["gpus"],
                "value": value,
            }
        )
    return out


def report(results: Results, out: Path | None) -> str:
    rows = results.rows
    lines = [f"# Dask scaling, {results.device}, GPUs {results.gpus}", ""]
    lines += [f"    {s}" for s in results.size_reasoning] + [""]
    for g, seen in sorted(results.workers.items()):
        lines.append(f"- {g} GPU(s): workers on {sorted(seen.values())}")
    lines += [
        "",
        "| B placed | GPUs | n | GB moved | seconds | GB/s | bits equal |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in results.placement:
        rate = f"{p['gb_per_s']:.2f}" if p["gb_per_s"] else p.get("stalled", "-")
        seconds = "-" if p["seconds"] is None else f"{p['seconds']:.1f}"
        lines.append(
            f"| {p['method']} | {p['gpus']} | {p['n']} | {p['gb']:.1f} | "
            f"{seconds} | {rate} | {p['bits_equal']} |"
        )
    lines += [
        "",
        "| scaling | n | level (ran) | GPUs | m | C kept | seconds | TFLOP/s | "
        "per GPU | plain call | per GPU / plain (>= 0.85) | speedup | error | on A's worker |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    gains = {(s["scaling"], s["n"], s["level"], s["gpus"]): s["value"] for s in speedups(rows)}
    for r in sorted(rows, key=lambda r: (r["scaling"], r["n"], r["level"], r["gpus"])):
        gain = gains.get((r["scaling"], r["n"], r["level"], r["gpus"]))
        error = "-" if r["error"] is None else f"{r['error']:.2e}"
        lines.append(
            f"| {r['scaling']} | {r['n']} | {r['level']} ({'/'.join(r['ran'])}) | {r['gpus']} | "
            f"{r['m']} | {'yes' if r['c_kept'] else 'no'} | {r['seconds']:.2f} | "
            f"{r['tflops']:.1f} | {r['tflops_per_gpu']:.1f} | {r['plain_tflops']:.1f} | "
            f"{r['per_gpu_vs_plain']:.2f} | {'-' if gain is None else f'{gain:.2f}'} | {error} | "
            f"{'yes' if r['on_a_blocks_worker'] else 'NO'} |"
        )
    lines += [
        "",
        "speedup: strong, 1-GPU seconds over these; weak, per-GPU rate over the "
        "1-GPU run's. Targets (issue 40): strong 1 -> 4 GPUs >= 3.5x at the largest n; "
        "per-GPU rate within 15% of the plain call.",
        "",
    ]
    most, top = max(results.gpus), max(results.sizes, default=0)
    for lv in sorted({r["level"] for r in rows}):
        gain = gains.get(("strong", top, lv, most))
        if gain is not None:
            lines.append(
                f"- n = {top}, {lv}: {gain:.2f}x from 1 to {most} GPUs "
                f"({'meets' if gain >= 3.5 else 'misses'} 3.5x)"
            )
    worst = min(rows, key=lambda r: r["per_gpu_vs_plain"], default=None)
    if worst is not None:
        lines.append(
            f"- lowest per-GPU / plain: {worst['per_gpu_vs_plain']:.2f} ({worst['scaling']} "
            f"n = {worst['n']} {worst['level']} on {worst['gpus']} GPUs)"
        )
    for s in results.skipped:
        lines.append(
            f"- not run: {s['scaling']} n = {s['n']} m = {s['m']} {s['level']} on "
            f"{s['gpus']} GPU(s): {s['why']}"
        )
    table = "\n".join(lines) + "\n"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        payload = {**results.__dict__, "speedups": speedups(rows)}
        (out / "scaling.json").write_text(json.dumps(payload, indent=1, default=str))
        (out / "scaling.md").write_text(table)
        plot(rows, most, out / "scaling.png")
    return table


def plot(rows: list[dict[str, Any]], most: int, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, kind, key in ((axes[0], "strong", "tflops"), (axes[1], "weak", "tflops_per_gpu")):
        for n, lv in sorted({(r["n"], r["level"]) for r in rows if r["scaling"] == kind}):
            pts = sorted(
                (r["gpus"], r[key])
                for r in rows
                if r["scaling"]
                in (kind, "strong" if kind == "weak" and r["gpus"] == most else kind)
                and r["n"] == n
                and r["level"] == lv
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"n={n} {lv}")
        ax.set(
            title=f"{kind} scaling",
            xlabel="GPUs",
            ylabel="TFLOP/s" if kind == "strong" else "TFLOP/s per GPU",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=[32768, 65536])
    parser.add_argument("--no-largest", action="store_true", help="only --sizes")
    parser.add_argument("--levels", nargs="*", default=["IV", "auto", "fp32"])
    parser.add_argument("--gpus", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument(
        "--tcp-n",
        type=int,
        default=32768,
        help="the size at which B is copied over TCP (timed); 0: never",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=0.0,
        help="seconds from the start after which no run starts (0: none)",
    )
    args = parser.parse_args()
    from distributed import Client

    from mixpert.clusters import gpu_cluster, worker_devices

    most = max(args.gpus)
    order = [most] + sorted({g for g in args.gpus if g != most})  # the most GPUs first
    results = Results(device.device_name(), args.gpus)

    def save() -> None:
        report(results, args.out)

    for g in order:
        say(f"starting {g} worker(s)")
        try:
            with gpu_cluster(g) as cluster, Client(cluster) as client:
                client.amm.stop()  # keep B's copies (ReduceReplicas would drop them)
                seen = within(120, "worker GPUs", lambda c=client: worker_devices(c))
                results.workers[g] = seen
                say(f"{g} worker(s) on {seen}")
                if len(set(seen.values())) != g:
                    raise RuntimeError(f"workers share a GPU: {seen}")
                workers = sorted(seen)
                free = min(within(60, "free memory", lambda c=client: c.run(free_bytes)).values())
                if not results.sizes:
                    results.sizes = sorted(set(args.sizes))
                    if not args.no_largest:
                        top, why = largest_size(
                            free, most, args.levels, max(args.sizes) + SIZE_STEP, gpu_workspace
                        )
                        results.size_reasoning = why
                        results.sizes += [top] if top else []
                    for line in results.size_reasoning:
                        say(line)
                    for n in results.sizes:
                        for lv in args.levels:
                            results.plain[f"{n}/{lv}"] = plain_rate(n, lv)
                            say(f"plain call n = {n} {lv}: {results.plain[f'{n}/{lv}']}")
                for n in sorted(results.sizes, reverse=True):
                    bench_size(
                        client,
                        workers,
                        most,
                        n,
                        args.levels,
                        results,
                        free,
                        gpu_workspace,
                        n == args.tcp_n,
                        args.deadline,
                        save,
                    )
        except Exception as error:  # keep what was measured; the next count runs
            results.skipped.append(
                {
                    "gpus": g,
                    "n": 0,
                    "m": 0,
                    "level": "-",
                    "scaling": "-",
                    "why": f"{type(error).__name__}: {error}",
                }
            )
            say(f"{g} GPU(s) stopped: {type(error).__name__}: {error}")
        save()
    print(report(results, args.out), flush=True)


if __name__ == "__main__":
    main()

"""The gemm and sparkler samples on Dask arrays of CuPy chunks across GPU workers, end to end,
against the same sample code on CuPy arrays on one GPU.

Each sample's inputs (its "gpu" size, seed 1) are made once on this process's GPU; the one-GPU
run calls the jitted sample on them (best of 3 after a warm-up), the Dask run on Dask arrays of
the same numbers, one worker per GPU (``gpu_cluster``): gemm's A and C cut into row panels, B
on every worker; sparkler's A and B into column panels (each output block then needs one panel
from another worker: that moves over TCP inside the run). Placing the chunks (scatter from
here, over TCP) is timed apart; the Dask run is timed cold (workers compile and tune) and warm,
to the result on the workers and to the result back here. Agreement: the largest difference
from the one-GPU result, the share of equal bits, both errors against float64 (MixPert Eq. 10)
and the sample's own checks on the Dask result. Writes dask-samples.json and dask-samples.md.

    python benchmarks/dask_samples.py --out DIR [--gpus 4] [--names gemm sparkler]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from mixpert.runtime import device

if __name__ == "__main__":  # not in spawned workers: they must not touch CUDA before pinning
    device.exit_without_gpu("benchmarks/dask_samples.py")

# the levels the tuner chose at the "gpu" size (benchmarks/results/NVIDIA-H*/samples/)
LEVELS = {"gemm": "IV", "sparkler": "I"}
# how each argument is cut over the workers: rows, columns, or whole on every worker
CUTS = {"gemm": ("rows", "whole", "rows"), "sparkler": ("cols", "cols")}
T0 = time.perf_counter()


def say(line: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {line}", flush=True)


def synchronize() -> None:
    import cupy  # (in the worker, after its pinning)

    cupy.cuda.Device().synchronize()


def known(keys: list[Any], dask_scheduler: Any) -> int:
    return sum(k in dask_scheduler.tasks for k in keys)


def forget(client: Any, out: Any) -> None:
    """Drop a persisted result so that the next run computes it again (same graph, same
    keys: Dask would hand back the result it holds)."""
    from distributed import futures_of

    keys = [f.key for f in futures_of(out)]
    client.cancel(out)
    deadline = time.monotonic() + 60
    while client.run_on_scheduler(known, keys=keys) and time.monotonic() < deadline:
        time.sleep(0.05)


def place(client: Any, x: Any, cut: str, workers: list[str]) -> Any:
    """``x`` as a Dask array whose chunks sit on the workers: row or column panels, one per
    worker, or one chunk copied to every worker."""
    import dask.array as da

    meta = x[:0, :0]
    if cut == "whole":
        future = client.scatter(x, broadcast=True, hash=False)
        return da.from_delayed(future, x.shape, x.dtype, meta=meta)
    axis = 0 if cut == "rows" else 1
    edges = [x.shape[axis] * i // len(workers) for i in range(len(workers) + 1)]
    panels = []
    for worker, lo, hi in zip(workers, edges[:-1], edges[1:], strict=True):
        piece = x[lo:hi] if axis == 0 else x[:, lo:hi]
        future = client.scatter(piece.copy(), workers=[worker], hash=False)
        panels.append(da.from_delayed(future, piece.shape, x.dtype, meta=meta))
    return da.concatenate(panels, axis=axis)


def run_sample(client: Any, workers: list[str], name: str) -> dict[str, Any]:
    import cupy as cp
    from distributed import wait

    from mixpert.metrics import output_error, reference_outputs
    from mixpert.samples import load_sample
    from mixpert.timing import best_time

    sample = load_sample(name)
    size = sample.sizes["gpu"]
    plan = dict.fromkeys(sample.func.ops, LEVELS[name])
    f = sample.func.with_plan(plan)
    args = sample.make_inputs(cp, cp.random.default_rng(1), size)
    reference = reference_outputs(sample.func.py_func, args)
    sync = cp.cuda.Device().synchronize
    one = f(*args)
    one_seconds = best_time(lambda: f(*args), sync, 3)
    say(f"{name} (size {size}, {plan}): one GPU {one_seconds:.3f} s")

    start = time.perf_counter()
    arrays = iter(CUTS[name])
    lazy = [place(client, x, next(arrays), workers) if hasattr(x, "shape") else x for x in args]
    wait([x for x in lazy if hasattr(x, "dask")])
    place_seconds = time.perf_counter() - start
    placed_gb = sum(x.nbytes for x in args if hasattr(x, "nbytes")) / 1e9
    say(f"{name}: inputs placed on {len(workers)} workers in {place_seconds:.1f} s")

    def on_workers() -> tuple[float, Any]:
        start = time.perf_counter()
        out = client.persist(f(*lazy))  # the jitted sample builds the graph; products per block
        wait(out, timeout=300)
        client.run(synchronize)
        return time.perf_counter() - start, out

    cold, out = on_workers()
    forget(client, out)
    warm, out = on_workers()
    start = time.perf_counter()
    got = out.compute()
    gather = time.perf_counter() - start
    say(f"{name}: Dask cold {cold:.2f} s, warm {warm:.2f} s, result back in {gather:.2f} s")
    got = cp.asarray(got)
    diff = float(cp.abs(got - one).max() / cp.abs(one).max())
    equal = float((got.view(cp.uint32) == one.view(cp.uint32)).mean())
    checks = sample.checks(args, got, reference) if sample.checks else []
    return {
        "sample": name, "size": size, "levels": plan, "gpus": len(workers),
        "input_gb": placed_gb, "place_seconds": place_seconds,
        "one_gpu_seconds": one_seconds, "dask_cold_seconds": cold,
        "dask_seconds": warm, "gather_seconds": gather,
        "dask_vs_one_gpu": warm / one_seconds,
        "largest_difference": diff, "equal_bits": equal,
        "one_gpu_error": output_error(one, reference),
        "dask_error": output_error(got, reference), "tol": sample.tol,
        "checks": [{"name": c.name, "value": c.value, "limit": c.limit, "ok": c.ok}
                   for c in checks],
        "checks_ok": all(c.ok for c in checks),
    }  # fmt: skip


def report(rows: list[dict[str, Any]], out: Path | None, gpu: str) -> str:
    lines = [
        f"# Samples on Dask arrays of CuPy chunks, {gpu}",
        "",
        "| sample | size | levels | GPUs | inputs GB | placed (s) | one GPU (s) | Dask cold (s) "
        "| Dask warm (s) | back here (s) | largest diff | equal bits | error 1 GPU | error Dask "
        "| checks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['sample']} | {r['size']} | {'/'.join(r['levels'].values())} | {r['gpus']} "
            f"| {r['input_gb']:.1f} | {r['place_seconds']:.1f} | {r['one_gpu_seconds']:.3f} "
            f"| {r['dask_cold_seconds']:.2f} | {r['dask_seconds']:.2f} | "
            f"{r['gather_seconds']:.2f} | {r['largest_difference']:.1e} | "
            f"{r['equal_bits']:.3f} | {r['one_gpu_error']:.1e} | {r['dask_error']:.1e} | "
            f"{'ok' if r['checks_ok'] else 'FAIL'} |"
        )
    text = "\n".join(lines) + "\n"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "dask-samples.json").write_text(json.dumps({"device": gpu, "rows": rows}, indent=1))
        (out / "dask-samples.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--gpus", type=int, default=None, help="workers (default: every GPU)")
    parser.add_argument("--names", nargs="*", default=["gemm", "sparkler"])
    args = parser.parse_args()
    from distributed import Client

    from mixpert.clusters import gpu_cluster, worker_devices

    rows: list[dict[str, Any]] = []
    with gpu_cluster(args.gpus) as cluster, Client(cluster) as client:
        client.amm.stop()  # keep the copies of B scattered to every worker
        seen = worker_devices(client)
        say(f"workers on {seen}")
        for name in args.names:
            try:
                rows.append(run_sample(client, sorted(seen), name))
            except Exception as error:  # the other sample still runs
                say(f"{name} failed: {type(error).__name__}: {error}")
            report(rows, args.out, device.device_name())
    print(report(rows, args.out, device.device_name()), flush=True)


if __name__ == "__main__":
    main()

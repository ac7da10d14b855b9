"""mixpert on Dask arrays across GPUs: strong and weak scaling of ``mixpert.matmul``.

One worker process per GPU (``mixpert.clusters.gpu_cluster``: dask-cuda's LocalCUDACluster
where installed, else Nannies pinned with CUDA_VISIBLE_DEVICES), CuPy chunks made on the
workers. A is
cut into row blocks (k one chunk), B is one chunk copied to every worker before the clock
starts (data already resident, as in an iterative solver); each output block is one task on
the worker holding its A block. Times C = mixpert.matmul(A, B) (persisted, waited for) at each
level on 1 and 2 GPUs; the per-GPU rate is compared with one plain ``mixpert.matmul`` of a
block on one GPU in the same run. Writes scaling.json, scaling.md and scaling.png under --out.

    python benchmarks/dask_scaling.py --out benchmarks/results/<gpu>x2 [--sizes 32768 65536]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from mixpert.runtime import device

if __name__ == "__main__":  # not in spawned workers: they must not touch CUDA before pinning
    device.exit_without_gpu("benchmarks/dask_scaling.py")

import cupy as cp
import dask
import dask.array as da
import numpy as np
from distributed import Client, futures_of, wait

import mixpert
from mixpert.clusters import gpu_cluster
from mixpert.timing import gpu_median_seconds

BLOCK_ROWS = 8192  # rows of A per chunk (and per output block): one task each


def make_block(seed: int, shape: tuple[int, int]) -> cp.ndarray:
    return cp.random.default_rng(seed).standard_normal(shape, dtype=cp.float32)


def block_error(a: cp.ndarray, b: cp.ndarray, c: cp.ndarray, corner: int = 1024) -> float:
    """Normwise error of a block's corner against float64, on the worker's GPU."""
    ref = a[:corner].astype(cp.float64) @ b[:, :corner].astype(cp.float64)
    return float(cp.linalg.norm(c[:corner, :corner] - ref) / cp.linalg.norm(ref))


def gpu_of_worker() -> str:
    return cp.cuda.Device().pci_bus_id


def synchronize() -> None:
    cp.cuda.Device().synchronize()


def lazy_block(seed: int, shape: tuple[int, int]) -> da.Array:
    meta = cp.empty((0, 0), dtype=cp.float32)
    return da.from_delayed(dask.delayed(make_block)(seed, shape), shape, np.float32, meta=meta)


def run(client: Client, gpus: int, n_rows: int, n: int, level: str) -> dict:
    rows = min(BLOCK_ROWS, n_rows // gpus)
    workers = sorted(client.scheduler_info()["workers"])
    a = da.concatenate([  # A's row blocks dealt round robin: each GPU holds its share
        client.persist(lazy_block(1 + i, (rows, n)), workers=[workers[i % len(workers)]])
        for i in range(n_rows // rows)
    ])  # fmt: skip
    b = lazy_block(0, (n, n)).persist()
    wait([a, b])
    client.replicate(futures_of(b))  # B resident on every worker before the clock starts
    start = time.perf_counter()
    c = mixpert.matmul(a, b, level=level).persist()
    wait(c)
    client.run(synchronize)  # tasks return once their kernels are queued: wait for the GPUs
    seconds = time.perf_counter() - start
    check = dask.delayed(block_error)(a.blocks[0, 0], b, c.blocks[0, 0])
    error = client.compute(check).result()
    flops = 2.0 * n_rows * n * n
    del a, b, c
    return {"gpus": gpus, "m": n_rows, "k": n, "n": n, "level": level, "seconds": seconds,
            "tflops": flops / seconds / 1e12, "tflops_per_gpu": flops / seconds / 1e12 / gpus,
            "error": error}  # fmt: skip


def single_gpu_rate(rows: int, n: int, level: str) -> float:
    """TFLOP/s of one plain mixpert.matmul of one row block on GPU 0 (the per-GPU reference)."""
    x, y = make_block(1, (rows, n)), make_block(0, (n, n))
    seconds = gpu_median_seconds(lambda: mixpert.matmul(x, y, level=level), 2.0 * rows * n * n)
    return 2.0 * rows * n * n / seconds / 1e12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=[32768, 65536])
    parser.add_argument("--levels", nargs="*", default=["IV", "fp32"])
    parser.add_argument("--gpus", type=int, nargs="*", default=[1, 2])
    args = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    rows = []
    for n in args.sizes:
        reference = {lv: single_gpu_rate(BLOCK_ROWS, n, lv) for lv in args.levels}
        cp.get_default_memory_pool().free_all_blocks()  # GPU 0 is a worker's next
        for gpus in args.gpus:
            with gpu_cluster(gpus) as cluster, Client(cluster) as client:
                print("workers' GPUs:", client.run(gpu_of_worker), flush=True)
                for lv in args.levels:  # warm-up: kernels compiled, cuBLAS handles made
                    run(client, gpus, 2048 * gpus, 2048, lv)
                for lv in args.levels:
                    strong = run(client, gpus, n, n, lv)  # the same product on more GPUs
                    weak_rows = n * gpus // max(args.gpus)  # rows per GPU fixed
                    weak = run(client, gpus, weak_rows, n, lv)
                    for kind, row in (("strong", strong), ("weak", weak)):
                        row.update(scaling=kind, single_gpu_tflops=reference[lv])
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    report(rows, args.out)


def report(rows: list[dict], out: Path | None) -> None:
    lines = [
        "| scaling | n | level | GPUs | m | seconds | TFLOP/s | per GPU | single GPU | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scaling']} | {r['n']} | {r['level']} | {r['gpus']} | {r['m']} | "
            f"{r['seconds']:.3f} | {r['tflops']:.1f} | {r['tflops_per_gpu']:.1f} | "
            f"{r['single_gpu_tflops']:.1f} | {r['error']:.2e} |"
        )
    table = "\n".join(lines)
    print(table)
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "scaling.json").write_text(json.dumps(rows, indent=1))
    (out / "scaling.md").write_text(f"# Dask scaling, {device.device_name()}\n\n{table}\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, kind in zip(axes, ("strong", "weak"), strict=True):
        for n, lv in sorted({(r["n"], r["level"]) for r in rows}):
            pts = sorted((r["gpus"], r["tflops"]) for r in rows
                         if r["scaling"] == kind and r["n"] == n and r["level"] == lv)  # fmt: skip
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"n={n} {lv}")
        ax.set(title=f"{kind} scaling", xlabel="GPUs", ylabel="TFLOP/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=120)


if __name__ == "__main__":
    main()

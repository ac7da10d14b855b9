"""A Dask cluster with one worker process per GPU, for ``mixpert.matmul`` on Dask arrays.

``gpu_cluster()`` returns dask-cuda's ``LocalCUDACluster`` where dask-cuda is installed, else a
``distributed.SpecCluster`` of Nannies each pinned to one GPU with CUDA_VISIBLE_DEVICES (what
dask-cuda does too). Workers are spawned processes: a script that builds a cluster must not call
into CUDA at import time (keep such code under ``if __name__ == "__main__":``), or each worker
initialises CUDA before its pinning applies and every worker lands on GPU 0.
``worker_devices(client)`` says which GPU each worker uses, asked from inside the workers.

Operands every block needs (B of A @ B) are best made on, or copied to, every worker before
the products: the scheduler runs a task where its largest inputs are. Dask's Active Memory
Manager drops copies no waiting task needs within seconds (its ReduceReplicas policy), so
``client.replicate`` needs ``client.amm.stop()`` first (benchmarks/dask_scaling.py does so).
"""

from __future__ import annotations

import os
from typing import Any

from .runtime import device


def gpu_cluster(gpus: int | None = None, **worker_options: Any) -> Any:
    """A local cluster with ``gpus`` workers (default: every visible GPU), one thread and one
    GPU each, no host-memory limit (the data live in GPU memory). ``worker_options`` go to
    each worker (Nanny)."""
    cp = device.cupy_module()
    if cp is None:
        raise RuntimeError(f"gpu_cluster needs a CUDA GPU: {device.unavailable_reason()}")
    visible = cp.cuda.runtime.getDeviceCount()
    gpus = visible if gpus is None else gpus
    if not 1 <= gpus <= visible:
        raise ValueError(
            f"gpus={gpus}: this machine shows {visible} GPU(s); ask for 1 to {visible}"
        )
    # worker i gets the i-th GPU this process sees (its own CUDA_VISIBLE_DEVICES respected)
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = seen.split(",")[:visible] if seen else [str(i) for i in range(visible)]
    options = {"nthreads": 1, "memory_limit": 0, **worker_options}
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        pass
    else:
        return LocalCUDACluster(
            CUDA_VISIBLE_DEVICES=ids[:gpus], threads_per_worker=1,
            memory_limit=options["memory_limit"], dashboard_address=None,
        )  # fmt: skip
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        i: {"cls": Nanny, "options": {**options, "env": {"CUDA_VISIBLE_DEVICES": ids[i]}}}
        for i in range(gpus)
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None}}
    return SpecCluster(workers=workers, scheduler=scheduler)


def worker_devices(client: Any) -> dict[str, str]:
    """Each worker's GPU, asked from inside the worker: address -> PCI bus id (distinct ids:
    one GPU each)."""
    return client.run(_pci_bus_id)


def _pci_bus_id() -> str:
    import cupy  # (in the worker, after its pinning)

    return str(cupy.cuda.Device().pci_bus_id)

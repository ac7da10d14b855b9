"""``gpu_cluster`` on real GPUs: one worker per GPU, asked from inside each worker, and a
worker killed in the middle of a GPU product replaced with the same bits."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import mixpert

da = pytest.importorskip("dask.array", reason="needs Dask: pip install 'mixpert[dask]'")
distributed = pytest.importorskip("distributed", reason="needs distributed: 'mixpert[dask]'")

pytestmark = pytest.mark.gpu


def visible_gpus() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def test_gpu_cluster_puts_each_worker_on_its_own_gpu() -> None:
    import cupy

    from mixpert.clusters import gpu_cluster, worker_devices

    visible = visible_gpus()
    ids = [cupy.cuda.Device(i).pci_bus_id for i in range(visible)]
    for gpus in range(1, visible + 1):
        with gpu_cluster(gpus) as cluster, distributed.Client(cluster) as client:
            seen = worker_devices(client)
        assert sorted(seen.values()) == sorted(ids[:gpus]), (gpus, seen)


def test_a_worker_killed_mid_gpu_product_is_replaced_and_the_bits_hold() -> None:
    import cupy

    from mixpert.clusters import gpu_cluster, worker_devices

    state = da.random.RandomState(5, RandomState=cupy.random.RandomState)  # the same numbers
    a = state.standard_normal((4096, 4096), chunks=(1024, 2048)).astype(np.float32)
    b = state.standard_normal((4096, 2048), chunks=(2048, 2048)).astype(np.float32)
    want = mixpert.matmul(a, b, level="IV").compute(scheduler="synchronous")  # this GPU
    assert isinstance(want, cupy.ndarray)
    # A's chunks arrive a quarter second apart, so the product is still running when cut
    held = a.map_blocks(lambda x: (time.sleep(0.25), x)[1], dtype=np.float32)
    gpus = min(2, visible_gpus())
    with gpu_cluster(gpus) as cluster, distributed.Client(cluster) as client:
        before = worker_devices(client)
        c = client.persist(mixpert.matmul(held, b, level="IV"))
        blocks = distributed.futures_of(c)
        distributed.wait(blocks, timeout=120, return_when="FIRST_COMPLETED")
        busy = [w for w, tasks in client.processing().items() if tasks]
        assert busy and not all(f.done() for f in blocks), "the product ended before the kill"
        pid = client.run(os.getpid, workers=busy[:1])[busy[0]]
        os.kill(pid, signal.SIGKILL)  # the worker process dies mid-product
        got = client.compute(c).result(timeout=180)
        deadline = time.monotonic() + 60
        while len(client.scheduler_info()["workers"]) < gpus and time.monotonic() < deadline:
            time.sleep(0.1)
        after = worker_devices(client)
    assert busy[0] not in after and len(after) == gpus  # a new worker took its place ...
    assert sorted(after.values()) == sorted(before.values())  # ... on the same GPU
    np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint32), want.get().view(np.uint32))

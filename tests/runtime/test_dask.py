"""mixpert on Dask arrays: per-chunk emulated products on a real (local, multi-process) cluster."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import mixpert

da = pytest.importorskip("dask.array", reason="needs Dask: pip install 'mixpert[dask]'")
distributed = pytest.importorskip("distributed", reason="needs distributed: 'mixpert[dask]'")

RNG = np.random.default_rng(17)
A = RNG.standard_normal((300, 500)).astype(np.float32)
B = RNG.standard_normal((500, 200)).astype(np.float32)


@pytest.fixture(scope="module")
def client():
    """Two worker processes (each behind a nanny that restarts it), one thread each."""
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def by_definition(a: np.ndarray, b: np.ndarray, k_cuts: list[int], level: str) -> np.ndarray:
    """The contract written out: chunk products at ``level`` added in k order in float64,
    rounded once (here for one output block covering everything)."""
    total = np.zeros((a.shape[0], b.shape[1]))
    for start, stop in zip(k_cuts[:-1], k_cuts[1:], strict=True):
        total = total + mixpert.matmul(a[:, start:stop], b[start:stop], level=level)
    return total.astype(np.float32)


def test_dask_operands_give_a_dask_array_with_the_defined_bits(client) -> None:
    c = mixpert.matmul(da.from_array(A, chunks=(300, 125)), da.from_array(B, chunks=(125, 200)),
                       level="IV")  # fmt: skip
    assert isinstance(c, da.Array) and c.dtype == np.float32 and c.shape == (300, 200)
    got = c.compute()
    want = by_definition(A, B, [0, 125, 250, 375, 500], "IV")
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    ref = A.astype(np.float64) @ B
    assert np.abs(got - ref).max() <= 2 * 500 * 2.0**-24 * (np.abs(A) @ np.abs(B)).max()


def test_misaligned_k_chunks_are_unified_and_blocks_follow_the_definition(client) -> None:
    a = da.from_array(A, chunks=(100, 128))
    b = da.from_array(B, chunks=(100, 64))
    got = mixpert.matmul(a, b, level="V").compute()
    cuts = sorted({0, 500, *range(0, 500, 128), *range(0, 500, 100)})
    for i in range(3):
        rows = slice(100 * i, 100 * (i + 1))
        want = by_definition(A[rows], B[:, 64:128], cuts, "V")
        np.testing.assert_array_equal(got[rows, 64:128], want)


def test_the_bits_do_not_depend_on_the_scheduler_or_worker_order(client) -> None:
    c = mixpert.matmul(da.from_array(A, chunks=(60, 100)), da.from_array(B, chunks=(100, 50)),
                       level="IV")  # fmt: skip
    local = c.compute(scheduler="synchronous").view(np.uint32)
    for _ in range(2):
        assert np.array_equal(c.compute().view(np.uint32), local)  # on the cluster
        threads = c.compute(scheduler="threads", num_workers=4)  # any completion order
        assert np.array_equal(threads.view(np.uint32), local)


def test_a_numpy_operand_beside_a_dask_one(client) -> None:
    got = mixpert.matmul(da.from_array(A, chunks=(150, 250)), B, level="IV").compute()
    want = mixpert.matmul(da.from_array(A, chunks=(150, 250)), da.from_array(B, chunks=(250, -1)),
                          level="IV").compute()  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_dask_operands_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match="3-D Dask array"):
        mixpert.matmul(da.ones((2, 3, 4), dtype=np.float32), da.ones((4, 5), dtype=np.float32))
    x = da.ones((10, 4), dtype=np.float32, chunks=5)
    unknown = x[x[:, 0] > 0]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        mixpert.matmul(unknown, da.ones((4, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="must equal"):
        mixpert.matmul(x, da.ones((5, 3), dtype=np.float32))
    # not a float32 product: Dask's own matmul, as np.matmul gives (issue 38)
    mixed = mixpert.matmul(da.ones((3, 4), dtype=np.int64), da.ones((4, 3), dtype=np.float32))
    assert isinstance(mixed, da.Array) and mixed.dtype == np.float64
    assert np.array_equal(mixed.compute(), np.full((3, 3), 4.0))


def mlp(x, w1, w2):
    h = np.maximum(x @ w1, 0.0)
    return h @ w2


def test_a_jitted_function_runs_its_numpy_plan_on_dask_arrays(client) -> None:
    w2 = RNG.standard_normal((200, 16)).astype(np.float32)
    f = mixpert.jit(mlp)
    plan = mixpert.tune(f, (A, B, w2), tol=1e-6)
    f.plan = plan
    x = da.from_array(A, chunks=(100, 250))
    with mixpert.record() as calls:
        out = f(x, B, w2)
    assert isinstance(out, da.Array)  # elementwise code stays lazy
    assert [(c.op_id, c.level) for c in calls] == [(op, plan.levels[op]) for op in f.ops]
    got = out.compute()
    ref = mlp(A.astype(np.float64), B.astype(np.float64), w2.astype(np.float64))
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-6


@pytest.mark.slow  # 512 x 4096 x 512 for the kill to land mid-product, then a new worker starts
def test_a_worker_killed_mid_product_is_replaced_and_the_bits_hold(client) -> None:
    state = da.random.RandomState(3)  # made on the workers, the same numbers every time
    a = state.standard_normal((512, 4096), chunks=(64, 1024)).astype(np.float32)
    b = state.standard_normal((4096, 512), chunks=(1024, 128)).astype(np.float32)
    c = mixpert.matmul(a, b, level="V")
    want = c.compute(scheduler="synchronous")
    future = client.compute(c)
    deadline = time.monotonic() + 60
    while not any(client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    victim = next(w for w, tasks in client.processing().items() if tasks)
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)  # the worker process dies mid-product
    got = future.result(timeout=180)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    deadline = time.monotonic() + 60
    while len(client.scheduler_info()["workers"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(client.scheduler_info()["workers"]) == 2  # the nanny started a new one


@pytest.mark.skipif(mixpert.runtime.device.gpu_available(), reason="checks the no-GPU message")
def test_gpu_cluster_without_a_gpu_says_why() -> None:
    from mixpert.clusters import gpu_cluster

    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        gpu_cluster()


@pytest.mark.parametrize("name", ["sparkler", "gemm"])
def test_samples_run_unchanged_on_dask_arrays(client, name: str) -> None:
    """The gemm and sparkler samples' own functions on Dask arrays (k cut into chunks for
    sparkler's long inner dimension), against the same plan on NumPy arrays."""
    from mixpert.sample_files import gemm, sparkler

    sample = {"gemm": gemm, "sparkler": sparkler}[name]
    rng = np.random.default_rng(3)
    args = sample.make_inputs(np, rng, 48)
    f = mixpert.jit(getattr(sample, name).py_func)
    f.plan = dict.fromkeys(f.ops, "IV")
    want = f(*args)
    chunked = [da.from_array(x, chunks=256) if isinstance(x, np.ndarray) else x for x in args]
    got = f(*chunked)
    assert isinstance(got, da.Array)
    got = got.compute()
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_one_k_chunk_gives_each_block_the_chunk_products_bits(client) -> None:
    """With k one chunk, C_ij is product(A_i, B_j) itself (no float64 round trip changes it)."""
    got = mixpert.matmul(da.from_array(A, chunks=(100, -1)), da.from_array(B, chunks=(-1, 120)),
                         level="IV").compute()  # fmt: skip
    for i in range(3):
        for j in range(2):
            rows, cols = slice(100 * i, 100 * (i + 1)), slice(120 * j, 120 * (j + 1))
            want = mixpert.matmul(A[rows], B[:, cols], level="IV")
            np.testing.assert_array_equal(got[rows, cols].view(np.uint32), want.view(np.uint32))

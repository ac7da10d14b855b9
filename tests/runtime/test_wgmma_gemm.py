"""mixpert's wgmma INT8 GEMM (``runtime.cuda.wgmma_gemm``, Hopper): its argument rules on any
machine; on an sm_90 GPU, exact int32 sums on awkward shapes, strides, offsets, accumulation
and batches with nothing written outside the output, and level IV's class-sum pipeline on it
giving the CPU oracle's bits."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert
from mixpert.runtime.cuda import wgmma_gemm

GOOD = dict(m=64, n=64, depth=64, a_ptr=1 << 20, lda=64, b_ptr=1 << 21, ldb=64, c_ptr=1 << 22,
            ldc=64, batch=1, stride_a=0, stride_b=0, stride_c=0)  # fmt: skip


@pytest.mark.parametrize(
    "change, named",
    [
        ({"lda": 72}, "lda = 72"),
        ({"lda": 48}, "lda = 48"),
        ({"depth": 40}, "depth = 40"),
        ({"a_ptr": (1 << 20) + 8}, "a_ptr"),
        ({"c_ptr": (1 << 22) + 2}, "c_ptr"),
        ({"ldc": 63}, "ldc = 63"),
        ({"m": 0}, "m = 0"),
        ({"batch": 2}, "stride_a = 0"),
        ({"batch": 2, "stride_a": 4096, "stride_b": 4096, "stride_c": 100}, "stride_c = 100"),
    ],
)
def test_arguments_it_cannot_take_are_refused_by_name(change, named) -> None:
    with pytest.raises(ValueError, match=named):
        wgmma_gemm._validate(**{**GOOD, **change})
    args = {**GOOD, **change}
    del args["ldc"]
    assert not wgmma_gemm.serves(**args)


def test_the_good_arguments_pass_the_rules() -> None:
    wgmma_gemm._validate(**GOOD)  # (serves then asks the device: see the GPU tests)


def _on_hopper():
    import cupy

    if not wgmma_gemm.available():
        pytest.skip("needs a compute capability 9.0 GPU (sm_90a code), NVRTC and cuda-bindings")
    return cupy


def _exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.int64)  # exact: < 2^53


@pytest.mark.gpu
@pytest.mark.parametrize(
    "m, n, depth",
    [(1, 1, 16), (7, 300, 48), (129, 257, 144), (1000, 1000, 1008), (128, 256, 128),
     (513, 1025, 16), (3000, 2500, 2064)],
)  # fmt: skip
@pytest.mark.parametrize("accumulate", [False, True])
def test_sums_are_exact_and_stay_in_their_window(m, n, depth, accumulate) -> None:
    """A and B rows padded and offset within larger buffers, C a window of a poisoned larger
    buffer: the sums (plus the old C where accumulating) are exact, the rest untouched."""
    cupy = _on_hopper()
    rng = np.random.default_rng(m + n + depth)
    lda, ldb, ldc = depth + 32, depth + 48, n + 8
    a = rng.integers(-128, 128, (m, depth), dtype=np.int8)
    b = rng.integers(-128, 128, (n, depth), dtype=np.int8)
    a_buf = cupy.zeros(16 + m * lda, dtype=cupy.int8)
    a_buf[16:].reshape(m, lda)[:, :depth] = cupy.asarray(a)
    b_buf = cupy.zeros(32 + n * ldb, dtype=cupy.int8)
    b_buf[32:].reshape(n, ldb)[:, :depth] = cupy.asarray(b)
    poison = np.int32(0x7F7F7F7F)
    c_host = np.full((m + 2, ldc), poison, dtype=np.int32)
    old = rng.integers(-(2**20), 2**20, (m, n), dtype=np.int32)
    if accumulate:
        c_host[1 : m + 1, :n] = old
    c_buf = cupy.asarray(c_host)
    c_ptr = c_buf.data.ptr + (ldc + 0) * 4  # (row 1)
    wgmma_gemm.gemm(m, n, depth, a_buf.data.ptr + 16, lda, b_buf.data.ptr + 32, ldb, c_ptr, ldc,
                    accumulate)  # fmt: skip
    got = cupy.asnumpy(c_buf)
    want = _exact(a, b) + (old if accumulate else 0)
    assert np.array_equal(got[1 : m + 1, :n].astype(np.int64), want)
    outside = np.ones(got.shape, bool)
    outside[1 : m + 1, :n] = False
    assert (got[outside] == poison).all()


@pytest.mark.gpu
@pytest.mark.parametrize("accumulate", [False, True])
def test_a_batch_of_problems_in_one_launch(accumulate) -> None:
    cupy = _on_hopper()
    batch, m, n, depth = 3, 300, 700, 272
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (batch, m, depth), dtype=np.int8)
    b = rng.integers(-128, 128, (batch, n, depth), dtype=np.int8)
    old = rng.integers(-(2**20), 2**20, (batch, m, n), dtype=np.int32)
    c = cupy.asarray(old if accumulate else np.full_like(old, 0x7F7F7F7F))
    a_gpu, b_gpu = cupy.asarray(a), cupy.asarray(b)
    wgmma_gemm.gemm(m, n, depth, a_gpu.data.ptr, depth, b_gpu.data.ptr, depth, c.data.ptr, n,
                    accumulate, batch, m * depth, n * depth, m * n)  # fmt: skip
    want = np.stack([_exact(a[i], b[i]) for i in range(batch)]) + (old if accumulate else 0)
    assert np.array_equal(cupy.asnumpy(c).astype(np.int64), want)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 520, 270), (1100, 700, 1500), (3, 90, 200, 150)])
def test_level_iv_class_sums_on_wgmma_give_the_oracles_bits(shape, monkeypatch) -> None:
    """Every INT8 GEMM of level IV's class-sum pipeline on the wgmma kernel (the choice forced,
    not timed): the CPU oracle's bits, stacks (one batched launch) included."""
    cupy = _on_hopper()
    from mixpert.runtime.cuda import tn_gemm

    monkeypatch.setenv("MIXPERT_FUSED", "0")
    monkeypatch.setenv("MIXPERT_PLAN_CACHE", "0")
    chosen: list[object] = []

    def wgmma_where_it_serves(shape, alignments, a_ptr, b_ptr, c_ptr):
        plan = tn_gemm.WGMMA if tn_gemm._wgmma_serves(shape, a_ptr, b_ptr) else None
        chosen.append(plan)
        return plan

    monkeypatch.setattr(tn_gemm, "_fastest", wgmma_where_it_serves)
    monkeypatch.setattr(tn_gemm, "_chosen", {})
    *stack, m, k, n = shape
    rng = np.random.default_rng(m)
    a = rng.standard_normal((*stack, m, k)) * np.exp(rng.standard_normal((*stack, m, 1)))
    b = rng.standard_normal((*stack, k, n))
    a, b = a.astype(np.float32), b.astype(np.float32)
    a[..., 2, 3] = np.nan  # a NaN line bypasses the sums
    got = mixpert.matmul(cupy.asarray(a), cupy.asarray(b), level="IV")
    want = mixpert.matmul(a, b, level="IV", backend="cpu")
    assert np.array_equal(cupy.asnumpy(got).view(np.uint32), want.view(np.uint32))
    assert chosen and all(plan is tn_gemm.WGMMA for plan in chosen)

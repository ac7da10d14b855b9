"""The INT8 GEMMs on the measured-fastest algorithm (``runtime.cuda.tn_gemm``): exact sums
on every candidate, at any alignment, batched or not, accumulating or not (GPU only)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C (m, n) = A (m, depth) @ B (n, depth)^T in int64, through float64 BLAS: every partial
    sum of INT8 products is an integer below 2^53 at these depths, so each is exact (NumPy's
    int64 matmul has no BLAS and took minutes at 4096 x 2048 x 1024)."""
    assert a.shape[1] * 128 * 128 < 2**53
    return (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.int64)


@pytest.mark.parametrize("m, n, depth", [(4096, 2048, 1024), (300, 33, 48), (64, 4096, 8192)])
@pytest.mark.parametrize("c_offset", [0, 1])  # 1: C starts 4 bytes past an aligned address
def test_int8_gemm_is_exact_on_the_chosen_algorithm(m: int, n: int, depth: int, c_offset: int):
    import cupy as cp

    from mixpert.runtime.cuda import tn_gemm

    rng = np.random.default_rng(m + n + depth + c_offset)
    a = rng.integers(-128, 128, (m, depth), dtype=np.int8)
    b = rng.integers(-128, 128, (n, depth), dtype=np.int8)
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    buffer = cp.full(m * n + c_offset, -7, dtype=cp.int32)  # poisoned
    out = buffer[c_offset:].reshape(m, n)
    shape = tn_gemm.Gemm(n, m, depth, depth, depth)
    for accumulate in (False, True, False):  # tune at the first, reuse the choice after
        tn_gemm.gemm(shape, b_dev.data.ptr, a_dev.data.ptr, out.data.ptr, accumulate)
        want = exact(a, b) * (2 if accumulate else 1)
        np.testing.assert_array_equal(cp.asnumpy(out), want)
    assert shape in tn_gemm.chosen_algorithms()
    alignments = tuple(tn_gemm._alignment(x.data.ptr) for x in (b_dev, a_dev, out))
    candidates = tn_gemm._candidates(shape, alignments)[2]
    assert candidates  # cuBLASLt offers some: each must give the exact sums
    for plan in candidates:
        out.fill(-7)
        device = cp.cuda.runtime.getDevice()
        tn_gemm._lt_matmul(plan, b_dev.data.ptr, a_dev.data.ptr, out.data.ptr, False, device)
        np.testing.assert_array_equal(cp.asnumpy(out), exact(a, b))


def test_batched_int8_gemm_is_exact() -> None:
    import cupy as cp

    from mixpert.runtime.cuda import tn_gemm

    s, m, n, depth = 16, 512, 384, 1024
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (s, m, depth), dtype=np.int8)
    b = rng.integers(-128, 128, (s, n, depth), dtype=np.int8)
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)  # (held: the GEMM reads them)
    out = cp.full((s, m, n), -7, dtype=cp.int32)
    shape = tn_gemm.Gemm(n, m, depth, depth, depth, s, n * depth, m * depth, m * n)
    tn_gemm.gemm(shape, b_dev.data.ptr, a_dev.data.ptr, out.data.ptr, False)
    want = np.stack([exact(a[i], b[i]) for i in range(s)])
    np.testing.assert_array_equal(cp.asnumpy(out), want)


def test_cublas_only_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy as cp

    import mixpert

    rng = np.random.default_rng(9)
    a = cp.asarray(rng.standard_normal((1536, 2048), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((2048, 1280), dtype=np.float32))
    stack_a = cp.asarray(rng.standard_normal((8, 256, 512), dtype=np.float32))
    stack_b = cp.asarray(rng.standard_normal((8, 512, 384), dtype=np.float32))
    tuned = [cp.asnumpy(mixpert.matmul(x, y, level="IV")) for x, y in ((a, b), (stack_a, stack_b))]
    monkeypatch.setenv("MIXPERT_INT8_GEMM", "cublas")
    from mixpert.runtime.cuda import tn_gemm

    monkeypatch.setattr(tn_gemm, "_chosen", {})
    plain = [cp.asnumpy(mixpert.matmul(x, y, level="IV")) for x, y in ((a, b), (stack_a, stack_b))]
    for x, y in zip(tuned, plain, strict=True):
        np.testing.assert_array_equal(x, y)


def test_the_cublaslt_beside_cupys_cublas_comes_first() -> None:
    from mixpert.runtime.cuda import tn_gemm

    maps = "\n".join(
        [
            "7f00 r-xp 00 08:01 1 /opt/torch/lib/libcublasLt.so.13",
            "7f01 r-xp 00 08:01 2 /venv/nvidia/cu13/lib/libcublas.so.13",
            "7f02 r-xp 00 08:01 3 /venv/nvidia/cu13/lib/libcublasLt.so.13",
        ]
    )
    assert tn_gemm._loaded_lt(maps) == [
        "/venv/nvidia/cu13/lib/libcublasLt.so.13",
        "/opt/torch/lib/libcublasLt.so.13",
    ]

"""1-D and N-D operands with np.matmul's semantics (vectors native, stacks broadcast)."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert
from mixpert.runtime import device

RNG = np.random.default_rng(21)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "stack @ shared weights": (f32(3, 5, 6), f32(6, 4)),
    "matrix @ stack": (f32(5, 6), f32(3, 6, 4)),
    "stack @ stack": (f32(3, 5, 6), f32(3, 6, 4)),
    "broadcast stacks": (f32(1, 3, 5, 6), f32(2, 1, 6, 4)),
    "matrix @ vector": (f32(5, 6), f32(6)),
    "vector @ stack": (f32(6), f32(3, 6, 4)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("level", ["IV", "V", "fp32"])
def test_np_matmul_semantics(case: str, level: str) -> None:
    a, b = CASES[case]
    c = mixpert.matmul(a, b, level=level)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert c.shape == want.shape and c.dtype == np.float32
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_stacks_run_each_pair_at_the_level() -> None:
    a, b = CASES["stack @ stack"]
    c = mixpert.matmul(a, b, level="I")
    for i in range(3):
        np.testing.assert_array_equal(c[i], mixpert.matmul(a[i], b[i], level="I"))


def test_shared_weights_fold_into_one_product() -> None:
    a, w = CASES["stack @ shared weights"]
    folded = mixpert.matmul(a.reshape(-1, 6), w, level="IV").reshape(3, 5, 4)
    np.testing.assert_array_equal(mixpert.matmul(a, w, level="IV"), folded)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_every_batch_element_has_the_cpu_bits_on_the_gpu(case: str) -> None:
    cp = device.cupy_module()
    a, b = CASES[case]
    want = mixpert.matmul(a, b, level="IV", backend="cpu")
    got = mixpert.matmul(cp.asarray(a), cp.asarray(b), level="IV", backend="cuda")
    assert type(got) is cp.ndarray
    if "vector" in case:  # native: BLAS orders differ
        np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)
        return
    np.testing.assert_array_equal(got.get().view(np.uint32), want.view(np.uint32))

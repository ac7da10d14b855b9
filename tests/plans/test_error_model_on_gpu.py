"""The tuner's model on a GPU: an INT8 level's products of the generic twins run on the CUDA
backend there, and give the exact CPU backend's bits, so the model's figures (and the plans they
decide) are the same either way."""

from __future__ import annotations

import numpy as np
import pytest

from mixpert.execution.product_samples import ProductSample
from mixpert.runtime import cpu
from mixpert.runtime.levels import get_level
from mixpert.tuning import error_model

LEVELS = ("I", "T6", "IV", "V")


def awkward_sample(k: int, seed: int) -> ProductSample:
    """A sampled product of row-scaled operands with zeros, a NaN, an Inf and wide exponents."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((8, k)) * np.exp2(rng.integers(-40, 40, (8, 1)))
    b = rng.standard_normal((k, 6)) * np.exp(2.0 * rng.standard_normal((k, 1)))
    a[1] = 0.0
    a[2, k // 3] = np.nan
    b[k // 2, 4] = np.inf
    a, b = a.astype(np.float32), b.astype(np.float32)
    return ProductSample.take(a, b, cpu.product_at_level(a, b, get_level("IV")))


@pytest.mark.gpu
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("k", [1000, 50_000])  # within one INT32 block of k, and past it
def test_the_models_products_on_the_gpu_are_the_cpu_oracles(level: str, k: int) -> None:
    sample = awkward_sample(k, seed=k)
    on_gpu = error_model.level_product(get_level(level), gpu=True)
    on_cpu = error_model.level_product(get_level(level), gpu=False)
    rng = np.random.default_rng(0)
    a, b = (error_model.generic_twin(x, rng) for x in (sample.a_rows, sample.b_cols))
    gpu_bits, cpu_bits = on_gpu(a, b), on_cpu(a, b)
    assert isinstance(gpu_bits, np.ndarray)  # host in, host out
    nan = np.isnan(cpu_bits)  # (a NaN's payload is no one's rounding)
    assert nan.any() and np.array_equal(np.isnan(gpu_bits), nan)
    np.testing.assert_array_equal(gpu_bits.view(np.uint32)[~nan], cpu_bits.view(np.uint32)[~nan])
    assert error_model._modelled([sample], on_gpu) == error_model._modelled([sample], on_cpu)

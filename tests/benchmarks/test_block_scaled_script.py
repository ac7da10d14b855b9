"""benchmarks/block_scaled_accuracy.py: its emulation agrees with level IV where they meet."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import mixpert
from mixpert.metrics import float64_product, relative_error
from mixpert.testdata import gemmul8

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def script():
    path = BENCHMARKS / "block_scaled_accuracy.py"  # (it imports its sibling accuracy.py)
    spec = importlib.util.spec_from_file_location("block_scaled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_block_of_all_k_is_level_iv(script) -> None:
    """One block spanning k is level IV's numerics (N(0,1) data: nothing rebalanced or
    bypassed): the same float32 results, up to the float64 summation order (one ulp)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((48, 200)).astype(np.float32)
    b = rng.standard_normal((200, 40)).astype(np.float32)
    got = script.block_scaled_product(a, b, 3, 3, 3, block=200)
    want = mixpert.matmul(a, b, level="IV", backend="cpu")
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32))
    assert ulps.max() <= 1 and (ulps == 0).mean() > 0.99


def test_smaller_blocks_keep_more_bits_on_wide_data(script) -> None:
    rng = np.random.default_rng(5)
    a, b = gemmul8(np, rng, (64, 512), 1.5), gemmul8(np, rng, (512, 64), 1.5)
    reference = float64_product(a, b)
    errors = [
        relative_error(script.block_scaled_product(a, b, 3, 3, 2, block), reference)
        for block in (32, 512)
    ]
    assert errors[0] < 0.7 * errors[1], errors

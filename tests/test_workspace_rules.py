"""The GPU workspace's accounting (``runtime.workspace``): blocks of class sums sized to the
budget, and every emulated product within about 4x the bytes of its operands and output. Pure
arithmetic, checked here on the CPU; the GPU tests measure the real peak against it."""

from __future__ import annotations

import pytest

from mixpert.runtime import get_level, workspace
from mixpert.runtime.combine import int32_k_block

ROW_BLOCK, ROW_BLOCK_MIN_N = 4096, 8192  # cuda.GEMM_ROW_BLOCK, cuda.GEMM_ROW_BLOCK_MIN_N


def row_block(n: int) -> int:  # cuda.gemm_row_block
    return ROW_BLOCK if n >= ROW_BLOCK_MIN_N else 1 << 62


def padded(k: int) -> int:  # cuda._padded
    return max(16, -(-k // 16) * 16)


@pytest.mark.parametrize(
    "units, unit_bytes, most, budget",
    [(8192, 131072, 4096, 805306368), (100, 10, 4096, 10**9), (70, 720, 24, 0),
     (9, 1000, 9, 4500), (1, 10**9, 4096, 1)],
)  # fmt: skip
def test_a_block_is_the_largest_halving_that_fits(units, unit_bytes, most, budget) -> None:
    size = workspace.gpu_block(units, unit_bytes, most, budget)
    assert 1 <= size <= min(units, most)
    assert size == 1 or size * unit_bytes <= budget
    larger = min(units, most, 2 * size)  # the step before the last halving did not fit
    assert larger == size or larger * unit_bytes > budget or size == min(units, most)


@pytest.mark.parametrize("level", ["I", "IV", "V"])
@pytest.mark.parametrize(
    "shape",
    [(8192, 64, 8192), (8192, 8192, 8192), (16384, 16, 1024), (8, 2048, 64, 2048),
     (1, 8192, 64, 8192), (64, 1024, 1024, 1024), (512, 2**17 + 64, 512), (16384, 4096, 16384)],
)  # fmt: skip
def test_gpu_workspace_is_within_4x_operands_and_output(level: str, shape: tuple) -> None:
    lv = get_level(level)
    *stack, m, k, n = shape
    count = stack[0] if stack else 1
    long_k = padded(k) > int32_k_block(lv)
    sums = workspace.sum_blocking(lv, m, k, n, count, long_k, row_block(n))[1]
    needed = workspace.gpu_bytes(lv, m, k, n, padded(k), long_k, count, sums)
    assert needed <= 4 * count * workspace.block_budget(m, k, n)


def test_small_k_is_cut_into_row_blocks() -> None:
    """8192 x 64 x 8192 at IV: all the class sums at once took ~4.9x the operands and output."""
    iv = get_level("IV")
    rows, sums = workspace.sum_blocking(iv, 8192, 64, 8192, 1, False, row_block(8192))
    assert rows < 8192 and sums <= workspace.SUMS_BUDGET * workspace.block_budget(8192, 64, 8192)
    whole = workspace.gpu_bytes(iv, 8192, 64, 8192, 64, False)  # every row's sums at once
    assert whole > 4 * workspace.block_budget(8192, 64, 8192)

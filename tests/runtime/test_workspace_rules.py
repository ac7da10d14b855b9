"""The GPU workspace's accounting (``runtime.workspace``): blocks of class sums sized to the
budget, and every emulated product within about 4x the bytes of its operands and output. Pure
arithmetic, checked here on the CPU; the GPU tests measure the real peak against it."""

from __future__ import annotations

import pytest

from mixpert.runtime import get_level, workspace
from mixpert.runtime.combine import int32_k_block


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
    sums = workspace.sum_blocking(lv, m, k, n, count, long_k, workspace.gemm_row_block(n))[1]
    needed = workspace.gpu_bytes(lv, m, k, n, padded(k), long_k, count, sums)
    assert needed <= 4 * count * workspace.block_budget(m, k, n)


@pytest.mark.parametrize("shape", [(8192, 64, 8192), (16384, 64, 4096)])
def test_small_k_is_cut_into_row_blocks(shape: tuple[int, int, int]) -> None:
    """At IV all the class sums at once would take ~4.9-5x the operands and output: they come in
    blocks of rows within the budget (at n = 4096 the budget's, below the GEMMs' own limit)."""
    iv = get_level("IV")
    m, k, n = shape
    rows, sums = workspace.sum_blocking(iv, m, k, n, 1, False, workspace.gemm_row_block(n))
    assert rows < m
    assert sums <= workspace.SUMS_BUDGET * workspace.block_budget(m, k, n)
    whole = workspace.gpu_bytes(iv, m, k, n, k, False)  # every row's sums at once
    assert whole > 4 * workspace.block_budget(m, k, n)


@pytest.mark.parametrize("n", [1, 3, 768, 1024, 4096, 8191, 8192, 16384])
def test_gemm_row_blocks_keep_a_gemm_far_below_2_to_the_31_outputs(n: int) -> None:
    """Outputs at least GEMM_ROW_BLOCK_MIN_N wide: GEMM_ROW_BLOCK rows a GEMM; narrower ones:
    as many as make NARROW_BLOCK_ENTRIES outputs, and never fewer than GEMM_ROW_BLOCK."""
    rows = workspace.gemm_row_block(n)
    if n >= workspace.GEMM_ROW_BLOCK_MIN_N:
        assert rows == workspace.GEMM_ROW_BLOCK
    else:
        assert rows >= workspace.GEMM_ROW_BLOCK
        assert rows * n <= max(workspace.NARROW_BLOCK_ENTRIES, workspace.GEMM_ROW_BLOCK * n)
        assert (rows + 1) * n > workspace.NARROW_BLOCK_ENTRIES or rows == workspace.GEMM_ROW_BLOCK
    assert rows * n < 2**31

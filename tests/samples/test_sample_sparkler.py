"""The sparkler sample: its output is the Pearson correlation matrix, and its checks can fail."""

from __future__ import annotations

import numpy as np
import pytest

from mixpert.metrics import output_error, reference_outputs
from mixpert.runtime.combine import int32_k_block
from mixpert.runtime.levels import get_level

M = 24  # vectors per set; k = 48 M
SIZE, SEED = M, 7  # args (conftest.py)


def pearson(a, b):
    """np.corrcoef's cross block, in float64."""
    m = a.shape[1]
    return np.corrcoef(np.float64(a).T, np.float64(b).T)[:m, m:]


def test_inputs_have_the_documented_shapes(args) -> None:
    a, b = args
    assert a.shape == b.shape == (48 * M, M)
    assert a.dtype == b.dtype == np.float32


def test_float64_reference_is_pearson(sample, args) -> None:
    np.testing.assert_allclose(
        reference_outputs(sample.func.py_func, args), pearson(*args), atol=1e-12
    )


def test_all_fp32_plan_is_plain_numpy(sample, args, at_level) -> None:
    assert len(sample.func.ops) == 1
    got = at_level("fp32")(*args)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, sample.func.py_func(*args), atol=1e-6)


@pytest.mark.parametrize("level, bound", [("I", 1e-4), ("IV", 5e-6)])
def test_a_with_itself_is_symmetric_with_unit_diagonal(args, at_level, level, bound) -> None:
    """Bounds: the level's error, and at IV float32's in the z-scores themselves (~1e-6)."""
    a = args[0]
    c = at_level(level)(a, a)
    np.testing.assert_allclose(c, c.T, atol=bound)
    np.testing.assert_allclose(np.diag(c), 1.0, atol=bound)
    assert np.abs(c).max() <= 1.0 + bound


def test_invariant_to_column_offsets_and_scales(args, at_level) -> None:
    """Pearson ignores each vector's units and origin: the centring and scaling remove them."""
    a, b = args
    rng = np.random.default_rng(8)
    scale = np.exp(2.0 * rng.standard_normal(M)).astype(np.float32)
    moved = (a * scale + np.float32(3.0) * rng.standard_normal(M).astype(np.float32)).astype(
        np.float32
    )
    f = at_level("IV")
    np.testing.assert_allclose(f(moved, b), f(a, b), atol=1e-5)


def test_planted_pairs_stand_out(module, args) -> None:
    c = pearson(*args)
    pairs = module.planted_pairs(M, M)
    assert len(pairs) == 8
    for i, j in pairs:
        assert c[i, j] > 0.95
        assert np.argmax(c[i]) == j
    background = c.copy()
    for i, j in pairs:
        background[i, j] = 0.0
    assert np.sqrt((background**2).mean()) > 0.05 and np.abs(background).max() < 0.8


def long_k_pair(xp, vectors: int):
    """Vectors longer than two INT32 blocks of level I; B's columns are noisy copies of A's."""
    k = 2 * int32_k_block(get_level("I")) + 1000
    rng = xp.random.default_rng(9)
    a = rng.standard_normal((k, vectors), dtype=xp.float32) + xp.float32(4.0)
    b = a[:, ::-1] + xp.float32(0.5) * rng.standard_normal((k, vectors), dtype=xp.float32)
    return a, xp.ascontiguousarray(b)


def test_long_k_beyond_one_int32_block(at_level) -> None:
    """The CPU path is exact for any k; the GPU one splits k (next test)."""
    a, b = long_k_pair(np, 3)
    c = at_level("I")(a, b)
    assert output_error(c, pearson(a, b)) < 1e-4
    assert np.diag(c[:, ::-1]).min() > 0.85


@pytest.mark.gpu
def test_long_k_on_the_gpu(sample, at_level) -> None:
    """On the GPU the INT8 sums are cut into INT32-safe k-blocks: same accuracy, same answer."""
    from mixpert.runtime import device

    cp = device.cupy_module()
    a, b = long_k_pair(cp, 3100)  # wide enough for the INT8 path under "auto" too
    for level in ("I", "IV"):
        c = at_level(level)(a, b)
        assert isinstance(c, cp.ndarray)
        ref = reference_outputs(sample.func.py_func, (a, b))
        assert output_error(c, ref) < {"I": 1e-4, "IV": 1e-5}[level]
        assert float(cp.diag(c[:, ::-1]).min()) > 0.85


def test_checks_pass_on_the_reference_and_catch_damage(sample, args) -> None:
    ref = pearson(*args)
    good = ref.astype(np.float32)
    assert all(c.ok for c in sample.checks(args, good, ref))
    i, j = 0, 11  # the first planted pair
    over = good.copy()
    over[3, 4] = 1.001
    weak = good.copy()
    weak[i, j] = 0.8
    swapped = good.copy()
    swapped[i, [j, 0]] = swapped[i, [0, j]]
    noisy = good.copy()
    noisy[5, 6] += 3e-4
    nan = good.copy()
    nan[1, 1] = np.nan
    for damaged, failing in [(over, 0), (weak, 1), (swapped, 2), (noisy, 3), (nan, 2)]:
        results = sample.checks(args, damaged, ref)
        assert not results[failing].ok, results[failing]

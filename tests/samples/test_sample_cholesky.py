"""samples/cholesky.py: the blocked factor is the Cholesky factor, to float32 accuracy."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::numba.NumbaPerformanceWarning")


def relative(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


def test_two_ops_panel_and_trailing_update(sample) -> None:
    assert len(sample.func.ops) == 2
    sources = " ".join(op.source for op in sample.func.ops.values())
    assert "inv(lkk)" in sources and "panel.T" in sources


def test_inputs_are_spd_float32(inputs) -> None:
    a, nb = inputs(96)
    assert a.dtype == np.float32 and a.shape == (96, 96) and nb == 12
    assert np.array_equal(a, a.T)
    assert np.linalg.eigvalsh(a.astype(np.float64)).min() >= 1.0 - 1e-5


def test_float64_run_is_numpy_cholesky(sample, inputs) -> None:
    a, nb = inputs(128)
    a64 = a.astype(np.float64)
    assert relative(sample.func.py_func(a64, nb), np.linalg.cholesky(a64)) < 1e-13


@pytest.mark.parametrize("level", ["fp32", "T6", "IV"])
@pytest.mark.parametrize(("n", "nb"), [(128, 16), (160, 32), (96, 96)])
def test_matches_numpy_cholesky_to_float32_accuracy(
    inputs, at_level, level: str, n: int, nb: int
) -> None:
    a, _ = inputs(n, seed=n)
    got = at_level(level)(a, nb)
    assert got.dtype == np.float32
    assert relative(got, np.linalg.cholesky(a.astype(np.float64))) < 1e-6
    assert np.array_equal(got, np.tril(got))
    assert (np.diagonal(got) > 0).all()


def test_checks_pass_at_a_float32_grade_level_and_fail_at_tf32(sample, inputs, at_level) -> None:
    a, nb = inputs(128)
    reference = sample.func.py_func(a.astype(np.float64), nb)
    good = sample.checks((a, nb), at_level("T6")(a, nb), reference)
    assert all(c.ok for c in good), good
    bad = sample.checks((a, nb), at_level("tf32")(a, nb), reference)
    assert not bad[0].ok, bad[0]


def test_checks_catch_a_factor_that_is_not_lower_or_not_positive(sample, inputs) -> None:
    a, nb = inputs(64)
    lo = np.linalg.cholesky(a.astype(np.float64)).astype(np.float32)
    assert all(c.ok for c in sample.checks((a, nb), lo, lo))
    upper = lo.copy()
    upper[0, 1] = 1e-3
    assert not sample.checks((a, nb), upper, lo)[1].ok
    flipped = lo.copy()
    flipped[:, 3] *= -1  # still L L^T = A, but not the Cholesky factor
    checks = sample.checks((a, nb), flipped, lo)
    assert checks[0].ok and not checks[2].ok


@pytest.mark.parametrize(("n", "nb"), [(100, 16), (64, 0), (64, 48)])
def test_block_size_that_does_not_divide_n_raises(sample, inputs, n: int, nb: int) -> None:
    a, _ = inputs(n)
    with pytest.raises(ValueError, match="nb must divide n"):
        sample.func(a, nb)
    with pytest.raises(ValueError, match="nb must divide n"):
        sample.func.py_func(a, nb)


def test_not_positive_definite_raises(inputs, at_level) -> None:
    a, nb = inputs(64)
    a[40, 40] = -1.0
    with pytest.raises(np.linalg.LinAlgError):
        at_level("fp32")(a, nb)

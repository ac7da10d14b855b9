"""Wide-range data: the componentwise bound |C - C64| <= 2 k u |A||B| (u = 2^-24) that cuBLAS
SGEMM and NumPy meet, on the data that defeated per-row scaling alone (issue "Numerical trust")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mixpert
from mixpert.runtime import LEVELS, cpu, equilibrate
from mixpert.testdata import gemmul8

U = 2.0**-24


def worst_ratio(a: np.ndarray, b: np.ndarray, level: str) -> float:
    """max over entries of |C - C64| / (2 k u (|A||B|)) (0/0 counts as 0)."""
    c = mixpert.matmul(a, b, level=level).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    err = np.abs(c - a64 @ b64)
    bound = 2 * a.shape[1] * U * (np.abs(a64) @ np.abs(b64))
    assert not (err[bound == 0] > 0).any()
    return float((err[bound > 0] / bound[bound > 0]).max(initial=0.0))


def cases(seed: int = 0, n: int = 256) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    outlier = rng.standard_normal((n, n)).astype(np.float32)
    outlier[7, 100] = 1e6  # an LLM-style outlier activation
    scale = np.exp2(rng.uniform(np.log2(1e-3), np.log2(1e3), n)).astype(np.float32)
    features = (rng.standard_normal((n, n)) * scale).astype(np.float32)  # unstandardised
    weights = (rng.standard_normal((n, 16)) / scale[:, None]).astype(np.float32)  # fitted
    column = rng.standard_normal((n, n)).astype(np.float32)
    column[:, 3] *= np.float32(1e6)
    return {
        "outlier-row": (outlier, rng.standard_normal((n, n)).astype(np.float32)),
        "raw-features": (features, weights),
        "outlier-column": (column, rng.standard_normal((n, n)).astype(np.float32)),
        "1e30": (np.array([[1e30, 1]], np.float32), np.array([[0], [1]], np.float32)),
        "phi=2": (gemmul8(np, rng, (n, n), 2.0), gemmul8(np, rng, (n, n), 2.0)),
    }


@pytest.mark.parametrize("level", ["IV", "V", "fp16", "auto"])
@pytest.mark.parametrize("case", ["outlier-row", "raw-features", "outlier-column", "1e30", "phi=2"])
def test_float32_grade_levels_meet_the_componentwise_bound(level: str, case: str) -> None:
    a, b = cases()[case]
    assert worst_ratio(a, b, level) <= 1.0


@pytest.mark.parametrize("level", ["IV", "V"])
@pytest.mark.parametrize("phi", [1.5, 2.0, 2.5, 3.0])
@pytest.mark.parametrize("shape", [(64, 64, 64), (200, 700, 30), (40, 1500, 90)])
def test_wider_spreads_and_other_shapes_meet_it(level: str, phi: float, shape) -> None:
    m, k, n = shape
    rng = np.random.default_rng([m, k, n, int(phi * 10)])
    a, b = gemmul8(np, rng, (m, k), phi), gemmul8(np, rng, (k, n), phi)
    assert worst_ratio(a, b, level) <= 1.0


def test_without_the_bypass_iv_misses_it_on_phi_2() -> None:
    """The bypass is what keeps the bound: the same slices without it miss it several times."""
    a, b = cases()["phi=2"]
    plain = dataclasses.replace(LEVELS["IV"], name="IV-plain", bypass_wide=False)
    c = cpu.product_at_level(a, b, plain).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = 2 * a.shape[1] * U * (np.abs(a64) @ np.abs(b64))
    assert (np.abs(c - a64 @ b64) / bound).max() > 2.0


@pytest.mark.parametrize("kind", ["normal", "phi=0.5", "phi=1"])
def test_narrow_data_bypass_no_line_at_long_k(kind: str) -> None:
    """No line of N(0,1), phi = 0.5 or phi = 1 data is unresolved at k = 8192: they never pay
    for the bypass."""
    rng = np.random.default_rng(11)
    shape = (48, 8192)
    if kind == "normal":
        a, b = (rng.standard_normal(s).astype(np.float32) for s in (shape, shape[::-1]))
    else:
        phi = float(kind.split("=")[1])
        a, b = gemmul8(np, rng, shape, phi), gemmul8(np, rng, shape[::-1], phi)
    for level in ("IV", "V"):
        assert cpu.unresolved_lines(a, b, LEVELS[level]) == (0, 0)


def test_an_outlier_row_is_recomputed_exactly() -> None:
    a, b = cases()["outlier-row"]
    rows, _ = cpu.unresolved_lines(a, b, LEVELS["IV"])
    assert rows >= 1
    c = mixpert.matmul(a, b, level="IV")
    exact = (a[7:8].astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(c[7], exact[0], rtol=2**-22)


def test_the_measured_before_cases_improved() -> None:
    """The issue's figures: 1.7e-2 (raw features, IV) and 0 for [[1e30, 1]] @ [[0], [1]] at V."""
    a, b = cases()["raw-features"]
    c = mixpert.matmul(a, b, level="IV").astype(np.float64)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 2e-6
    one = mixpert.matmul(*cases()["1e30"], level="V")
    assert one[0, 0] == 1.0


def test_narrow_data_moves_no_k_index() -> None:
    rng = np.random.default_rng(3)
    for phi in (0.0, 0.5, 1.0):
        a, b = gemmul8(np, rng, (512, 512), phi), gemmul8(np, rng, (512, 512), phi)
        assert (equilibrate.k_exponents(a, b) == 0).all(), phi


def test_inspection_reports_the_k_indices_rebalanced_and_the_exact_lines() -> None:
    a, b = cases()["raw-features"]

    def predict(x, w):
        return x @ w

    f = mixpert.jit(predict)
    f.plan = dict.fromkeys(f.ops, "IV")
    with mixpert.record() as calls:
        f(a, b)
    moved = int(np.count_nonzero(equilibrate.k_exponents(a, b)))
    assert moved > 0 and calls[0].rebalanced_k == moved
    row = mixpert.inspect(f, a, b).ops[0]
    assert row.ran_at.startswith(f"IV on cpu, {moved} k rebalanced")

    a, b = cases()["phi=2"]
    rows, cols = cpu.unresolved_lines(a, b, LEVELS["IV"])
    assert rows > 0 and cols > 0
    with mixpert.record() as calls:
        f(a, b)
    assert calls[0].exact_lines == (rows, cols)
    assert f"{rows} rows exact, {cols} columns exact" in mixpert.inspect(f, a, b).ops[0].ran_at

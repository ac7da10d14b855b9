"""Awkward inputs: NaN/Inf, zeros, subnormals, wide rows, empty and degenerate shapes, huge k."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import binade_rows, normal, oracle
from hypothesis import given
from hypothesis import strategies as st
from test_matmul_accuracy import ALL_LEVELS, INT8_LEVELS, combine_model, error_bound

import mixpert
from mixpert.runtime import LEVELS


def assert_within_bound(a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
    c = mixpert.matmul(a, b, level=name)
    assert c.dtype == np.float32 and c.shape == (a.shape[0], b.shape[1])
    err = np.abs(c.astype(np.float64) - oracle(a, b))
    bound = error_bound(a, b, LEVELS[name]) * (1 + 1e-9)
    assert (err <= bound).all(), f"{name}: max excess {np.max(err - bound):.3e}"
    return c


# ---- NaN and Inf -----------------------------------------------------------------------------


@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.tuples(st.integers(1, 7), st.integers(1, 9), st.integers(1, 7)),
    count=st.integers(1, 6),
    name=st.sampled_from(ALL_LEVELS),
)
def test_nonfinite_outputs_where_float32_puts_them(seed, shape, count, name) -> None:
    m, k, n = shape
    rng = np.random.default_rng(seed)
    a, b = normal(rng, (m, k)), normal(rng, (k, n))
    a[rng.random((m, k)) < 0.15] = 0.0  # zeros make Inf * 0 = NaN reachable
    b[rng.random((k, n)) < 0.15] = 0.0
    specials = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
    for _ in range(count):
        target = a if rng.random() < 0.5 else b
        i, j = rng.integers(target.shape[0]), rng.integers(target.shape[1])
        target[i, j] = specials[rng.integers(3)]
    with np.errstate(invalid="ignore"):
        want = a @ b
    c = mixpert.matmul(a, b, level=name)
    assert np.array_equal(np.isnan(c), np.isnan(want))
    assert np.array_equal(np.isposinf(c), np.isposinf(want))
    assert np.array_equal(np.isneginf(c), np.isneginf(want))
    # Entries no NaN/Inf reaches are emulated as if the non-finite entries were zeros (scales
    # and equilibration ignore them; BLAS results depend on the shape instead).
    rows = np.isfinite(a).all(axis=1)
    cols = np.isfinite(b).all(axis=0)
    assert np.isfinite(want[np.ix_(rows, cols)]).all()
    if LEVELS[name].kind == "int8":
        zeroed = (np.where(np.isfinite(x), x, np.float32(0)) for x in (a, b))
        clean = mixpert.matmul(*zeroed, level=name)
        assert np.array_equal(c[np.ix_(rows, cols)], clean[np.ix_(rows, cols)])


@pytest.mark.parametrize("name", ALL_LEVELS)
def test_nonfinite_signs(name: str) -> None:
    a = np.array([[np.inf, 1.0], [-np.inf, 2.0], [np.nan, 0.0], [1.0, 1.0]], dtype=np.float32)
    b = np.array([[1.0, -2.0, 0.0], [3.0, 4.0, np.inf]], dtype=np.float32)
    c = mixpert.matmul(a, b, level=name)
    with np.errstate(invalid="ignore"):
        want = a @ b
    assert np.array_equal(c, want, equal_nan=True)
    assert c[0, 0] == np.inf and c[0, 1] == -np.inf and np.isnan(c[0, 2])
    assert c[1, 0] == -np.inf and np.isnan(c[2]).all() and c[3, 2] == np.inf
    if LEVELS[name].emulated:  # one canonical quiet NaN, the same on every backend
        assert (c.view(np.uint32)[np.isnan(c)] == 0x7FC00000).all()


# ---- zeros, subnormals, wide rows -------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_LEVELS)
def test_zeros(name: str) -> None:
    rng = np.random.default_rng(3)
    a, b = normal(rng, (6, 5)), normal(rng, (5, 4))
    a[2] = 0.0
    b[:, 1] = 0.0
    c = mixpert.matmul(a, b, level=name)
    assert (c[2] == 0).all() and (c[:, 1] == 0).all()
    assert (mixpert.matmul(np.zeros((3, 5), np.float32), b, level=name) == 0).all()
    assert (mixpert.matmul(a, np.zeros((5, 2), np.float32), level=name) == 0).all()
    assert_within_bound(a, b, name)


@pytest.mark.parametrize("name", ALL_LEVELS)
def test_subnormals(name: str) -> None:
    rng = np.random.default_rng(4)
    tiny = np.float32(2.0**-140) * normal(rng, (5, 16))  # subnormal float32 entries
    assert (np.abs(tiny[tiny != 0]) < np.finfo(np.float32).tiny).all()
    b = normal(rng, (16, 3))
    c = assert_within_bound(tiny, b, name)
    if name != "tf32":  # TF32 keeps 10 bits: subnormals below 2^-137 round to zero
        assert np.count_nonzero(c) > 0  # subnormal results are not flushed to zero
    # Products that underflow float32 (2^-70 * 2^-70) but not float64.
    small_a = np.ldexp(normal(rng, (4, 8)), -70).astype(np.float32)
    small_b = np.ldexp(normal(rng, (8, 4)), -70).astype(np.float32)
    assert_within_bound(small_a, small_b, name)


@pytest.mark.parametrize("name", ALL_LEVELS)
def test_rows_spanning_many_binades(name: str) -> None:
    rng = np.random.default_rng(5)
    a = binade_rows(span=70)(rng, (12, 64))
    b = binade_rows(span=70)(rng, (64, 10))
    spread = np.log2(np.abs(a).max(axis=1) / np.abs(a).min(axis=1))
    assert (spread >= 60).all()
    assert_within_bound(a, b, name)
    # An entry 2^-60 below its row's maximum whose neighbour meets a zero row of B: the dead
    # k-index is dropped (equilibration), so every level returns the entry exactly.
    a2 = np.array([[1.0, 2.0**-60]], dtype=np.float32)
    b2 = np.array([[0.0], [1.0]], dtype=np.float32)
    assert mixpert.matmul(a2, b2, level=name)[0, 0] == np.float32(2.0**-60)


# ---- shapes: empty, k = 0, 1 x k x 1, k >= 2^17 -------------------------------------------


@pytest.mark.parametrize("name", ALL_LEVELS)
@pytest.mark.parametrize("shape", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0), (1, 0, 1)])
def test_empty_dimensions(name: str, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    c = mixpert.matmul(a, b, level=name)
    assert c.shape == (m, n) and c.dtype == np.float32
    assert (c == 0).all()


@pytest.mark.parametrize("name", ALL_LEVELS)
@pytest.mark.parametrize("k", [1, 2, 1000])
def test_vector_dot(name: str, k: int) -> None:
    rng = np.random.default_rng(k)
    a, b = normal(rng, (1, k)), normal(rng, (k, 1))
    assert_within_bound(a, b, name)


@pytest.mark.parametrize("name", ["I", "IV", "V"])
@pytest.mark.parametrize("shape", [(1, 131072, 1), (3, 140000, 2)])
def test_k_beyond_2_to_17(name: str, shape: tuple[int, int, int]) -> None:
    """k >= 2^17 (past one INT32 block of every level): bit-exact combine, within the bound."""
    m, k, n = shape
    rng = np.random.default_rng(k)
    a, b = normal(rng, (m, k)), np.abs(normal(rng, (k, n)))
    a = np.abs(a)  # all-positive: the sums are as large as they get, nothing cancels
    c = assert_within_bound(a, b, name)
    assert np.array_equal(c, combine_model(a, b, LEVELS[name]))
    c64 = oracle(a, b)
    assert np.max(np.abs(c - c64) / c64) < {"I": 1e-4, "IV": 3e-7, "V": 1e-7}[name]


@pytest.mark.parametrize("name", INT8_LEVELS)
def test_largest_float32_values_do_not_overflow_the_packer(name: str) -> None:
    big = np.finfo(np.float32).max
    a = np.array([[big, -big / 3]], dtype=np.float32)
    b = np.array([[2.0**-100], [2.0**-100]], dtype=np.float32)
    assert_within_bound(a, b, name)


# ---- the top of the range -----------------------------------------------------------------------

FLT_MAX = np.finfo(np.float32).max
NO_TF32 = [name for name in ALL_LEVELS if name != "tf32"]  # TF32 inputs round FLT_MAX to inf


@pytest.mark.parametrize("name", NO_TF32)
def test_finite_exact_results_near_flt_max_stay_finite(name: str) -> None:
    cases = [
        (np.array([[FLT_MAX]]), np.array([[1.0]]), FLT_MAX),
        (np.array([[-FLT_MAX]]), np.array([[1.0]]), -FLT_MAX),
        (np.array([[FLT_MAX / 2, FLT_MAX / 2]]), np.ones((2, 1)), FLT_MAX),
        (np.array([[FLT_MAX, 1.0]]), np.array([[1.0], [-1.0]]), FLT_MAX),
        (np.array([[3e38, 3e37]]), np.array([[1.0], [1.0]]), 3.3e38),
    ]
    for a, b, exact in cases:
        c = mixpert.matmul(a.astype(np.float32), b.astype(np.float32), level=name)
        assert np.isfinite(c).all(), (name, a, b, c)
        assert abs(float(c[0, 0]) - exact) <= max(2e-6, 2 * LEVELS[name].expected_error) * FLT_MAX


@pytest.mark.parametrize("name", ALL_LEVELS)
def test_true_overflows_still_give_inf(name: str) -> None:
    a = np.array([[-2e38, -3e38], [3e38, 3e38], [FLT_MAX, 0.0]], np.float32)
    b = np.array([[2.0], [2.0]], np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        c = mixpert.matmul(a, b, level=name)
    assert c[0, 0] == -np.inf and c[1, 0] == np.inf and c[2, 0] == np.inf


@pytest.mark.parametrize("name", NO_TF32)
def test_an_overflow_behind_a_larger_row_maximum_gives_inf(name: str) -> None:
    a = np.array([[1e38, 1e30]], np.float32)
    for b in (np.array([[0], [1e30]], np.float32), np.array([[1], [1e30]], np.float32)):
        with np.errstate(over="ignore", invalid="ignore"):
            assert mixpert.matmul(a, b, level=name)[0, 0] == np.inf

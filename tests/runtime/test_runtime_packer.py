"""Packer, ladder and combine-bound invariants, checked against the contract's definitions.

The reference definitions here are written out independently of ``runtime/packer.py``: slice 0
holds 7 fraction bits, every later slice 8 (widths 7, 8, 8, ...), the row scale is the smallest
2^e with max |x| < (127/128) 2^e, and s slices represent rint(x * 2^(P(s) - e)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mixpert.runtime import LADDER, LEVELS, combine, cpu, packer
from mixpert.runtime.levels import get_level

INT8_LEVELS = [lv for lv in LADDER if lv.kind == "int8"]
CONTRACT_BITS = {1: 7, 2: 15, 3: 23, 4: 31}  # P(s): widths 7, 8, 8, 8


def reference_scale(line: np.ndarray) -> int:
    """Smallest integer e with max |finite x| < (127/128) 2^e (0 for an all-zero line)."""
    finite = line[np.isfinite(line)]
    top = float(np.abs(finite).max()) if finite.size else 0.0
    if top == 0.0:
        return 0
    e = math.frexp(top)[1] - 2
    while not top < 127 / 128 * 2.0**e:
        e += 1
    assert not top < 127 / 128 * 2.0 ** (e - 1)
    return e


floats32 = st.floats(allow_nan=False, allow_infinity=False, width=32)  # subnormals included
matrices = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=12),
    elements=floats32,
)


@given(x=matrices)
def test_scale_exponents_match_the_definition(x: np.ndarray) -> None:
    rows = packer.scale_exponents(x, axis=1)
    cols = packer.scale_exponents(x, axis=0)
    assert rows.tolist() == [reference_scale(row) for row in x]
    assert cols.tolist() == [reference_scale(col) for col in x.T]


@pytest.mark.parametrize("slices", [1, 2, 3, 4])
@given(x=matrices)
def test_digits_in_range_and_reconstruct_rint_exactly(x: np.ndarray, slices: int) -> None:
    exponents = packer.scale_exponents(x, axis=1)
    digits = packer.slice_rows(x, exponents, slices)
    assert digits.shape == (slices, *x.shape) and digits.dtype == np.int8
    d = digits.astype(np.int64)
    assert np.abs(d[0]).max() <= 127  # slice 0 never reaches +-128
    assert d[1:].min(initial=0) >= -128 and d[1:].max(initial=0) <= 127
    bits = CONTRACT_BITS[slices]
    assert packer.fraction_bits(slices) == bits
    # sum_i d_i 2^-(7 + 8 i) * 2^e == rint(x * 2^(P - e)) * 2^(e - P), exactly (integers here).
    recon = sum(d[i] << (bits - 7 - 8 * i) for i in range(slices))
    scaled = np.ldexp(x.astype(np.float64), (bits - exponents.astype(np.int64))[:, None])
    assert np.array_equal(recon, np.rint(scaled).astype(np.int64))


def test_columns_pack_like_rows_of_the_transpose() -> None:
    rng = np.random.default_rng(1)
    b = (rng.standard_normal((9, 5)) * 2.0 ** rng.integers(-20, 20, (9, 5))).astype(np.float32)
    b = np.asfortranarray(b)
    col_exp = packer.scale_exponents(b, axis=0)
    got = packer.slice_columns(b, col_exp, 3)
    want = packer.slice_rows(np.ascontiguousarray(b.T), col_exp, 3)
    assert got.shape == (3, 5, 9)
    assert np.array_equal(got, want)


def test_first_digit_extremes() -> None:
    """Values just below the headroom limit round to 127, never 128, at every width."""
    top = np.float32(127 / 128 - 2**-24)  # largest float32 below 127/128
    x = np.array([[top, -top, 0.5, -0.5]], dtype=np.float32)
    exponents = packer.scale_exponents(x, axis=1)
    assert exponents.tolist() == [0]
    for slices in (1, 2, 3, 4):
        d0 = packer.slice_rows(x, exponents, slices)[0, 0]
        assert d0.tolist() == [127, -127, 64, -64]
    # 127/128 itself needs the next scale.
    assert packer.scale_exponents(np.array([[127 / 128]], dtype=np.float32), 1).tolist() == [1]


def test_nonfinite_entries_pack_as_zero() -> None:
    x = np.array([[np.nan, 1.0, np.inf, -np.inf, 0.25]], dtype=np.float32)
    exponents = packer.scale_exponents(x, axis=1)
    assert exponents.tolist() == [reference_scale(x[0])] == [1]
    digits = packer.slice_rows(x, exponents, 2)
    assert digits[:, 0, [0, 2, 3]].tolist() == [[0, 0, 0], [0, 0, 0]]


def test_digit_products_at_most_2_to_14() -> None:
    bounds = [packer.digit_bound(i) for i in range(4)]
    assert bounds == [127, 128, 128, 128]
    assert max(p * q for p in bounds for q in bounds) <= 2**14


@pytest.mark.parametrize("level", INT8_LEVELS, ids=lambda lv: lv.name)
def test_int32_blocks_never_overflow(level) -> None:
    worst = max(combine.group_bound(level, g) for g in level.groups)
    block = combine.int32_k_block(level)
    assert block * worst < 2**31  # the worst INT32 sum of one block fits
    assert (block + 1) * worst >= 2**31 - 1  # and the block is as long as it can be
    assert block >= 2**15  # k >= 2^17 really needs a split, but not a tiny one
    # The float64 blocks of the CPU backend keep every partial sum exact.
    assert combine.float64_k_block(level) * worst < 2**53
    # group_bound agrees with the digit bounds pair by pair.
    for g in level.groups:
        want = sum(
            (127 if i == 0 else 128) * (127 if j == 0 else 128)
            for i, j in level.pairs
            if i + j == g
        )
        assert combine.group_bound(level, g) == want


@pytest.mark.parametrize("k", [cpu.FLOAT32_K_BLOCK, cpu.FLOAT32_K_BLOCK + 1, 3000])
def test_the_cpu_class_sums_are_exact_at_the_largest_digits(k: int) -> None:
    """The CPU's class sums (each pair's k-block product in float32) equal integer arithmetic
    where every digit is at its bound (a whole block's sums near 2^24 in magnitude, odd ones
    included; k a whole block, one step past it, several) and on random digits, whatever
    k-block the caller asks."""
    level = get_level("V")
    rng = np.random.default_rng(k)
    for fill in ("bounds", "random"):
        shape_a, shape_b = (level.a_slices, 3, k), (level.b_slices, 2, k)
        if fill == "bounds":
            a = np.full(shape_a, -128, dtype=np.int8)
            b = np.full(shape_b, -128, dtype=np.int8)
            a[0], b[0] = 127, -127  # slice 0's digits reach 127
        else:
            a = rng.integers(-128, 128, shape_a).astype(np.int8)
            b = rng.integers(-128, 128, shape_b).astype(np.int8)
        want = {g: np.zeros((3, 2), dtype=np.int64) for g in level.groups}
        for i, j in level.pairs:
            want[i + j] += a[i].astype(np.int64) @ b[j].astype(np.int64).T
        for k_block in (None, 700):
            got = cpu.exact_class_sums(a, b, level, k_block)
            for g in level.groups:
                assert got[g].dtype == np.float64
                np.testing.assert_array_equal(got[g], want[g].astype(np.float64))


@pytest.mark.parametrize(
    ("name", "sa", "sb", "products"),
    [("I", 2, 2, 4), ("II", 2, 3, 6), ("III", 3, 2, 6), ("T6", 3, 3, 6), ("IV", 3, 3, 8),
     ("V", 4, 4, 10)],
)  # fmt: skip
def test_int8_levels_have_the_contract_shapes(name: str, sa: int, sb: int, products: int) -> None:
    level = get_level(name)
    assert (level.kind, level.a_slices, level.b_slices, level.products) == (
        "int8",
        sa,
        sb,
        products,
    )
    assert len(set(level.pairs)) == len(level.pairs)
    assert all(0 <= i < sa and 0 <= j < sb for i, j in level.pairs)
    weights = [i + j for i, j in level.pairs]
    assert weights == sorted(weights)  # listed by weight class g = i + j
    # Every pair (i, 0) and (0, j) is kept: the leading digits of each operand are all used.
    assert all((i, 0) in level.pairs for i in range(sa))
    assert all((0, j) in level.pairs for j in range(sb))


def test_mixpert_levels_are_full_triangles() -> None:
    assert LEVELS["IV"].pairs == tuple(
        (i, j) for g in range(4) for i in range(3) for j in range(3) if i + j == g
    )
    assert (2, 2) not in LEVELS["IV"].pairs
    assert {i + j for i, j in LEVELS["V"].pairs} == {0, 1, 2, 3}


def test_ladder_is_data_a_tuner_can_walk() -> None:
    names = [lv.name for lv in LADDER]
    assert names == [
        "tf32",
        "I",
        "II",
        "III",
        "T6",
        "IV",
        "V",
        "IV-blocks",
        "fp16",
        "fp32",
        "fp64",
        "fp32-ordered",
    ]
    assert len(set(names)) == len(names)
    for lv in LADDER:
        assert lv.relative_cost > 0 and lv.products >= 1 and lv.description
    emulated = [LEVELS[n] for n in ("I", "II", "IV", "V")]
    assert [lv.relative_cost for lv in emulated] == sorted(lv.relative_cost for lv in emulated)
    assert LEVELS["fp16"].products == 3


def test_combine_is_the_documented_formula() -> None:
    """acc = sum_g S_g 2^-(14 + 8 g), smallest weight first; C = fl32(acc * 2^(ea + eb))."""
    assert [packer.pair_exponent(g) for g in range(4)] == [14, 22, 30, 38]
    sums = {0: np.array([[3.0]]), 1: np.array([[-5.0]]), 3: np.array([[2.0**40 + 1]])}
    got = combine.combine(sums, np.array([2]), np.array([-3]))
    want = np.float32((3 * 2.0**-14 - 5 * 2.0**-22 + (2.0**40 + 1) * 2.0**-38) * 2.0**-1)
    assert got.dtype == np.float32 and got.tolist() == [[want]]

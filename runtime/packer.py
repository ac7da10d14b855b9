"""The data packer: power-of-two scales and signed INT8 slices (the numerics contract, CPU side).

For a row x of A (or a column of B) with largest finite magnitude m, the scale exponent is the
smallest e with m < (127/128) 2^e, so x * 2^-e lies in (-127/128, 127/128). With s slices the
scaled row is rounded once to P(s) = 7 + 8 (s - 1) fraction bits,

    X = rint(x * 2^(P(s) - e))                        (an exact integer, |X| < 127 * 256^(s-1))

and X is written as balanced base-256 digits from the bottom up:

    d_last = ((X + 128) mod 256) - 128,   X <- (X - d_last) / 256,   ...,   d_0 = what is left

so x ~= 2^e * sum_i d_i * 2^-(7 + 8 i). Slice 0 carries 7 bits and |d_0| <= 127: the 1/128 of
headroom in e is what keeps the carries of the lower digits from ever pushing it to 128. Later
slices use all 8 bits ([-128, 127]): the one rounding at the bottom already halved the residual.
Every digit product is at most 2^14 in magnitude. The representation is round-to-nearest at P(s)
bits, so each slice adds 8 bits (measured on the CPU at n = 1024, phi = 0.5, level IV: first slice
with 6 fraction bits 7.3e-7, with 7 bits 3.6e-7).

The CUDA backend reproduces these integers exactly: ``rint`` of an exactly scaled float32 value is
one correctly rounded operation on every IEEE machine.
"""

from __future__ import annotations

import numpy as np

FIRST_SLICE_BITS = 7  # fraction bits of slice 0 (the scale leaves 1/128 of headroom)
LATER_SLICE_BITS = 8  # later slices: full signed INT8 digits
HEADROOM_NUMERATOR, HEADROOM_DENOMINATOR = 127, 128
HEADROOM = HEADROOM_NUMERATOR / HEADROOM_DENOMINATOR  # scaled magnitudes stay below this
DIGIT_HALF = 1 << (LATER_SLICE_BITS - 1)  # 128: a later digit is ((X + 128) mod 256) - 128
DIGIT_MASK = (1 << LATER_SLICE_BITS) - 1  # 255
DIGIT_BOUND_FIRST = 127  # |d_0| <= 127
DIGIT_BOUND_LATER = DIGIT_HALF  # -128 <= d_i <= 127


def fraction_bits(slices: int) -> int:
    """P(s): fraction bits kept by ``slices`` slices."""
    return FIRST_SLICE_BITS + LATER_SLICE_BITS * (slices - 1)


def place_exponent(slice_index: int) -> int:
    """Digit ``slice_index`` is worth 2^-place_exponent(slice_index) of the scale 2^e."""
    return FIRST_SLICE_BITS + LATER_SLICE_BITS * slice_index


def pair_exponent(group: int) -> int:
    """A product of slices i and j with i + j = group is worth 2^-pair_exponent(group)."""
    return 2 * FIRST_SLICE_BITS + LATER_SLICE_BITS * group


def digit_bound(slice_index: int) -> int:
    return DIGIT_BOUND_FIRST if slice_index == 0 else DIGIT_BOUND_LATER


def finite_abs_max(x: np.ndarray, axis: int) -> np.ndarray:
    """Largest finite |x| along ``axis``, as float64 (0 where a line has none); the temporary
    keeps ``x``'s dtype (|x| is exact in it)."""
    if x.shape[axis] == 0:
        return np.zeros(np.delete(x.shape, axis), dtype=np.float64)
    magnitude = np.where(np.isfinite(x), np.abs(x), x.dtype.type(0))
    return magnitude.max(axis=axis).astype(np.float64)


def binade_exponents(x: np.ndarray, axis: int) -> np.ndarray:
    """Smallest e with max |finite x| < 2^e along ``axis`` (0 for an all-zero line)."""
    _, exponent = np.frexp(finite_abs_max(x, axis))  # max = f * 2^e with f in [0.5, 1)
    return exponent.astype(np.int32)


def scale_exponents(x: np.ndarray, axis: int) -> np.ndarray:
    """Smallest e with max |finite x| < (127/128) 2^e along ``axis``: the INT8 packer's scales."""
    top = finite_abs_max(x, axis)
    _, exponent = np.frexp(top)
    # top < 2^e already; it needs e + 1 only when it sits in the last 1/128 below 2^e.
    # Both sides of the test are exact in float64 (top has 24 significant bits).
    needs_more = top * HEADROOM_DENOMINATOR >= np.ldexp(float(HEADROOM_NUMERATOR), exponent)
    return (exponent + needs_more).astype(np.int32)


def slice_rows(x: np.ndarray, exponents: np.ndarray, slices: int) -> np.ndarray:
    """INT8 digits of each row of ``x`` (m, k) -> (slices, m, k), or of a stack (..., m, k) ->
    (slices, ..., m, k); non-finite entries pack as 0."""
    finite = np.where(np.isfinite(x), x, 0).astype(np.float64)
    shift = (fraction_bits(slices) - exponents.astype(np.int64))[..., None]
    rest = np.rint(np.ldexp(finite, shift)).astype(np.int64)
    digits = np.empty((slices, *x.shape), dtype=np.int8)
    for i in range(slices - 1, 0, -1):
        low = ((rest + DIGIT_HALF) & DIGIT_MASK) - DIGIT_HALF
        digits[i] = low
        rest = (rest - low) >> LATER_SLICE_BITS
    if rest.size and np.abs(rest).max() > DIGIT_BOUND_FIRST:
        raise AssertionError("packer invariant broken: leading digit outside [-127, 127]")
    digits[0] = rest
    return digits


def slice_columns(x: np.ndarray, exponents: np.ndarray, slices: int) -> np.ndarray:
    """INT8 digits of each column of ``x`` (k, n) -> (slices, n, k): the TN layout, k contiguous
    (stacks: (..., k, n) -> (slices, ..., n, k))."""
    return slice_rows(np.ascontiguousarray(np.swapaxes(x, -1, -2)), exponents, slices)

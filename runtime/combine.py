"""The combine formula and the accumulation bounds: what every backend reproduces bit for bit.

For an INT8 level, S_g is the exact integer sum over k of the digit products of weight class g
(all pairs (i, j) with i + j = g). The float32 result is

    acc = 0.0                                                  (float64)
    for g in groups, largest g first (smallest weight first):
        acc = acc + S_g * 2^-(14 + 8 g)                        (S_g * 2^-w is exact; one rounding)
    v = acc * 2^(ea[r] + eb[c])                                (exact scaling)
    C[r, c] = float32_rne(v), except that a v that would round to +-inf but lies within the
              level's error bound E = (k * slack) * 2^(ea[r] + eb[c]) of the finite range
              becomes +-FLT_MAX (``saturate``)

Saturation keeps a finite exact result finite: slicing rounds FLT_MAX's row up to 2^128 at
levels I-IV, yet the exact product FLT_MAX * 1 is finite. ``slack`` bounds a level's error per
k-step in units of the scale product (``overflow_slack``); a v beyond the finite range by more
than E overflows for certain and gives inf, as float32 does.

Because the S_g are exact and the steps are fixed IEEE float64 operations (an FMA computes the
same value since the product is exact), every backend gets the same bits.

INT32 safety: a tensor-core backend sums slice products into INT32. With digit bounds
|d_0| <= 127 and |d_i| <= 128, one k-step of weight class g adds at most ``group_bound(g)``; a
block of ``int32_k_block`` k-steps therefore never overflows, whichever pairs share the buffer.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from .levels import Level
from .packer import digit_bound, fraction_bits, pair_exponent

INT32_LIMIT = 2**31 - 1
FLOAT64_EXACT_LIMIT = 2**53
FLT_MAX = float(np.finfo(np.float32).max)
OVERFLOW_THRESHOLD = 2.0**128 - 2.0**103  # float32 rounds |v| >= this to inf


def group_bound(level: Level, group: int) -> int:
    """Largest |sum of the products of class ``group``| that one k-step can add."""
    return sum(digit_bound(i) * digit_bound(j) for i, j in level.pairs if i + j == group)


@functools.cache  # (the CUDA backend asks per GEMM: the sums cost microseconds)
def int32_k_block(level: Level) -> int:
    """Most k-steps one INT32 accumulator of any weight class of ``level`` can take."""
    return INT32_LIMIT // max(group_bound(level, g) for g in level.groups)


@functools.cache
def float64_k_block(level: Level) -> int:
    """Most k-steps whose class sums stay exactly representable in float64."""
    return (FLOAT64_EXACT_LIMIT - 1) // max(group_bound(level, g) for g in level.groups)


def overflow_slack(level: Level) -> float:
    """A bound on ``level``'s error per k-step in units of 2^(ea + eb): each operand rounded to
    its fraction bits (half a unit of the last place, on values below 1 in magnitude) and the
    largest digit products of the dropped pairs (|d| <= 128)."""
    if level.kind == "fp16":
        return 2.0**-21  # hi + lo keep 22 bits of each scaled value
    kept = set(level.pairs)
    dropped = [
        (i, j) for i in range(level.a_slices) for j in range(level.b_slices) if (i, j) not in kept
    ]
    rounding = 2.0 ** -(fraction_bits(level.a_slices) + 1) + 2.0 ** -(
        fraction_bits(level.b_slices) + 1
    )
    return 2 * rounding + sum(2.0 ** (14 - pair_exponent(i + j)) for i, j in dropped)


def saturate(v: np.ndarray, scale: np.ndarray, k_slack: float) -> np.ndarray:
    """float32(v), with +-FLT_MAX where |v| would overflow but lies within the error bound
    ``k_slack * 2^scale`` of the finite range (see the module docstring)."""
    with np.errstate(over="ignore"):
        out = v.astype(np.float32)
    near = np.abs(v) >= OVERFLOW_THRESHOLD
    if near.any():
        within = near & (np.abs(v) - np.ldexp(k_slack, scale) < OVERFLOW_THRESHOLD)
        out[within] = np.copysign(np.float32(FLT_MAX), v[within])
    return out


def combine(
    group_sums: Mapping[int, np.ndarray],
    row_exp: np.ndarray,
    col_exp: np.ndarray,
    k_slack: float = 0.0,
) -> np.ndarray:
    """The combine formula above on exact class sums (float64 arrays holding integers);
    ``k_slack`` = k * ``overflow_slack(level)``."""
    groups = sorted(group_sums, reverse=True)
    acc = np.zeros_like(group_sums[groups[0]], dtype=np.float64)
    for g in groups:
        acc = acc + np.ldexp(group_sums[g], -pair_exponent(g))
    scale = row_exp.astype(np.int32)[..., :, None] + col_exp.astype(np.int32)[..., None, :]
    return saturate(np.ldexp(acc, scale), scale, k_slack)

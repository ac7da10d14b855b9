"""The combine formula and the accumulation bounds: what every backend reproduces bit for bit.

For an INT8 level, S_g is the exact integer sum over k of the digit products of weight class g
(all pairs (i, j) with i + j = g). The float32 result is

    acc = 0.0                                                  (float64)
    for g in groups, largest g first (smallest weight first):
        acc = acc + S_g * 2^-(14 + 8 g)                        (S_g * 2^-w is exact; one rounding)
    C[r, c] = float32_rne(acc * 2^(ea[r] + eb[c]))             (exact scaling, one rounding)

Because the S_g are exact and the steps are fixed IEEE float64 operations (an FMA computes the
same value since the product is exact), every backend gets the same bits.

INT32 safety: a tensor-core backend sums slice products into INT32. With digit bounds
|d_0| <= 127 and |d_i| <= 128, one k-step of weight class g adds at most ``group_bound(g)``; a
block of ``int32_k_block`` k-steps therefore never overflows, whichever pairs share the buffer.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .levels import Level
from .packer import digit_bound, pair_exponent

INT32_LIMIT = 2**31 - 1
FLOAT64_EXACT_LIMIT = 2**53


def group_bound(level: Level, group: int) -> int:
    """Largest |sum of the products of class ``group``| that one k-step can add."""
    return sum(digit_bound(i) * digit_bound(j) for i, j in level.pairs if i + j == group)


def int32_k_block(level: Level) -> int:
    """Most k-steps one INT32 accumulator of any weight class of ``level`` can take."""
    return INT32_LIMIT // max(group_bound(level, g) for g in level.groups)


def float64_k_block(level: Level) -> int:
    """Most k-steps whose class sums stay exactly representable in float64."""
    return (FLOAT64_EXACT_LIMIT - 1) // max(group_bound(level, g) for g in level.groups)


def combine(
    group_sums: Mapping[int, np.ndarray], row_exp: np.ndarray, col_exp: np.ndarray
) -> np.ndarray:
    """The combine formula above on exact class sums (float64 arrays holding integers)."""
    groups = sorted(group_sums, reverse=True)
    acc = np.zeros_like(group_sums[groups[0]], dtype=np.float64)
    for g in groups:
        acc = acc + np.ldexp(group_sums[g], -pair_exponent(g))
    scale = row_exp.astype(np.int32)[:, None] + col_exp.astype(np.int32)[None, :]
    with np.errstate(over="ignore"):
        return np.ldexp(acc, scale).astype(np.float32)

"""The FP16 hi/lo split of LE-GEMM / SGEMM-cube, with power-of-two scaling.

Each row of A (column of B) is scaled by 2^(15 - e), e its finite-max exponent, so its largest
entry lies in [2^14, 2^15): hi = fp16(x) cannot overflow (fp16 max 65504) and the row keeps
fp16's full 30 binades of range below its maximum. lo = fp16((x - hi) * 2^11) holds the next 11
bits. The product is

    C ~= (hi_a @ hi_b + (hi_a @ lo_b + lo_a @ hi_b) * 2^-11) * 2^(ea + eb - 30)

three FP16 GEMMs summed termwise; lo @ lo (weight 2^-22) is dropped.
"""

from __future__ import annotations

import numpy as np

from .combine import saturate

ROW_TOP_EXPONENT = 15  # the scaled row maximum lies below 2^15
LO_SHIFT = 11  # lo carries the 11 bits after hi's
SCALE_BACK = 2 * ROW_TOP_EXPONENT


def split_rows(x: np.ndarray, exponents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) float16 parts of each row of ``x``; non-finite entries split as 0."""
    finite = np.where(np.isfinite(x), x, 0).astype(np.float64)
    scaled = np.ldexp(finite, (ROW_TOP_EXPONENT - exponents.astype(np.int32))[:, None])
    hi = scaled.astype(np.float16)
    lo = np.ldexp(scaled - hi.astype(np.float64), LO_SHIFT).astype(np.float16)
    return hi, lo


def combine_parts(
    hh: np.ndarray,
    hl_plus_lh: np.ndarray,
    row_exp: np.ndarray,
    col_exp: np.ndarray,
    k_slack: float = 0.0,
) -> np.ndarray:
    """float32 result from the hi@hi product and the sum of the two cross products (with
    ``combine.saturate``'s rule at the top of the range)."""
    acc = hh.astype(np.float64) + np.ldexp(hl_plus_lh.astype(np.float64), -LO_SHIFT)
    scale = row_exp.astype(np.int32)[:, None] + col_exp.astype(np.int32)[None, :]
    return saturate(np.ldexp(acc, scale - SCALE_BACK), scale, k_slack)

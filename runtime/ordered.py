"""Level fp32-ordered: float32 arithmetic in one fixed order, so every backend gives the same bits.

Each output entry is computed as the GPU's kernels for this level compute it
(``cuda.fp32_ordered``: the tile kernel ``ordered_product``, the small-stack ``ordered_stack``,
the pairs ``ordered_pairs``, the tall ``ordered_rows``, the thin ``ordered_thin`` and the
split-k ``ordered_segments`` and ``ordered_chunks``): k runs in chunks of ``CHUNK``; inside a
chunk the products are accumulated by IEEE float32 fused multiply-adds in k order, starting
from +0 (subnormals kept, no flush); each chunk's float32 sum is added, in chunk order, into a
float64 segment total (segments of ``SEGMENT`` k-steps), and the segment totals are added, in
order, into a float64 total, which is rounded once to float32 (NaN canonical). Segments let a
long k be split across thread blocks (split-k) with the same bits as one thread walking it; for
k <= SEGMENT the total is the one segment's. Error: each chunk rounds like a float32 dot
product of at most CHUNK terms, so |C - C64| <= (min(k, CHUNK) + 1) u |A||B| plus the final
rounding, u = 2^-24: within SGEMM's 2 k u |A||B| for every k, and far below it for long k.

This module is the CPU model of that arithmetic: ``fma32`` rounds a float64-exact product plus a
float32 accumulator once to float32, exactly as a hardware FMA does (a float64 sum followed by a
rounding to float32 could round twice).
"""

from __future__ import annotations

import numpy as np

CHUNK = 32  # k-steps summed in float32 before the float64 total takes them
SEGMENT = 512  # k-steps whose chunk sums make one float64 segment total (a multiple of CHUNK)


# A float64 keeps 29 fraction bits below a normal float32's last one: a float64 that lies
# exactly on a float32 midpoint has them 1000...0.
_BELOW_FLOAT32 = np.uint64((1 << 29) - 1)
_MIDPOINT_BITS = np.uint64(1 << 28)
_SMALLEST_NORMAL = 2.0**-126


def fma32(product: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """float32(product + acc) rounded once (round to nearest even), ``product`` the exact
    float64 product of two float32 values, ``acc`` float32: IEEE fmaf.

    s = product + acc rounds in float64; rounding s to float32 gives the right answer except
    where s landed exactly on a float32 midpoint while the exact sum lies beyond it. (float32
    midpoints are float64 numbers, so a sum that is not on one rounds to the same side in both
    precisions.) Only entries on a midpoint, or in float32's subnormal range (whose midpoints
    sit elsewhere), take the exact path, ``_on_midpoints``.
    """
    acc64 = acc.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = product + acc64
        rounded = s.astype(np.float32)
        suspect = (s.view(np.uint64) & _BELOW_FLOAT32) == _MIDPOINT_BITS
        suspect |= (np.abs(s) < _SMALLEST_NORMAL) & (s != 0)
        if suspect.any():
            rounded[suspect] = _on_midpoints(product[suspect], acc64[suspect], s[suspect])
    return rounded


def _on_midpoints(product: np.ndarray, acc64: np.ndarray, s: np.ndarray) -> np.ndarray:
    """fma32 where s = product + acc64 (float64) may sit on a float32 midpoint: (s, e) with
    s + e exact is Knuth's TwoSum; when s is a midpoint and e points past it (the same sign as
    s - float32(s)), the other neighbour is the correctly rounded result."""
    rounded = s.astype(np.float32)
    virtual = s - acc64
    e = (product - virtual) + (acc64 - (s - virtual))
    r64 = rounded.astype(np.float64)
    d = s - r64  # exact: s is within half a float32 step of its rounding
    other = np.nextafter(rounded, np.where(d > 0, np.float32(np.inf), np.float32(-np.inf)))
    midpoint = np.isfinite(s) & np.isfinite(rounded) & (d != 0)
    midpoint &= 2 * d == other.astype(np.float64) - r64
    beyond = midpoint & (e != 0) & ((e > 0) == (d > 0))
    return np.where(beyond, other, rounded)


def ordered_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in level fp32-ordered's arithmetic (module docstring); stacks (..., m, k) @
    (..., k, n) broadcast as np.matmul."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[-1]
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    acc = np.zeros(shape, dtype=np.float32)
    segment = np.zeros(shape, dtype=np.float64)
    total = np.zeros(shape, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for q in range(k):
            acc = fma32(a64[..., :, q, None] * b64[..., None, q, :], acc)
            if q % CHUNK == CHUNK - 1 or q == k - 1:
                segment += acc.astype(np.float64)
                acc = np.zeros(shape, dtype=np.float32)
            if q % SEGMENT == SEGMENT - 1 or q == k - 1:
                total += segment
                segment = np.zeros(shape, dtype=np.float64)
        return np.where(np.isnan(total), np.float32(np.nan), total.astype(np.float32))

"""Lines that bypass emulation: recomputed exactly from the original values instead.

Two kinds of rows of A and columns of B bypass the slices:

* **Non-finite lines**, holding a NaN or Inf. The packers treat such entries as 0; the output
  row (column) is recomputed. Such an output entry always contains an Inf or NaN term, so its
  value (NaN, +Inf or -Inf) is the one float32 gives unless finite products overflow on the way
  (float32 [[inf, 1e30]] @ [[1], [-1e30]] is NaN, mixpert's inf; [[1e30, -1e30]] @ [[1e10],
  [1e10]] is NaN in float32 and the exact 0 in mixpert). NaNs are written as the canonical quiet
  NaN (0x7FC00000): payloads and signs differ between CPUs and GPUs.
* **Unresolved lines** (levels with ``Level.bypass_wide``: IV, V, and IV-blocks, whose entries
  are measured against their own block's scale, ``blocks``). A line's INT8 digits keep
  ``P`` fraction bits of its scale 2^e (``packer.fraction_bits``), so an entry d binades below
  the scale keeps a relative precision of about 2^(d - P): when its partner entry dominates a
  product, the componentwise bound 2 k u |A||B| (u = 2^-24) that SGEMM meets needs
  d <= P - 24 + log2(k). A line is unresolved when more than 1/``DEEP_FRACTION`` of its k
  entries are non-zero and lie deeper than ``deep_binades`` = P - 24 + ceil(log2 k) +
  ``MARGIN_BINADES`` (the one outlier in a row of N(0,1), or the per-entry spread of phi >= 1.5
  data). Measured on the CPU (phi in 1..3, n in 64..1024): worst |C - C64| / bound 0.10 at IV,
  0.19 at V with these lines bypassed (5.0 and 2.8 without); no line of N(0,1), phi = 0.5 or
  phi = 1 data at k = 8192 is unresolved, so narrow data never pay.

A bypassed output entry is the float64 sum of the exact products a_iq b_qj (float32 x float32
is exact in float64) added in q order, rounded once: every backend adds in this order, so the
bits agree. Its error is below (u + k 2^-53) |A||B|, inside SGEMM's bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MARGIN_BINADES = 3
DEEP_FRACTION = 32  # a line with more than k / 32 deep entries is unresolved
NO_BYPASS = int(np.iinfo(np.int32).min)  # deep_binades of a level that bypasses no line


def exact_share(rows: int, cols: int, m: int, n: int) -> float:
    """Share of an m x n product's entries in ``rows`` rows and ``cols`` columns."""
    return (rows * n + cols * m - rows * cols) / (m * n) if m and n else 0.0


def deep_binades(fraction_bits: int, k: int) -> int:
    """Entries more than this many binades below their line's scale are "deep"."""
    return fraction_bits - 24 + (k - 1).bit_length() + MARGIN_BINADES


def unresolved(lines: np.ndarray, exponents: np.ndarray, fraction_bits: int, k: int) -> np.ndarray:
    """Which rows of ``lines`` (rebalanced, float64, each of length k) are unresolved, given
    their scale exponents."""
    return deep_counts(lines, exponents, fraction_bits, k) * DEEP_FRACTION > k


def deep_counts(lines: np.ndarray, exponents: np.ndarray, fraction_bits: int, k: int) -> np.ndarray:
    """Deep entries of each row of ``lines`` (float64, finite) in a product of this k, given the
    scale exponents that cover them: |x| < 2^(e - deep - 1) is more than ``deep`` binades down."""
    depth = deep_binades(fraction_bits, k)
    threshold = np.ldexp(1.0, exponents.astype(np.int64) - depth - 1)[..., None]
    return np.count_nonzero((lines != 0) & (np.abs(lines) < threshold), axis=-1)


def nonfinite_masks(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """Which rows of ``a`` and columns of ``b`` hold a NaN or Inf (stacks: per pair)."""
    return ~xp.isfinite(a).all(axis=-1), ~xp.isfinite(b).all(axis=-2)


def nonfinite_lines(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """Indices of the rows of ``a`` and the columns of ``b`` holding a NaN or Inf."""
    rows, cols = nonfinite_masks(xp, a, b)
    return xp.flatnonzero(rows), xp.flatnonzero(cols)


def recompute_lines(c: np.ndarray, a: np.ndarray, b: np.ndarray, rows: Any, cols: Any) -> None:
    """Overwrite the ``rows`` and ``cols`` of ``c`` with the in-order float64 sums of exact
    products (the CUDA combine kernel's loop), rounded once; NaN canonical."""
    if len(rows):
        c[rows, :] = in_order(a[rows, :], b)
    if len(cols):
        c[:, cols] = in_order(a, b[:, cols])


def in_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b as float64 sums of the exact products taken in k order, rounded once to float32,
    NaN canonical: a bypassed line's entries. Stacks (..., m, k) @ (..., k, n) broadcast as
    np.matmul."""
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    total = np.zeros(shape, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for q in range(a.shape[-1]):  # q order: each step rounds once, as the GPU's loop
            total += a64[..., :, q, None] * b64[..., None, q, :]
        return np.where(np.isnan(total), np.float32(np.nan), total.astype(np.float32))

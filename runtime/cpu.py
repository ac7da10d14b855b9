"""The exact CPU backend: the oracle every other backend is checked against.

INT8 slice products are computed exactly with float64 BLAS on integer-valued blocks: every digit
product is an integer of at most 2^14, and k is cut into blocks short enough (``float64_k_block``)
that every partial sum stays below 2^53, so no operation in any summation order rounds. The exact
class sums then go through ``combine.combine``.
"""

from __future__ import annotations

import numpy as np

from . import fp16split, packer
from .combine import combine, float64_k_block
from .levels import Level

TF32_DROPPED_BITS = 13  # float32 keeps 23 mantissa bits, TF32 10


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (10-bit mantissa), nearest-even; NaN/Inf unchanged."""
    bits = x.view(np.uint32)
    keep_odd = (bits >> TF32_DROPPED_BITS) & 1
    half = np.uint32((1 << (TF32_DROPPED_BITS - 1)) - 1)
    rounded = (bits + half + keep_odd) & np.uint32(~((1 << TF32_DROPPED_BITS) - 1) & 0xFFFFFFFF)
    return np.where(np.isfinite(x), rounded.view(np.float32), x)


def exact_class_sums(
    a_digits: np.ndarray, b_digits: np.ndarray, level: Level
) -> dict[int, np.ndarray]:
    """S_g for each weight class g: exact integer sums (as float64) of a_i @ b_j^T, i + j = g."""
    _, m, k = a_digits.shape
    n = b_digits.shape[1]
    block = float64_k_block(level)
    sums = {g: np.zeros((m, n), dtype=np.float64) for g in level.groups}
    for start in range(0, k, block):
        stop = min(start + block, k)
        a_f64 = a_digits[:, :, start:stop].astype(np.float64)
        b_f64 = b_digits[:, :, start:stop].astype(np.float64)
        for i, j in level.pairs:
            sums[i + j] += a_f64[i] @ b_f64[j].T  # exact: integers below 2^53 throughout
    return sums


def int8_product(a: np.ndarray, b: np.ndarray, level: Level) -> np.ndarray:
    row_exp = packer.scale_exponents(a, axis=1)
    col_exp = packer.scale_exponents(b, axis=0)
    a_digits = packer.slice_rows(a, row_exp, level.a_slices)
    b_digits = packer.slice_columns(b, col_exp, level.b_slices)
    return combine(exact_class_sums(a_digits, b_digits, level), row_exp, col_exp)


def fp16_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The FP16 path with exact FP16 operands and float64 accumulation (GPUs accumulate in FP32)."""
    row_exp = packer.binade_exponents(a, axis=1)
    col_exp = packer.binade_exponents(b, axis=0)
    a_hi, a_lo = fp16split.split_rows(a, row_exp)
    b_hi, b_lo = fp16split.split_rows(np.ascontiguousarray(b.T), col_exp)
    a_hi, a_lo, b_hi, b_lo = (p.astype(np.float64) for p in (a_hi, a_lo, b_hi, b_lo))
    hh = a_hi @ b_hi.T
    cross = a_hi @ b_lo.T + a_lo @ b_hi.T
    return fp16split.combine_parts(hh, cross, row_exp, col_exp)


def product(a: np.ndarray, b: np.ndarray, level: Level) -> np.ndarray:
    """a @ b at ``level`` for float32 matrices with finite entries (non-finite ones pack as 0)."""
    if level.kind == "int8":
        return int8_product(a, b, level)
    if level.kind == "fp16":
        return fp16_product(a, b)
    if level.name == "fp32":
        return np.matmul(a, b)
    if level.name == "tf32":
        return np.matmul(round_to_tf32(a), round_to_tf32(b))
    if level.name == "fp64":
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    raise ValueError(f"level {level.name!r} has no CPU implementation")

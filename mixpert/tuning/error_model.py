"""What the tuner trusts: each op's own error, a data-independent model of each level's error on
that op, and the margin a plan needs so that it holds on inputs the tuner never saw.

**Own error** ``own_error(samples)``: MixPert Eq. 10 of the op's output against the float64
product of the *same* float32 operands, over the ``ProductSample``s its calls kept in one
profiling run. Unlike the function's error it cannot hide behind a discrete step (an argmin
that happened not to flip) or behind later code that discards the product.

**Model** ``model_error(samples, level)``: the level's Eq. 10 error on *generic* operands of the
op's size and magnitudes: the sampled rows of A and columns of B with their signs, zeros and
magnitudes kept and their low-order bits made random (each entry times 2^u, u uniform in
[-1/2, 1/2], rounded to float32), multiplied at ``level`` on the exact CPU backend (an INT8
level's on the GPU where there is one: its bits are the same) and measured against float64. It
depends on k, on the operands' magnitudes (how their entries spread below each line's top, which
sets what the INT8 slices keep) and on the level's bits, and not on whether the tuning data
happen to be exact in a lower level (integers, constants, small dyadic values).

**Margin** ``margin_for(outputs, reference)``: the function's error on another input of the
same size spreads around the error measured on this one. The outputs are cut into blocks of
consecutive entries and their error re-estimated over blocks drawn with replacement (a
bootstrap); with ``cv`` the spread of those estimates relative to their mean (at least
``CV_FLOOR``; ``CV_UNSEEN`` where the outputs have too few entries to cut), a plan's measured
error must stay within ``tol / (1 + Z * cv)``. Large outputs of many independent entries
(a GEMM's) get a margin near 1; small or scalar outputs get ``1 / (1 + Z * CV_UNSEEN)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..execution.product_samples import ProductSample, squared_error
from ..metrics import float_leaves, ratio_of_sums
from ..runtime import cpu, device
from ..runtime.levels import NATIVE_LEVEL, Level, get_level

FLOAT32_GRADE = "float32 in k order"  # model_error's name for SGEMM's reference product
MODEL_ENTRIES = 4096  # output entries the model averages over: more twins for small samples
MAX_TWINS = 16
MODEL_SEED = 0x5EED  # the model is deterministic: the same samples give the same figure
# Levels that are "auto" resolve per shape to one of these (both float32-grade): the model
# takes the worse.
AUTO_STANDS_FOR = (NATIVE_LEVEL, "IV")

BLOCKS = 64  # blocks of consecutive output entries the bootstrap draws from
MIN_BLOCKS = 8  # fewer entries than this: the spread is unseen
RESAMPLES = 200
Z = 2.0  # the error may sit this many spreads above the measured one
CV_FLOOR = 0.05  # blocks of one input share its conditioning: never trust a tighter spread
CV_UNSEEN = 0.5  # outputs too small to cut: assume errors vary by half between inputs


def generic_twin(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x`` with its signs, zeros, non-finite entries and magnitudes (within a factor of
    sqrt 2) kept and its low-order bits random: what "data of this size and magnitude" means."""
    factor = np.exp2(rng.uniform(-0.5, 0.5, size=x.shape))
    twin = (x.astype(np.float64) * factor).astype(np.float32)
    return np.where(np.isfinite(x), twin, x)


def own_error(samples: Sequence[ProductSample]) -> float:
    """Eq. 10 of an op's sampled outputs against float64 (0 where there is nothing to measure)."""
    num = den = 0.0
    for sample in samples:
        d, r = sample.squared_error()
        num, den = num + d, den + r
    return ratio_of_sums(num, den)


def model_error(samples: Sequence[ProductSample], level: str | Level) -> float:
    """``level``'s Eq. 10 error on generic twins of the sampled operands (see the module
    docstring); 0 where the samples hold no product. ``FLOAT32_GRADE`` names a float32 GEMM
    that sums each entry's products in k order."""
    if level == FLOAT32_GRADE:
        return _modelled(samples, _in_order_float32)
    level = get_level(level)
    if level.kind == "policy":
        return max(model_error(samples, name) for name in AUTO_STANDS_FOR)
    return _modelled(samples, level_product(level, device.gpu_available()))


def level_product(level: Level, gpu: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``level``'s product of two host matrices for the model: on the GPU where ``gpu`` and the
    level is INT8-sliced (the CUDA backend's bits are the exact CPU backend's; a twin of a
    long-k product costs the CPU seconds a level, the GPU milliseconds), else the exact CPU
    backend."""
    if gpu and level.kind == "int8":
        from ..runtime.cuda import backend

        return lambda a, b: backend.product_at_level(a, b, level)
    return lambda a, b: cpu.product_at_level(a, b, level)


def _in_order_float32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 products summed in k order in float32 (``cumsum`` is sequential; BLAS's blocked
    and pairwise sums err less than SGEMM's bound allows)."""
    columns = [np.cumsum(a * b[:, j], axis=1, dtype=np.float32)[:, -1] for j in range(b.shape[1])]
    return np.stack(columns, axis=1)


def _modelled(
    samples: Sequence[ProductSample], product: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> float:
    """Eq. 10 of ``product`` on generic twins of the samples' operands against float64."""
    rng = np.random.default_rng(MODEL_SEED)
    num = den = 0.0
    for sample in samples:
        r, _, c = sample.shape
        for _ in range(min(MAX_TWINS, -(-MODEL_ENTRIES // (r * c)))):
            a, b = generic_twin(sample.a_rows, rng), generic_twin(sample.b_cols, rng)
            want = a.astype(np.float64) @ b.astype(np.float64)
            d, w = squared_error(product(a, b), want)
            num, den = num + d, den + w
    return ratio_of_sums(num, den)


# --- the margin -------------------------------------------------------------------------------
def error_spread(outputs: Any, reference: Any) -> float:
    """The bootstrap spread (coefficient of variation) of the outputs' Eq. 10 error over blocks
    of consecutive entries; ``CV_UNSEEN`` when they are too small to cut into ``MIN_BLOCKS``."""
    pairs = list(zip(float_leaves(outputs), float_leaves(reference), strict=False))
    if sum(int(want.size) for _, want in pairs) < MIN_BLOCKS:
        return CV_UNSEEN
    sums = [_block_sums(got, want) for got, want in pairs if want.size]
    num = np.concatenate([d for d, _ in sums])
    den = np.concatenate([r for _, r in sums])
    if not np.isfinite(num).all() or num.sum() == 0 or den.sum() == 0:
        return CV_FLOOR
    draws = np.random.default_rng(MODEL_SEED).integers(0, num.size, size=(RESAMPLES, num.size))
    estimates = np.sqrt(num[draws].sum(axis=1) / np.maximum(den[draws].sum(axis=1), 1e-300))
    return max(CV_FLOOR, float(estimates.std() / estimates.mean()))


def _block_sums(got: Any, want: Any) -> tuple[np.ndarray, np.ndarray]:
    """(sum of squared differences, sum of squared references) over ``BLOCKS`` runs of
    consecutive entries, computed on the arrays' own device (only the sums come back)."""
    if got.size != want.size:  # an output of another shape: no error to spread
        return np.full(1, np.inf), np.ones(1)
    xp = device.array_module(want)
    want = xp.asarray(want, dtype=xp.float64).ravel()
    got = xp.asarray(got, dtype=xp.float64).ravel()
    finite = xp.isfinite(want)
    diff = xp.where(finite, got - want, 0.0)
    want = xp.where(finite, want, 0.0)
    blocks = min(BLOCKS, int(want.size))
    pad = -int(want.size) % blocks
    diff, want = (xp.concatenate([x, xp.zeros(pad)]).reshape(blocks, -1) for x in (diff, want))
    return device.to_host((diff * diff).sum(axis=1)), device.to_host((want * want).sum(axis=1))


def margin_for(spread: float) -> float:
    """The share of tol a measured error may use when its spread between inputs is ``spread``."""
    return 1.0 / (1.0 + Z * spread)


__all__ = [
    "error_spread",
    "generic_twin",
    "margin_for",
    "model_error",
    "own_error",
]

"""What the tuner was given: its inputs in words, and whether they can be trusted.

Smoke-test data (``np.arange(12) * 0.5 - 1``, small integers, ones, zeros, a tiny range) are
exact, or nearly, in every level: a plan tuned on them would lower every op as far as it goes
and then err 30x tol on the first real input. ``degenerate_reason`` says why an input is such
data; the tuner then rests the plan on its error model alone and marks it provisional, and a
``tol=`` function tunes again on its next call whose inputs are not degenerate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..plans.plan import signature_of
from ..runtime import device
from .copies import is_float_array

SHORT_BITS = 11  # significand bits of TF32, the narrowest level: values this short are exact
TINY = 2.0**-100  # a range this far below 1 sits near float32's subnormals
MIN_ENTRIES = 4  # smaller arrays (a scalar in a 1 x 1 array) say too little
MIN_ROWS = 8  # fewer rows than this are no sample to resample


def array_degenerate(x: Any) -> str | None:
    """Why the float array ``x`` is degenerate tuning data, or None."""
    values = device.to_host(x).astype(np.float64, copy=False).ravel()
    values = values[np.isfinite(values)]
    if values.size < MIN_ENTRIES:
        return None
    magnitude = np.abs(values)
    if not magnitude.any():
        return "is all zeros"
    if (values == values[0]).all():
        return f"is constant ({values[0]:g})"
    if (values == np.round(values)).all():
        return "holds only integers"
    significand, _ = np.frexp(values)
    scaled = significand * 2.0**SHORT_BITS
    if (scaled == np.round(scaled)).all():
        return f"holds only values of at most {SHORT_BITS} significant bits (exact in every level)"
    if magnitude.max() < TINY:
        return f"lies below 2^{int(np.log2(TINY))} (subnormal or tiny range)"
    return None


def degenerate_reason(args: Sequence[Any]) -> str:
    """Why ``args`` are degenerate tuning data: every float array argument of at least
    ``MIN_ENTRIES`` entries is all zeros, constant, integer, short-significand or tiny, each
    named ("" when one of them holds real data)."""
    sizable = [(i, a) for i, a in enumerate(args) if is_float_array(a) and a.size >= MIN_ENTRIES]
    reasons = [(i, array_degenerate(a)) for i, a in sizable]
    if not reasons or not all(why for _, why in reasons):
        return ""  # an argument of real data: the model and the own errors see through the rest
    return "; ".join(f"argument {i} {why}" for i, why in reasons)


def resampled(args: Sequence[Any], rng: np.random.Generator) -> tuple[Any, ...]:
    """Another input of the same kind, drawn from the rows of ``args``.

    Arguments are grouped by their leading size n (float arrays of at least ``MIN_ROWS``
    rows), and every argument of a group gets the same row map, so related arguments stay
    related (points and their weights, a matrix and its right-hand sides). Where the group
    holds symmetric matrices, the map is a signed permutation applied to their rows and
    columns (``D P A P^T D``: the same spectrum and definiteness) and to the rows of the others
    (``D P b``); a group with a square matrix that is not symmetric (a system matrix, centroids
    as many as features) is kept as it is; elsewhere rows are drawn with replacement (a
    bootstrap of the samples a data matrix holds). Other arguments are kept.
    The tuner holds a plan within tol on a few of these, so one input's luck does not set it.
    """
    groups: dict[int, list[int]] = {}
    for i, a in enumerate(args):
        if is_float_array(a) and a.ndim in (1, 2) and a.shape[0] >= MIN_ROWS:
            groups.setdefault(a.shape[0], []).append(i)
    out = list(args)
    for n, members in groups.items():
        square = [i for i in members if args[i].ndim == 2 and args[i].shape[1] == n]
        symmetric = [i for i in square if _symmetric(args[i])]
        if square and len(symmetric) < len(square):
            continue  # a square matrix that is no symmetric operator: rows are not samples
        rows = rng.permutation(n) if square else rng.integers(0, n, size=n)
        signs = rng.choice([-1.0, 1.0], size=n) if square else np.ones(n)
        for i in members:
            out[i] = _mapped(args[i], rows, signs, both_sides=i in symmetric)
    return tuple(out)


def _symmetric(a: Any) -> bool:
    return bool(device.array_module(a).array_equal(a, a.T))


def _mapped(a: Any, rows: np.ndarray, signs: np.ndarray, both_sides: bool) -> Any:
    """``a`` with rows ``rows`` each times ``signs`` (and its columns alike when ``both_sides``)."""
    xp = device.array_module(a)
    index, sign = xp.asarray(rows), xp.asarray(signs.astype(a.dtype))
    shape = (-1,) + (1,) * (a.ndim - 1)
    mapped = a[index] * sign.reshape(shape)
    if both_sides:
        mapped = mapped[:, index] * sign.reshape(1, -1)
    return mapped


def describe(args: Sequence[Any]) -> str:
    """The inputs in words, e.g. "1 input: float32[64x256], float32[256x128], float"."""
    return "1 input: " + ", ".join(signature_of(args))

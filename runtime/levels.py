"""The level ladder: every way mixpert can compute a float32 product, as data a tuner can walk.

An INT8 level cuts each row of A into ``a_slices`` signed INT8 digits and each column of B into
``b_slices`` (see ``packer``), and sums the slice products ``pairs`` = ((i, j), ...). MixPert's
configurations (l, r) = (sa - 1, sb - 1) are levels I-IV; V adds a fourth slice; T6 keeps IV's
slices but only the pairs with i + j <= 2 (6 products, ~1e-6: far better than II/III at equal
cost).

``relative_cost`` is the time of a call in units of one INT8 GEMM of the same shape, from the
H200 ceilings in ``shared/reference/baselines-h200.md`` (INT8 ~1300 TOPS, FP16 ~680, TF32 ~380,
FP32 ~51, FP64 ~55), plus one unit for packing and the combine on the emulated levels. The tuner
only compares costs, so one consistent unit is all it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["int8", "fp16", "native"]


def triangle(a_slices: int, b_slices: int, max_sum: int) -> tuple[tuple[int, int], ...]:
    """Slice pairs (i, j) with i + j <= max_sum, ordered by weight (i + j), then i."""
    return tuple(
        (i, j)
        for g in range(max_sum + 1)
        for i in range(a_slices)
        for j in range(b_slices)
        if i + j == g
    )


@dataclass(frozen=True)
class Level:
    """One rung of the ladder. ``expected_error`` is the measured phi=0.5, n=4096 error (CPU)."""

    name: str
    kind: Kind
    a_slices: int = 0
    b_slices: int = 0
    pairs: tuple[tuple[int, int], ...] = ()
    relative_cost: float = 1.0
    expected_error: float = 0.0
    description: str = ""

    @property
    def products(self) -> int:
        """Low-precision GEMMs one call runs (1 for a native level)."""
        if self.kind == "int8":
            return len(self.pairs)
        return 3 if self.kind == "fp16" else 1

    @property
    def groups(self) -> tuple[int, ...]:
        """Weight classes i + j present in ``pairs``: pairs of one class share a place value."""
        return tuple(sorted({i + j for i, j in self.pairs}))


def _int8(name: str, sa: int, sb: int, max_sum: int, expected: float, text: str) -> Level:
    pairs = triangle(sa, sb, max_sum)
    return Level(name, "int8", sa, sb, pairs, float(len(pairs) + 1), expected, text)


# Cheapest first within each kind; the tuner orders by relative_cost, not by position.
LADDER: tuple[Level, ...] = (
    Level(
        "tf32",
        "native",
        relative_cost=3.4,
        expected_error=3e-4,
        description="float32 inputs rounded to TF32 (10-bit mantissa), float32 accumulation",
    ),
    _int8("I", 2, 2, 2, 1.5e-4, "MixPert I: (l, r) = (1, 1), 2 x 2 slices"),
    _int8("II", 2, 3, 3, 5e-5, "MixPert II: (l, r) = (1, 2), 2 x 3 slices"),
    _int8("III", 3, 2, 3, 5e-5, "MixPert III: (l, r) = (2, 1), 3 x 2 slices"),
    _int8("T6", 3, 3, 2, 2e-6, "3 x 3 slices, i + j <= 2: float32-grade on narrow-range data"),
    _int8("IV", 3, 3, 3, 5e-7, "MixPert IV: (l, r) = (2, 2), 3 x 3 slices, pair (2, 2) dropped"),
    _int8("V", 4, 4, 3, 3e-8, "4 x 4 slices, i + j <= 3"),
    Level(
        "fp16",
        "fp16",
        relative_cost=3 * 1300 / 680 + 1,
        expected_error=5e-7,
        description="FP16 hi/lo split of power-of-two scaled rows/columns, 3 FP16 GEMMs",
    ),
    Level(
        "fp32",
        "native",
        relative_cost=1300 / 51,
        expected_error=1.1e-6,
        description="native float32 GEMM (cuBLAS SGEMM / NumPy)",
    ),
    Level(
        "fp64",
        "native",
        relative_cost=1300 / 55,
        expected_error=6e-8,
        description="float64 product of the float32 inputs, rounded once to float32",
    ),
)

LEVELS: dict[str, Level] = {level.name: level for level in LADDER}
DEFAULT_LEVEL = "IV"


def get_level(level: str | Level) -> Level:
    """The level called ``level``; ValueError listing the known names otherwise."""
    if isinstance(level, Level):
        return level
    try:
        return LEVELS[level]
    except (KeyError, TypeError):
        known = ", ".join(LEVELS)
        raise ValueError(
            f"level={level!r} is not a known level; the known levels are: {known}"
        ) from None

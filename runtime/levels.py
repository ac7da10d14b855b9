"""The level ladder: every way mixpert can compute a float32 product, as data a tuner can walk.

An INT8 level cuts each row of A into ``a_slices`` signed INT8 digits and each column of B into
``b_slices`` (see ``packer``), and sums the slice products ``pairs`` = ((i, j), ...). MixPert's
configurations (l, r) = (sa - 1, sb - 1) are levels I-IV; V adds a fourth slice; T6 keeps IV's
slices but only the pairs with i + j <= 2 (6 products, ~1e-6: far better than II/III at equal
cost).

``relative_cost`` is the time of a call in units of one INT8 GEMM of the same shape (whole-call
times over one INT8 GEMM's, ``benchmarks/results/NVIDIA-H100-80GB-HBM3/gemm.json``), packing and
the combine included on the emulated levels. The tuner only compares costs, so one consistent
unit is all it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from .ordered import CHUNK
from .packer import fraction_bits

# How a level computes: INT8 slices (scaled per line, or per block of k: "blocks", ``blocks``),
# the FP16 split, one native product (TF32 inputs, float32, float64), float32 arithmetic in one
# fixed order ("ordered": ``ordered``), or "policy" (a rule that picks one of the others per
# call: "auto"). Each backend keeps a table kind -> product function.
Kind = Literal["int8", "blocks", "fp16", "tf32", "fp32", "fp64", "ordered", "policy"]
SLICED_KINDS: tuple[Kind, ...] = ("int8", "blocks")  # INT8 slices and pairs
EMULATED_KINDS: tuple[Kind, ...] = (*SLICED_KINDS, "fp16")


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
    """One rung of the ladder. ``expected_error``: measured on an H100 at n = 8192 on phi = 0.5
    inputs (the README's level table; IV-blocks at 65536 x 4096 x n)."""

    name: str
    kind: Kind
    a_slices: int = 0
    b_slices: int = 0
    pairs: tuple[tuple[int, int], ...] = ()
    relative_cost: float = 1.0
    expected_error: float = 0.0
    description: str = ""
    # Lines whose range the slices cannot resolve are recomputed exactly (``bypass``): the
    # float32-grade INT8 levels, which promise SGEMM's componentwise bound.
    bypass_wide: bool = False

    def __post_init__(self) -> None:
        check_level(self)

    @property
    def products(self) -> int:
        """Low-precision GEMMs one call runs (1 for a native level)."""
        if self.kind in SLICED_KINDS:
            return len(self.pairs)
        return 3 if self.kind == "fp16" else 1

    @property
    def bits(self) -> str:
        """Significand bits each operand keeps, "A x B" (INT8 levels: relative to the line's
        largest entry, which sets the scale; FP16: per entry, within 30 binades of it)."""
        if self.kind in SLICED_KINDS:
            return f"{fraction_bits(self.a_slices)} x {fraction_bits(self.b_slices)}"
        native = {"tf32": "11 x 11", "fp32": "24 x 24", "fp64": "24 x 24", "ordered": "24 x 24"}
        return {"fp16": "22 x 22", **native}.get(self.kind, "-")

    @property
    def emulated(self) -> bool:
        """Sliced or split operands (INT8, FP16), as opposed to one native product."""
        return self.kind in EMULATED_KINDS

    @property
    def groups(self) -> tuple[int, ...]:
        """Weight classes i + j present in ``pairs``: pairs of one class share a place value."""
        return tuple(sorted({i + j for i, j in self.pairs}))


# The CUDA packer holds a line's rounded scaled value, 7 + 8 (s - 1) bits plus sign, in a 32-bit
# integer: at most 4 slices per operand.
MAX_SLICES = 4


def check_level(level: Level) -> None:
    """ValueError naming the level, the field and the rule when ``level`` cannot run correctly."""

    def refuse(rule: str) -> None:
        raise ValueError(f"level {level.name!r}: {rule}")

    if not isinstance(level.name, str) or not level.name:
        refuse("the name must be a non-empty string")
    if level.kind not in get_args(Kind):
        refuse(f"kind {level.kind!r} is not one of {', '.join(get_args(Kind))}")
    if not (math.isfinite(level.relative_cost) and level.relative_cost > 0):
        refuse(f"relative_cost {level.relative_cost!r} must be a positive finite number")
    if level.kind not in SLICED_KINDS:
        if level.a_slices or level.b_slices or level.pairs:
            refuse(f"a {level.kind} level takes no slices or pairs")
        return
    for side, count in (("a_slices", level.a_slices), ("b_slices", level.b_slices)):
        if not (isinstance(count, int) and 1 <= count <= MAX_SLICES):
            refuse(f"{side} = {count!r}; an INT8 level has 1 to {MAX_SLICES} slices per operand")
    if not level.pairs:
        refuse("an INT8 level needs at least one slice pair")
    if len(set(level.pairs)) != len(level.pairs):
        refuse(f"pairs {level.pairs} repeat a pair")
    for pair in level.pairs:
        i, j = pair
        if not (0 <= i < level.a_slices and 0 <= j < level.b_slices):
            refuse(f"pair {pair} is outside {level.a_slices} x {level.b_slices} slices")
    groups = sorted({i + j for i, j in level.pairs})
    if groups != list(range(len(groups))):  # class sums are stored and combined by index
        refuse(f"the weight classes i + j present, {groups}, must be 0, 1, ... without a gap")
    for g in groups:  # the CUDA backend sums a class in one GEMM
        members = sorted(i for i, j in level.pairs if i + j == g)
        if members != list(range(members[0], members[0] + len(members))):
            refuse(f"the pairs of weight class i + j = {g} must be consecutive slices")


def _int8(
    name: str,
    sa: int,
    sb: int,
    max_sum: int,
    cost: float,
    expected: float,
    text: str,
    bypass_wide: bool = False,
) -> Level:
    pairs = triangle(sa, sb, max_sum)
    return Level(name, "int8", sa, sb, pairs, cost, expected, text, bypass_wide)


# Costs measured on an H100 (benchmarks/results/NVIDIA-H100-80GB-HBM3/gemm.json, n = 8192-16384):
# whole-call time over one INT8 GEMM of the same shape. Errors: phi = 0.5 inputs, n = 8192, GPU.
LADDER: tuple[Level, ...] = (
    Level(
        "tf32",
        "tf32",
        relative_cost=4.1,
        expected_error=2.9e-4,
        description="float32 inputs rounded to TF32 (10-bit mantissa), float32 accumulation",
    ),
    _int8("I", 2, 2, 2, 4.9, 1.4e-4, "MixPert I: (l, r) = (1, 1), 2 x 2 slices"),
    _int8("II", 2, 3, 3, 7.0, 9.5e-5, "MixPert II: (l, r) = (1, 2), 2 x 3 slices"),
    _int8("III", 3, 2, 3, 7.0, 9.6e-5, "MixPert III: (l, r) = (2, 1), 3 x 2 slices"),
    _int8("T6", 3, 3, 2, 6.9, 3.3e-6, "3 x 3 slices, i + j <= 2: f32-grade on narrow-range data"),
    _int8("IV", 3, 3, 3, 9.0, 5.3e-7, "MixPert IV: (l, r) = (2, 2), 3 x 3, no pair (2, 2)", True),
    _int8("V", 4, 4, 3, 11.0, 3.0e-8, "4 x 4 slices, i + j <= 3", True),
    # IV's slices and pairs with a scale per block of k (``blocks``): one kernel slices A in
    # registers as it streams it, for memory-bound products (tall A, a thin B) where packing
    # A into memory and reading it back would cost more than the product. Its cost here is a
    # square product's, where that kernel is slower than SGEMM: the tuner reaches it through
    # "auto", which routes the tall shapes it wins (dispatch).
    Level(
        "IV-blocks",
        "blocks",
        3,
        3,
        triangle(3, 3, 3),
        relative_cost=40.0,
        expected_error=2.4e-7,
        description="IV's 3 x 3 slices and 8 pairs, a scale per block of 64 k-steps, in-register",
        bypass_wide=True,
    ),
    Level(
        "fp16",
        "fp16",
        relative_cost=20.0,  # k-blocked on the GPU: 1.1-1.4x SGEMM (cuda.sliced.FP16_K_BLOCK)
        expected_error=1.3e-6,  # GPU, FP32 sums of 1024 k-steps; 8e-8 on the CPU (float64 sums)
        description="FP16 hi/lo split of power-of-two scaled rows/columns, 3 FP16 GEMMs",
    ),
    Level(
        "fp32",
        "fp32",
        relative_cost=27.0,
        expected_error=1.6e-6,
        description="native float32 GEMM (cuBLAS SGEMM / NumPy)",
    ),
    Level(
        "fp64",
        "fp64",
        relative_cost=30.0,
        expected_error=2.5e-8,
        description="float64 product of the float32 inputs, rounded once to float32",
    ),
    # float32 arithmetic in one fixed order (``ordered``), so every backend gives the same bits:
    # the GPU's small-stack, pairs, tall, thin and split-k kernels
    # (cuda.fp32_ordered.ordered_product), for shapes where data movement and launches, not
    # arithmetic, set the time. Other products are faster at fp32 (cuBLAS).
    Level(
        "fp32-ordered",
        "ordered",
        relative_cost=28.0,
        expected_error=1.0e-7,
        description=f"float32 FMAs in k order, chunks of {CHUNK} summed in float64, rounded once",
    ),
)

LEVELS: dict[str, Level] = {level.name: level for level in LADDER}
LevelName = Literal[
    "auto",
    "tf32",
    "I",
    "II",
    "III",
    "T6",
    "IV",
    "V",
    "IV-blocks",
    "fp16",
    "fp32",
    "fp64",
    "fp32-ordered",
]

# Not a rung but a policy: the fastest float32-grade way for the shape and backend at hand
# (auto.on_gpu): level IV where the INT8 tensor cores win, IV-blocks for tall products
# with few columns and a long k, fp32-ordered's kernels for stacks of very small pairs and tall,
# narrow or long-k products on the GPU, native float32 elsewhere. Its cost in the tuner's model
# is native float32's (what it mostly runs): the model cannot know the shape-specific paths,
# only measurement does (tuner._auto_where_faster).
AUTO = Level(
    "auto",
    "policy",
    relative_cost=next(lv.relative_cost for lv in LADDER if lv.name == "fp32"),
    description="fastest float32-grade level for the shape and device",
)

# The two defaults every layer names rather than spells:
DEFAULT_LEVEL = AUTO.name  # the initial default level (``precision``): matmul's, unplanned ops'
_BY_LOWER_NAME = {level.name.lower(): level for level in (*LADDER, AUTO)}
NATIVE_LEVEL = "fp32"  # native float32: compiled code runs its own product; the tuner's baseline


def get_level(level: str | Level) -> Level:
    """The level called ``level`` ("auto" included, any case); ValueError listing the names."""
    if isinstance(level, Level):
        return level
    if isinstance(level, str) and level.lower() in _BY_LOWER_NAME:  # case does not matter
        return _BY_LOWER_NAME[level.lower()]
    what = "is not a known level" if isinstance(level, str) else (
        f"is a {type(level).__name__}, not a level name or a mixpert.Level"
    )  # fmt: skip
    raise ValueError(
        f"level={level!r} {what}; the known levels are: {', '.join(['auto', *LEVELS])}"
    )

"""Karatsuba slice products: an exact CPU model of a claimed INT8 rung, beside IV, V, T6, II/III.

With digits of at most 7 bits (a 6-bit leading digit |d_0| <= 63, later digits in [-64, 63]),
the sum of two digits of a line fits INT8 (|d_i + d_j| <= 127), so one INT8 product gives both
cross terms of a pair of slices (Karatsuba):

    K_ij = (a_i + a_j)(b_i + b_j) - P_ii - P_jj = a_i b_j + a_j b_i,    P_ii = a_i b_i

(the digits are unshifted integers, so a_i b_j and a_j b_i have the same place value 2^-(p_i +
p_j) and K_ij is exact). A product set is a list of such products; the slice pairs (i, j) it
covers are the P's and both orders of each K, and every other pair is dropped.

The model: each row of A and column of B gets a power-of-two scale 2^e from its largest entry
(the smallest e with max < (1 - 2^-w_0) 2^e, the packer's 127/128 at w_0 = 7), is rounded once
to nearest at sum(widths) fraction bits and written as balanced signed digits from the bottom
up; digit products are float64 matmuls of integer matrices, exact because every partial sum
stays below 2^53 (asserted per product and per weight class), summed per place value and
combined in float64 (smallest weight first), scaled and rounded once to float32: the oracle's
steps (``runtime.combine``). For IV's widths (7, 8, 8) this split and combine are checked bit
for bit against mixpert's own packer, ``cpu.exact_class_sums`` and ``combine.combine``; IV, V,
T6, II and III run through that real code, and through ``mixpert.matmul(backend="cpu")``
(equilibration and the bypass of unresolved lines included).

Inputs: ``mixpert.testdata.gemmul8`` (a = (U - 0.5) exp(phi N(0, 1))), n x n x n; error: MixPert's
Eq. 10, ||C - C64||_F / ||C64||_F against the float64 product of the same float32 inputs.

    python benchmarks/karatsuba_model.py [--n 1024] [--seeds 3] [--large 4096] \
        [--out benchmarks/results/cpu]

(``--large 0`` skips the one-phi run at the larger n.) About 2.5 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

import mixpert
from mixpert.metrics import float64_product, relative_error
from mixpert.runtime import combine, cpu, packer
from mixpert.runtime.levels import LEVELS, Level
from mixpert.testdata import gemmul8

EXACT = 2**53  # float64 integers are exact below this
INT8_MIN, INT8_MAX = -128, 127
Widths = tuple[int, ...]  # bits of each digit of a line, leading digit first (its sign apart)
Term = tuple[Literal["P", "K"], int, int]  # ("P", i, j): a_i b_j; ("K", i, j): K_ij
PHIS = (0.5, 1.0, 2.0)
MIXPERT_LEVELS = ("II", "III", "T6", "IV", "V")
DECISION = "## Decision"  # the hand-written part of the results file, kept on a rerun


@dataclass(frozen=True)
class ProductSet:
    name: str
    widths_a: Widths
    widths_b: Widths
    terms: tuple[Term, ...]

    @property
    def products(self) -> int:
        return len(self.terms)

    def covered(self) -> set[tuple[int, int]]:
        """Slice pairs (i, j) whose product a_i b_j the set's sum includes."""
        pairs: set[tuple[int, int]] = set()
        for kind, i, j in self.terms:
            pairs |= {(i, j)} if kind == "P" else {(i, j), (j, i)}
        return pairs

    def dropped(self) -> list[tuple[int, int]]:
        pairs = [(i, j) for i in range(len(self.widths_a)) for j in range(len(self.widths_b))]
        return [p for p in pairs if p not in self.covered()]

    def __post_init__(self) -> None:
        direct = {(i, j) for kind, i, j in self.terms if kind == "P"}
        for kind, i, j in self.terms:
            if kind == "K":
                assert i != j and {(i, i), (j, j)} <= direct, f"{self.name}: K{i}{j} needs P's"
                assert self.widths_a == self.widths_b, "Karatsuba pairs need equal slicings"


def from_level(level: Level) -> ProductSet:
    """A mixpert INT8 level as a product set of plain pairs, with the packer's widths."""
    widths = {
        s: (packer.FIRST_SLICE_BITS,) + (packer.LATER_SLICE_BITS,) * (s - 1)
        for s in (level.a_slices, level.b_slices)
    }
    terms: tuple[Term, ...] = tuple(("P", i, j) for i, j in level.pairs)
    return ProductSet(level.name, widths[level.a_slices], widths[level.b_slices], terms)


def terms(spec: str) -> tuple[Term, ...]:
    """The terms of a spec such as "P00 K01": (("P", 0, 0), ("K", 0, 1))."""
    out: list[Term] = []
    for word in spec.split():
        kind: Literal["P", "K"] = "P" if word[0] == "P" else "K"
        out.append((kind, int(word[1]), int(word[2])))
    return tuple(out)


K4, K3 = (6, 7, 7, 7), (6, 7, 7)
KARATSUBA = (
    ProductSet("K8 (claim)", K4, K4, terms("P00 P11 P22 P33 K01 K02 K03 K12")),
    ProductSet("K5 (claim)", K3, K3, terms("P00 P11 P22 K01 K02")),
    # Not in the claim: K8's coverage with P03 and P30 for P33 and K03 (no Karatsuba there);
    # every pair of three digits; the four-digit set plus K13.
    ProductSet("K8 plain 03", K4, K4, terms("P00 P11 P22 K01 K02 K12 P03 P30")),
    ProductSet("K6 (all of 3)", K3, K3, terms("P00 P11 P22 K01 K02 K12")),
    ProductSet("K9 (K8 + K13)", K4, K4, terms("P00 P11 P22 P33 K01 K02 K03 K12 K13")),
)


def split_lines(x: np.ndarray, widths: Widths) -> tuple[np.ndarray, np.ndarray]:
    """Signed digits of each row of ``x`` (m, k) -> (slices, m, k) float64 integers, and each
    row's scale exponent e: x ~= 2^e sum_i d_i 2^-place(i), place(i) = widths[0] + ... +
    widths[i]; |d_0| <= 2^w_0 - 1, later digits in [-2^(w - 1), 2^(w - 1) - 1]."""
    first = widths[0]
    top = packer.finite_abs_max(x, axis=1)
    _, e = np.frexp(top)
    e = e + (top * 2.0**first >= np.ldexp(2.0**first - 1, e))  # exact on both sides
    rest = np.rint(np.ldexp(x.astype(np.float64), (sum(widths) - e)[:, None]))
    digits: list[np.ndarray] = []
    for w in reversed(widths[1:]):
        half = 2.0 ** (w - 1)
        low = np.mod(rest + half, 2.0**w) - half
        digits.append(low)
        rest = (rest - low) / 2.0**w
    assert np.abs(rest).max() <= 2**first - 1, f"leading digit outside {first} bits"
    digits.append(rest)
    return np.stack(digits[::-1]), e.astype(np.int32)


def exact_matmul(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """x @ y.T for integer-valued float64 (m, k), (n, k), and a bound on its entries; asserts
    that no partial sum can reach 2^53 (so BLAS's order cannot round)."""
    bound = x.shape[1] * float(np.abs(x).max()) * float(np.abs(y).max())
    assert bound < EXACT, f"float64 product not exact: bound {bound:.3g}"
    return x @ y.T, bound


def model_product(a: np.ndarray, b: np.ndarray, ps: ProductSet) -> tuple[np.ndarray, int]:
    """a @ b from ``ps``'s products, exact class sums, rounded once to float32; and the
    largest |digit sum| fed to a Karatsuba product (0 without one)."""
    da, ea = split_lines(a, ps.widths_a)
    db, eb = split_lines(np.ascontiguousarray(b.T), ps.widths_b)
    pa, pb = np.cumsum(ps.widths_a), np.cumsum(ps.widths_b)
    sums: dict[int, np.ndarray] = {}
    bounds: dict[int, float] = {}
    plain: dict[tuple[int, int], np.ndarray] = {}
    widest = 0
    for kind, i, j in sorted(ps.terms, key=lambda t: t[0] == "K"):  # P's first: K's need them
        if kind == "P":
            value, bound = exact_matmul(da[i], db[j])
            plain[(i, j)] = value
        else:
            xa, xb = da[i] + da[j], db[i] + db[j]
            for s in (xa, xb):  # the INT8 tensor cores take the sums as they are
                assert s.min() >= INT8_MIN and s.max() <= INT8_MAX, "digit sum outside INT8"
            widest = max(widest, int(np.abs(xa).max()), int(np.abs(xb).max()))
            q, bound = exact_matmul(xa, xb)
            value = q - plain[(i, i)] - plain[(j, j)]  # exact: integers well below 2^53
        w = int(pa[i] + pb[j])
        sums[w] = sums.get(w, 0) + value
        bounds[w] = bounds.get(w, 0.0) + bound
        assert bounds[w] < EXACT, f"class sum at 2^-{w} not exact"
    acc = np.zeros((a.shape[0], b.shape[1]))
    for w in sorted(sums, reverse=True):  # smallest weight first, as combine.combine
        acc = acc + np.ldexp(sums[w], -w)
    return np.ldexp(acc, ea[:, None] + eb[None, :]).astype(np.float32), widest


def packer_product(a: np.ndarray, b: np.ndarray, level: Level) -> np.ndarray:
    """The oracle's slicing, exact class sums and combine (no equilibration, no bypass)."""
    ea, eb = packer.scale_exponents(a, axis=1), packer.scale_exponents(b, axis=0)
    da = packer.slice_rows(a, ea, level.a_slices)
    db = packer.slice_columns(b, eb, level.b_slices)
    return combine.combine(cpu.exact_class_sums(da, db, level), ea, eb)


def check_split(a: np.ndarray) -> None:
    """The model's split is the packer's at IV's widths."""
    digits, e = split_lines(a, (7, 8, 8))
    want_e = packer.scale_exponents(a, axis=1)
    assert np.array_equal(e, want_e), "scale exponents differ from the packer's"
    assert np.array_equal(digits, packer.slice_rows(a, want_e, 3)), "digits differ"


def inputs(n: int, phi: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = gemmul8(np, rng, (n, n), phi), gemmul8(np, rng, (n, n), phi)
    return a, b, float64_product(a, b)


Errors = dict[str, dict[float, list[float]]]  # row -> phi -> one error per seed
WIDEST: dict[str, int] = {}  # largest |a_i + a_j| or |b_i + b_j| seen by each Karatsuba set


def measure(
    n: int, phis: tuple[float, ...], seeds: int, rows: tuple[str, ...], check: bool = True
) -> Errors:
    """Errors of ``rows`` (product sets, mixpert levels, "<level> (matmul)"); ``check``: also
    assert that the model gives the oracle's bits at mixpert's levels."""
    sets = {ps.name: ps for ps in KARATSUBA}
    errors: Errors = {}
    for phi in phis:
        for seed in range(seeds):
            a, b, ref = inputs(n, phi, seed)
            if check:
                check_split(a)
            for name in rows:
                if name in sets:
                    c, widest = model_product(a, b, sets[name])
                    WIDEST[name] = max(WIDEST.get(name, 0), widest)
                elif name.endswith(" (matmul)"):
                    level = name.removesuffix(" (matmul)")
                    c = mixpert.matmul(a, b, level=level, backend="cpu")
                else:
                    c = packer_product(a, b, LEVELS[name])
                    if check:
                        model, _ = model_product(a, b, from_level(LEVELS[name]))
                        assert np.array_equal(c, model), f"{name}: model differs from oracle"
                errors.setdefault(name, {}).setdefault(phi, []).append(relative_error(c, ref))
    return errors


def describe(name: str) -> tuple[int, str, str]:
    """(products, widths, pairs dropped with their places) of a row."""
    base = name.removesuffix(" (matmul)")
    ps = next((p for p in KARATSUBA if p.name == base), None) or from_level(LEVELS[base])
    pa, pb = np.cumsum(ps.widths_a), np.cumsum(ps.widths_b)
    dropped = " ".join(f"{i}{j}" for i, j in ps.dropped() if (j, i) not in ps.dropped() or i <= j)
    lowest = min((int(pa[i] + pb[j]) for i, j in ps.dropped()), default=None)
    where = f"{dropped} (2^-{lowest})" if lowest else "none"
    widths = "/".join(map(str, ps.widths_a)) + (
        "" if ps.widths_a == ps.widths_b else " x " + "/".join(map(str, ps.widths_b))
    )
    return ps.products, widths, where


def table(errors: Errors, phis: tuple[float, ...]) -> list[str]:
    head = " | ".join(f"phi={phi:g}" for phi in phis)
    lines = [
        f"| products set | products | widths | dropped pairs (largest place) | {head} |",
        "|---|---|---|---|" + "---|" * len(phis),
    ]
    for name, by_phi in errors.items():
        products, widths, dropped = describe(name)
        cells = " | ".join(f"{float(np.median(by_phi[phi])):.2e}" for phi in phis)
        lines.append(f"| {name} | {products} | {widths} | {dropped} | {cells} |")
    return lines


def spread(errors: Errors) -> float:
    """Largest max/min ratio over seeds of any cell."""
    return max(max(v) / min(v) for by_phi in errors.values() for v in by_phi.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--large", type=int, default=4096, help="n of the phi = 0.5 run (0: none)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = (
        *MIXPERT_LEVELS,
        *(f"{name} (matmul)" for name in ("T6", "IV", "V")),
        *(ps.name for ps in KARATSUBA),
    )
    small = measure(args.n, PHIS, args.seeds, rows)
    lines = [
        f"# Karatsuba INT8 slice products: exact CPU model, n = {args.n}",
        "",
        f"`python benchmarks/karatsuba_model.py --n {args.n} --seeds {args.seeds} "
        f"--large {args.large}`. Median over {args.seeds} seeds of ||C - C64||_F / ||C64||_F "
        f"(largest max/min over seeds in any cell: {spread(small):.2f}). Rows II-V: mixpert's "
        "packer, exact class sums and combine (bit-identical to this model's split at the same "
        'widths); (matmul): `mixpert.matmul(backend="cpu")`, equilibration and bypass '
        "included; K rows: the model with 6/7/7(/7)-bit digits. Dropped pairs: one of each "
        "mirrored pair; the place 2^-(p_i + p_j) of the heaviest, in units of the scale product.",
        "",
        *table(small, PHIS),
    ]
    if args.large:
        large_rows = ("T6", "IV", *(ps.name for ps in KARATSUBA[:2]))
        big = measure(args.large, (0.5,), 1, large_rows, check=False)
        lines += ["", f"n = {args.large}, phi = 0.5, one seed:", "", *table(big, (0.5,))]
    bypassed = []
    for phi in PHIS:
        a, b, _ = inputs(args.n, phi, 0)
        counts = ", ".join(f"{lv} {cpu.unresolved_lines(a, b, LEVELS[lv])}" for lv in ("IV", "V"))
        bypassed.append(f"phi={phi:g}: {counts}")
    seen = ", ".join(f"{name} {w}" for name, w in WIDEST.items())
    lines += [
        "",
        f"Largest |digit sum| fed to a Karatsuba product: {seen} (all within INT8, [-128, 127]).",
        "",
        f"Unresolved (rows, columns) that `mixpert.matmul` recomputes exactly, seed 0, n = "
        f"{args.n}: {'; '.join(bypassed)} (of {args.n} each).",
        "",
        f"({time.perf_counter() - start:.0f} s)",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:  # keeps a decision written below the tables (from DECISION on)
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "karatsuba-model.md"
        old = path.read_text() if path.exists() else ""
        kept = old[old.index(DECISION) :] if DECISION in old else ""
        path.write_text(text + ("\n" + kept if kept else ""))


if __name__ == "__main__":
    main()

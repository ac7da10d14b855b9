"""Other slice widths for a 7-product INT8 level (issue 18, item 3), on the CPU.

``seven_products.py`` measured the 7-product levels the packer can make (its widths are fixed:
7 + 8 + 8 ... bits). This script frees the widths: each operand's lines are cut into signed
digits of any widths that fit INT8 (the first one with one bit of headroom, as the packer's),
rounded to nearest at their sum, and a product keeps the 7 slice pairs of largest place value
(every choice where pairs tie at the cut). Integer products are exact in float64 here (|digit
products| < 2^14, k < 2^39), so an error is the slicing's and the dropped pairs', as on the GPU.
IV's widths and 8 pairs run through the same model as the reference. Errors: MixPert's Eq. 10
against float64, worst over the distributions; "float32-grade" needs at most cuBLAS SGEMM's
error, 2.3e-6 at its most lenient (n = 16384; the emulation's error does not grow with k).

    python benchmarks/slice_widths.py [--n 512] [--out benchmarks/results/cpu]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from mixpert.metrics import float64_product, relative_error
from mixpert.testdata import gemmul8

Widths = tuple[int, ...]  # bits of each digit of a line, leading digit first
Pair = tuple[int, int]  # (slice of A, slice of B)
PRODUCTS = 7
LENIENT_SGEMM_ERROR = 2.3e-6  # cuBLAS SGEMM at n = 16384 (benchmarks/accuracy.py)
# Three digits: the first of 5-7 bits (+ sign), the others of 6-8, at least 21 bits in all
# (IV's are 23); four: a few splits of 24-31 bits (more, narrower slices: 7 pairs cover less).
WIDTHS = (
    *(w for w in itertools.product((5, 6, 7), (6, 7, 8), (6, 7, 8)) if sum(w) >= 21),
    (6, 6, 6, 6),
    (7, 6, 6, 6),
    (6, 7, 7, 7),
    (7, 8, 8, 8),
)
IV_WIDTHS = (7, 8, 8)
DISTRIBUTIONS = {"phi=0": 0.0, "phi=0.5": 0.5, "phi=1": 1.0, "phi=1.5": 1.5}


def line_digits(x: np.ndarray, widths: Widths) -> tuple[np.ndarray, np.ndarray]:
    """Signed digits of each row of ``x`` (m, k) -> (slices, m, k) float64 integers, and each
    row's scale exponent e: x ~= 2^e sum_i d_i 2^-place(i), place(i) = widths[0] + ... +
    widths[i]. Rounded once, to nearest, at all the widths' bits."""
    first = widths[0]
    top = np.abs(x).max(axis=1).astype(np.float64)
    _, e = np.frexp(top)
    headroom = 1 - 2.0**-first  # the packer's 127/128 at 7 bits: the leading digit fits
    e = e + (top >= headroom * np.ldexp(1.0, e))
    rest = np.rint(np.ldexp(x.astype(np.float64), (sum(widths) - e)[:, None]))
    digits = []
    for w in reversed(widths[1:]):
        half = 2.0 ** (w - 1)
        low = np.mod(rest + half, 2.0**w) - half
        digits.append(low)
        rest = (rest - low) / 2.0**w
    if np.abs(rest).max() > 2**first - 1:
        raise AssertionError(f"leading digit outside {first} bits for widths {widths}")
    digits.append(rest)
    return np.stack(digits[::-1]), e


def places(widths: Widths) -> np.ndarray:
    """Bits above each digit's unit: widths[0] + ... + widths[i]."""
    return np.cumsum(widths)


def heaviest_pairs(wa: Widths, wb: Widths, count: int) -> list[tuple[Pair, ...]]:
    """Every set of ``count`` slice pairs of largest place value (ties at the cut: each way)."""
    pa, pb = places(wa), places(wb)
    pairs = sorted(
        itertools.product(range(len(wa)), range(len(wb))), key=lambda p: pa[p[0]] + pb[p[1]]
    )
    cut = pa[pairs[count - 1][0]] + pb[pairs[count - 1][1]]
    sure = [p for p in pairs if pa[p[0]] + pb[p[1]] < cut]
    tied = [p for p in pairs if pa[p[0]] + pb[p[1]] == cut]
    return [tuple(sure + list(c)) for c in itertools.combinations(tied, count - len(sure))]


def sliced_product(
    a: np.ndarray, b: np.ndarray, wa: Widths, wb: Widths, pairs: tuple[Pair, ...]
) -> np.ndarray:
    """a @ b from the kept slice pairs, exact sums in float64, rounded once to float32."""
    da, ea = line_digits(a, wa)
    db, eb = line_digits(np.ascontiguousarray(b.T), wb)
    pa, pb = places(wa), places(wb)
    total = np.zeros((a.shape[0], b.shape[1]))
    for i, j in sorted(pairs, key=lambda p: -(pa[p[0]] + pb[p[1]])):  # smallest weight first
        total += np.ldexp(da[i] @ db[j].T, -(pa[i] + pb[j]))
    return np.ldexp(total, ea[:, None] + eb[None, :]).astype(np.float32)


def errors(
    wa: Widths, wb: Widths, pairs: tuple[Pair, ...], inputs: dict[str, tuple[np.ndarray, ...]]
) -> dict[str, float]:
    """The product's error on each distribution's inputs (a, b, float64 reference)."""
    return {
        name: relative_error(sliced_product(a, b, wa, wb, pairs), reference)
        for name, (a, b, reference) in inputs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    n = args.n
    rng = np.random.default_rng(18)
    inputs = {}
    for name, phi in DISTRIBUTIONS.items():
        a, b = gemmul8(np, rng, (n, n), phi), gemmul8(np, rng, (n, n), phi)
        inputs[name] = (a, b, float64_product(a, b))
    iv_pairs = tuple(p for p in itertools.product(range(3), range(3)) if sum(p) <= 3)
    iv = errors(IV_WIDTHS, IV_WIDTHS, iv_pairs, inputs)
    rows = [
        (wa, wb, pairs, errors(wa, wb, pairs, inputs))
        for wa, wb in itertools.product(WIDTHS, WIDTHS)
        if wa <= wb  # (inputs are alike in A and B: one of each mirrored pair)
        for pairs in heaviest_pairs(wa, wb, PRODUCTS)
    ]
    rows.sort(key=lambda row: max(row[3].values()))
    worst = max(rows[0][3].values())
    lines = [
        f"# 7-product INT8 slicings with free widths, n = {n} (CPU, exact integer products)",
        "",
        f"{len(rows)} slicings of 7 pairs (widths of A and B; the 7 heaviest pairs, every way at "
        "a tie), the best 15 by their worst error, below IV's 8 pairs through the same model. "
        f"float32-grade needs at most cuBLAS SGEMM's error on every distribution: "
        f"{LENIENT_SGEMM_ERROR:.1e} at n = 16384, its most lenient.",
        "",
        f"| pairs kept | widths A | widths B | {' | '.join(DISTRIBUTIONS)} | worst |",
        "|---|---|---|" + "---|" * (len(DISTRIBUTIONS) + 1),
    ]
    for wa, wb, pairs, err in [(IV_WIDTHS, IV_WIDTHS, iv_pairs, iv), *rows[:15]]:
        cells = " | ".join(f"{err[d]:.2e}" for d in DISTRIBUTIONS)
        kept = " ".join(f"{i}{j}" for i, j in pairs)
        lines.append(f"| {kept} | {wa} | {wb} | {cells} | {max(err.values()):.2e} |")
    lines += [
        "",
        f"Best 7-pair slicing's worst error {worst:.2e}: "
        f"{'within' if worst <= LENIENT_SGEMM_ERROR else 'above'} {LENIENT_SGEMM_ERROR:.1e} "
        f"(IV: {max(iv.values()):.2e}).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "slice-widths.md").write_text(text)


if __name__ == "__main__":
    main()

"""benchmarks/slice_widths.py: its free-width slicer is the packer's at the packer's widths, and
the pairs it keeps are the heaviest."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from mixpert.runtime import packer
from mixpert.testdata import gemmul8

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import slice_widths  # noqa: E402


def test_the_free_width_slicer_gives_the_packer_digits_at_its_widths() -> None:
    rng = np.random.default_rng(3)
    x = gemmul8(np, rng, (40, 300), 1.5)
    x[3] *= np.float32(2.0**-100)
    x[5] = rng.uniform(-0.5, 0.5, size=300).astype(np.float32)
    x[5, 7] = np.float32(127 / 128)  # the row's top on the headroom's edge: scale 2^1
    for slices in (2, 3, 4):
        widths = (packer.FIRST_SLICE_BITS, *[packer.LATER_SLICE_BITS] * (slices - 1))
        digits, e = slice_widths.line_digits(x, widths)
        expected_e = packer.scale_exponents(x, axis=1)
        np.testing.assert_array_equal(e, expected_e)
        np.testing.assert_array_equal(digits, packer.slice_rows(x, expected_e, slices))


def test_the_digits_rebuild_the_rounded_lines_at_other_widths() -> None:
    rng = np.random.default_rng(4)
    x = gemmul8(np, rng, (20, 64), 1.0)
    for widths in ((5, 8, 8), (6, 7, 7, 7), (7, 6, 8)):
        digits, e = slice_widths.line_digits(x, widths)
        bits = sum(widths)
        places = slice_widths.places(widths)
        rebuilt = sum(np.ldexp(digits[i], -int(places[i])) for i in range(len(widths)))
        expected = np.rint(np.ldexp(x.astype(np.float64), (bits - e)[:, None])) * 2.0**-bits
        np.testing.assert_array_equal(rebuilt, expected)
        assert np.abs(digits[0]).max() <= 2 ** widths[0] - 1
        for i, w in enumerate(widths[1:], 1):
            assert digits[i].min() >= -(2 ** (w - 1)) and digits[i].max() < 2 ** (w - 1)


def test_the_heaviest_pairs_and_every_way_at_a_tie() -> None:
    iv = (7, 8, 8)
    sets = slice_widths.heaviest_pairs(iv, iv, 7)
    six = {(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0)}
    assert sorted(set(s) - six for s in sets) == [{(1, 2)}, {(2, 1)}]
    assert all(six <= set(s) and len(s) == 7 for s in sets)

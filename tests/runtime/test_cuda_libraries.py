"""``cuda.libraries``: the first library that loads, its functions' types declared (no GPU)."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from mixpert.runtime.cuda import libraries


def test_the_first_library_that_loads_comes_with_its_signatures() -> None:
    math = ctypes.util.find_library("m")
    if math is None:
        pytest.skip("no C math library to load here")
    library = libraries.load(["libmixpert-absent.so", math], {"ilogb": [ctypes.c_double]})
    assert library is not None
    assert library.ilogb.restype is ctypes.c_int
    assert library.ilogb(8.0) == 3  # the double went in as a double


def test_none_where_no_library_loads() -> None:
    assert libraries.load(["libmixpert-absent.so", "libmixpert-absent.so.2"], {}) is None

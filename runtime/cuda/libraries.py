"""CUDA libraries called through ctypes, where CuPy's wrappers do not serve (cuBLASLt's GEMMs and
cuBLAS's own call under stream capture): the very files this process already loaded, preferred
to any other copy on the search path, with their functions' argument types declared."""

from __future__ import annotations

import ctypes
from typing import Any


def process_maps() -> str:
    """This process's memory map (``/proc/self/maps``: the files it loaded), or "" where the
    system cannot tell."""
    try:
        with open("/proc/self/maps") as maps:
            return maps.read()
    except OSError:
        return ""


def load(names: list[str], signatures: dict[str, list[Any]]) -> ctypes.CDLL | None:
    """The first of ``names`` that loads, each function of ``signatures`` given its argument
    types and an int status result; None where none loads."""
    for name in names:
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        for function, argtypes in signatures.items():
            getattr(library, function).argtypes = argtypes
            getattr(library, function).restype = ctypes.c_int
        return library
    return None

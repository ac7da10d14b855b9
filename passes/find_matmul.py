"""Pass ``find-matmul-sites``: record every matmul site of the function and its op id."""

from __future__ import annotations

from dataclasses import dataclass

from numba.core.compiler import StateDict

from .record import record_of
from .sites import find_sites


@dataclass(frozen=True)
class FindMatmulSites:
    name: str = "find-matmul-sites"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        record.sites = find_sites(state.func_ir)
        return False

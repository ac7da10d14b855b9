"""Pass ``gemm-graph``: the function's GEMM dependency graph and summary (see ``dataflow``), its
ops marked with their loop-invariant operands (``loop_invariance``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from numba.core.compiler import StateDict

from . import callees
from .dataflow import analyse
from .loop_invariance import invariant_operands
from .record import record_of


@dataclass(frozen=True)
class BuildGemmGraph:
    name: str = "gemm-graph"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        invariance = invariant_operands(state.func_ir, record.sites, callees.summary_of)
        record.sites = [
            replace(site, op=replace(site.op, invariant=invariance[id(site.stmt)]))
            for site in record.sites
        ]
        record.summary = analyse(state.func_ir, record.sites, callees.summary_of)
        callees.remember(state.func_id.func, record.summary)
        return False

"""Pass ``gemm-graph``: the function's GEMM dependency graph and summary (see ``dataflow``)."""

from __future__ import annotations

from dataclasses import dataclass

from numba.core.compiler import StateDict

from . import callees
from .dataflow import analyse
from .record import record_of


@dataclass(frozen=True)
class BuildGemmGraph:
    name: str = "gemm-graph"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        record.summary = analyse(state.func_ir, record.sites, callees.summary_of)
        callees.remember(state.func_id.func, record.summary)
        return False

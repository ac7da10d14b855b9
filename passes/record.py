"""What the passes learn about one compile, kept in ``state.metadata["mixpert"]``."""

from __future__ import annotations

from dataclasses import dataclass, field

from numba.core.compiler import StateDict

from .dataflow import FunctionSummary
from .sites import Site


@dataclass(frozen=True)
class RewriteNote:
    """One site's IR statement before and after the rewrite (for inspection and golden tests)."""

    op_id: str
    before: str
    after: str


@dataclass
class CompileRecord:
    qualname: str
    sites: list[Site] = field(default_factory=list)
    summary: FunctionSummary | None = None
    rewrites: list[RewriteNote] = field(default_factory=list)
    callees: dict[str, str] = field(default_factory=dict)  # callee qualname -> how it was handled
    unseen_gemm: list[str] = field(default_factory=list)  # BLAS calls the pass did not see
    native_reasons: dict[str, str] = field(default_factory=dict)  # op id -> why it runs natively


KEY = "mixpert"


def record_of(state: StateDict) -> CompileRecord:
    """The compile's record, created on first use."""
    record = state.metadata.get(KEY)
    if record is None:
        record = CompileRecord(state.func_id.func_qualname)
        state.metadata[KEY] = record
    return record

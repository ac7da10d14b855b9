"""The mixpert compilers: Numba's pipelines with the mixpert passes placed in them.

nopython (NumPy operands)::

    ... untyped passes ... reconstruct_ssa
    mixpert-numpy-scalar-rules  mixpert-find-matmul-sites  mixpert-gemm-graph
    mixpert-placement  mixpert-retarget-callees  mixpert-rewrite-matmul
    ... nopython_type_inference  mixpert-native-sites  ... typed passes, lowering ...
    nopython_backend  mixpert-check-llvm-gemm

object mode (CuPy operands) places find-matmul-sites, retarget-callees and rewrite-matmul after
IR processing. ``analyse_function`` runs only the untyped part and the three analyses.

An observer (``observe``) sees the state after every pass, for ``--print-ir-after`` and timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from numba.core.compiler import (
    CompilerBase,
    DefaultPassBuilder,
    Flags,
    StateDict,
    _EarlyPipelineCompletion,
)
from numba.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba.core.typed_passes import NoPythonBackend, NopythonTypeInference
from numba.core.untyped_passes import IRProcessing, ReconstructSSA

from . import callees
from .base import numba_pass
from .callees import RetargetCallees
from .check_llvm import CheckLLVMGemm
from .find_matmul import FindMatmulSites
from .gemm_graph import BuildGemmGraph
from .movability import JudgePlacement
from .native_sites import ReportNativeSites
from .record import CompileRecord, record_of
from .rewrite_matmul import RewriteMatmul
from .scalar_rules import NumpyScalarRules

Observer = Callable[[str, StateDict, float], None]  # (pass name, state, seconds)
_OBSERVER: ContextVar[Observer | None] = ContextVar("mixpert_observer", default=None)

NOPYTHON_PASSES = (
    NumpyScalarRules(),
    FindMatmulSites(),
    BuildGemmGraph(),
    JudgePlacement(),
    RetargetCallees(),
    RewriteMatmul(),
)
NUMBA_RULES_PASSES = NOPYTHON_PASSES[1:]  # scalar_rules="numba": Numba's own promotion
OBJECT_PASSES = (FindMatmulSites(), RetargetCallees("object"), RewriteMatmul("object"))
ANALYSIS_PASSES = (FindMatmulSites(), BuildGemmGraph(), JudgePlacement())
PASS_NAMES = tuple(
    f"mixpert-{p.name}" for p in (*NOPYTHON_PASSES, ReportNativeSites(), CheckLLVMGemm())
)


@contextmanager
def observe(observer: Observer) -> Iterator[None]:
    """Call ``observer`` after every pass of every compile started in the body."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


class _ObservedPassManager(PassManager):
    def __init__(self, pm: PassManager, observer: Observer):
        super().__init__(pm.pipeline_name)
        self.passes = list(pm.passes)
        self._observer = observer

    def _runPass(self, index: int, pss: Any, internal_state: StateDict) -> None:  # noqa: N802
        start = time.perf_counter()
        super()._runPass(index, pss, internal_state)
        self._observer(pss.name(), internal_state, time.perf_counter() - start)


def _insert_after(pm: PassManager, anchor: type, passes: tuple) -> None:
    for mixpert_pass in passes:
        cls = numba_pass(mixpert_pass)
        pm.add_pass_after(cls, anchor)
        anchor = cls


def _finish(pm: PassManager) -> list[PassManager]:
    observer = _OBSERVER.get()
    if observer is not None:
        pm = _ObservedPassManager(pm, observer)
    pm.finalize()
    return [pm]


class MixpertCompiler(CompilerBase):
    """Numba's nopython pipeline plus the mixpert passes."""

    passes: tuple = NOPYTHON_PASSES

    def define_pipelines(self) -> list[PassManager]:
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        _insert_after(pm, ReconstructSSA, self.passes)
        pm.add_pass_after(numba_pass(ReportNativeSites(), stage="analysis"), NopythonTypeInference)
        pm.add_pass_after(numba_pass(CheckLLVMGemm(), stage="lowering"), NoPythonBackend)
        return _finish(pm)


class NumbaRulesCompiler(MixpertCompiler):
    """``MixpertCompiler`` without ``numpy-scalar-rules``: Numba's promotion of literals."""

    passes = NUMBA_RULES_PASSES


class MixpertObjectCompiler(CompilerBase):
    """Numba's object-mode pipeline plus the mixpert passes (for CuPy operands)."""

    def define_pipelines(self) -> list[PassManager]:
        pm = DefaultPassBuilder.define_objectmode_pipeline(self.state)
        _insert_after(pm, IRProcessing, OBJECT_PASSES)
        return _finish(pm)


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopWithRecord(FunctionPass):
    _name = "mixpert-stop"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: StateDict) -> bool:
        raise _EarlyPipelineCompletion(record_of(state))


class AnalysisCompiler(CompilerBase):
    """The untyped pipeline up to SSA, the analyses, then stop: ops, graph and placement, no
    code."""

    passes: tuple = ANALYSIS_PASSES

    def define_pipelines(self) -> list[PassManager]:
        pm = DefaultPassBuilder.define_untyped_pipeline(self.state)
        _insert_after(pm, ReconstructSSA, self.passes)
        pm.add_pass_after(_StopWithRecord, numba_pass(self.passes[-1]))
        return _finish(pm)


class UntypedRewriteCompiler(AnalysisCompiler):
    """As ``AnalysisCompiler``, with the rewrite too: the rewritten untyped IR, for inspection."""

    passes = NOPYTHON_PASSES


def analyse_function(py_func: Any, rewrite: bool = False) -> CompileRecord:
    """Ops, graph and summary of ``py_func`` (and its jitted callees), without compiling it.

    ``rewrite=True`` also runs retarget-callees and rewrite-matmul (for inspection).
    """
    from numba.core import bytecode, types
    from numba.core.registry import cpu_target

    # Untyped passes ignore argument types; FixupArgs only checks their number.
    nargs = bytecode.FunctionIdentity.from_function(py_func).arg_count
    compiler_class = UntypedRewriteCompiler if rewrite else AnalysisCompiler
    compiler = compiler_class(
        cpu_target.typing_context,
        cpu_target.target_context,
        None,
        (types.pyobject,) * nargs,
        None,
        Flags(),
        {},
    )
    return compiler.compile_extra(py_func)


# callees.summary_of analyses a callee with this pipeline (which holds gemm-graph, its caller)
callees.install(analyse=lambda py_func: analyse_function(py_func).summary)

"""Calls into other jitted functions: their summaries, and pass ``retarget-callees``.

A plain ``@njit`` callee that multiplies matrices (itself or further down) is recompiled with the
mixpert pipeline: the pass points the caller's global at a mixpert dispatcher of the same Python
function and options. In object mode (CuPy operands) every jitted callee is swapped for its
object-mode mixpert version, since nopython code cannot take CuPy arrays.

Both need what sits above this module: a callee's summary comes from the analysis pipeline
(``pipeline.analyse_function``), its variant from a dispatcher compiling with the pipeline this
pass is part of (``dispatcher.variant_for``). Those modules ``install`` them when imported, so
this one imports neither and the passes form no import circle (the recursion is the compiler's:
analysing or compiling a function analyses or compiles its callees).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from numba.core import ir
from numba.core.compiler import StateDict
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

from .dataflow import FunctionSummary
from .record import record_of

Mode = Literal["nopython", "object"]

_SUMMARIES: dict[Any, FunctionSummary] = {}
_IN_PROGRESS: set[Any] = set()


@dataclass
class _Installed:
    analyse: Callable[[Any], FunctionSummary | None] | None = None  # py_func -> its summary
    variant_for: Callable[[Any, Mode], Any] | None = None  # callee, mode -> mixpert dispatcher


_INSTALLED = _Installed()


def install(
    analyse: Callable[[Any], FunctionSummary | None] | None = None,
    variant_for: Callable[[Any, Mode], Any] | None = None,
) -> None:
    """Give this module the analysis of a Python function and the factory of mixpert dispatchers
    for callees (``pipeline`` and ``dispatcher`` do, at import; see the module docstring)."""
    if analyse is not None:
        _INSTALLED.analyse = analyse
    if variant_for is not None:
        _INSTALLED.variant_for = variant_for


def _need(what: str) -> Any:
    found = getattr(_INSTALLED, what)
    if found is None:  # importing mixpert imports both; only a bare passes module can miss them
        raise RuntimeError(f"passes.callees: no {what} installed; import mixpert.passes.dispatcher")
    return found


def python_function(obj: object) -> Any | None:
    """The Python function behind a jitted callee (Numba dispatcher or mixpert function)."""
    if isinstance(obj, Dispatcher):
        return obj.py_func
    return getattr(obj, "__mixpert_py_func__", None)


def remember(py_func: Any, summary: FunctionSummary) -> None:
    _SUMMARIES[py_func] = summary


def summary_of(obj: object) -> FunctionSummary | None:
    """The summary of a jitted callee (computed once, untyped), or None for anything else.

    None also for a function whose summary is being computed (recursion): the caller then treats
    the call conservatively.
    """
    py_func = python_function(obj)
    if py_func is None:
        return None
    summary = _SUMMARIES.get(py_func)
    if summary is not None:
        return summary
    # Under Numba's (reentrant) compiler lock: threads asking at once wait for one analysis,
    # and _IN_PROGRESS only ever holds this thread's recursion.
    with global_compiler_lock:
        if py_func in _IN_PROGRESS:
            return None
        summary = _SUMMARIES.get(py_func)
        if summary is None:
            analyse = _need("analyse")
            _IN_PROGRESS.add(py_func)
            try:
                summary = analyse(py_func)
            finally:
                _IN_PROGRESS.discard(py_func)
            assert summary is not None
            _SUMMARIES[py_func] = summary
    return summary


def _replacement(value: object, mode: Mode) -> object | None:
    variant_for = _need("variant_for")
    if isinstance(value, Dispatcher) and getattr(value, "mixpert_mode", None) == mode:
        return None  # already compiled by mixpert in this mode
    if mode == "object":
        return variant_for(value, "object") if python_function(value) is not None else None
    if isinstance(value, Dispatcher) and getattr(value, "mixpert_mode", None) is None:
        summary = summary_of(value)
        if summary is not None and summary.ops:
            return variant_for(value, "nopython")
    return None


@dataclass(frozen=True)
class RetargetCallees:
    mode: Mode = "nopython"
    name: str = "retarget-callees"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        func_ir = state.func_ir
        changed = False
        for block in func_ir.blocks.values():
            for stmt in block.body:
                if not isinstance(stmt, ir.Assign):
                    continue
                value = stmt.value
                if not isinstance(value, (ir.Global, ir.FreeVar)):
                    continue
                new = _replacement(value.value, self.mode)
                if new is None:
                    continue
                replaced: ir.Global | ir.FreeVar | ir.Const
                if self.mode == "object":  # loaded by name at run time: pass the object itself
                    replaced = ir.Const(new, value.loc)
                elif isinstance(value, ir.Global):
                    replaced = ir.Global(value.name, new, value.loc)
                else:
                    replaced = ir.FreeVar(value.index, value.name, new, value.loc)
                stmt.value = replaced
                defs = func_ir._definitions[stmt.target.name]
                func_ir._definitions[stmt.target.name] = [
                    replaced if d is value else d for d in defs
                ]
                record.callees[python_function(new).__qualname__] = f"mixpert {self.mode}"
                changed = True
        return changed

"""Pass ``native-sites``: which product sites compiled code runs natively, and why.

After type inference the operand types of every site are known. A site whose operands are not
two 2-D float32 arrays keeps Numba's own product (the stubs' rule); this pass writes the reason
into the compile record (``native_reasons``: shown by ``mixpert.inspect``), and warns once per
signature when a function that takes float32 arrays sends none of its products to the runtime,
naming the sites, so that nothing is skipped silently. It also gives Numba's own
``NumbaPerformanceWarning`` for a site whose operands are not known to be contiguous, where
numba.njit would compile the product and warn: once per compile, at the site's line, whatever
Numba typed before (its own warning comes only the first time a process types those operands,
and mixpert's stubs never let it come from inside them).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from numba.core import config, ir, types
from numba.core.compiler import StateDict
from numba.core.errors import NumbaPerformanceWarning

from .numpy_products import numba_multiplies, numba_writes_out
from .record import CompileRecord, record_of


class NotEmulatedWarning(UserWarning):
    """A function with float32 array arguments whose products all run natively."""


def native_reason(a: types.Type, b: types.Type) -> str | None:
    """Why a product of these operand types is not emulated (None: it is)."""
    for t in (a, b):
        if not isinstance(t, types.Array):
            return f"operand of type {t} is not an array"
    if 1 in (a.ndim, b.ndim):
        return "matrix-vector product (a 1-D operand)"
    if 0 in (a.ndim, b.ndim):
        return "a 0-D operand (not a matrix product)"
    if a.dtype != types.float32 or b.dtype != types.float32:
        return f"{a.dtype} x {b.dtype} operands (mixpert emulates float32 products)"
    return None


def _is_float64_array(t: types.Type) -> bool:
    return isinstance(t, types.Array) and t.dtype == types.float64


def why_float64(func_ir: ir.FunctionIR, typemap: dict, var: ir.Var, depth: int = 6) -> str:
    """What made a float64 operand float64, as the user would say it ("the Python float 0.0 at
    line 4 made `h` float64"), from its definitions in the IR; "" when nothing is found (a
    float64 argument, or a cause further away than ``depth`` steps)."""
    name = var.name.split(".")[0]
    label = f"`{name}`" if not name.startswith("$") else "an operand"
    seen: set[str] = set()
    frontier = [var]
    for _ in range(depth):
        following = []
        for v in frontier:
            if v.name in seen:
                continue
            seen.add(v.name)
            try:
                definition = func_ir.get_definition(v)
            except KeyError:  # defined more than once (a loop, a branch)
                continue
            if isinstance(definition, ir.Arg) and _is_float64_array(typemap.get(v.name)):
                return f"{label} is float64 because argument `{definition.name}` is"
            if isinstance(definition, (ir.Const, ir.FreeVar, ir.Global)) and isinstance(
                definition.value, float
            ):
                return (
                    f"the Python float {definition.value!r} at line {definition.loc.line} made "
                    f"{label} float64 (scalar_rules='numba'; the default 'numpy' keeps float32)"
                )
            if isinstance(definition, ir.Expr):
                following += [u for u in definition.list_vars() if _carries_float64(typemap, u)]
        frontier = following
    return ""


def _carries_float64(typemap: dict, var: ir.Var) -> bool:
    t = typemap.get(var.name)
    return t == types.float64 or _is_float64_array(t)


@dataclass(frozen=True)
class ReportNativeSites:
    name: str = "native-sites"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        typemap = state.typemap
        for site in record.sites:
            reason = native_reason(typemap[site.lhs.name], typemap[site.rhs.name])
            if reason is not None:
                causes = [
                    why_float64(state.func_ir, typemap, var)
                    for var in (site.lhs, site.rhs)
                    if _is_float64_array(typemap[var.name])
                ]
                record.native_reasons[site.op.op_id] = "; ".join(
                    [reason, *(c for c in causes if c)]
                )
        _contiguity_warnings(record, typemap)
        takes_float32 = any(
            isinstance(t, types.Array) and t.dtype == types.float32 for t in state.args
        )
        ops = {site.op.op_id for site in record.sites}  # (copies of one product: one op)
        if ops and len(record.native_reasons) == len(ops) and takes_float32:
            listed = "; ".join(f"{op}: {why}" for op, why in record.native_reasons.items())
            fid = state.func_id
            warnings.warn_explicit(
                f"mixpert: {fid.func_qualname} takes float32 arrays but none of its products "
                f"reaches the runtime ({listed})",
                NotEmulatedWarning,
                fid.filename,
                fid.firstlineno,
            )
        return False


def _contiguity_warnings(record: CompileRecord, typemap: dict) -> None:
    """Numba's "... is faster on contiguous arrays" for each site numba.njit would compile and
    warn about (its message, category and place), once per compile."""
    if config.DISABLE_PERFORMANCE_WARNINGS:
        return
    given = set()
    for site in record.sites:
        if site.numba_name is None:
            continue
        a, b = typemap[site.lhs.name], typemap[site.rhs.name]
        out = typemap[site.out.name] if site.out is not None else None
        compiles = numba_multiplies(a, b) if out is None else numba_writes_out(a, b, out)
        if not compiles or all(x.layout in "CF" for x in (a, b, out) if x is not None):
            continue
        message = f"{site.numba_name} is faster on contiguous arrays, called on {(a, b)}"
        if (site.op.file, site.op.line, message) not in given:
            given.add((site.op.file, site.op.line, message))
            warning = NumbaPerformanceWarning(message)
            warnings.warn_explicit(warning, NumbaPerformanceWarning, site.op.file, site.op.line)

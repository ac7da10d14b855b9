"""Pass ``native-sites``: which product sites compiled code runs natively, and why.

After type inference the operand types of every site are known. A site whose operands are not
two 2-D float32 arrays keeps Numba's own product (the stubs' rule); this pass writes the reason
into the compile record (``native_reasons``: shown by ``mixpert.inspect``), and warns once per
signature when a function that takes float32 arrays sends none of its products to the runtime,
naming the sites, so that nothing is skipped silently.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from numba.core import ir, types
from numba.core.compiler import StateDict

from .record import record_of


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
        takes_float32 = any(
            isinstance(t, types.Array) and t.dtype == types.float32 for t in state.args
        )
        if record.sites and len(record.native_reasons) == len(record.sites) and takes_float32:
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

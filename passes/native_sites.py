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

from numba.core import types
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


@dataclass(frozen=True)
class ReportNativeSites:
    name: str = "native-sites"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        typemap = state.typemap
        for site in record.sites:
            reason = native_reason(typemap[site.lhs.name], typemap[site.rhs.name])
            if reason is not None:
                record.native_reasons[site.op.op_id] = reason
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

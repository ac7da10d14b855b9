"""Matmul sites: where a function multiplies matrices, and the stable op id each site gets.

A site is one ``a @ b``, ``np.dot(a, b)``, ``np.matmul(a, b)`` or ``a.dot(b)`` in a function's
untyped Numba IR. Its op id is ``module:qualname:line:ordinal`` (ordinal counts the sites of one
source line in evaluation order), so ids survive edits elsewhere in the file and are the same in
every process. Compiled code carries the id's op index (``mixpert.execution.op_ids``), a constant.
"""

from __future__ import annotations

import linecache
import operator
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from numba.core import ir
from numba.core.ir_utils import find_callname, guard

from mixpert.execution.op_ids import op_index

# How the site was written; it decides which operation non-emulated operands fall back to.
SiteKind = Literal["matmul", "dot", "method_dot"]


@dataclass(frozen=True)
class OpInfo:
    """What inspection and the tuner know about one op (one matmul site)."""

    op_id: str
    module: str
    qualname: str
    file: str
    line: int
    ordinal: int
    kind: SiteKind
    source: str

    @property
    def op_index(self) -> int:
        return op_index(self.op_id)


@dataclass(frozen=True)
class Site:
    """One site in one function's IR: the op plus where its statement and operands are."""

    op: OpInfo
    stmt: ir.Assign
    lhs: ir.Var
    rhs: ir.Var


def classify(func_ir: ir.FunctionIR, expr: ir.Expr) -> tuple[SiteKind, ir.Var, ir.Var] | None:
    """(kind, lhs, rhs) when ``expr`` is a 2-operand matrix product, else None."""
    if expr.op == "binop" and expr.fn is operator.matmul:
        return "matmul", expr.lhs, expr.rhs
    if expr.op != "call" or expr.kws or expr.vararg or expr.varkwarg:
        return None
    name = guard(find_callname, func_ir, expr)
    if name is None:
        return None
    attr, base = name
    if base == "numpy" and attr in ("dot", "matmul") and len(expr.args) == 2:
        return ("dot" if attr == "dot" else "matmul"), expr.args[0], expr.args[1]
    if attr == "dot" and isinstance(base, ir.Var) and len(expr.args) == 1:
        return "method_dot", base, expr.args[0]
    return None


def find_sites(func_ir: ir.FunctionIR) -> list[Site]:
    """Every matmul site of ``func_ir``, in block then statement order (deterministic)."""
    fid = func_ir.func_id
    per_line: dict[int, int] = defaultdict(int)
    found: list[tuple[int, ir.Assign, tuple[SiteKind, ir.Var, ir.Var]]] = []
    for label in sorted(func_ir.blocks):
        for stmt in func_ir.blocks[label].body:
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr):
                hit = classify(func_ir, stmt.value)
                if hit is not None:
                    found.append((stmt.loc.line, stmt, hit))
    # Ordinals follow source order within a line, whatever order the blocks were laid out in.
    found.sort(key=lambda item: item[0])
    sites = []
    for line, stmt, (kind, lhs, rhs) in found:
        ordinal = per_line[line]
        per_line[line] += 1
        op_id = f"{fid.modname}:{fid.func_qualname}:{line}:{ordinal}"
        source = linecache.getline(fid.filename, line).strip()
        qualname = fid.func_qualname
        info = OpInfo(op_id, fid.modname, qualname, fid.filename, line, ordinal, kind, source)
        sites.append(Site(info, stmt, lhs, rhs))
    return sites

"""Matmul sites: where a function multiplies matrices, and the stable op id each site gets.

A site is one ``a @ b``, ``np.dot(a, b)`` (also with ``out``), ``np.matmul(a, b)`` or ``a.dot(b)``
(``a.T.dot(b)`` too) in a function's
untyped Numba IR. Its op id is ``qualname:ordinal``: the function's qualified name and the site's
place among the function's sites in source order (line, then evaluation order). Neither the module
name (``__main__`` when the file runs as a script) nor line numbers enter it, so ids are the same
imported or run, in every process, and across edits that add or move lines. ``source_hash``, a
hash of the product's source line, lets a plan see that a product itself changed. Compiled code
carries the id's op index (``mixpert.execution.op_ids``), a constant.
"""

from __future__ import annotations

import hashlib
import linecache
import operator
from dataclasses import dataclass
from typing import Literal

from numba.core import ir
from numba.core.ir_utils import find_callname, guard

from mixpert.execution.op_ids import op_index

# How the site was written; it decides which operation non-emulated operands fall back to.
SiteKind = Literal["matmul", "dot", "method_dot", "dot_out"]


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
    def source_hash(self) -> str:
        """Hash of the product's source text (whitespace at the ends ignored)."""
        return source_hash(self.source)

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
    out: ir.Var | None = None  # np.dot(a, b, out): the array the product is written into


Found = tuple[SiteKind, ir.Var, ir.Var, "ir.Var | None"]


def classify(func_ir: ir.FunctionIR, expr: ir.Expr) -> Found | None:
    """(kind, lhs, rhs, out) when ``expr`` is a 2-operand matrix product, else None."""
    if expr.op == "binop" and expr.fn is operator.matmul:
        return "matmul", expr.lhs, expr.rhs, None
    if expr.op != "call" or expr.vararg or expr.varkwarg:
        return None
    name = guard(find_callname, func_ir, expr)
    if name is None:
        return None
    attr, base = name
    kws = dict(expr.kws)
    if base == "numpy" and attr == "dot" and (len(expr.args) == 3 or set(kws) == {"out"}):
        out = expr.args[2] if len(expr.args) == 3 else kws["out"]
        if len(expr.args) + len(kws) == 3:
            return "dot_out", expr.args[0], expr.args[1], out
    if kws:
        return None
    if base == "numpy" and attr in ("dot", "matmul") and len(expr.args) == 2:
        return ("dot" if attr == "dot" else "matmul"), expr.args[0], expr.args[1], None
    if len(expr.args) == 1:  # x.dot(w), x.T.dot(w), t.dot(w): the object the method is read from
        method = guard(func_ir.get_definition, expr.func)
        if isinstance(method, ir.Expr) and method.op == "getattr" and method.attr == "dot":
            return "method_dot", method.value, expr.args[0], None
    return None


def source_hash(source: str) -> str:
    return hashlib.blake2b(source.strip().encode(), digest_size=6).hexdigest()


def find_sites(func_ir: ir.FunctionIR) -> list[Site]:
    """Every matmul site of ``func_ir``, in source order (deterministic)."""
    fid = func_ir.func_id
    found: list[tuple[int, ir.Assign, Found]] = []
    for label in sorted(func_ir.blocks):
        for stmt in func_ir.blocks[label].body:
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr):
                hit = classify(func_ir, stmt.value)
                if hit is not None:
                    found.append((stmt.loc.line, stmt, hit))
    # Ordinals follow source lines, then evaluation order within a line, whatever order the
    # blocks were laid out in (the sort is stable).
    found.sort(key=lambda item: item[0])
    sites = []
    for ordinal, (line, stmt, (kind, lhs, rhs, out)) in enumerate(found):
        op_id = f"{fid.func_qualname}:{ordinal}"
        source = linecache.getline(fid.filename, line).strip()
        qualname = fid.func_qualname
        info = OpInfo(op_id, fid.modname, qualname, fid.filename, line, ordinal, kind, source)
        sites.append(Site(info, stmt, lhs, rhs, out))
    return sites

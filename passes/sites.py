"""Matmul sites: where a function multiplies matrices, and the stable op id each site gets.

A site is one ``a @ b``, ``np.dot(a, b)`` (also with ``out``), ``np.matmul(a, b)`` or ``a.dot(b)``
(``a.T.dot(b)`` too) or a two-operand ``np.einsum`` that is one matrix product
(``'ij,jk->ik'``, ``'ik,jk->ij'``, ...) in a function's
untyped Numba IR. Its op id is ``qualname:ordinal``: the function's qualified name and the site's
place among the function's sites in source order (line, then evaluation order; the copies of one
source product that CPython compiles twice share it: ``copied_lines``). Neither the module
name (``__main__`` when the file runs as a script) nor line numbers enter it, so ids are the same
imported or run, in every process, and across edits that add or move lines. ``source_hash``, a
hash of the product's source line, lets a plan see that a product itself changed. Compiled code
carries the id's op index (``mixpert.execution.op_ids``), a constant.
"""

from __future__ import annotations

import dis
import hashlib
import linecache
import operator
from dataclasses import dataclass
from typing import Any, Literal

from numba.core import ir
from numba.core.ir_utils import find_callname, guard

from mixpert.execution.op_ids import op_index

# How the site was written; it decides which operation non-emulated operands fall back to.
SiteKind = Literal["matmul", "dot", "method_dot", "dot_out", "imatmul"]


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
    # Operands (A, B) that stay the same while the loops around the site run, which the runtime
    # packs once per call of the function (``loop_invariance``).
    invariant: tuple[bool, bool] = (False, False)

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
    transposed: tuple[bool, bool] = (False, False)  # einsum: the product is lhs(.T) @ rhs(.T)
    # How Numba's own product of this spelling names itself in its warnings ("'@'",
    # "np.dot()"); None where Numba has no such product (np.matmul, einsum, @=).
    numba_name: str | None = None


Found = tuple[SiteKind, ir.Var, ir.Var, "ir.Var | None", tuple[bool, bool]]
STRAIGHT = (False, False)


def einsum_product(subscripts: str) -> tuple[int, int, bool, bool] | None:
    """For a two-operand einsum that is one matrix product: (index of the left operand, of the
    right one, whether each is transposed), e.g. 'ik,jk->ij' -> (0, 1, False, True)."""
    text = subscripts.replace(" ", "")
    if "->" not in text or "." in text:
        return None
    inputs, output = text.split("->")
    specs = inputs.split(",")
    if len(specs) != 2 or len(output) != 2 or any(len(x) != 2 for x in specs):
        return None
    p, q = output
    shared = set(specs[0]) & set(specs[1])
    if len(shared) != 1 or p == q or len(set(specs[0])) != 2 or len(set(specs[1])) != 2:
        return None
    (c,) = shared
    left = next((i for i, x in enumerate(specs) if p in x and c in x), None)
    right = next((i for i, x in enumerate(specs) if q in x and c in x), None)
    if left is None or right is None or left == right or c in (p, q):
        return None
    return left, right, specs[left] == c + p, specs[right] == q + c


def classify(func_ir: ir.FunctionIR, expr: ir.Expr) -> Found | None:
    """(kind, lhs, rhs, out, transposed) when ``expr`` is a 2-operand matrix product."""
    if expr.op == "binop" and expr.fn is operator.matmul:
        return "matmul", expr.lhs, expr.rhs, None, STRAIGHT
    if expr.op == "inplace_binop" and expr.fn is operator.imatmul:  # a @= b
        return "imatmul", expr.lhs, expr.rhs, None, STRAIGHT
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
            return "dot_out", expr.args[0], expr.args[1], out, STRAIGHT
    if kws:
        return None
    if base == "numpy" and attr in ("dot", "matmul") and len(expr.args) == 2:
        return ("dot" if attr == "dot" else "matmul"), expr.args[0], expr.args[1], None, STRAIGHT
    if base == "numpy" and attr == "einsum" and len(expr.args) == 3:
        subscripts = guard(func_ir.get_definition, expr.args[0])
        if isinstance(subscripts, ir.Const) and isinstance(subscripts.value, str):
            product = einsum_product(subscripts.value)
            if product is not None:
                left, right, t_left, t_right = product
                operands = expr.args[1:]
                return "matmul", operands[left], operands[right], None, (t_left, t_right)
    if len(expr.args) == 1:  # x.dot(w), x.T.dot(w), t.dot(w): the object the method is read from
        method = guard(func_ir.get_definition, expr.func)
        if isinstance(method, ir.Expr) and method.op == "getattr" and method.attr == "dot":
            return "method_dot", method.value, expr.args[0], None, STRAIGHT
    return None


def numba_name(kind: SiteKind, expr: ir.Expr) -> str | None:
    """The name Numba's own product of this spelling warns under, or None (Numba has none)."""
    if kind == "matmul":
        return "'@'" if expr.op == "binop" else None
    if kind == "dot_out":
        return "np.vdot()"  # sic: Numba's np.dot(a, b, out) warns under this name
    return "np.dot()" if kind in ("dot", "method_dot") else None


def source_hash(source: str) -> str:
    return hashlib.blake2b(source.strip().encode(), digest_size=6).hexdigest()


def find_sites(func_ir: ir.FunctionIR) -> list[Site]:
    """Every matmul site of ``func_ir``, in source order (deterministic). The copies of one
    source product that the bytecode holds twice (``copied_lines``) are sites of one op."""
    fid = func_ir.func_id
    copied = copied_lines(fid.func)
    found: list[tuple[int, tuple[Any, ...], ir.Assign, Found]] = []
    for label in sorted(func_ir.blocks):
        on_line: dict[int, int] = {}  # line -> its sites in this block so far
        for stmt in func_ir.blocks[label].body:
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr):
                hit = classify(func_ir, stmt.value)
                if hit is not None:
                    line = stmt.loc.line
                    nth = on_line[line] = on_line.get(line, -1) + 1
                    # a copy takes the same place on its line in its own block, with operands
                    # of the same making
                    where: tuple[Any, ...] = (line, nth, label)
                    if line in copied:
                        operands = (made_of(func_ir, hit[1]), made_of(func_ir, hit[2]))
                        where = (line, nth, hit[0], *operands)
                    found.append((line, where, stmt, hit))
    # Ordinals follow source lines, then evaluation order within a line, whatever order the
    # blocks were laid out in (the sort is stable).
    found.sort(key=lambda item: item[0])
    ops: dict[tuple[Any, ...], OpInfo] = {}
    sites = []
    for line, where, stmt, (kind, lhs, rhs, out, transposed) in found:
        info = ops.get(where)
        if info is None:
            ordinal = len(ops)
            op_id = f"{fid.func_qualname}:{ordinal}"
            source = linecache.getline(fid.filename, line).strip()
            qualname = fid.func_qualname
            info = OpInfo(op_id, fid.modname, qualname, fid.filename, line, ordinal, kind, source)
            ops[where] = info
        name = numba_name(kind, stmt.value)
        sites.append(Site(info, stmt, lhs, rhs, out, transposed, name))
    return sites


def made_of(func_ir: ir.FunctionIR, var: ir.Var, depth: int = 4) -> str:
    """What an operand is, alike in every copy of its line: a variable's source name (SSA's
    versions dropped), else its defining expression, operands and all (temporaries' names
    differ between copies)."""
    if not var.name.startswith("$"):
        return var.name.split(".")[0]
    value = guard(func_ir.get_definition, var) if depth else None
    if isinstance(value, ir.Const):
        return repr(value.value)
    if isinstance(value, (ir.Global, ir.FreeVar)):
        return value.name
    if isinstance(value, ir.Expr):
        known = value._kws  # (an Expr's missing field raises KeyError, not AttributeError)
        parts = [value.op, str(known.get("fn", "")), str(known.get("attr", ""))]
        parts += [made_of(func_ir, v, depth - 1) for v in value.list_vars()]
        return "(" + " ".join(parts) + ")"
    return "?"


# Instructions whose copies say a line's products were compiled twice: ``@`` and calls (a
# lone return or jump is copied without its line's work).
_PRODUCT_OPS = frozenset({"BINARY_OP", "CALL", "CALL_KW", "CALL_FUNCTION_EX"})


def copied_lines(func: Any) -> frozenset[int]:
    """Lines part of whose bytecode CPython compiled twice: an ``@`` or a call at one source
    position (line and columns) more than once. CPython 3.12 copies a small block that ends in
    ``return`` into each branch that reaches it, and a loop's condition may be compiled before
    the loop and again at its end: each copy of a product there is the same source product,
    and keeps one op id (the ids then match across Python versions)."""
    code = getattr(func, "__code__", None)
    if code is None:
        return frozenset()
    seen: set[tuple[Any, ...]] = set()
    copied: set[int] = set()
    for instruction in dis.get_instructions(code):
        where = instruction.positions
        if instruction.opname not in _PRODUCT_OPS or where is None or where.col_offset is None:
            continue
        key = (instruction.opname, instruction.arg, *where)
        if key in seen:
            copied.add(where.lineno)
        seen.add(key)
    return frozenset(copied)

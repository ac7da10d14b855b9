"""Pass ``numpy-scalar-rules``: Python number literals follow NumPy 2's rules (NEP 50).

NumPy treats a Python int or float literal as *weak*: ``np.maximum(h, 0.0)``, ``x * 0.5``,
``v + 1e-8`` and ``2 * (a @ b)`` stay float32 when ``h``, ``x``, ``v``, ``a @ b`` are float32.
Numba types the literal as float64 (or int64) and promotes the result to float64, so the next
product mixes float64 and float32 and is no longer emulated. This is the one place mixpert
departs from Numba's promotion (``mixpert.jit(scalar_rules="numba")`` keeps Numba's).

The pass wraps each literal operand of an arithmetic operator or a NumPy ufunc (``np.where``
and ``np.clip`` included) in ``mixpert_weak(literal, (other operands...))``; the overload
returns the literal as float32 when the other operands are float32 (arrays or scalars) and
none is float64, and the literal unchanged otherwise. Python float *arguments* are typed before
any pass runs: ``mixpert.jit`` passes them as float32 when every floating-point array argument
is float32 (``jit.weak_float_arguments``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types
from numba.core import ir
from numba.core.compiler import StateDict
from numba.core.ir_utils import find_callname, guard
from numba.extending import overload

ARITHMETIC = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
              operator.mod, operator.pow, operator.iadd, operator.isub, operator.imul,
              operator.itruediv, operator.ifloordiv, operator.imod, operator.ipow}  # fmt: skip
# NumPy functions whose positional arguments from ``first`` on are operands of one dtype.
OPERAND_FROM = {"where": 1, "clip": 1}


def mixpert_weak(value: Any, others: tuple) -> Any:
    """``value`` as NumPy would combine it with ``others`` (plain Python: unchanged)."""
    return value


def _float_kinds(others: types.BaseTuple) -> set[types.Type]:
    kinds = set()
    for t in others.types:
        dtype = t.dtype if isinstance(t, types.Array) else t
        if isinstance(dtype, types.Float):
            kinds.add(dtype)
    return kinds


@overload(mixpert_weak)
def _weak(value, others):  # type: ignore[no-untyped-def]
    number = isinstance(value, (types.Integer, types.Float)) and not isinstance(
        value, types.Boolean
    )
    if number and _float_kinds(others) == {types.float32}:
        return lambda value, others: np.float32(value)
    return lambda value, others: value


def _literal(func_ir: ir.FunctionIR, var: ir.Var) -> bool:
    """A Python int or float literal (or its negation), not a bool."""
    try:
        value = func_ir.get_definition(var)
    except KeyError:
        return False
    if isinstance(value, ir.Const):
        return type(value.value) in (int, float)
    if (
        isinstance(value, ir.Expr)
        and value.op == "unary"
        and value.fn in (operator.neg, operator.pos)
    ):
        return _literal(func_ir, value.value)
    return False


def _int_literal(func_ir: ir.FunctionIR, var: ir.Var) -> bool:
    value = func_ir.get_definition(var)
    if isinstance(value, ir.Expr):  # a negated literal
        return _int_literal(func_ir, value.value)
    return type(value.value) is int


def _operands(func_ir: ir.FunctionIR, expr: ir.Expr) -> list[tuple[str, int]] | None:
    """Where ``expr``'s operands are: ("lhs"/"rhs", 0) for operators, ("args", i) for calls."""
    if expr.op in ("binop", "inplace_binop") and expr.fn in ARITHMETIC:
        return [("lhs", 0), ("rhs", 0)]
    if expr.op != "call" or expr.kws or expr.vararg:
        return None
    name = guard(find_callname, func_ir, expr)
    if name is None or name[1] != "numpy":
        return None
    attr = name[0]
    if attr in OPERAND_FROM:
        return [("args", i) for i in range(OPERAND_FROM[attr], len(expr.args))]
    if isinstance(getattr(np, attr, None), np.ufunc):
        return [("args", i) for i in range(len(expr.args))]
    return None


def _get(expr: ir.Expr, where: tuple[str, int]) -> ir.Var:
    field, i = where
    return expr.args[i] if field == "args" else getattr(expr, field)


def _set(expr: ir.Expr, where: tuple[str, int], var: ir.Var) -> None:
    field, i = where
    if field == "args":
        expr.args[i] = var
    else:
        setattr(expr, field, var)


@dataclass(frozen=True)
class NumpyScalarRules:
    name: str = "numpy-scalar-rules"

    def apply(self, state: StateDict) -> bool:
        func_ir = state.func_ir
        changed = False
        for block in func_ir.blocks.values():
            body: list[ir.Stmt] = []
            for stmt in block.body:
                if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr):
                    body += self._wrap(func_ir, block.scope, stmt.value, stmt.loc)
                body.append(stmt)
            changed |= len(body) != len(block.body)
            block.body = body
        return changed

    def _wrap(self, func_ir: ir.FunctionIR, scope: ir.Scope, expr: ir.Expr, loc: ir.Loc) -> list:
        places = _operands(func_ir, expr)
        if not places:
            return []
        literal = [p for p in places if _literal(func_ir, _get(expr, p))]
        if expr.op != "call" and expr.fn in (operator.pow, operator.ipow):
            # an int exponent keeps Numba's (and NumPy's) integer power: x ** 2 is x * x
            literal = [p for p in literal if not _int_literal(func_ir, _get(expr, p))]
        strong = [_get(expr, p) for p in places if p not in literal]
        if not literal or not strong:
            return []
        new: list[ir.Stmt] = []
        stub = scope.redefine("$mixpert_weak_fn", loc)
        new.append(ir.Assign(ir.Global("mixpert_weak", mixpert_weak, loc), stub, loc))
        others = scope.redefine("$mixpert_weak_others", loc)
        new.append(ir.Assign(ir.Expr.build_tuple(strong, loc), others, loc))
        for place in literal:
            weak = scope.redefine("$mixpert_weak", loc)
            call = ir.Expr.call(stub, [_get(expr, place), others], (), loc)
            new.append(ir.Assign(call, weak, loc))
            _set(expr, place, weak)
        for assign in new:
            func_ir._definitions[assign.target.name] = [assign.value]
        return new

"""Pass ``rewrite-matmul``: each site becomes ``mixpert_<kind>(op_index, a, b)``.

``$c = a @ b`` turns into::

    $mixpert_stub = global(mixpert_matmul: <function ...>)
    $mixpert_op = const(int, <op index>)
    $c = call $mixpert_stub($mixpert_op, a, b)

Both new variables are defined once, so the IR stays in SSA form. The stubs (``stubs``) keep
Numba's semantics for operands mixpert does not emulate.
"""

from __future__ import annotations

from dataclasses import dataclass

from numba.core import ir
from numba.core.compiler import StateDict
from numba.core.ir_utils import dead_code_elimination

from .record import RewriteNote, record_of
from .stubs import STUBS


@dataclass(frozen=True)
class RewriteMatmul:
    # Object mode loads an ir.Global by name from the function's module dict, where the stub is
    # not; there the stub goes in as a constant (kept in the function's environment).
    mode: str = "nopython"
    name: str = "rewrite-matmul"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        func_ir = state.func_ir
        by_stmt = {id(site.stmt): site for site in record.sites}
        for block in func_ir.blocks.values():
            body: list[ir.Stmt] = []
            for stmt in block.body:
                site = by_stmt.get(id(stmt))
                if site is None:
                    body.append(stmt)
                    continue
                loc, scope = stmt.loc, block.scope
                stub = STUBS[site.op.kind]
                stub_var = scope.redefine("$mixpert_stub", loc)
                op_var = scope.redefine("$mixpert_op", loc)
                stub_value: ir.Global | ir.Const = (
                    ir.Const(stub, loc)
                    if self.mode == "object"
                    else ir.Global(stub.__name__, stub, loc)
                )
                op_value = ir.Const(site.op.op_index, loc)
                before, old = str(stmt), stmt.value
                operands = [site.lhs, site.rhs]
                for i, transposed in enumerate(site.transposed):  # einsum's operand order
                    if transposed:
                        flipped = scope.redefine("$mixpert_t", loc)
                        value = ir.Expr.getattr(operands[i], "T", loc)
                        body.append(ir.Assign(value, flipped, loc))
                        func_ir._definitions[flipped.name] = [value]
                        operands[i] = flipped
                if site.out is not None:
                    operands.append(site.out)
                call = ir.Expr.call(stub_var, [op_var, *operands], (), loc)
                body += [ir.Assign(stub_value, stub_var, loc), ir.Assign(op_value, op_var, loc)]
                stmt.value = call
                body.append(stmt)
                func_ir._definitions[stub_var.name] = [stub_value]
                func_ir._definitions[op_var.name] = [op_value]
                defs = func_ir._definitions[stmt.target.name]
                func_ir._definitions[stmt.target.name] = [call if d is old else d for d in defs]
                after = (
                    f"{stub_var} = global({stub.__name__})\n"
                    f"{op_var} = const(int, {site.op.op_index})\n"
                    f"{stmt.target} = call {stub_var}({op_var}, {', '.join(map(str, operands))})"
                )
                record.rewrites.append(RewriteNote(site.op.op_id, before, after))
            block.body = body
        if record.sites and self.mode == "nopython":
            # The callees the sites replaced (np.matmul, which Numba cannot type) are now
            # loaded for nothing: drop such dead loads so typing never sees them.
            dead_code_elimination(func_ir)
        return bool(record.sites)

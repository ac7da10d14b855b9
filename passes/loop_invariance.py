"""Loop-invariant operands: which operands of a product in a loop stay the same array, unchanged,
for as long as the loops around it run, so the runtime may pack them once per call.

An operand of a site inside loops is invariant when, over the outermost loop around the site:

- its variable is defined outside that loop (an argument, or computed before the loop), or is a
  transposed view (``.T``) of such a variable made inside it (``q @ refs.T``);
- no statement in that loop can write into storage the variable may share (``dataflow``'s
  may-alias classes: views, slices, phis, containers, call results): item and slice
  assignments, in-place operators, ufunc outputs and ``out=``, NumPy's mutating functions and
  methods, a product written into an array (``np.dot(a, b, out)``, ``a @= b``) (``writes``);
- the loop calls nothing opaque: no Python or jitted function, no unknown method, no ``*args``
  call. Such a call may write any array it can reach (in object mode, through globals too),
  so every operand in that loop is left alone.

An outermost loop runs at most once per call (re-entering it would need an enclosing loop), so
every run of the site within one call reads the same memory with the same contents. What the
IR cannot show is checked at run time (``mixpert.execution.kept_packs``): arguments that overlap
in memory or hold arrays in containers, and functions that may re-enter themselves.
"""

from __future__ import annotations

from numba.core import ir
from numba.core.analysis import compute_cfg_from_blocks

from .dataflow import SummaryOf, may_alias
from .sites import Site
from .writes import call_writes

TRANSPOSED_VIEWS = frozenset(["T"])  # attributes that are a view of the same memory

Invariance = tuple[bool, bool]


def invariant_operands(
    func_ir: ir.FunctionIR, sites: list[Site], summary_of: SummaryOf
) -> dict[int, Invariance]:
    """id(site statement) -> (A invariant, B invariant) for each site of ``func_ir``."""
    loops = list(compute_cfg_from_blocks(func_ir.blocks).loops().values())
    block_of = {id(stmt): label for label, block in func_ir.blocks.items() for stmt in block.body}
    defined_in: dict[str, int] = {}
    definition: dict[str, ir.Assign] = {}
    for label, block in func_ir.blocks.items():
        for stmt in block.find_insts(ir.Assign):
            defined_in[stmt.target.name] = label
            definition[stmt.target.name] = stmt
    root = may_alias(func_ir, sites, summary_of)
    site_of = {id(site.stmt): site for site in sites}
    written_in: dict[int, set[str]] = {}  # block -> alias classes its statements may write
    opaque_in: set[int] = set()  # blocks with an opaque call
    for label, block in func_ir.blocks.items():
        written_in[label] = set()
        for stmt in block.body:
            vars_, opaque = _written(func_ir, stmt, site_of)
            written_in[label] |= {root(v.name) for v in vars_}
            if opaque:
                opaque_in.add(label)
    result: dict[int, Invariance] = {}
    for site in sites:
        label = block_of[id(site.stmt)]
        body: set[int] = set()
        for loop in loops:
            if label in loop.body:
                body |= loop.body  # nested loops: the union is the outermost one's body
        if not body or body & opaque_in:
            result[id(site.stmt)] = (False, False)
            continue
        written = set().union(*(written_in[lb] for lb in body))

        def invariant(var: ir.Var, body: set[int] = body, written: set[str] = written) -> bool:
            return root(var.name) not in written and _defined_outside(
                var, body, defined_in, definition
            )

        result[id(site.stmt)] = (invariant(site.lhs), invariant(site.rhs))
    return result


def _defined_outside(
    var: ir.Var, body: set[int], defined_in: dict[str, int], definition: dict[str, ir.Assign]
) -> bool:
    """``var`` is bound outside ``body``, or inside it to a copy or ``.T`` of such a variable."""
    seen: set[str] = set()
    while var.name not in seen:
        seen.add(var.name)
        if defined_in.get(var.name) not in body:
            return var.name in defined_in  # an undefined name (a free variable) proves nothing
        value = definition[var.name].value
        if isinstance(value, ir.Var):
            var = value
        elif (
            isinstance(value, ir.Expr) and value.op == "getattr" and value.attr in TRANSPOSED_VIEWS
        ):
            var = value.value
        else:
            return False
    return False


def _written(
    func_ir: ir.FunctionIR, stmt: ir.Stmt, site_of: dict[int, Site]
) -> tuple[list[ir.Var], bool]:
    """Variables whose storage ``stmt`` may write into, and whether it is an opaque call."""
    if isinstance(stmt, (ir.SetItem, ir.StaticSetItem, ir.SetAttr, ir.DelItem)):
        return [stmt.target], False
    if not isinstance(stmt, ir.Assign) or not isinstance(stmt.value, ir.Expr):
        return [], False
    expr = stmt.value
    if expr.op == "inplace_binop":
        return [expr.lhs], False
    if expr.op != "call":
        return [], False
    site = site_of.get(id(stmt))
    if site is not None:  # a product writes only its ``out`` (np.dot(a, b, out))
        return ([] if site.out is None else [site.out]), False
    found = call_writes(func_ir, expr, lambda callee: None)  # every callee is opaque here
    return list(found.vars), found.opaque

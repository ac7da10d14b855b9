"""GEMM dependency analysis: which op outputs can reach which op inputs, through any code.

A flow-insensitive taint analysis over one function's SSA Numba IR. A token is an op id (a site's
output) or a ``Param`` (the function's i-th argument). Each variable carries the tokens that can
flow into it: an op's result carries only its own id (the graph records direct dependencies), other
expressions carry the union of their operands' tokens, and a write into an array (``x[i] = v``,
``x += v``, a callee writing an argument, ``out=``) adds ``v``'s tokens to every variable that may
share storage with ``x`` (may-alias classes: views, slices, tuples, phis). Iterating to a fixpoint
handles loops, so a loop-carried product gets a self edge. The result is a ``FunctionSummary``,
which callers use to carry dependencies through calls (arguments into callee ops, callee ops into
the result, callee writes into arguments).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from numba.core import ir
from numba.core.analysis import compute_cfg_from_blocks
from numba.core.ir_utils import guard

from .placement import Placement
from .sites import OpInfo, Site
from .writes import call_writes, callee_object, resolve_call


@dataclass(frozen=True)
class Param:
    index: int


Token = str | Param

# NumPy functions whose result may be a view of their first argument.
VIEW_FUNCS = frozenset(
    [
        "reshape",
        "transpose",
        "ravel",
        "asarray",
        "ascontiguousarray",
        "asfortranarray",
        "squeeze",
        "expand_dims",
        "swapaxes",
        "moveaxis",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "diagonal",
        "broadcast_to",
        "flip",
        "fliplr",
        "flipud",
        "rot90",
        "split",
        "array_split",
        "hsplit",
        "vsplit",
        "dsplit",
        "nditer",
    ]
)
# Container methods that store their arguments in the container (it then holds the arrays).
STORING_METHODS = frozenset(["append", "extend", "insert", "add", "update", "setdefault"])
VIEW_METHODS = frozenset(
    ["reshape", "transpose", "ravel", "view", "squeeze", "swapaxes", "T", "real", "imag", "flat"]
)
# NumPy functions whose result holds none of their arguments' data (shape and dtype only), and
# array attributes that are metadata, not data.
SHAPE_ONLY_FUNCS = frozenset(["empty", "zeros", "ones", "empty_like", "zeros_like", "ones_like"])
META_ATTRS = frozenset(["shape", "ndim", "size", "dtype", "strides", "itemsize", "nbytes"])
# Discrete steps: NumPy functions and array methods whose result jumps where their argument
# crosses a threshold (an index, an order, a truth value, an integer). A product that reaches
# one can change an output by more than its own error (a label flips), so the tuner holds it to
# float32 grade. Comparisons, ``where``'s condition and casts to integers count too.
DECISION_FUNCS = frozenset(
    [
        "argmin",
        "argmax",
        "argsort",
        "argpartition",
        "searchsorted",
        "where",
        "nonzero",
        "argwhere",
        "flatnonzero",
        "count_nonzero",
        "unique",
        "sign",
        "floor",
        "ceil",
        "rint",
        "trunc",
        "isclose",
        "allclose",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "equal",
        "not_equal",
        "digitize",
        "histogram",
        "bincount",
    ]
)
DECISION_METHODS = frozenset(["argmin", "argmax", "argsort", "nonzero"])
DECISION_BUILTINS = frozenset(["int", "bool", "round"])
INTEGER_KINDS = frozenset("biu")  # dtype kinds a cast rounds to: bool, signed, unsigned
COMPARISONS = frozenset(
    [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]
)


class DuplicateOpIdError(ValueError):
    """Two functions called together share a qualified name, so their op ids would collide."""


@dataclass
class FunctionSummary:
    """Ops of a function and its callees, their graph, and how the function's ports connect."""

    ops: dict[str, OpInfo] = field(default_factory=dict)
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    param_feeds: dict[int, set[str]] = field(default_factory=dict)  # arg i reaches these ops
    returns: set[Token] = field(default_factory=set)  # tokens that reach the return value
    writes: dict[int, set[Token]] = field(default_factory=dict)  # tokens written into arg i
    mutates: set[int] = field(default_factory=set)  # args it may write into (any value)
    decisions: set[Token] = field(default_factory=set)  # tokens reaching a discrete step
    # where the body runs for NumPy arguments under a GPU plan (pass ``placement``; None:
    # not judged)
    placement: Placement | None = None

    def decision_ops(self) -> frozenset[str]:
        """Ops whose results reach a discrete step (``DECISION_FUNCS``), directly or through the
        ops they feed."""
        direct = {t for t in self.decisions if isinstance(t, str) and t in self.graph}
        reach = set(direct)
        for op in direct:
            reach |= nx.ancestors(self.graph, op)
        return frozenset(reach)

    def add_op(self, op: OpInfo) -> None:
        known = self.ops.get(op.op_id)
        if known is not None and (known.file, known.line) != (op.file, op.line):
            raise DuplicateOpIdError(
                f"op id {op.op_id} names two products: {known.file}:{known.line} and "
                f"{op.file}:{op.line} (two jitted functions with the qualified name "
                f"{op.qualname!r} are called together); rename one so plans can tell them apart"
            )
        self.ops[op.op_id] = op
        self.graph.add_node(op.op_id, file=op.file, line=op.line, source=op.source)


SummaryOf = Callable[[object], "FunctionSummary | None"]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        self.parent[x] = root
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


class _Analysis:
    def __init__(
        self,
        func_ir: ir.FunctionIR,
        sites: list[Site],
        summary_of: SummaryOf,
        views_through_callees: bool = False,
    ):
        self.func_ir = func_ir
        # An analysed callee's result may be a view of its arguments (``may_alias``); the
        # graph's flows need not assume it (the callee's summary carries them).
        self.views_through_callees = views_through_callees
        self.sites = {id(site.stmt): site for site in sites}
        self.summary_of = summary_of
        self.alias = _UnionFind()
        self.taint: dict[str, set[Token]] = {}
        self.written: dict[str, set[Token]] = {}  # alias root -> tokens written into it
        self.preds: dict[str, set[Token]] = {}  # op id -> tokens reaching its operands
        self.out = FunctionSummary()
        self.changed = False
        self.exit_tests = loop_exit_tests(func_ir)

    # --- helpers -------------------------------------------------------------------------
    def tokens(self, var: ir.Var) -> set[Token]:
        own = self.taint.get(var.name, set())
        return own | self.written.get(self.alias.find(var.name), set())

    def tokens_of(self, vars_: Iterable[ir.Var]) -> set[Token]:
        result: set[Token] = set()
        for var in vars_:
            result |= self.tokens(var)
        return result

    def _add(self, table: dict, key: object, new: set[Token]) -> None:
        current = table.setdefault(key, set())
        if not new <= current:
            current |= new
            self.changed = True

    def flow(self, target: ir.Var, new: set[Token]) -> None:
        self._add(self.taint, target.name, new)

    def write(self, var: ir.Var, new: set[Token]) -> None:
        self._add(self.written, self.alias.find(var.name), new)

    def feed(self, op_id: str, new: set[Token]) -> None:
        self._add(self.preds, op_id, new)

    def _compares(self, target: ir.Var, value: ir.Expr) -> bool:
        """A comparison that is a decision (not a loop's convergence test)."""
        comparison = value.op == "binop" and value.fn in COMPARISONS
        return comparison and target.name not in self.exit_tests

    def decide(self, new: set[Token]) -> None:
        if not new <= self.out.decisions:
            self.out.decisions |= new
            self.changed = True

    def statements(self) -> Iterable[ir.Stmt]:
        for label in sorted(self.func_ir.blocks):
            yield from self.func_ir.blocks[label].body

    # --- may-alias classes (structural, computed once) ---------------------------------------
    def build_aliases(self) -> None:
        for stmt in self.statements():
            if isinstance(stmt, (ir.SetItem, ir.StaticSetItem)):  # a container holds the value
                self.alias.union(stmt.target.name, stmt.value.name)
            if not isinstance(stmt, ir.Assign):
                continue
            target, value = stmt.target.name, stmt.value
            if isinstance(value, ir.Var):
                self.alias.union(target, value.name)
            elif isinstance(value, (ir.Global, ir.FreeVar)):  # every load of one global name
                self.alias.union(target, f"$global:{value.name}")
            elif isinstance(value, ir.Expr) and id(stmt) not in self.sites:
                for var in self._aliased_operands(value):
                    self.alias.union(target, var.name)

    def _aliased_operands(self, expr: ir.Expr) -> list[ir.Var]:
        op = expr.op
        if op in ("getitem", "static_getitem", "getattr", "cast", "exhaust_iter", "getiter"):
            return [expr.value]
        if op in ("iternext", "pair_first", "pair_second"):
            return [expr.value]
        if op in ("build_tuple", "build_list", "build_set"):
            return list(expr.items)
        if op == "phi":
            return [v for v in expr.incoming_values if isinstance(v, ir.Var)]
        if op == "inplace_binop":
            return [expr.lhs]
        if op == "call":
            name = resolve_call(self.func_ir, expr)
            if name is not None and name[1] == "numpy":
                return list(expr.args[:1]) if name[0] in VIEW_FUNCS else []
            if name is not None and isinstance(name[1], ir.Var):
                method = name[0].rsplit(".", 1)[-1]
                if method in STORING_METHODS:  # lst.append(a): the list holds a
                    return [name[1], *expr.args]
                return [name[1]] if method in VIEW_METHODS else []
            if self._summary(expr) is not None and not self.views_through_callees:
                return []  # analysed callee: its summary says what flows where
            return list(expr.args)  # unknown callee: may return a view of any argument
        return []

    # --- taint fixpoint -------------------------------------------------------------------
    def run(self) -> FunctionSummary:
        self.build_aliases()
        for site in self.sites.values():
            self.out.add_op(site.op)
        self.changed = True
        while self.changed:
            self.changed = False
            for stmt in self.statements():
                self.visit(stmt)
        return self.finish()

    def visit(self, stmt: ir.Stmt) -> None:
        if isinstance(stmt, ir.Assign):
            self.assign(stmt)
        elif isinstance(stmt, (ir.SetItem, ir.StaticSetItem)):
            index = [stmt.index] if isinstance(stmt, ir.SetItem) else []
            self.write(stmt.target, self.tokens_of([stmt.value, *index]))
        elif isinstance(stmt, ir.SetAttr):
            self.write(stmt.target, self.tokens(stmt.value))
        elif isinstance(stmt, ir.Return):
            new = self.tokens(stmt.value)
            if not new <= self.out.returns:
                self.out.returns |= new
                self.changed = True

    def assign(self, stmt: ir.Assign) -> None:
        target, value = stmt.target, stmt.value
        site = self.sites.get(id(stmt))
        if site is not None:
            self.feed(site.op.op_id, self.tokens_of([site.lhs, site.rhs]))
            self.flow(target, {site.op.op_id})
            if site.out is not None:  # np.dot(a, b, out) writes the product into out
                self.write(site.out, {site.op.op_id})
            if site.op.kind == "imatmul":  # a @= b writes it into a
                self.write(site.lhs, {site.op.op_id})
        elif isinstance(value, ir.Arg):
            self.flow(target, {Param(value.index)})
        elif isinstance(value, ir.Var):
            self.flow(target, self.tokens(value))
        elif isinstance(value, ir.Expr):
            if value.op == "call":
                self.call(target, value)
            elif value.op == "getattr" and value.attr in META_ATTRS:
                pass  # a.shape carries no data of a
            else:
                if self._compares(target, value):
                    self.decide(self.tokens_of(value.list_vars()))
                if value.op == "inplace_binop":
                    self.write(value.lhs, self.tokens(value.rhs))
                self.flow(target, self.tokens_of(value.list_vars()))

    def call(self, target: ir.Var, expr: ir.Expr) -> None:
        args = list(expr.args)
        kws = dict(expr.kws)
        everything = self.tokens_of([*args, *kws.values()])
        summary = self._summary(expr)
        if summary is not None:
            self.through_callee(target, summary, args)
            return
        name = resolve_call(self.func_ir, expr)
        receiver = name[1] if name is not None and isinstance(name[1], ir.Var) else None
        if receiver is not None:
            everything |= self.tokens(receiver)
        if name is not None and name[1] == "numpy" and name[0] in SHAPE_ONLY_FUNCS:
            return
        if _is_decision(name) and target.name not in self.exit_tests:
            decided = args[:1] if name is not None and name[0] == "where" else args
            self.decide(self.tokens_of(decided) | (self.tokens(receiver) if receiver else set()))
        elif receiver is not None and _is_integer_cast(self.func_ir, name, args):
            self.decide(self.tokens(receiver))
        for var in call_writes(self.func_ir, expr, self._mutates).vars:
            self.write(var, everything)
        self.flow(target, everything)

    def through_callee(self, target: ir.Var, summary: FunctionSummary, args: list[ir.Var]) -> None:
        def mapped(tokens: set[Token]) -> set[Token]:
            result: set[Token] = set()
            for token in tokens:
                if isinstance(token, Param):
                    if token.index < len(args):
                        result |= self.tokens(args[token.index])
                else:
                    result.add(token)
            return result

        for op in summary.ops.values():
            if op.op_id not in self.out.ops:
                self.changed = True
            self.out.add_op(op)  # the same callee twice is the same op; a namesake raises
        for u, v in summary.graph.edges:
            if not self.out.graph.has_edge(u, v):
                self.out.graph.add_edge(u, v)
                self.changed = True
        for index, ops in summary.param_feeds.items():
            if index < len(args):
                for op_id in ops:
                    self.feed(op_id, self.tokens(args[index]))
        for index in summary.mutates:
            if index < len(args):
                self.write(args[index], mapped(summary.writes.get(index, set())))
        self.decide(mapped(summary.decisions))
        self.flow(target, mapped(summary.returns))

    def _summary(self, expr: ir.Expr) -> FunctionSummary | None:
        if expr.kws or expr.vararg or expr.varkwarg:
            return None
        callee = callee_object(self.func_ir, expr)
        return None if callee is None else self.summary_of(callee)

    def _mutates(self, callee: object) -> set[int] | None:
        summary = self.summary_of(callee)
        return None if summary is None else summary.mutates

    def finish(self) -> FunctionSummary:
        out = self.out
        for op_id, tokens in self.preds.items():
            for token in tokens:
                if isinstance(token, Param):
                    out.param_feeds.setdefault(token.index, set()).add(op_id)
                else:
                    out.graph.add_edge(token, op_id)
        arg_names = {}
        for stmt in self.statements():
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Arg):
                arg_names[stmt.value.index] = stmt.target
        for index, var in arg_names.items():
            root = self.alias.find(var.name)
            if root in self.written:  # written into, even with a constant
                out.mutates.add(index)
            written = self.written.get(root, set()) - {Param(index)}
            if written:
                out.writes[index] = written
        return out


def loop_exit_tests(func_ir: ir.FunctionIR) -> set[str]:
    """Variables whose only use is to decide whether a loop goes on (``while err > eps``,
    ``if scaled < 16: break``), directly or through ``bool()``: a convergence test picks how
    many times a loop runs, not which value an output takes, so it is no discrete step."""
    loops = compute_cfg_from_blocks(func_ir.blocks).loops().values()
    uses: dict[str, list[ir.Stmt]] = {}
    defs: dict[str, ir.Assign] = {}
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if isinstance(stmt, ir.Assign):
                value = stmt.value
                used = value.list_vars() if hasattr(value, "list_vars") else []
                if isinstance(value, ir.Var):
                    used = [value]
            else:
                used = stmt.list_vars()
            for var in used:
                uses.setdefault(var.name, []).append(stmt)
            if isinstance(stmt, ir.Assign):
                defs[stmt.target.name] = stmt

    def exits_loop(branch: ir.Branch) -> bool:
        """One way stays in (or enters) a loop, the other leaves (or skips) it."""
        return any((branch.truebr in loop.body) != (branch.falsebr in loop.body) for loop in loops)

    def only_exit(name: str) -> bool:
        found = uses.get(name, [])
        return bool(found) and all(
            (isinstance(stmt, ir.Branch) and exits_loop(stmt))
            or (_is_bool_call(stmt, name) and only_exit(stmt.target.name))
            for stmt in found
        )

    return {name for name in defs if only_exit(name)}


def _is_bool_call(stmt: ir.Stmt, arg: str) -> bool:
    """Whether ``stmt`` is ``target = bool(arg)`` (how Numba's IR tests an ``if``)."""
    if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)):
        return False
    expr = stmt.value
    return expr.op == "call" and [v.name for v in expr.args] == [arg] and not expr.kws


def _is_decision(name: tuple[str, object] | None) -> bool:
    """Whether a resolved call (``resolve_call``) is a discrete step."""
    if name is None:
        return False
    func, owner = name
    if owner == "numpy":
        return func in DECISION_FUNCS
    if isinstance(owner, ir.Var):
        return func.rsplit(".", 1)[-1] in DECISION_METHODS
    return owner == "builtins" and func in DECISION_BUILTINS


def _is_integer_cast(
    func_ir: ir.FunctionIR, name: tuple[str, object] | None, args: list[ir.Var]
) -> bool:
    """Whether a method call is ``x.astype(<an integer or bool dtype>)``."""
    return bool(name and name[0].endswith("astype") and args and _integer_dtype(func_ir, args[0]))


def _constant(definition: object) -> object:
    """The Python value of a global, free variable or constant definition (else None)."""
    if isinstance(definition, (ir.Global, ir.FreeVar, ir.Const)):
        return definition.value
    return None


def _integer_dtype(func_ir: ir.FunctionIR, var: ir.Var) -> bool:
    """Whether ``var`` is a constant naming an integer or bool dtype (``np.int64``, "i4")."""
    definition = guard(func_ir.get_definition, var)
    if isinstance(definition, ir.Expr) and definition.op == "getattr":  # np.int64
        module = guard(func_ir.get_definition, definition.value)
        value = getattr(_constant(module), definition.attr, None)
    else:  # a global or constant: int, "i4"
        value = _constant(definition)
    try:
        return np.dtype(value).kind in INTEGER_KINDS
    except TypeError:
        return False


def may_alias(
    func_ir: ir.FunctionIR, sites: list[Site], summary_of: SummaryOf
) -> Callable[[str], str]:
    """Variable name -> its may-alias class (a representative name): views, slices, phis,
    containers and what they hold, and the results of calls with their arguments."""
    analysis = _Analysis(func_ir, sites, summary_of, views_through_callees=True)
    analysis.build_aliases()
    return analysis.alias.find


def analyse(func_ir: ir.FunctionIR, sites: list[Site], summary_of: SummaryOf) -> FunctionSummary:
    """The ``FunctionSummary`` of ``func_ir`` whose matmul sites are ``sites``."""
    return _Analysis(func_ir, sites, summary_of).run()

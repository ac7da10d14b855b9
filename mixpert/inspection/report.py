"""``mixpert.inspect(f, *args)``: the ops a jitted function has, their graph, levels, IR and cost.

Without arguments it runs the untyped pipeline only (ops, graph, the Numba IR of every site before
and after the rewrite). With arguments it compiles a fresh copy for their types (so the LLVM call
sites of ``mixpert_gemm`` and BLAS calls the pass missed are known) and, unless ``run=False``,
calls the function once under ``record_calls`` to learn each op's shapes and predicted cost.
``print(report)`` shows the text ``mixpert inspect`` prints (``Inspection.print_to``).
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import networkx as nx
from numba import typeof
from numba.core.dispatcher import Dispatcher

from ..execution import (
    EMPTY_PLAN,
    CallRecord,
    MixpertRuntimeError,
    activate,
    op_index,
    record_calls,
    reraise_pending,
)
from ..jit import weak_float_arguments
from ..passes import callees, pipeline
from ..passes.dispatcher import make_dispatcher
from ..passes.record import KEY, CompileRecord, RewriteNote
from ..passes.sites import OpInfo
from ..plans.plan import as_active_plan
from . import graph_picture

if TYPE_CHECKING:
    from rich.console import Console

TEXT_WIDTH = 240  # as the CLI prints to a pipe: wide enough that nothing is cut or wrapped


@dataclass(frozen=True)
class OpRow:
    """One op as inspection shows it. ``shapes`` are the (m, k, n) it ran with, if it ran."""

    op_id: str
    file: str
    line: int
    source: str
    kind: str
    level: str  # the plan's level for the op ("auto" included)
    shapes: tuple[tuple[int, int, int], ...] = ()
    predicted_cost: float | None = None  # sum of 2mkn x level.relative_cost (INT8-GEMM op units)
    ran: tuple[str, ...] = ()  # per call: "IV on cuda[, 3 k rebalanced]": what ran, and the
    # k-indices equilibration moved for wide-range data
    native: str = ""  # with argument types: why the site keeps Numba's own product, if it does
    packed_once: str = ""  # "A", "B", "A, B": loop-invariant operands packed once per call

    @property
    def ran_at(self) -> str:
        """The concrete levels the op ran at ("auto" resolved), or its plan level if it did not
        run."""
        if self.native:
            return f"native: {self.native}"
        return ", ".join(dict.fromkeys(self.ran)) or self.level


@dataclass
class Inspection:
    function: str
    ops: list[OpRow]
    graph: nx.DiGraph
    rewrites: list[RewriteNote]
    signature: str | None = None
    llvm_calls: list[str] = field(default_factory=list)  # LLVM lines calling mixpert_gemm
    unseen_gemm: list[str] = field(default_factory=list)
    ir_after: dict[str, str] = field(default_factory=dict)  # pass name -> Numba IR dump
    pass_seconds: dict[str, float] = field(default_factory=dict)
    callees: dict[str, str] = field(default_factory=dict)
    # function (and each jitted function it names) -> where its body runs for NumPy arguments
    # under a plan for a GPU: "runs on the GPU in one trip" or "stays on the host: <why>"
    placement: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Ops, graph edges and what ran, for scripts (``mixpert inspect --json``)."""
        return {
            "function": self.function,
            "signature": self.signature,
            "ops": [
                {**dataclasses.asdict(row), "ran_at": row.ran_at, "shapes": list(row.shapes)}
                for row in self.ops
            ],
            "edges": sorted(self.graph.edges),
            "callees": self.callees,
            "unseen_gemm": self.unseen_gemm,
            "placement": self.placement,
        }

    def op(self, op_id: str) -> OpRow:
        return next(row for row in self.ops if row.op_id == op_id)

    def print_to(self, console: Console) -> None:
        """The report as ``mixpert inspect`` prints it: the ops table, the graph, the IR at each
        site, callees, LLVM call sites, missed GEMMs and the IR dumps asked for."""
        from rich.markup import escape
        from rich.table import Table

        console.print(f"[bold]{escape(self.function)}[/bold]  {escape(self.signature or '')}")
        table = Table()
        table.add_column("op id", overflow="fold")  # never cut
        for name in ("line", "source", "kind", "plan level", "packed once", "ran at",
                     "shapes (m,k,n)", "pred. cost"):  # fmt: skip
            table.add_column(name)
        for row in self.ops:
            shapes_text = ", ".join("x".join(map(str, s)) for s in sorted(set(row.shapes)))
            cost = f"{row.predicted_cost:.3g}" if row.predicted_cost is not None else ""
            table.add_row(
                escape(row.op_id), str(row.line), escape(row.source), row.kind, row.level,
                row.packed_once, escape(row.ran_at), shapes_text, cost,
            )  # fmt: skip
        console.print(table)
        console.print("[bold]GEMM dependency graph[/bold] (edge: output reaches input)")
        for node in sorted(self.graph.nodes):
            successors = sorted(self.graph.successors(node))
            console.print(f"  {escape(node)} -> {escape(', '.join(successors) or '(none)')}")
        console.print("[bold]Numba IR at each site, before -> after rewrite-matmul[/bold]")
        for note in self.rewrites:
            console.print(f"  [cyan]{escape(note.op_id)}[/cyan]")
            console.print(f"    - {escape(note.before)}")
            for line in note.after.splitlines():
                console.print(f"    + {escape(line)}")
        if self.placement:
            console.print("[bold]NumPy arguments under a plan for a GPU[/bold]")
            for name, where in self.placement.items():
                console.print(f"  {escape(name)}: {escape(where)}")
        if self.callees:
            console.print("[bold]jitted callees[/bold]")
            for name, how in self.callees.items():
                console.print(f"  {escape(name)}: {escape(how)}")
        if self.signature is not None:  # compiled for arguments: the LLVM is known
            console.print("[bold]LLVM call sites of mixpert_gemm[/bold]")
            for line in self.llvm_calls:
                console.print(f"  {escape(line)}")
        for name in self.unseen_gemm:
            console.print(f"[yellow]warning: BLAS GEMM the pass could not see, in {escape(name)}")
        for name, text in self.ir_after.items():
            console.print(f"[bold]--- IR after {escape(name)} ---[/bold]")
            console.print(escape(text), highlight=False, soft_wrap=True)  # unwrapped

    def __str__(self) -> str:
        """What ``mixpert inspect`` prints to a pipe, without colours (``print(report)``)."""
        from rich.console import Console

        buffer = io.StringIO()
        self.print_to(Console(file=buffer, width=TEXT_WIDTH, soft_wrap=True, color_system=None))
        return buffer.getvalue()

    def to_dot(self) -> str:
        """The graph in Graphviz DOT (``graph_picture``): op id, source and level per node,
        loop-carried edges dashed."""
        return graph_picture.to_dot(self.ops, self.graph)


def ran_at(call: CallRecord) -> str:
    """What one call ran, as inspection shows it: "IV on cpu, 3 k rebalanced, 1 row exact"."""
    parts = [f"{call.level} on {call.backend}"]
    if call.rebalanced_k:
        parts.append(f"{call.rebalanced_k} k rebalanced")
    reused = [name for name, kept in zip("AB", call.reused, strict=True) if kept]
    if reused:
        parts.append(f"pack of {' and '.join(reused)} reused")
    for count, what in zip(call.exact_lines, ("row", "column"), strict=True):
        if count:
            parts.append(f"{count} {what}{'s' if count > 1 else ''} exact")
    return ", ".join(parts)


def packed_once(op: OpInfo, function: str) -> str:
    """The operands of ``op`` a call of ``function`` packs once ("A", "B", "A, B" or ""): the
    loop-invariant ones of its own ops (``execution.kept_packs``)."""
    if op.qualname != function:
        return ""
    return ", ".join(name for name, flag in zip("AB", op.invariant, strict=True) if flag)


def _py_func(f: Any) -> Any:
    if isinstance(f, Dispatcher):
        return f.py_func
    return getattr(f, "__mixpert_py_func__", f)


def inspect(
    f: Any, *args: Any, run: bool = True, print_ir_after: str | list[str] | None = None
) -> Inspection:
    """Inspect ``f`` (a ``mixpert.jit`` function, a Numba dispatcher or a plain function).

    ``print_ir_after``: "all" or pass names (Numba's or ``mixpert-*``) whose output IR to keep in
    ``.ir_after``.
    """
    py_func = _py_func(f)
    if getattr(f, "scalar_rules", "numpy") == "numpy":  # typed as a call of f would type them
        args = weak_float_arguments(args)
    active = getattr(f, "active_plan", EMPTY_PLAN)
    if getattr(f, "plan_book", None) is not None:  # a tol= function: the plan it runs
        if args:
            active = as_active_plan(f.plan_for(*args))
        elif len(f.plans) == 1:  # no arguments: the one plan it holds, if it holds one
            active = as_active_plan(f.plans[0])
    wanted = [print_ir_after] if isinstance(print_ir_after, str) else list(print_ir_after or [])
    ir_after: dict[str, str] = {}
    seconds: dict[str, float] = {}

    def observer(name: str, state: Any, elapsed: float) -> None:
        if state.func_id.func is not py_func:
            return
        seconds[name] = seconds.get(name, 0.0) + elapsed
        if state.func_ir is not None and ("all" in wanted or name in wanted):
            buffer = io.StringIO()
            state.func_ir.dump(file=buffer)
            ir_after[name] = buffer.getvalue()

    signature, llvm_calls = None, []
    with pipeline.observe(observer):
        if args:
            disp = make_dispatcher(  # compiled as f compiles (its options and scalar rules)
                py_func, "nopython", getattr(f, "options", None),
                scalar_rules=getattr(f, "scalar_rules", "numpy"),
            )  # fmt: skip
            sig = tuple(typeof(a) for a in args)
            disp.compile(sig)
            cres = disp.overloads[sig]
            record: CompileRecord = cres.metadata[KEY]
            signature = str(cres.signature)
            llvm = disp.inspect_llvm(sig)
            llvm_calls = [ln.strip() for ln in llvm.splitlines() if "@mixpert_gemm(" in ln]
        else:
            record = pipeline.analyse_function(py_func, rewrite=True)
    summary = record.summary
    assert summary is not None
    shapes: dict[str, list[tuple[int, int, int]]] = {}
    ran: dict[str, list[str]] = {}
    if args and run:
        runner = f if hasattr(f, "with_plan") else disp  # f activates its own plan
        with record_calls() as calls, activate(active):
            try:
                runner(*args)
            except MixpertRuntimeError as relay:  # a bare dispatcher: raise the runtime's error
                reraise_pending(relay)
        for call in calls:
            shapes.setdefault(call.op_id, []).append(call.shape)
            ran.setdefault(call.op_id, []).append(ran_at(call))
    rows = []
    for op in sorted(summary.ops.values(), key=lambda o: (o.file, o.line, o.ordinal)):
        level = active.level_of(op_index(op.op_id))
        seen = tuple(shapes.get(op.op_id, ()))
        cost = None
        if seen:
            cost = sum(2.0 * m * k * n for m, k, n in seen) * level.relative_cost
        rows.append(
            OpRow(
                op.op_id, op.file, op.line, op.source, op.kind, level.name, seen, cost,
                tuple(ran.get(op.op_id, ())), record.native_reasons.get(op.op_id, ""),
                packed_once(op, py_func.__qualname__),
            )
        )  # fmt: skip
    return Inspection(
        function=py_func.__qualname__,
        ops=rows,
        graph=summary.graph.copy(),
        rewrites=list(record.rewrites),
        signature=signature,
        llvm_calls=llvm_calls,
        unseen_gemm=list(record.unseen_gemm),
        ir_after=ir_after,
        pass_seconds=seconds,
        callees=dict(record.callees),
        placement=placements(f, py_func, summary.placement, args),
    )


def placements(f: Any, py_func: Any, own: Any, args: tuple[Any, ...]) -> dict[str, str]:
    """Qualified name -> placement (``passes.placement``) of ``py_func`` and of each jitted
    function it names: with arguments, the function's own says what they change
    (``MixpertFunction.placement_for``)."""
    found = {py_func.__qualname__: str(own) if own is not None else "not judged"}
    if args and hasattr(f, "placement_for"):
        found[py_func.__qualname__] = str(f.placement_for(*args))
    for name in py_func.__code__.co_names:
        callee = py_func.__globals__.get(name)
        inner = callees.python_function(callee)
        if inner is None or inner is py_func or inner.__qualname__ in found:
            continue
        summary = callees.summary_of(callee)
        if summary is not None and summary.placement is not None:
            found[inner.__qualname__] = str(summary.placement)
    return found

"""The layering the architecture promises, read from the sources' imports.

user layer (mixpert/, its subpackages) -> compile time (passes/) -> run time (mixpert/execution/)
-> emulation runtime (runtime/): a module imports only its own layer and the layers below it, and
mixpert's modules form no import cycle through any import: at load time, inside a function, or
under ``if TYPE_CHECKING`` (a circle hidden in a function body is still a circle). No cycle is
excepted. Within the user layer, the plans (``mixpert.plans``) sit below the tuner
(``mixpert.tuning``), which sits below its callers (jit, the plan book, the API, the CLI).
"""

from __future__ import annotations

import ast
import os
from functools import cache
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
RANK = {"mixpert": 3, "mixpert.passes": 2, "mixpert.execution": 1, "mixpert.runtime": 0}
NOT_MODULES = {"sample_files"}  # samples/, loaded by path, not imported as mixpert modules


@cache
def modules() -> dict[str, Path]:
    """Every module of the mixpert package, subpackages included; mixpert/passes and
    mixpert/runtime are links to passes/ and runtime/, followed."""
    found = {}
    for folder, subfolders, files in os.walk(ROOT / "mixpert", followlinks=True):
        here = Path(folder)
        subfolders[:] = sorted(
            d for d in subfolders if d not in NOT_MODULES and (here / d / "__init__.py").exists()
        )
        package = ".".join(here.relative_to(ROOT).parts)
        for file in sorted(f for f in files if f.endswith(".py")):
            stem = file.removesuffix(".py")
            found[package if stem == "__init__" else f"{package}.{stem}"] = here / file
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and ".".join(parts[:2]) in RANK else "mixpert"


def imports(module: str, path: Path, load_time_only: bool) -> set[str]:
    """mixpert modules ``module`` imports (relative imports resolved); with ``load_time_only``
    only those at module level outside ``if TYPE_CHECKING``, else every import statement."""
    tree = ast.parse(path.read_text())
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    nodes = tree.body if load_time_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mixpert")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            if not base.startswith("mixpert"):
                continue
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules()}
    return {name for name in found if name in modules()}


@pytest.mark.parametrize("module", sorted(modules()))
def test_imports_go_down_the_layers(module: str) -> None:
    mine = RANK[layer(module)]
    upward = [
        name for name in imports(module, modules()[module], False) if RANK[layer(name)] > mine
    ]
    assert not upward, f"{module} ({layer(module)}) imports a layer above it: {upward}"


def import_graph() -> nx.DiGraph:
    """module -> module it imports, through any import statement. Importing a module runs its
    packages' ``__init__`` first, so an import of ``a.b.c`` also reaches ``a.b`` and ``a``, but
    for the packages holding the importer itself (its own parents, run before it)."""
    graph = nx.DiGraph()
    for module, path in modules().items():
        own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        if path.stem == "__init__":
            own.add(module)
        for name in imports(module, path, False):
            parts = name.split(".")
            reached = {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules().keys()
            graph.add_edges_from((module, n) for n in reached - own if n != module)
    return graph


def test_no_import_cycles() -> None:
    """Through any import: a function-level import that closes a circle fails as well (the
    message names every cycle, shortest first)."""
    cycles = sorted(nx.simple_cycles(import_graph()), key=lambda c: (len(c), c))
    named = [" -> ".join([*cycle, cycle[0]]) for cycle in cycles]
    assert not cycles, f"{len(cycles)} import cycles:\n" + "\n".join(named[:40])


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_plans_hold_the_plan_and_its_files_only() -> None:
    """mixpert.plans sits below the tuner: its modules import nothing of the user layer but
    each other (the tuner makes plans; the plan book, which tunes, sits above the tuner)."""
    plans = [m for m in modules() if within(m, "mixpert.plans")]
    assert {"mixpert.plans.plan", "mixpert.plans.files"} <= set(plans)
    for module in plans:
        user = {n for n in imports(module, modules()[module], False) if layer(n) == "mixpert"}
        above = {n for n in user if not within(n, "mixpert.plans")}
        assert not above, f"{module} imports {above}, above the plans"


def test_the_tuner_sits_below_jit_and_the_plan_book() -> None:
    """The tuner takes any ``Tunable``: jit, the plan book that tunes on a first call, the
    public API and the command line are its callers, never its imports."""
    callers = ("mixpert.jit", "mixpert.plan_book", "mixpert.api", "mixpert.cli", "mixpert.samples")
    tuning = [m for m in modules() if within(m, "mixpert.tuning")]
    assert "mixpert.tuning.tuner" in tuning
    for module in tuning:
        found = imports(module, modules()[module], False)
        assert not [n for n in found if any(within(n, c) for c in callers)], module


def test_compile_time_holds_no_run_time_state() -> None:
    """passes/ reaches the run time only through its public hook and op-id modules."""
    allowed = {"mixpert.execution.hook", "mixpert.execution.op_ids"}
    for module, path in modules().items():
        if layer(module) == "mixpert.passes":
            reached = {n for n in imports(module, path, False) if layer(n) == "mixpert.execution"}
            assert reached <= allowed, f"{module} imports {reached - allowed}"

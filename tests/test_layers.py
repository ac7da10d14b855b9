"""The layering the architecture promises, read from the sources' imports.

user layer (mixpert/*.py) -> compile time (passes/) -> run time (mixpert/execution/) ->
emulation runtime (runtime/): a module imports only its own layer and the layers below it, and
the modules imported at load time form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"mixpert": "mixpert", "mixpert.execution": "mixpert/execution",
           "mixpert.passes": "passes", "mixpert.runtime": "runtime"}  # fmt: skip
RANK = {"mixpert": 3, "mixpert.passes": 2, "mixpert.execution": 1, "mixpert.runtime": 0}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and ".".join(parts[:2]) in RANK else "mixpert"


def imports(module: str, path: Path, load_time_only: bool) -> set[str]:
    """mixpert modules ``module`` imports (relative imports resolved); with ``load_time_only``
    only those at module level outside ``if TYPE_CHECKING``."""
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


def test_no_import_cycles_at_load_time() -> None:
    graph = nx.DiGraph()
    for module, path in modules().items():
        for name in imports(module, path, True):
            if name != module and not module.startswith(name + "."):  # a package's own parent
                graph.add_edge(module, name)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles: {cycles}"


def test_the_tuner_does_not_import_jit() -> None:
    assert "mixpert.jit" not in imports("mixpert.tuner", modules()["mixpert.tuner"], False)


def test_compile_time_holds_no_run_time_state() -> None:
    """passes/ reaches the run time only through its public hook and op-id modules."""
    allowed = {"mixpert.execution.hook", "mixpert.execution.op_ids"}
    for module, path in modules().items():
        if layer(module) == "mixpert.passes":
            reached = {n for n in imports(module, path, False) if layer(n) == "mixpert.execution"}
            assert reached <= allowed, f"{module} imports {reached - allowed}"

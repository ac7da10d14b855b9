"""Pictures of the GEMM dependency graph: layered top to bottom, each op with its source and
level, loop-carried edges (those inside a cycle, self-loops included) dashed.

Graphviz's ``dot`` draws it when installed; otherwise matplotlib does, with the layers taken
from the graph's condensation (cycles collapsed) in topological order.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import networkx as nx


def loop_carried(graph: nx.DiGraph) -> set[tuple[str, str]]:
    """Edges that close a cycle: both ends in one strongly connected component."""
    component = {}
    for index, members in enumerate(nx.strongly_connected_components(graph)):
        component.update(dict.fromkeys(members, index))
    return {(u, v) for u, v in graph.edges if component[u] == component[v]}


def layers(graph: nx.DiGraph) -> dict[str, int]:
    """Node -> depth: ops in one cycle share a layer; an edge otherwise goes down."""
    condensed = nx.condensation(graph)
    depth = {}
    for level, group in enumerate(nx.topological_generations(condensed)):
        for scc in group:
            depth.update(dict.fromkeys(condensed.nodes[scc]["members"], level))
    return depth


def label(row: Any) -> str:
    source = textwrap.shorten(row.source, 48, placeholder="...")
    return f"{row.op_id}\n{source}\nlevel {row.ran_at}"


def to_dot(rows: Sequence[Any], graph: nx.DiGraph) -> str:
    """Graphviz DOT: boxes with op id, source and level; loop-carried edges dashed."""
    dashed = loop_carried(graph)
    lines = ["digraph gemm {", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
    for row in rows:
        text = label(row).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'  "{row.op_id}" [label="{text}"];')
    for u, v in sorted(graph.edges):
        style = " [style=dashed]" if (u, v) in dashed else ""
        lines.append(f'  "{u}" -> "{v}"{style};')
    return "\n".join([*lines, "}"]) + "\n"


def draw_png(rows: Sequence[Any], graph: nx.DiGraph, path: str | Path) -> str:
    """Write the picture to ``path``; returns which tool drew it ("graphviz" or "matplotlib")."""
    dot = shutil.which("dot")
    if dot is not None:
        subprocess.run([dot, "-Tpng", "-o", str(path)], input=to_dot(rows, graph).encode(),
                       check=True)  # fmt: skip
        return "graphviz"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    depth = layers(graph)
    by_layer: dict[int, list[str]] = {}
    for node in sorted(graph.nodes, key=lambda n: (depth[n], n)):
        by_layer.setdefault(depth[node], []).append(node)
    pos = {
        node: (i - (len(nodes) - 1) / 2, -level)
        for level, nodes in by_layer.items()
        for i, node in enumerate(nodes)
    }
    width = max((len(nodes) for nodes in by_layer.values()), default=1)
    fig, ax = plt.subplots(figsize=(3.2 * width + 2, 1.6 * len(by_layer) + 0.5))
    dashed = loop_carried(graph)
    for u, v in sorted(graph.edges):
        (xu, yu), (xv, yv) = pos[u], pos[v]
        line = "--" if (u, v) in dashed else "-"
        if u == v:  # a self-loop: a small arc on the box's right
            start, end, bend = (xu + 0.16, yu + 0.08), (xu + 0.16, yu - 0.08), "arc3,rad=-1.6"
        else:  # spanning layers: bent, so it does not run through the boxes between
            down = yv < yu
            start, end = (
                (xu, yu - 0.22 if down else yu + 0.22),
                (xv, yv + 0.22 if down else yv - 0.22),
            )
            bend = "arc3,rad=0" if abs(depth[u] - depth[v]) == 1 and down else "arc3,rad=0.35"
        ax.add_patch(
            FancyArrowPatch(start, end, connectionstyle=bend, arrowstyle="-|>", mutation_scale=14,
                            linestyle=line, color="#333")
        )  # fmt: skip
    for row in rows:
        if row.op_id in pos:
            x, y = pos[row.op_id]
            box = {"boxstyle": "round", "facecolor": "#e8eef7", "edgecolor": "#456"}
            ax.text(x, y, label(row), ha="center", va="center", family="monospace", fontsize=8,
                    bbox=box)  # fmt: skip
    ax.set_xlim(-width / 2 - 0.3, width / 2 + 0.3)
    ax.set_ylim(-len(by_layer) + 0.4, 0.6)
    ax.set_axis_off()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return "matplotlib"

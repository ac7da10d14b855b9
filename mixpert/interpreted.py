"""``NUMBA_DISABLE_JIT=1``: the Python function itself runs, its products at the plan's levels.

Numba's switch turns jitted functions back into Python for debugging. A ``mixpert.jit`` function
then runs a copy of its source in which every product site (``a @ b``, ``np.matmul``,
``np.dot``, ``x.dot(y)``) calls ``mixpert.matmul`` at its op's level; the sites are numbered in
the order the compiler numbers them (source line, then evaluation order), so op ids and plans
are the same. A function whose source cannot be read or that closes over variables runs as it
is (native products).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

SITE = "__mixpert_site__"


class _Sites(ast.NodeTransformer):
    """Replaces product expressions with ``__mixpert_site__(ordinal, lhs, rhs, native)``."""

    def __init__(self) -> None:
        self.found: list[tuple[int, int, ast.Call]] = []  # (line, order, call)

    def _site(self, node: ast.expr, lhs: ast.expr, rhs: ast.expr, native: str) -> ast.Call:
        call = ast.Call(
            func=ast.Name(SITE, ast.Load()),
            args=[ast.Constant(-1), lhs, rhs, ast.Constant(native)],
            keywords=[],
        )
        self.found.append((node.lineno, len(self.found), call))
        return ast.copy_location(call, node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:  # noqa: N802
        self.generic_visit(node)  # operands first: they are evaluated (and numbered) first
        if isinstance(node.op, ast.MatMult):
            return self._site(node, node.left, node.right, "matmul")
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:  # noqa: N802
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Attribute) or node.keywords:
            return node
        numpy_call = isinstance(func.value, ast.Name) and func.value.id in ("np", "numpy")
        if numpy_call and func.attr in ("matmul", "dot") and len(node.args) == 2:
            return self._site(node, node.args[0], node.args[1], func.attr)
        if func.attr == "dot" and len(node.args) == 1:
            return self._site(node, func.value, node.args[0], "matmul")
        return node


def python_variant(py_func: Callable[..., Any], site: Callable[..., Any]) -> Callable[..., Any]:
    """``py_func`` rewritten so each product calls ``site(ordinal, a, b, native)``."""
    if py_func.__closure__:
        return py_func
    try:
        source = textwrap.dedent(inspect.getsource(py_func))
    except (OSError, TypeError):
        return py_func
    tree = ast.parse(source)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        return py_func
    definition.decorator_list = []
    sites = _Sites()
    sites.visit(definition)
    for ordinal, (_, _, call) in enumerate(sorted(sites.found, key=lambda f: (f[0], f[1]))):
        call.args[0] = ast.Constant(ordinal)
    ast.fix_missing_locations(tree)
    offset = py_func.__code__.co_firstlineno - 1
    ast.increment_lineno(tree, offset)
    namespace = dict(py_func.__globals__)
    namespace[SITE] = site
    exec(compile(tree, py_func.__code__.co_filename, "exec"), namespace)  # noqa: S102
    return namespace[definition.name]


def native(kind: str) -> Callable[[Any, Any], Any]:
    return {"matmul": np.matmul, "dot": np.dot}[kind]

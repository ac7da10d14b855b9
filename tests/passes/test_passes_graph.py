"""The GEMM dependency graph on functions whose graphs are known (untyped analysis only)."""

from __future__ import annotations

import numba
import numpy as np

import mixpert
from mixpert.passes import sites


def edges(f) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Edges as 'qualname:line:k': line relative to the function's first line, k-th on it."""
    ops = f.ops

    def short(op_id: str) -> str:
        op = ops[op_id]
        same_line = [o for o in ops.values() if (o.qualname, o.line) == (op.qualname, op.line)]
        k = sorted(o.ordinal for o in same_line).index(op.ordinal)
        return f"{op.qualname}:{op.line - def_line(op.qualname)}:{k}"

    return {(short(u), short(v)) for u, v in f.graph.edges}


def def_line(qualname: str) -> int:
    """Line of the ``def`` of a module-level function decorated once."""
    return globals()[qualname].py_func.__code__.co_firstlineno + 1


@mixpert.jit
def chain(a, b, c, d):
    x = a @ b
    y = x @ c
    return y @ d


@mixpert.jit
def one_line_chain(a, b, c):
    return a @ b @ c


@mixpert.jit
def diamond(a, b, c, d):
    x = a @ b
    y = np.maximum(x @ c, 0)
    z = np.dot(x, d)
    return y.dot(z)


@mixpert.jit
def independent(a, b, c, d):
    x = a @ b
    y = c @ d
    return x, y


@mixpert.jit
def loop_carried(a, x, steps):
    for _ in range(steps):
        x = a @ x
        x = x / np.sqrt(np.sum(x * x))
    return x @ a


@mixpert.jit
def through_array_write(a, b, c):
    out = np.zeros((a.shape[0], b.shape[1] * 2), np.float32)
    out[:, : b.shape[1]] = a @ b
    view = out[:, b.shape[1] :]
    view[:] = a @ c
    return out.T @ a


@mixpert.jit
def not_through_fresh_copy(a, b):
    x = a @ b
    y = np.ones_like(x)  # shape only: no data of x flows here
    return y.T @ a, x


@mixpert.jit
def branches(a, b, flag):
    if flag:  # noqa: SIM108 (two statements, two blocks, on purpose)
        x = a @ b
    else:
        x = np.dot(b, a)
    return x @ a


@mixpert.jit
def loop_condition(a, b, c):
    n = 0
    while (a @ b).sum() > 0 and n < 3:  # (compiled before the loop and at its end)
        a = a @ c
        n += 1
    return a


@mixpert.jit
def two_in_a_condition(a, b, c):
    n = 0
    while (a @ b).sum() > 0 and (b @ c).sum() > 0 and n < 2:
        n += 1
    return n


@mixpert.jit
def join_of_a_sum(a, b, flag):
    if flag:  # noqa: SIM108 (two statements, two blocks, on purpose)
        x = a @ b
    else:
        x = np.dot(b, a)
    return (x + np.float32(1)) @ a


@numba.njit
def inner(x, w):
    return np.maximum(x @ w, 0)


@numba.njit
def fill_into(out, x, w):
    out[:] = x @ w


@mixpert.jit
def through_callees(a, b, c):
    h = inner(a @ b, c)
    out = np.empty_like(h)
    fill_into(out, h, c)
    return out @ c


def test_op_ids_are_qualname_and_ordinal() -> None:
    first = def_line("one_line_chain")
    assert sorted(one_line_chain.ops) == ["one_line_chain:0", "one_line_chain:1"]
    op = one_line_chain.ops["one_line_chain:0"]
    assert op.source == "return a @ b @ c" and op.kind == "matmul" and op.file == __file__
    assert op.line == first + 1 and op.module == __name__
    assert sorted(chain.ops) == ["chain:0", "chain:1", "chain:2"]
    assert [chain.ops[f"chain:{i}"].line for i in range(3)] == sorted(
        op.line for op in chain.ops.values()
    )


def test_chain() -> None:
    assert edges(chain) == {("chain:1:0", "chain:2:0"), ("chain:2:0", "chain:3:0")}
    assert edges(one_line_chain) == {("one_line_chain:1:0", "one_line_chain:1:1")}


def test_diamond_with_every_spelling() -> None:
    assert {op.kind for op in diamond.ops.values()} == {"matmul", "dot", "method_dot"}
    assert edges(diamond) == {
        ("diamond:1:0", "diamond:2:0"),
        ("diamond:1:0", "diamond:3:0"),
        ("diamond:2:0", "diamond:4:0"),
        ("diamond:3:0", "diamond:4:0"),
    }


def test_independent_ops_have_no_edges() -> None:
    assert len(independent.ops) == 2 and edges(independent) == set()


def test_loop_carried_dependency_is_a_self_edge() -> None:
    assert edges(loop_carried) == {
        ("loop_carried:2:0", "loop_carried:2:0"),
        ("loop_carried:2:0", "loop_carried:4:0"),
    }


def test_dependencies_through_writes_into_arrays_and_views() -> None:
    assert edges(through_array_write) == {
        ("through_array_write:2:0", "through_array_write:5:0"),
        ("through_array_write:4:0", "through_array_write:5:0"),
    }


def test_no_edge_through_shape_only_use() -> None:
    assert edges(not_through_fresh_copy) == set()


def test_ops_in_both_branches_feed_the_join() -> None:
    """One op at the join, on Python 3.12 too, whose bytecode holds ``return x @ a`` once in
    each branch."""
    assert sorted(branches.ops) == ["branches:0", "branches:1", "branches:2"]
    assert edges(branches) == {("branches:2:0", "branches:5:0"), ("branches:4:0", "branches:5:0")}


def test_a_product_compiled_twice_is_one_op() -> None:
    """A loop's condition is in the bytecode twice: its product is one op, whose runs are
    recorded under that one id, and the products of the body stay apart."""
    assert len(sites.copied_lines(loop_condition.py_func)) == 1
    assert sorted(loop_condition.ops) == ["loop_condition:0", "loop_condition:1"]
    first = def_line("loop_condition")
    assert {op.line - first for op in loop_condition.ops.values()} == {2, 3}
    a = np.eye(8, dtype=np.float32)
    with mixpert.record() as calls:
        loop_condition(a, a, a * np.float32(0.5))
    condition = [c.op_id for c in calls if loop_condition.ops[c.op_id].line == first + 2]
    assert condition == ["loop_condition:0"] * 4  # checked before each of 3 turns and after


def test_copies_keep_two_products_of_one_line_apart() -> None:
    """Two products of a condition compiled twice: two ops, whatever the copies; a join's
    product of a sum (temporaries named apart in each copy on Python 3.12): one op."""
    first = def_line("two_in_a_condition")
    assert {op.line - first for op in two_in_a_condition.ops.values()} == {2}
    assert sorted(two_in_a_condition.ops) == ["two_in_a_condition:0", "two_in_a_condition:1"]
    assert len(join_of_a_sum.ops) == 3
    assert edges(join_of_a_sum) == {
        ("join_of_a_sum:2:0", "join_of_a_sum:5:0"),
        ("join_of_a_sum:4:0", "join_of_a_sum:5:0"),
    }


def test_ops_inside_njit_callees_and_edges_through_calls() -> None:
    ops = through_callees.ops
    assert any(op.qualname == "inner" for op in ops.values())
    assert any(op.qualname == "fill_into" for op in ops.values())
    graph_edges = edges(through_callees)
    # a @ b -> inner's x @ w -> fill_into's x @ w (through the argument) -> out @ c (its write)
    assert ("through_callees:1:0", "inner:1:0") in graph_edges
    assert ("inner:1:0", "fill_into:1:0") in graph_edges
    assert ("fill_into:1:0", "through_callees:4:0") in graph_edges
    assert ("through_callees:1:0", "through_callees:4:0") not in graph_edges


def test_nodes_carry_source_locations() -> None:
    for node, data in chain.graph.nodes(data=True):
        assert data["file"] == __file__ and data["line"] > 0 and "@" in data["source"]
        assert chain.ops[node].line == data["line"]


def test_op_ids_are_the_same_in_a_fresh_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    code = "import test_passes_graph as t; print(sorted(t.diamond.ops))"
    env_path = str(__import__("pathlib").Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=env_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(diamond.ops)), out.stderr

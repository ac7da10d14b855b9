"""Pass ``placement``: which functions can run their body on the GPU in one trip, and why the
others stay on the host (the reason and the line), in the IR, ``mixpert.inspect`` and the
arguments' judgement at call time."""

from __future__ import annotations

import inspect

import numba
import numpy as np
import pytest

import mixpert
from mixpert.passes.pipeline import analyse_function
from mixpert.passes.placement import MOVABLE, Placement

HOST_ARRAY = np.ones(4, np.float32)


def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, 0.0)
    h = np.maximum(h @ w2, 0.0)
    return h @ w3


def blocked_update(a, nb):  # whole-array work in a loop, through slices: moves
    n = a.shape[0]
    s = a.copy()
    for k in range(0, n, nb):
        e = k + nb
        s[k:e, k:e] = np.linalg.cholesky(s[k:e, k:e])
        s[e:, e:] -= s[e:, k:e] @ s[e:, k:e].T
    return np.tril(s), float(np.abs(s).max())


def iterations(x, c, steps):  # a loop of whole-array code with typed constants: moves
    two = x.dtype.type(2)
    t = x.dtype.type
    for _ in range(steps):
        d = (x * x).sum(axis=1)[:, None] - two * (x @ c.T)
        labels = np.argmin(d, axis=1)
        c = c * t(0.5) + np.take_along_axis(d, labels[:, None], axis=1).sum()
    if steps < 0:
        raise ValueError("steps must be >= 0")
    return c, labels


def elements(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i, 0]
    return s


def columns(x):
    out = np.zeros_like(x)
    for j in range(x.shape[1]):
        out[:, j] = 2.0
    return out + x


def parallel(x, w):
    out = np.zeros_like(x)
    for i in numba.prange(x.shape[0]):
        out[i] = x[i] * 2
    return out @ w


def host_maker(x):
    return np.empty((3, 3), np.float32) + x


def global_array(x):
    return x + HOST_ARRAY


def grows_a_list(x):
    out = []
    for i in range(3):
        out.append(x * i)
    return out


def over_rows(x):
    t = 0.0
    for row in x:
        t += row.sum()
    return t


def draws(x):
    return x + np.random.rand(3)


def unknown_method(x):
    return x.byteswap()


@numba.njit
def element_helper(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i, 0]
    return s


def calls_element_helper(x):
    return x @ x + element_helper(x)


@numba.njit
def array_helper(x):
    return np.tanh(x)


def calls_array_helper(x):
    return array_helper(x @ x)


def line_of(func, text: str) -> int:
    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("func", [mlp, blocked_update, iterations, calls_array_helper])
def test_whole_array_code_runs_on_the_gpu_in_one_trip(func) -> None:
    placement = analyse_function(func).summary.placement
    assert placement == MOVABLE and str(placement) == "runs on the GPU in one trip"


@pytest.mark.parametrize(
    ("func", "reason", "where"),
    [
        (elements, "reads x element by element in a loop", "s += x[i, 0]"),
        (columns, "writes out element by element in a loop", "out[:, j] ="),
        (parallel, "runs a prange loop", "numba.prange"),
        (host_maker, "np.empty makes a NumPy array on the host", "np.empty"),
        (global_array, "reads the global array HOST_ARRAY (host memory)", "HOST_ARRAY"),
        (grows_a_list, "grows the list out in a loop", "out.append"),
        (over_rows, "loops over the items of x", "for row in x"),
        (draws, "draws random numbers (np.random.rand", "np.random.rand"),
        (unknown_method, "calls .byteswap() of x, which CuPy arrays lack", "byteswap"),
        (calls_element_helper, "calls element_helper, which reads x element by element", "+ el"),
    ],
)
def test_code_that_cannot_move_stays_on_the_host_and_says_why_and_where(
    func, reason: str, where: str
) -> None:
    placement = analyse_function(func).summary.placement
    assert not placement.movable
    assert placement.reason.startswith(reason), placement.reason
    assert placement.line == line_of(func, where)
    assert str(placement) == f"stays on the host: {placement.reason} at line {placement.line}"


def test_a_callee_that_stays_names_its_own_line() -> None:
    placement = analyse_function(calls_element_helper).summary.placement
    assert f"at its line {line_of(element_helper.py_func, 's += x[i, 0]')}" in placement.reason


def test_the_nopython_compile_judges_as_the_analysis_does() -> None:
    """The summary a compile leaves (what calls read) carries the same placement, after
    numpy-scalar-rules has wrapped the literals (``mixpert_weak`` calls move)."""
    jitted = mixpert.jit(mlp)
    args = [np.ones((8, 4), np.float32), *(np.ones((4, 4), np.float32) for _ in range(3))]
    jitted.compile_for(args)
    assert jitted.placement == MOVABLE
    parallel_jitted = mixpert.jit(parallel, parallel=True)
    parallel_jitted.compile_for([np.ones((4, 4), np.float32)] * 2)
    assert parallel_jitted.placement.reason == "runs a prange loop"


def test_arguments_judged_at_call_time() -> None:
    writes = mixpert.jit(lambda x, w: np.add(x, x @ w, out=x))
    x, w = np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)
    assert writes.mutated_arguments == frozenset({0})
    assert writes.placement_for(x, w) == MOVABLE
    assert writes.placement_for(x, 2.0) == MOVABLE  # scalars go as they are
    read_only = x.copy()
    read_only.flags.writeable = False
    big_endian = x.astype(">f4")
    cases = [
        ((x, x[1:]), "arguments 'x' and 'w' may share memory"),
        (((x,), w), "argument 'x' is a tuple"),
        ((x.astype(object), w), "argument 'x' has dtype object, which CuPy arrays lack"),
        ((big_endian, w), f"argument 'x' has dtype {big_endian.dtype}, which CuPy arrays lack"),
        ((x.view(np.recarray), w), "argument 'x' is a recarray, not a plain NumPy array"),
        ((1.0, 2.0), "no NumPy array arguments to move"),
        ((read_only, w), "argument 'x' is read-only and the function may write into it"),
    ]
    for args, reason in cases:
        assert writes.placement_for(*args) == Placement(reason), reason


def test_inspect_says_where_each_function_runs() -> None:
    jitted = mixpert.jit(calls_element_helper)
    report = mixpert.inspect(jitted)
    here = line_of(calls_element_helper, "+ el")
    inner = line_of(element_helper.py_func, "s += x[i, 0]")
    helper = f"stays on the host: reads x element by element in a loop at line {inner}"
    assert report.placement == {
        "calls_element_helper": "stays on the host: calls element_helper, which reads x "
        f"element by element in a loop at its line {inner} at line {here}",
        "element_helper": helper,
    }
    text = str(report)
    assert "NumPy arguments under a plan for a GPU" in text
    assert f"  element_helper: {helper}" in text
    moving = mixpert.inspect(mixpert.jit(mlp), *(np.ones((4, 4), np.float32) for _ in range(4)))
    assert moving.placement == {"mlp": "runs on the GPU in one trip"}
    assert moving.to_json()["placement"] == {"mlp": "runs on the GPU in one trip"}
    shared = np.ones((4, 4), np.float32)
    with_arguments = mixpert.inspect(mixpert.jit(mlp), shared, shared, shared, shared)
    assert with_arguments.placement["mlp"] == (
        "stays on the host: arguments 'x' and 'w1' may share memory"
    )

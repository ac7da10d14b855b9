"""Tuning never runs the function's side effects on the caller's own objects.

A ``tol=`` function's first call tunes (a float64 reference run, profiling runs, held-out runs)
and then runs once for the caller; ``mixpert.tune`` only tunes. The caller's objects, nested
ones included, must end as one call (or no call) of their own code leaves them.
"""

from __future__ import annotations

import threading
import warnings
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import pytest
from numba import typed

import mixpert
from mixpert.tuning.copies import UncopyableArgumentError, copies, float64_copies

TOL = 1e-4
RATE = np.float32(1e-3)


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NativeOnCpuWarning and the like: not the point here
        yield


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((48, 24)).astype(np.float32)
    w = rng.standard_normal((24, 24)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    return x, w, b


def _run(way: str, func: Callable[..., Any], args: tuple[Any, ...], **options: Any) -> int:
    """Calls that many times of the caller's code a user expects: 1 for a first ``tol=`` call,
    0 for ``mixpert.tune``."""
    if way == "first call":
        mixpert.jit(func, tol=TOL, **options)(*args)
        return 1
    mixpert.tune(mixpert.jit(func, **options), args, tol=TOL)
    return 0


def _updated(w0: np.ndarray, x: np.ndarray, times: int) -> np.ndarray:
    w = w0.copy()
    for _ in range(times):
        w -= RATE * (x.T @ x)
    return w


def step(params, x):  # nopython: an in-place update of a weight inside a parameter tuple
    w, b, calls = params
    calls[0] += 1
    w -= RATE * (x.T @ x)
    return x @ w + b


def step_prange(params, x):  # the same through a prange loop
    w, b, calls = params
    calls[0] += 1
    g = x.T @ x
    for i in numba.prange(w.shape[0]):
        w[i] -= RATE * g[i]
    return x @ w + b


WAYS = ["first call", "tune"]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("func, options", [(step, {}), (step_prange, {"parallel": True})])
def test_a_parameter_tuple_is_updated_as_often_as_the_caller_calls(way, func, options) -> None:
    x, w, b = _data()
    w0, b0, calls = w.copy(), b.copy(), np.zeros(1, np.int64)
    times = _run(way, func, ((w, b, calls), x), **options)
    assert calls[0] == times
    np.testing.assert_allclose(w, _updated(w0, x, times), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(b, b0)


def step_list(layers, x):  # nopython: a typed list of weights, each updated in place
    h = x
    for w in layers:
        w *= np.float32(0.5)
        h = h @ w
    return h


@pytest.mark.parametrize("way", WAYS)
def test_arrays_in_a_typed_list_are_written_only_by_the_callers_call(way) -> None:
    x, w, _ = _data()
    layers = typed.List([w, w.T.copy()])
    before = [layer.copy() for layer in layers]
    times = _run(way, step_list, (layers, x))
    for layer, was in zip(layers, before, strict=True):
        np.testing.assert_array_equal(layer, was * np.float32(0.5) ** times)


def counted(d, x, w):  # object mode: a counter and a running sum in a dict
    d["n"] = d.get("n", 0) + 1
    d["sum"] += (x @ w).sum(axis=0)
    return x @ w


@pytest.mark.parametrize("way", WAYS)
def test_a_dict_argument_in_object_mode(way) -> None:
    x, w, b = _data()
    d: dict[str, Any] = {"sum": b.copy()}
    times = _run(way, counted, (d, x, w), forceobj=True)
    assert d.get("n", 0) == times
    if times == 0:
        np.testing.assert_array_equal(d["sum"], b)


class Model:
    """An object holding arrays and a history, as a user's model class does."""

    def __init__(self, w: np.ndarray) -> None:
        self.w = w
        self.history: list[float] = []


def train(model, x):  # object mode: the object's array and list both change
    model.w -= RATE * (x.T @ x)
    model.history.append(float(model.w.sum()))
    return x @ model.w


@pytest.mark.parametrize("way", WAYS)
def test_an_object_holding_arrays(way) -> None:
    x, w, _ = _data()
    w0 = w.copy()
    model = Model(w)
    times = _run(way, train, (model, x), forceobj=True)
    assert len(model.history) == times
    assert model.w is w  # the caller's own array, written in place by the caller's call only
    np.testing.assert_allclose(w, _updated(w0, x, times), rtol=0, atol=1e-5)


Params = namedtuple("Params", "w b")


def named_step(p, x):
    p.w[:] = p.w * np.float32(2)
    return x @ p.w + p.b


@pytest.mark.parametrize("way", WAYS)
def test_a_namedtuple(way) -> None:
    x, w, b = _data()
    w0 = w.copy()
    times = _run(way, named_step, (Params(w, b), x))
    np.testing.assert_array_equal(w, w0 * np.float32(2) ** times)


def scale_dask(parts, w):  # object mode on Dask arrays: a lazy array inside a list, set in place
    parts[0][0] = 0
    return parts[0] @ w


@pytest.mark.parametrize("way", WAYS)
def test_dask_arrays_in_a_list(way) -> None:
    da = pytest.importorskip("dask.array")
    x, w, _ = _data()
    lazy = da.from_array(x, chunks=(24, 24))
    parts = [lazy]
    times = _run(way, scale_dask, (parts, w), forceobj=True)
    first_row = parts[0][0].compute()
    if times == 0:
        assert parts[0] is lazy
        np.testing.assert_array_equal(first_row, x[0])
    else:
        np.testing.assert_array_equal(first_row, np.zeros_like(x[0]))


def with_a_lock(state, x, w):  # object mode: a dict that also holds a lock
    state["calls"] = state.get("calls", 0) + 1
    return x @ w


def test_an_argument_that_cannot_be_copied_is_refused_by_name() -> None:
    x, w, _ = _data()
    state = {"lock": threading.Lock()}
    with pytest.raises(UncopyableArgumentError, match=r"argument 0 \('state'\).*lock"):
        mixpert.tune(mixpert.jit(with_a_lock, forceobj=True), (state, x, w), tol=TOL)
    with pytest.raises(UncopyableArgumentError, match="'state'"):
        mixpert.jit(with_a_lock, tol=TOL, forceobj=True)(state, x, w)
    assert "calls" not in state  # refused before any run
    assert issubclass(mixpert.UncopyableArgumentError, TypeError)


def test_copies_keep_structure_and_aliasing_and_share_code() -> None:
    x, w, _ = _data()
    args = ((w, [w, {"k": x}]), w, np.matmul, 3)
    (pair, same, func, three) = copies(args)
    assert pair[0] is not w and pair[0] is same and pair[1][0] is same  # one copy of one array
    np.testing.assert_array_equal(pair[1][1]["k"], x)
    assert pair[1][1]["k"] is not x
    assert func is np.matmul and three == 3
    promoted = float64_copies(args)
    assert promoted[0][1][1]["k"].dtype == np.float64 and promoted[1].dtype == np.float64


def test_a_list_that_holds_itself_is_copied() -> None:
    cycle: list[Any] = [np.ones(2)]
    cycle.append(cycle)
    (copied,) = copies((cycle,))
    assert copied[1] is copied and copied[0] is not cycle[0]


@pytest.mark.gpu
@pytest.mark.parametrize("way", WAYS)
def test_cupy_arrays_in_a_tuple_on_their_device(way) -> None:
    import cupy

    x, w, b = (cupy.asarray(a) for a in _data())
    w0 = w.copy()
    calls = [0]

    def step_gpu(params, x):
        w, b, calls = params
        calls[0] += 1
        w -= RATE * (x.T @ x)
        return x @ w + b

    times = _run(way, step_gpu, ((w, b, calls), x), forceobj=True)
    assert calls[0] == times
    expected = w0.copy()
    for _ in range(times):
        expected -= RATE * (x.T @ x)
    cupy.testing.assert_allclose(w, expected, rtol=0, atol=1e-5)
    last = cupy.cuda.runtime.getDeviceCount() - 1
    with cupy.cuda.Device(last):
        on_last = cupy.ones(3, np.float32)
    (copied,) = copies(((on_last,),))
    assert copied[0].device.id == last and copied[0] is not on_last

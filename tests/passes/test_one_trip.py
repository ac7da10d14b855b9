"""One trip per call (``mixpert.one_trip``), on the CPU: what decides it, and what the caller
gets back. The GPU is played by a stand-in (host arrays whose type says "cupy", copied by a
fake ``transfers``), so everything around the copies runs here: which calls move, the results'
types, shapes and bits, arguments written back exactly, results that are arguments or views of
them, the fallbacks. The real copies and bits on a GPU: tests/runtime/test_one_trip_gpu.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import mixpert
from mixpert import one_trip
from mixpert.plans.plan import Plan, op_sources, op_table_hash
from mixpert.runtime import device


class DeviceArray(np.ndarray):
    """A stand-in for a CuPy array: host memory, a type ``device.is_cupy_array`` takes, and
    CuPy's ``.data.ptr``."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return SimpleNamespace(ptr=self.__array_interface__["data"][0])


DeviceArray.__module__ = "cupy_stand_in"


class StandIn:
    """``runtime.cuda.transfers`` for the stand-in: copies that keep a contiguous layout."""

    def __init__(self) -> None:
        self.over = 0
        self.back = 0

    def to_device(self, host: np.ndarray) -> DeviceArray:
        self.over += 1
        return np.array(host, order="K", copy=True).view(DeviceArray)

    def to_host(self, copy: DeviceArray, out: np.ndarray | None = None) -> np.ndarray:
        self.back += 1
        if out is None:
            return np.array(copy.view(np.ndarray), copy=True)
        np.copyto(out, copy.view(np.ndarray))
        return out


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    """A usable "GPU" for ``one_trip`` alone (the rest of mixpert sees none)."""
    stand_in = StandIn()
    monkeypatch.setattr(one_trip, "_transfers", lambda: stand_in)
    monkeypatch.setattr(
        one_trip,
        "device",
        SimpleNamespace(gpu_available=lambda: True, is_cupy_array=device.is_cupy_array),
    )
    monkeypatch.delenv(one_trip.ENV, raising=False)
    return stand_in


def gpu_plan(jitted: Any, level: str = "fp32", **fields: Any) -> Plan:
    """A plan for the GPU (native float32: the stand-in runs NumPy's own products)."""
    ops = jitted.ops
    fields = {"target": "cuda", **fields}
    return Plan(
        levels=dict.fromkeys(ops, level), function=jitted.py_func.__qualname__,
        op_hash=op_table_hash(ops), signature=[], device="cpu", tol=1e-4, error=0.0,
        predicted_speedup=1.0, op_sources=op_sources(ops), **fields,
    )  # fmt: skip


def on_gpu(func: Any, **fields: Any) -> Any:
    jitted = mixpert.jit(func)
    return jitted.with_plan(gpu_plan(jitted, **fields))


def same(x: Any, y: Any) -> bool:
    """Same type, dtype, shape and bits."""
    return (
        type(x) is type(y)
        and x.dtype == y.dtype
        and np.shape(x) == np.shape(y)
        and np.array_equal(_bytes(x), _bytes(y))
    )


def _bytes(x: Any) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


RNG = np.random.default_rng(3)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, 0.0)
    h = np.maximum(h @ w2, 0.0)
    return h @ w3


def step(x, w):
    x += np.tanh(x @ w)
    return (x * x).sum()


def views(x, w):
    x *= 2.0
    return x, x[1:], x.T, x @ w


def many(x, w):
    h = np.maximum(x @ w, 0.0)
    labels = np.argmin(h, axis=1)
    return [h, (h.sum(), x.shape[0], labels), {"top": h.max(axis=0), "again": h}]


def fails(x, w):
    x += x @ w
    if x.shape[0] > 0:
        raise ValueError("no")
    return x


def elements(x, w):
    h = x @ w
    s = 0.0
    for i in range(h.shape[0]):
        s += h[i, 0]
    return h * s


ARGS = (f32(16, 8), f32(8, 8), f32(8, 8), f32(8, 4))


def test_the_body_runs_on_the_copies_and_the_result_comes_back_as_numpy(gpu: StandIn) -> None:
    given = tuple(a.copy() for a in ARGS)
    result = on_gpu(mlp)(*ARGS)
    assert same(result, mlp(*ARGS))  # NumPy's own run: the same bits, a plain ndarray
    assert (gpu.over, gpu.back) == (4, 1)  # once each way
    assert all(same(a, b) for a, b in zip(ARGS, given, strict=True))  # arguments untouched


def test_plans_that_do_not_move(gpu: StandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    jitted = mixpert.jit(mlp)
    host = jitted.with_plan(dict.fromkeys(jitted.ops, "fp32"))(*ARGS)
    for plan in (
        dict.fromkeys(jitted.ops, "fp32"),  # levels alone: no target
        gpu_plan(jitted, target="cpu"),
        gpu_plan(jitted, on_host="the host's own run beats the GPU's"),
    ):
        assert same(jitted.with_plan(plan)(*ARGS), host)
    monkeypatch.setenv(one_trip.ENV, "0")
    assert same(on_gpu(mlp)(*ARGS), host)
    assert gpu.over == 0


def test_arguments_written_in_place_end_as_on_the_host(gpu: StandIn) -> None:
    x, w = f32(6, 5), f32(5, 5)
    x_host = x.copy()
    expected = step(x_host, w)
    got = on_gpu(step)(x, w)
    assert same(x, x_host) and same(got, expected)  # a NumPy float32 scalar, not a 0-d array
    assert (gpu.over, gpu.back) == (2, 2)  # x and w over; x and the sum (0-d, as CuPy's) back


@pytest.mark.parametrize("order", ["C", "F"])
def test_results_that_are_arguments_or_their_views_come_back_as_such(
    gpu: StandIn, order: str
) -> None:
    x, w = np.asarray(f32(6, 5), order=order), f32(5, 3)
    x_host = x.copy(order=order)
    expected = views(x_host, w)
    got = views_on_gpu(x, w)
    assert got[0] is x
    for view in got[1:3]:
        assert np.shares_memory(view, x)
    assert all(same(g, e) for g, e in zip(got, expected, strict=True))
    assert got[1].strides == expected[1].strides and got[2].strides == expected[2].strides
    got[1][0, 0] = 7.0  # a view of the caller's array, as on the host
    assert x[1, 0] == 7.0


views_on_gpu = on_gpu(views)


def test_containers_scalars_and_shared_results(gpu: StandIn) -> None:
    x, w = f32(9, 4), f32(4, 6)
    expected = many(x, w)
    got = on_gpu(many)(x, w)
    assert type(got) is list and type(got[1]) is tuple and type(got[2]) is dict
    assert same(got[0], expected[0]) and same(got[2]["top"], expected[2]["top"])
    assert same(got[1][0], expected[1][0]) and got[1][1] == 9 and same(got[1][2], expected[1][2])
    assert got[2]["again"] is got[0]  # one device array, one host array


def test_a_body_that_raises_leaves_the_arguments_as_far_as_it_got(gpu: StandIn) -> None:
    x, w = f32(4, 4), f32(4, 4)
    x_host = x.copy()
    with pytest.raises(ValueError, match="no"):
        fails(x_host, w)
    with pytest.raises(ValueError, match="no"):
        on_gpu(fails)(x, w)
    assert same(x, x_host)


def test_cupy_refusing_the_body_runs_it_on_the_host_from_then_on(
    gpu: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = []

    def refused(body: Any, args: Any, mutated: Any) -> Any:
        attempts.append(1)
        raise TypeError("Implicit conversion to a NumPy array is not allowed")

    monkeypatch.setattr(one_trip, "run", refused)
    f = on_gpu(mlp)
    jitted = mixpert.jit(mlp)
    host = jitted.with_plan(dict.fromkeys(jitted.ops, "fp32"))(*ARGS)
    assert same(f(*ARGS), host) and same(f(*ARGS), host)
    assert len(attempts) == 1
    assert str(f.placement_for(*ARGS)) == (
        "stays on the host: CuPy refused its body (TypeError: Implicit conversion to a NumPy "
        "array is not allowed)"
    )


def refuses(x, w):
    if x.shape[0] > 2:
        raise TypeError("the code's own")
    return x @ w


def test_the_codes_own_refusal_is_raised_as_the_host_raises_it(gpu: StandIn) -> None:
    f = on_gpu(refuses)
    x, w = f32(4, 4), f32(4, 4)
    for _ in range(2):
        with pytest.raises(TypeError, match="the code's own"):
            f(x, w)
    assert gpu.over == 4  # tried on the GPU each time: the host failed too
    assert f.placement_for(x, w).movable


def test_code_that_cannot_move_runs_on_the_host_and_says_why(
    gpu: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    x, w = f32(5, 3), f32(3, 3)
    with caplog.at_level(logging.DEBUG, logger="mixpert"):
        got = on_gpu(elements)(x, w)
        on_gpu(mlp)(*ARGS)
        flat = f32(16)
        on_gpu(mlp)(
            flat[:8].reshape(4, 2), flat[4:8].reshape(2, 2), w[:2, :2].copy(), w[:2, :1].copy()
        )
    jitted = mixpert.jit(elements)
    assert same(got, jitted.with_plan(dict.fromkeys(jitted.ops, "fp32"))(x, w))
    assert gpu.over == 4  # mlp's arguments, the one time they moved
    said = [r.getMessage() for r in caplog.records if r.name == "mixpert"]
    assert (
        "elements: stays on the host: reads h element by element in a loop at line "
        in "\n".join(said)
    )
    assert "mlp: runs on the GPU in one trip" in said
    assert "mlp: stays on the host: arguments 'x' and 'w1' may share memory" in said


def test_without_a_gpu_a_plan_for_one_runs_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU is unchanged: nothing is moved, the bits are the levels'."""
    stand_in = StandIn()
    monkeypatch.setattr(one_trip, "_transfers", lambda: stand_in)
    jitted = mixpert.jit(mlp)
    assert same(
        on_gpu(mlp, level="IV")(*ARGS), jitted.with_plan(dict.fromkeys(jitted.ops, "IV"))(*ARGS)
    )
    assert stand_in.over == 0


def test_a_kept_operand_goes_to_a_device_once_per_identity() -> None:
    """Where a product's body stays on the host, a loop-invariant operand is copied to the GPU
    once per call, beside its pack (``Kept.copy``, which ``execution.hook`` uses)."""
    from mixpert.runtime.pack_reuse import Kept, PackSlot

    slot, copies = PackSlot(), []

    def copy() -> object:
        copies.append(object())
        return copies[-1]

    same = Kept(slot, ("numpy", 1, (2, 2), (8, 4), "<f4"))
    first = same.copy("cuda:0", copy)
    assert same.copy("cuda:0", copy) is first and len(copies) == 1
    assert same.copy("cuda:1", copy) is not first  # another device: another copy
    other = Kept(slot, ("numpy", 2, (2, 2), (8, 4), "<f4"))
    assert other.copy("cuda:1", copy) is copies[-1] and len(copies) == 3
    assert Kept().copy("cuda:0", copy) is copies[-1] and len(copies) == 4  # nothing kept

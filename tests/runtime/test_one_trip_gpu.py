"""One trip per call on a GPU (issue 47): NumPy arguments of a function whose plan is for the GPU
go over once, the body runs on CuPy copies, the results come back once, with the bits the same
function computes on CuPy arrays at the same plan; arguments written back exactly; where the
body cannot move (element loops, ``prange``, calls from ``numba.njit`` code) each product moves
through the pinned staging buffers, a loop-invariant operand once a call (products of at least
``offload_min_flops``: smaller NumPy ones run on the CPU backend). The pieces that need no GPU:
tests/passes/test_one_trip.py, tests/passes/test_placement.py, tests/plans/test_trip.py,
tests/runtime/test_transfers_logic.py.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any

import numba
import numpy as np
import pytest

import mixpert
from mixpert import one_trip
from mixpert.plans.plan import Plan, op_sources, op_table_hash

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(47)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def gpu_plan(jitted: Any, levels: dict[str, str] | str) -> Plan:
    """A plan for the GPU with these levels (one level: every op's)."""
    ops = jitted.ops
    chosen = dict.fromkeys(ops, levels) if isinstance(levels, str) else dict(levels)
    return Plan(
        levels=chosen, function=jitted.py_func.__qualname__, op_hash=op_table_hash(ops),
        signature=[], device="test", tol=1e-4, error=0.0, predicted_speedup=1.0,
        op_sources=op_sources(ops), target="cuda",
    )  # fmt: skip


def on_gpu(func: Any, levels: dict[str, str] | str = "IV", **options: Any) -> Any:
    jitted = mixpert.jit(func, **options)
    return jitted.with_plan(gpu_plan(jitted, levels))


def resident(jitted: Any, *args: Any) -> Any:
    """The same function at the same plan on CuPy copies of ``args`` (and those copies)."""
    import cupy as cp

    moved = tuple(cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
    return jitted(*moved), moved


def host(x: Any) -> Any:
    import cupy as cp

    return cp.asnumpy(x) if isinstance(x, cp.ndarray) else x


def same_bits(x: Any, y: Any) -> bool:
    x, y = np.asarray(host(x)), np.asarray(host(y))
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    flat = (np.ascontiguousarray(v).reshape(-1).view(np.uint8) for v in (x, y))
    return bool(np.array_equal(*flat))


@pytest.fixture
def moved(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the arrays ``transfers`` copies over and back."""
    from mixpert.runtime.cuda import transfers

    counts = {"over": 0, "back": 0}
    to_device, to_host = transfers.to_device, transfers.to_host
    lock = threading.Lock()  # prange workers copy too

    def over(array: np.ndarray) -> Any:
        with lock:
            counts["over"] += 1
        return to_device(array)

    def back(array: Any, out: np.ndarray | None = None) -> np.ndarray:
        with lock:
            counts["back"] += 1
        return to_host(array, out)

    monkeypatch.setattr(transfers, "to_device", over)
    monkeypatch.setattr(transfers, "to_host", back)
    monkeypatch.delenv(one_trip.ENV, raising=False)
    return counts


# --- the staging buffers ---------------------------------------------------------------------
def _layouts() -> dict[str, np.ndarray]:
    big = f32(3000, 2000)  # 24 MB: several pieces
    return {
        "C": f32(37, 29),
        "F": np.asfortranarray(f32(37, 29)),
        "strided": f32(40, 60)[::3, 1::2],
        "negative": f32(20, 30)[::-1, ::-2],
        "0-d": np.array(2.5, np.float32),
        "empty": np.zeros((0, 7), np.float32),
        "big": big,
        "big strided": f32(1500, 4000)[:, ::2],
        "long rows": f32(2, 5_000_000)[:, ::2],  # a row beyond a staging buffer
        "int64": RNG.integers(-9, 9, (13, 5)),
        "bool": RNG.random((7, 3)) > 0.5,
        "complex64": (f32(6, 4) + 1j * f32(6, 4)).astype(np.complex64),
        "3-d": f32(4, 5, 6).transpose(1, 0, 2),
    }


@pytest.mark.parametrize("name", list(_layouts()))
def test_arrays_go_over_and_back_bit_for_bit_in_any_layout(name: str) -> None:
    import cupy as cp

    from mixpert.runtime.cuda import transfers

    array = _layouts()[name]
    copy = transfers.to_device(array)
    assert isinstance(copy, cp.ndarray) and copy.shape == array.shape
    assert copy.dtype == array.dtype and same_bits(copy, array)
    if array.flags.f_contiguous or array.flags.c_contiguous:
        assert copy.strides == array.strides  # the layout kept: the bytes mirrored
    back = transfers.to_host(copy)
    assert type(back) is np.ndarray and same_bits(back, array)
    into = np.zeros((*array.shape[:-1], 2 * array.shape[-1]), array.dtype)[..., ::2] if (
        array.ndim
    ) else np.zeros((), array.dtype)  # fmt: skip
    assert transfers.to_host(copy, into) is into and same_bits(into, array)


def test_to_host_refuses_another_shape_or_dtype() -> None:
    from mixpert.runtime.cuda import transfers

    copy = transfers.to_device(f32(3, 4))
    with pytest.raises(ValueError, match=r"out is float64\[3, 4\], the array float32\[3, 4\]"):
        transfers.to_host(copy, np.zeros((3, 4)))


def test_the_bandwidth_is_measured_once() -> None:
    from mixpert.runtime.cuda import transfers

    rate = transfers.bandwidth()
    assert 1e8 < rate < 1e12 and transfers.bandwidth() == rate


# --- one trip --------------------------------------------------------------------------------
def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, 0.0)
    h = np.maximum(h @ w2, 0.0)
    return h @ w3


def mlp_args(w: int) -> tuple[np.ndarray, ...]:
    return (f32(4 * w, w), *(f32(w, w, scale=w**-0.5) for _ in range(3)))


MLP_LEVELS = {"mlp:0": "T6", "mlp:1": "IV", "mlp:2": "V"}


def test_same_bits_as_the_same_function_on_cupy_arrays(
    moved: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    f = on_gpu(mlp, MLP_LEVELS)
    args = mlp_args(256)
    given = tuple(a.copy() for a in args)
    with caplog.at_level(logging.DEBUG, logger="mixpert"), mixpert.record() as calls:
        got = f(*args)
    assert moved == {"over": 4, "back": 1}
    assert "mlp: runs on the GPU in one trip" in [r.getMessage() for r in caplog.records]
    assert [(c.op_id, c.level, c.backend) for c in calls] == [
        ("mlp:0", "T6", "cuda"), ("mlp:1", "IV", "cuda"), ("mlp:2", "V", "cuda"),
    ]  # fmt: skip
    assert type(got) is np.ndarray and got.dtype == np.float32 and got.shape == (1024, 256)
    expected, _ = resident(f, *args)
    assert same_bits(got, expected)
    assert all(same_bits(a, b) for a, b in zip(args, given, strict=True))


def update(x, w):
    x += np.maximum(x @ w, 0.0)
    return (x * x).sum()


def test_arguments_written_in_place_are_written_back_exactly(moved: dict[str, int]) -> None:
    f = on_gpu(update, "V")
    x, w = f32(300, 200), f32(200, 200, scale=0.05)
    (expected, (x_dev, _)) = resident(f, x.copy(), w)
    got = f(x, w)
    assert moved == {"over": 2, "back": 2}  # x and w over; x and the sum back
    assert type(got) is np.float32 and same_bits(got, expected)
    assert same_bits(x, x_dev)


def many(x, w):
    h = np.maximum(x @ w, 0.0)
    labels = np.argmin(h, axis=1)
    return [h, (h.sum(), x.shape[0], labels), {"top": h.max(axis=0), "again": h}]


def test_results_have_numpys_types_dtypes_and_shapes(moved: dict[str, int]) -> None:
    f = on_gpu(many, "IV")
    x, w = f32(64, 32), f32(32, 48)
    got = f(x, w)
    reference = many(x, w)  # NumPy's own run: the types, dtypes and shapes to match
    expected, _ = resident(f, x, w)
    assert type(got) is list and type(got[1]) is tuple and type(got[2]) is dict
    for g, r, e in [
        (got[0], reference[0], expected[0]),
        (got[1][0], reference[1][0], expected[1][0]),
        (got[1][2], reference[1][2], expected[1][2]),
        (got[2]["top"], reference[2]["top"], expected[2]["top"]),
    ]:
        assert type(g) is type(r) and g.dtype == r.dtype and np.shape(g) == np.shape(r)
        assert same_bits(g, e)
    assert got[1][1] == 64 and got[2]["again"] is got[0]


def views(x, w):
    x *= 2.0
    return x, x[1:], x.T, x @ w


@pytest.mark.parametrize("order", ["C", "F"])
def test_results_that_are_arguments_or_their_views_stay_so(order: str) -> None:
    f = on_gpu(views, "IV")
    x, w = np.asarray(f32(40, 30), order=order), f32(30, 20)
    x_host = x.copy(order=order)
    expected = views(x_host, w)
    got = f(x, w)
    assert got[0] is x and np.shares_memory(got[1], x) and np.shares_memory(got[2], x)
    assert same_bits(got[1], expected[1]) and same_bits(got[2], expected[2])
    assert same_bits(x, x_host)


def fails(x, w):
    x += x @ w
    if x.shape[0] > 0:
        raise ValueError("stop")
    return x


def test_a_body_that_raises_writes_back_as_far_as_it_got() -> None:
    import cupy as cp

    f = on_gpu(fails, "IV")
    x, w = f32(50, 40), f32(40, 40, scale=0.1)
    product = host(mixpert.matmul(cp.asarray(x), cp.asarray(w), level="IV"))
    written = x.copy()
    with pytest.raises(ValueError, match="stop"):
        f(written, w)
    assert same_bits(written, x + product)


# --- bodies that stay on the host: each product through the staging buffers --------------------
def element_loop(x, w, steps):  # (float32 constants: a Python float makes h float64 in Numba)
    h = x
    s = np.float32(0)
    for i in range(steps):
        h = (h @ w) * np.float32(0.5)
        s = s + h[i, 0]
    return h, s


def test_a_body_that_cannot_move_stays_and_its_products_move_one_by_one(
    moved: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    f = on_gpu(element_loop, "IV")
    x, w = f32(1024, 512), f32(512, 512, scale=0.05)
    with caplog.at_level(logging.DEBUG, logger="mixpert"), mixpert.record() as calls:
        h, _ = f(x, w, 3)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "element_loop: stays on the host: reads h element by element in a loop at line " in said
    assert moved == {"over": 4, "back": 3}  # h each time, w (loop-invariant) once
    assert [c.backend for c in calls] == ["cuda"] * 3
    expected, _ = resident(f, x, w, 3)
    assert same_bits(h, expected[0])


def stacked(x, w):
    out = np.zeros_like(x[:, :, : w.shape[1]])
    for i in numba.prange(x.shape[0]):
        out[i] = x[i] @ w
    return out


def test_prange_products_move_one_by_one_at_their_level(moved: dict[str, int]) -> None:
    import cupy as cp

    f = on_gpu(stacked, "IV", parallel=True)
    x, w = f32(4, 1024, 512), f32(512, 512)
    assert str(f.placement_for(x, w)).startswith("stays on the host: runs a prange loop at line")
    out = f(x, w)
    assert moved["over"] == 8 and moved["back"] == 4
    for i in range(4):
        alone = mixpert.matmul(cp.asarray(x[i]), cp.asarray(w), level="IV")
        assert same_bits(out[i], alone)


def test_calls_from_numba_njit_code_move_each_product(moved: dict[str, int]) -> None:
    inner = on_gpu(mlp, MLP_LEVELS)

    @numba.njit
    def outer(x, w1, w2, w3):
        return inner(x, w1, w2, w3) * np.float32(2)

    args = mlp_args(512)
    got = outer(*args)
    assert moved == {"over": 6, "back": 3}  # per product: no wrapper, no one trip
    expected, _ = resident(inner, *args)
    assert same_bits(got, expected * 2)


def test_one_trip_off_moves_products_one_by_one(
    moved: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = on_gpu(mlp, MLP_LEVELS)
    args = mlp_args(512)
    trip = f(*args)
    monkeypatch.setenv(one_trip.ENV, "0")
    products = f(*args)
    assert moved == {"over": 4 + 6, "back": 1 + 3}
    assert same_bits(trip, products)  # the same levels, the same bits


# --- the tuner counts the trip ------------------------------------------------------------------
def test_a_tuned_plan_counts_its_trip_and_beats_the_host() -> None:
    args = mlp_args(1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = mixpert.tune(mlp, args, tol=1e-4, target="cuda")
    assert plan.trip_bytes == sum(a.nbytes for a in args) + args[0].nbytes
    assert plan.trip_seconds > 0 and plan.gpu_seconds > 0 and plan.host_seconds > 0
    assert "trip:" in str(plan) and "(measured), natively on the host" in str(plan)
    if plan.on_host:  # (the host won: its own run, said so)
        assert set(plan.levels.values()) == {"fp32"} and plan.gpu_seconds > plan.host_seconds
    else:
        assert plan.gpu_seconds <= plan.host_seconds
        fast = mixpert.jit(mlp, plan=plan)
        expected, _ = resident(fast, *args)
        assert same_bits(fast(*args), expected)


def test_a_plan_the_host_runs_faster_runs_natively_there(moved: dict[str, int]) -> None:
    args = mlp_args(8)  # microseconds on the host; launches and copies cost more on a GPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = mixpert.tune(mlp, args, tol=1e-4, target="cuda")
    assert plan.on_host.startswith("the host's own run (")
    assert set(plan.levels.values()) == {"fp32"}
    before = dict(moved)
    mixpert.jit(mlp, plan=plan)(*args)
    assert moved == before  # nothing moves

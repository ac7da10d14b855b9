"""``@mixpert.jit`` on CuPy arrays without a GPU: the short way of a site (a native site is a
type check and ``cupy.matmul``, an INT8 one its op's plan), the compiled code called without
the dispatcher's typing, and what decides whole-call replay (``mixpert.replay``): option,
signatures, when a call runs directly. A stand-in plays CuPy (host arrays whose type says
"cupy"); the graphs, copies and bits on a GPU: tests/passes/test_replay_gpu.py."""

from __future__ import annotations

import importlib
import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import mixpert
from mixpert import execution, replay
from mixpert.execution import cupy_sites, kept_packs
from mixpert.runtime import device, dispatch


class Array(np.lib.mixins.NDArrayOperatorsMixin):
    """A CuPy array as mixpert reads one: host data, ``.data.ptr`` and ``.data.device_id``,
    NumPy's functions and operators through ``__array_ufunc__`` (and, as for CuPy's, Numba
    types it as a Python object)."""

    __array_priority__ = 100

    def __init__(self, values: np.ndarray, device_id: int = 0) -> None:
        self.values = values
        self.data = SimpleNamespace(ptr=values.__array_interface__["data"][0], device_id=device_id)

    shape = property(lambda self: self.values.shape)
    ndim = property(lambda self: self.values.ndim)
    dtype = property(lambda self: self.values.dtype)
    strides = property(lambda self: self.values.strides)
    size = property(lambda self: self.values.size)
    itemsize = property(lambda self: self.values.itemsize)
    flags = property(lambda self: self.values.flags)
    T = property(lambda self: Array(self.values.T))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Array:
        plain = [x.values if isinstance(x, Array) else x for x in inputs]
        return Array(getattr(ufunc, method)(*plain, **kwargs))


Array.__module__ = "cupy._core.core"


@pytest.fixture
def cp(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The stand-in CuPy, counting its products; the rest of the runtime sees a GPU."""
    products: list[tuple[int, ...]] = []

    def matmul(a: Array, b: Array) -> Array:
        products.append(a.shape + b.shape[1:])
        return Array(a.values @ b.values)

    stream = SimpleNamespace(ptr=7)
    module = SimpleNamespace(
        ndarray=Array,
        matmul=matmul,
        products=products,
        stream=stream,
        may_share_memory=lambda a, b: np.may_share_memory(a.values, b.values),
        cuda=SimpleNamespace(
            runtime=SimpleNamespace(getDevice=lambda: 0),
            get_current_stream=lambda: stream,
        ),
    )
    monkeypatch.setattr(device, "cupy_module", lambda: module)
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(dispatch, "_cuda", lambda: SimpleNamespace(clear_plans=lambda: None))
    monkeypatch.setattr(cupy_sites, "_backend", lambda: SimpleNamespace())  # (nothing replays)
    mixpert.clear_cache()
    yield module
    mixpert.clear_cache()


RNG = np.random.default_rng(46)
jit_module = importlib.import_module("mixpert.jit")  # (``mixpert.jit`` names the decorator)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, np.float32(0))
    h = np.maximum(h @ w2, np.float32(0))
    return h @ w3


def at(level: str, func: Any = mlp, **options: Any) -> Any:
    jitted = mixpert.jit(func, **options)
    return jitted.with_plan(dict.fromkeys(jitted.ops, level))


def test_a_native_site_is_cupys_product_and_nothing_else(cp, monkeypatch) -> None:
    """Where the backend replays nothing (the fixture's), a native site is one ``cupy.matmul``."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a native CuPy site went through dispatch")

    monkeypatch.setattr(dispatch, "cupy_matrix_product", refuse)
    monkeypatch.setattr(dispatch, "route", refuse)
    x, ws = f32(8, 4), [f32(4, 4) for _ in range(3)]
    f = at("fp32")
    for _ in range(2):
        got = f(Array(x), *(Array(w) for w in ws))
        assert type(got) is Array
        np.testing.assert_array_equal(got.values, mlp(x, *ws))
    assert cp.products == [(8, 4, 4)] * 6


def test_a_native_site_replays_cupys_product_where_the_backend_serves_one(cp, monkeypatch) -> None:
    """Small products replay CuPy's very SGEMM as a graph (``replayed_sgemm``: from a shape's
    second call); where it gives None, CuPy's own product runs."""
    replayed: list[tuple[int, ...]] = []
    owners: set[int] = set()

    def replayed_sgemm(a: Array, b: Array, owner: int) -> Array | None:
        if a.shape[0] != 8:
            return None
        replayed.append(a.shape + b.shape[1:])
        owners.add(owner)
        return Array(a.values @ b.values)

    monkeypatch.setattr(cupy_sites, "_backend", lambda: SimpleNamespace(
        replayed_sgemm=replayed_sgemm
    ))  # fmt: skip
    ws = [f32(4, 4) for _ in range(3)]
    for m, level in ((8, "fp32"), (16, "fp32"), (8, "auto")):
        x = f32(m, 4)
        got = at(level)(Array(x), *(Array(w) for w in ws))
        np.testing.assert_array_equal(got.values, mlp(x, *ws))
    assert replayed == [(8, 4, 4)] * 6
    assert cp.products == [(16, 4, 4)] * 3
    assert len(owners) == 3  # (each site its own plan: its graph stays pointed at its operands)


def powers(x, w, n):
    for _ in range(n):
        x = x @ w  # (w is loop-invariant: its packs may be kept)
    return x


def test_an_auto_site_whose_route_is_native_replays_though_its_operand_keeps_packs(
    cp, monkeypatch
) -> None:
    """A native route packs nothing: the site replays CuPy's SGEMM (its op's own plan) whether
    or not the compiler kept a slot for its loop-invariant operand."""
    owners: list[int] = []

    def replayed_sgemm(a: Array, b: Array, owner: int) -> Array:
        owners.append(owner)
        return Array(a.values @ b.values)

    monkeypatch.setattr(cupy_sites, "_backend", lambda: SimpleNamespace(
        replayed_sgemm=replayed_sgemm
    ))  # fmt: skip
    f = at("auto", powers)
    assert any(op.invariant[1] for op in f.ops.values())
    x, w = f32(8, 4), f32(4, 4)
    np.testing.assert_array_equal(f(Array(x), Array(w), 3).values, x @ w @ w @ w)
    assert len(owners) == 3 and len(set(owners)) == 1 and cp.products == []


def test_later_calls_skip_the_dispatchers_typing(cp) -> None:
    f = at("fp32")
    args = (Array(f32(8, 4)), *(Array(f32(4, 4)) for _ in range(3)))
    first = f(*args)
    assert list(f._entries) == [(Array,) * 4]

    class Refusing:  # the dispatcher, which a kept entry no longer asks
        def __call__(self, *args: Any) -> Any:
            raise AssertionError("the dispatcher typed a call with a kept entry")

    f._dispatchers["object"] = Refusing()
    np.testing.assert_array_equal(f(*args).values, first.values)
    np.testing.assert_array_equal(f(*args[:1], w1=args[1], w2=args[2], w3=args[3]).values,
                                  first.values)  # fmt: skip


def test_calls_whose_types_say_all_run_the_compiled_code_at_once(cp, monkeypatch) -> None:
    """A call of CuPy arrays and scalars whose types decide their Numba types goes straight to
    the kept code; Python floats and ints (and NumPy arrays) keep the wrapper's look at them."""
    f = at("fp32", scaled)
    x, w = Array(f32(4, 4)), Array(f32(4, 4))
    f(x, w, np.float32(0.5), True)
    f(x, w, 1.5, 3)
    assert set(f._direct) == {(Array, Array, np.float32, bool)}
    looked_at: list[int] = []
    real = jit_module.weak_float_arguments
    monkeypatch.setattr(jit_module, "weak_float_arguments",
                        lambda args: looked_at.append(1) or real(args))  # fmt: skip
    got = f(x, w, np.float32(0.5), True)
    np.testing.assert_array_equal(got.values, (x.values @ w.values) * np.float32(0.5) + 1)
    assert looked_at == []
    np.testing.assert_array_equal(f(x, w, 1.5, 3).values, (x.values @ w.values) * 1.5 + 3)
    assert looked_at == [1]
    numpy_args = (f32(4, 4), w, np.float32(0.5), True)  # (a NumPy array: its dtype and layout)
    np.testing.assert_array_equal(f(*numpy_args), (numpy_args[0] @ w.values) * np.float32(0.5) + 1)
    assert set(f._direct) == {(Array, Array, np.float32, bool)}
    replayed = at("fp32", scaled, replay=True)
    monkeypatch.setattr(replayed._replays, "call", lambda args, plan, body: body(args))
    for _ in range(2):  # (each call through the replay's layer, which runs it directly here)
        replayed(x, w, np.float32(0.5), True)
    assert replayed._entries and not replayed._direct  # (a replayed call: its own path)


def scaled(x, w, s, n):
    return (x @ w) * s + n


def with_default(x, w, s=2.0):
    return (x @ w) * s


def test_which_arguments_keep_an_entry(cp) -> None:
    x, w = Array(f32(4, 4)), Array(f32(4, 4))
    f = at("fp32", scaled)
    f(x, w, np.float32(0.5), 3)
    f(x, w, 1.5, True)
    assert set(f._entries) == {
        (Array, Array, np.float32, int),
        (Array, Array, np.float32, bool),  # (1.5 beside float32 arrays: NEP 50's float32)
    }
    f(x, w, np.float32(1), 1 << 70)  # an int past int64: its Numba type depends on its value
    f(x, w, np.float32(1), np.ones(4, np.float32))  # a NumPy array: dtype, ndim and layout
    assert len(f._entries) == 2
    g = at("fp32", with_default)
    g(x, w)  # a default the dispatcher folds in: no entry
    assert g._entries == {}


def general_path(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The levels of the products that took dispatch's general path, in order (computed on
    the stand-in's host data)."""
    general: list[str] = []
    monkeypatch.setattr(
        dispatch,
        "cupy_matrix_product",
        lambda a, b, level, keep=None: general.append(level.name) or Array(a.values @ b.values),
    )
    return general


def test_an_int8_site_replays_its_ops_plan_found_once_a_signature(cp, monkeypatch) -> None:
    class Plan:
        def __init__(self) -> None:
            self.calls = 0
            self.released = False

        def __call__(self, a: Array, b: Array) -> Array | None:
            self.calls += 1
            return None if self.released else Array(a.values @ b.values)

    made: list[tuple[Any, ...]] = []
    plans: list[Plan] = []

    def captured_plan(m: int, k: int, n: int, level: Any, fallback: Any = None) -> Plan:
        made.append((m, k, n, level.name))
        plans.append(Plan())
        return plans[-1]

    monkeypatch.setattr(
        cupy_sites, "_backend", lambda: SimpleNamespace(captured_plan=captured_plan)
    )
    general = general_path(monkeypatch)

    def one(x, w):
        return x @ w

    f = at("IV", one)
    x, w = Array(f32(8, 4)), Array(f32(4, 4))
    for _ in range(3):
        f(x, w)
    f(Array(f32(16, 4)), w)
    assert made == [(8, 4, 4, "IV"), (16, 4, 4, "IV")] and plans[0].calls == 3
    plans[0].released = True  # evicted: the general path, then the cache's plan again
    f(x, w)
    f(x, w)
    assert general == ["IV"] and len(made) == 3 and plans[2].calls == 1
    mixpert.clear_cache()  # the op's table forgotten
    f(x, w)
    assert len(made) == 4


def test_an_auto_site_asks_its_route_once_a_shape(cp, monkeypatch) -> None:
    """ "auto": the route for an op and shape is asked once; native float32 is CuPy's product,
    level IV the op's plan made with the route's fallback; other routes take the general path;
    ``clear_cache`` forgets the routes."""
    from mixpert.runtime import auto

    asked: list[tuple[int, int, int]] = []
    routes = {4: auto.NATIVE_ON_GPU, 8: auto.EMULATED_ON_GPU, 16: auto.ORDERED_ON_GPU}

    def route(m: int, k: int, n: int) -> auto.Route:
        asked.append((m, k, n))
        return routes[m]

    made: list[tuple[Any, ...]] = []

    def captured_plan(m: int, k: int, n: int, level: Any, fallback: Any = None) -> Any:
        made.append((m, level.name, fallback))
        return lambda a, b: Array(a.values @ b.values)

    monkeypatch.setattr(dispatch, "auto_route_on_gpu", route)
    monkeypatch.setattr(
        cupy_sites, "_backend", lambda: SimpleNamespace(captured_plan=captured_plan)
    )
    general = general_path(monkeypatch)

    def one(x, w):
        return x @ w

    f = at("auto", one)
    w = Array(f32(4, 4))
    for m in (4, 8, 16, 4, 8, 16):
        x = Array(f32(m, 4))
        np.testing.assert_array_equal(f(x, w).values, x.values @ w.values)
    assert asked == [(4, 4, 4), (8, 4, 4), (16, 4, 4)]  # once a shape
    assert cp.products == [(4, 4, 4), (4, 4, 4)]  # native: CuPy's own product
    assert made == [(8, "IV", auto.EMULATED_ON_GPU.fallback)]  # the op's plan, kept
    assert general == ["auto", "auto"]  # fp32-ordered: the general path
    mixpert.clear_cache()
    f(Array(f32(4, 4)), w)
    assert asked[-1] == (4, 4, 4) and len(asked) == 4


def test_autos_route_is_asked_once_a_shape_and_device_while_plans_are_kept(cp, monkeypatch) -> None:
    """``dispatch.kept_auto_route_on_gpu`` (what ``mixpert.matmul`` and a jit site at "auto"
    ask): the rules once per shape and device; each call with the plan cache off (the free
    memory they read matters then); again after ``clear_cache``."""
    from mixpert.runtime import auto, plan_cache

    asked: list[tuple[int, ...]] = []
    here = [0]
    cp.cuda.runtime.getDevice = lambda: here[0]

    def route(m: int, k: int, n: int) -> auto.Route:
        asked.append((m, k, n, here[0]))
        return auto.EMULATED_ON_GPU

    monkeypatch.setattr(dispatch, "auto_route_on_gpu", route)
    for shape in ((64, 32, 16), (64, 32, 16), (16, 32, 64)):
        assert dispatch.kept_auto_route_on_gpu(*shape) is auto.EMULATED_ON_GPU
    here[0] = 1
    dispatch.kept_auto_route_on_gpu(64, 32, 16)
    assert asked == [(64, 32, 16, 0), (16, 32, 64, 0), (64, 32, 16, 1)]
    mixpert.clear_cache()
    dispatch.kept_auto_route_on_gpu(64, 32, 16)
    assert asked[-1] == (64, 32, 16, 1) and len(asked) == 4
    monkeypatch.setenv(plan_cache.SWITCH, "0")
    for _ in range(2):
        dispatch.kept_auto_route_on_gpu(64, 32, 16)
    assert len(asked) == 6


def test_without_the_backends_lookup_an_int8_site_takes_the_general_path(cp, monkeypatch) -> None:
    monkeypatch.setattr(cupy_sites, "_backend", lambda: SimpleNamespace())  # (no captured_plan)
    general = general_path(monkeypatch)

    def one(x, w):
        return x @ w

    f = at("IV", one)
    for _ in range(2):
        f(Array(f32(8, 4)), Array(f32(4, 4)))
    assert general == ["IV", "IV"]


def test_no_overlap_test_where_no_operand_is_kept(monkeypatch) -> None:
    def refuse(args: Any) -> bool:
        raise AssertionError("the arguments' overlap was tested for nothing")

    monkeypatch.setattr(kept_packs, "arguments_overlap", refuse)
    scope = kept_packs.PackScope(lambda: {}, (f32(2, 2), f32(2, 2)))
    assert scope.keep_for(5, None, None) == kept_packs.KEEP_NOTHING


# --- whole-call replay: the option, signatures, when a call runs directly ---------------------


def test_the_replay_option_is_checked_and_carried() -> None:
    with pytest.raises(TypeError, match="replay="):
        mixpert.jit(mlp, replay="yes")
    f = mixpert.jit(mlp, replay=True)
    assert f.replay and f.with_plan(None).replay
    assert not mixpert.jit(mlp).replay and mixpert.jit(mlp)._replays is None
    assert mixpert.jit(replay=True)(mlp).replay


def key(f: Any, *args: Any, plan: Any = None) -> Any:
    return f._replays.signature(args, f.active_plan if plan is None else plan)


def test_signatures_tell_apart_what_the_graph_holds(cp) -> None:
    f = at("fp32", scaled, replay=True)
    base = np.zeros(4096, np.float32)
    x = Array(base[:16].reshape(4, 4))
    w = Array(f32(4, 4))
    same_alignment = Array(base[256:272].reshape(4, 4))  # 1 KiB further: the same modulo 256
    assert key(f, x, w, 0.5, 1) == key(f, same_alignment, w, 0.5, 1)
    others = [
        key(f, Array(base[1:17].reshape(4, 4)), w, 0.5, 1),  # another alignment
        key(f, Array(f32(4, 8)), w, 0.5, 1),  # another shape
        key(f, Array(np.asfortranarray(x.values)), w, 0.5, 1),  # other strides
        key(f, Array(x.values.astype(np.float64)), w, 0.5, 1),  # another dtype
        key(f, x, w, -0.5, 1),  # scalars by value ...
        key(f, x, w, np.float32(0.5), 1),  # ... and type
        key(f, x, w, 0.5, True),
        key(f, x, w, 0.5, 1, plan=execution.EMPTY_PLAN),  # another plan
    ]
    keys = [key(f, x, w, 0.5, 1), *others]
    assert all(isinstance(k, tuple) for k in keys) and len(set(keys)) == len(keys)
    assert key(f, x, w, float("nan"), 1) == key(f, x, w, float("nan"), 1)  # (NaN keeps its key)
    equal = execution.ActivePlan(dict(f.active_plan.levels))  # plans compare by their levels
    assert key(f, x, w, 0.5, 1, plan=equal) == keys[0]
    cp.stream = SimpleNamespace(ptr=9)
    cp.cuda.get_current_stream = lambda: cp.stream
    assert key(f, x, w, 0.5, 1) != keys[0]  # another stream


def writes(x, w):
    x += x @ w
    return x


def test_calls_that_run_directly_say_why(cp) -> None:
    f = mixpert.jit(scaled, replay=True)
    x, w = Array(f32(4, 4)), Array(f32(4, 4))
    assert "ndarray" in key(f, f32(4, 4), w, 0.5, 1)
    assert "list" in key(f, x, w, [0.5], 1)
    assert "device 1" in key(f, Array(f32(4, 4), device_id=1), w, 0.5, 1)
    g = mixpert.jit(writes, replay=True)
    both = np.zeros((4, 8), np.float32)
    assert g.mutated_arguments == {0}
    assert "shares memory" in key(g, Array(both[:, :4]), Array(both[:, 2:6]))
    assert isinstance(key(g, Array(f32(4, 4)), Array(f32(4, 4))), tuple)


class Captured:
    """A stand-in ``ReplayedCall``: the direct call's result again, or refused."""

    made: list[str] = []
    refuse = ""
    copying = "the stand-in copies"  # (why calls copy: ``ReplayedCall.copying``)

    def __init__(self, args, saved, reference, body, written) -> None:
        if Captured.refuse:
            raise replay.NotReplayable(Captured.refuse)
        Captured.made.append("made")
        self.nbytes, self.reference, self.released, self.replays = 1, reference, False, 0

    def __call__(self, args: Any) -> Any:
        self.replays += 1
        return replay._RELEASED if self.released else self.reference

    def release(self) -> None:
        self.released = True


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> type[Captured]:
    Captured.made, Captured.refuse = [], ""
    monkeypatch.setattr(replay, "ReplayedCall", Captured)
    monkeypatch.setattr(replay, "_saved", lambda args: {})
    return Captured


def counting(body: list[int]) -> Any:
    def run(args: tuple[Any, ...]) -> Any:
        body.append(1)
        return ("direct", len(body))

    return run


def test_a_signature_is_captured_once_then_replayed(cp, captured) -> None:
    replays = replay.Replays("f", lambda: frozenset())
    ran: list[int] = []
    args = (Array(f32(4, 4)),)
    first = replays.call(args, execution.EMPTY_PLAN, counting(ran))
    assert first == ("direct", 1) and captured.made == ["made"]
    assert replays.call(args, execution.EMPTY_PLAN, counting(ran)) == first and len(ran) == 1
    mixpert.clear_cache()  # released: the next call captures again
    assert replays.call(args, execution.EMPTY_PLAN, counting(ran)) == ("direct", 2)
    assert captured.made == ["made", "made"]


def test_a_refused_capture_leaves_its_signature_to_the_direct_call(cp, captured, caplog) -> None:
    captured.refuse = "a host read"
    replays = replay.Replays("f", lambda: frozenset())
    ran: list[int] = []
    args = (Array(f32(4, 4)),)
    with caplog.at_level(logging.DEBUG, logger="mixpert"):
        for _ in range(3):
            replays.call(args, execution.EMPTY_PLAN, counting(ran))
    assert len(ran) == 3 and captured.made == []
    said = [r.getMessage() for r in caplog.records if "without replay" in r.getMessage()]
    assert said == ["f: calls of this signature run without replay: NotReplayable: a host read"]
    captured.refuse = ""  # (it is remembered: no second attempt)
    replays.call(args, execution.EMPTY_PLAN, counting(ran))
    assert captured.made == []


def test_records_and_captures_run_directly(cp, captured) -> None:
    replays = replay.Replays("f", lambda: frozenset())
    ran: list[int] = []
    args = (Array(f32(4, 4)),)
    with execution.record_calls():
        replays.call(args, execution.EMPTY_PLAN, counting(ran))
    with cupy_sites.capturing():  # (a replayed function called inside another's capture)
        replays.call(args, execution.EMPTY_PLAN, counting(ran))
    assert len(ran) == 2 and captured.made == []


def test_the_plan_cache_switch_turns_replay_off(cp, captured, monkeypatch) -> None:
    monkeypatch.setenv("MIXPERT_PLAN_CACHE", "0")
    replays = replay.Replays("f", lambda: frozenset())
    ran: list[int] = []
    for _ in range(2):
        replays.call((Array(f32(4, 4)),), execution.EMPTY_PLAN, counting(ran))
    assert len(ran) == 2 and captured.made == []


def test_a_jitted_function_replays_through_its_signatures(cp, captured) -> None:
    f = at("fp32", scaled, replay=True)
    x, w = Array(f32(4, 4)), Array(f32(4, 4))
    first = f(x, w, 0.5, 1)
    again = f(x, w, 0.5, 1)  # the stand-in's replay: the first call's result object
    assert again is first and captured.made == ["made"]
    f(x, w, 0.25, 1)
    f(f32(4, 4), f32(4, 4), 0.5, 1)  # NumPy: nopython, never replayed
    assert captured.made == ["made", "made"]


# --- the layout arithmetic of buffers and copies ----------------------------------------------


class Strided(SimpleNamespace):
    """An array as ``_span`` and ``_groups`` read it."""


def strided(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int = 4):
    size = int(np.prod(shape))
    flags = SimpleNamespace(c_contiguous=strides[-1:] == (itemsize,))
    return Strided(data=SimpleNamespace(ptr=ptr), shape=shape, strides=strides, size=size,
                   itemsize=itemsize, nbytes=size * itemsize, flags=flags)  # fmt: skip


def test_spans_cover_every_element_whatever_the_strides() -> None:
    assert replay._span(strided(1000, (3, 4), (16, 4))) == (1000, 48)
    assert replay._span(strided(1000, (3, 4), (4, 12))) == (1000, 48)  # column-major
    assert replay._span(strided(1000, (3, 2), (32, 8))) == (1000, 76)  # gaps included
    assert replay._span(strided(1000, (3, 4), (-16, 4))) == (968, 48)  # a flipped view
    assert replay._span(strided(1000, (0, 4), (16, 4))) == (1000, 0)
    assert replay._span(strided(1000, (5,), (0,))) == (1000, 4)  # broadcast


def test_outputs_sharing_memory_are_copied_out_together() -> None:
    h = strided(5000, (4, 4), (16, 4))
    arrays = [
        strided(1000, (4, 4), (16, 4)),
        h,
        strided(5000, (4, 4), (4, 16)),  # h.T: shares h's memory
        strided(9000, (2,), (4,)),
    ]
    groups = replay._groups(arrays)
    assert [[j for j, _ in g.members] for g in groups] == [[0], [1, 2], [3]]
    assert [(g.low, g.size) for g in groups] == [(1000, 64), (5000, 64), (9000, 8)]

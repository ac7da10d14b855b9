"""Whole-call replay (``mixpert.replay``) end to end without a GPU, over a stand-in CuPy whose
"device" memory is host memory at real addresses and whose stream capture records each
operation instead of running it (a graph launch runs the records in order, reading and writing
the memory they were captured on, as a CUDA graph does). What this checks is replay's own work:
buffers of the arguments' layout, the copies in and back, results that are arguments or views
of them or share memory, the check against the direct call, and the fallbacks.

Each test runs twice: with calls copying, and with calls reading in place where replay finds
them safe, through a stand-in for ``graph_operands.find`` whose binding moves, at a launch,
every array lying in a bound buffer to the address the binding was pointed at (what rewriting
the kernels' parameters does); a device copy, made with plain addresses, does not move: the
stand-in for a graph reaching an argument through a pointer its nodes do not hold. The real
kernels, copies, bindings and bits: tests/passes/test_replay_gpu.py (GPU)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import mixpert
from mixpert import replay
from mixpert.execution import cupy_sites
from mixpert.runtime import device, dispatch
from mixpert.runtime.cuda import graph_operands

# --- the stand-in -------------------------------------------------------------------------------


class CaptureError(RuntimeError):
    """What CUDA says of a host read or synchronisation inside a capture."""


class _Capture:
    ops: list[Callable[[], None]] | None = None  # the records of the capture under way
    broken = False


capture = _Capture()


def enqueue(run: Callable[[], None]) -> None:
    """Work on the stream: recorded while a capture is under way, else run now."""
    if capture.ops is not None:
        capture.ops.append(run)
    else:
        run()


class Memory:
    """One allocation, 512-byte aligned as CuPy's."""

    def __init__(self, nbytes: int) -> None:
        self.bytes = np.zeros(nbytes + 1024, np.uint8)
        start = self.bytes.__array_interface__["data"][0]
        self.base = start
        self.first = start + (-start % 512)


class Pointer:
    def __init__(self, memory: Memory, ptr: int) -> None:
        self.mem, self.ptr, self.device_id = memory, ptr, 0

    def __add__(self, offset: int) -> Pointer:
        return Pointer(self.mem, self.ptr + offset)


def new_memory(nbytes: int) -> Pointer:
    memory = Memory(nbytes)
    return Pointer(memory, memory.first)


allocators: list[Callable[[int], Pointer]] = []  # ``using_allocator``'s, innermost last


def alloc(nbytes: int) -> Pointer:
    """CuPy's ``cuda.alloc``: from the current allocator."""
    return allocators[-1](nbytes) if allocators else new_memory(nbytes)


@contextlib.contextmanager
def using_allocator(malloc: Callable[[int], Pointer]) -> Iterator[None]:
    allocators.append(malloc)
    try:
        yield
    finally:
        allocators.pop()


class ndarray(np.lib.mixins.NDArrayOperatorsMixin):  # noqa: N801  (CuPy's name)
    def __init__(self, shape, dtype=np.float32, memptr=None, strides=None, order="C"):
        shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
        dtype = np.dtype(dtype)
        if memptr is None:
            memptr = alloc(max(int(np.prod(shape)), 1) * dtype.itemsize)
        if strides is None:
            strides = np.empty(shape, dtype, order=order).strides
        self.data = memptr
        offset = memptr.ptr - memptr.mem.base
        self._values = np.ndarray(shape, dtype, memptr.mem.bytes, offset, strides)

    @property
    def values(self) -> np.ndarray:
        """The elements: where a rebound graph's launch moved them, during one."""
        return moved(self._values) if Graph.moving else self._values

    @classmethod
    def over(cls, values: np.ndarray, memory: Memory) -> ndarray:
        """An array over ``values``, a view of ``memory``'s bytes."""
        return cls(values.shape, values.dtype, Pointer(memory, _address(values)), values.strides)

    shape = property(lambda self: self.values.shape)
    ndim = property(lambda self: self.values.ndim)
    dtype = property(lambda self: self.values.dtype)
    strides = property(lambda self: self.values.strides)
    size = property(lambda self: self.values.size)
    itemsize = property(lambda self: self.values.itemsize)
    nbytes = property(lambda self: self.values.nbytes)
    flags = property(lambda self: self.values.flags)
    T = property(lambda self: ndarray.over(self.values.T, self.data.mem))

    def __getitem__(self, index: Any) -> ndarray:
        return ndarray.over(self.values[index], self.data.mem)

    def __setitem__(self, index: Any, value: Any) -> None:
        def run() -> None:
            self.values[index] = value.values if isinstance(value, ndarray) else value

        enqueue(run)

    def view(self, dtype: Any) -> ndarray:
        return ndarray.over(self.values.view(dtype), self.data.mem)

    def copy(self) -> ndarray:
        return computed(lambda: self.values.copy())

    def any(self) -> ndarray:
        return computed(lambda: np.asarray(self.values.any()))

    def max(self, axis: Any = None, keepdims: bool = False) -> ndarray:
        return computed(lambda: self.values.max(axis=axis, keepdims=keepdims))

    def sum(self, axis: Any = None, keepdims: bool = False) -> ndarray:
        return computed(lambda: self.values.sum(axis=axis, keepdims=keepdims))

    def get(self) -> np.ndarray:
        if capture.ops is not None:
            capture.broken = True
            raise CaptureError("operation not permitted when stream is capturing")
        return self.values.copy()

    def __float__(self) -> float:
        return float(self.get())

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.pop("out", None)

        def value() -> Any:
            plain = [x.values if isinstance(x, ndarray) else x for x in inputs]
            return getattr(ufunc, method)(*plain, **kwargs)

        if out is not None:
            (target,) = out
            target[...] = Lazy(value)
            return target
        return computed(value)


class Lazy:
    """A value computed when the stream runs it."""

    def __init__(self, compute: Callable[[], Any]) -> None:
        self.compute = compute


def computed(compute: Callable[[], Any]) -> ndarray:
    """A new array whose values the stream computes (its shape and dtype read from a trial on
    the memory as it is now: during a capture, whatever it holds)."""
    with np.errstate(all="ignore"):
        trial = np.asarray(compute())
    out = ndarray(trial.shape, trial.dtype)

    def run() -> None:
        with np.errstate(all="ignore"):
            out.values[...] = compute()

    enqueue(run)
    return out


_setitem = ndarray.__setitem__


def _lazy_setitem(self: ndarray, index: Any, value: Any) -> None:
    if isinstance(value, Lazy):

        def run() -> None:
            with np.errstate(all="ignore"):
                self.values[index] = value.compute()

        enqueue(run)
        return
    _setitem(self, index, value)


ndarray.__setitem__ = _lazy_setitem  # type: ignore[method-assign]
ndarray.__module__ = "cupy._core.core"


def _address(values: np.ndarray) -> int:
    return values.__array_interface__["data"][0]


def moved(values: np.ndarray) -> np.ndarray:
    """``values`` where the launch under way moved them: an array whose first element lies in
    a bound buffer, at the same offset in the memory the buffer was pointed at."""
    address = _address(values)
    for start, size, base in Graph.moving:
        if start <= address < start + size and values.size:
            shape, strides = values.shape, values.strides
            low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
            high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
            there = base + address - start
            span = (ctypes.c_char * (high - low + values.itemsize)).from_address(there + low)
            return np.ndarray(shape, values.dtype, span, -low, strides)
    return values


class Stream:
    current: list[Stream] = []

    def __init__(self, non_blocking: bool = False) -> None:
        self.ptr = id(self)
        self.capturing = False

    def __enter__(self) -> Stream:
        Stream.current.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        Stream.current.pop()

    def is_capturing(self) -> bool:
        return self.capturing

    def synchronize(self) -> None:
        if capture.ops is not None:
            capture.broken = True
            raise CaptureError("operation not permitted when stream is capturing")

    def begin_capture(self) -> None:
        capture.ops, capture.broken = [], False
        self.capturing = True

    def end_capture(self) -> Graph:
        ops, broken = capture.ops, capture.broken
        capture.ops, self.capturing = None, False
        if broken:
            raise CaptureError("capture invalidated")
        return Graph(ops)


class Graph:
    launches = 0
    moving: list[tuple[int, int, int]] = []  # the launch under way's moves (``Binding``)

    def __init__(self, ops: list[Callable[[], None]]) -> None:
        self.ops = ops
        self.moves: list[tuple[int, int, int]] = []  # (buffer's start, bytes, where it is now)

    def launch(self, stream: Stream) -> None:
        Graph.launches += 1
        Graph.moving = self.moves
        try:
            for run in self.ops:
                run()
        finally:
            Graph.moving = []


class Binding:
    """``graph_operands.Binding`` in the stand-in: ``point`` moves each buffer for the graph's
    next launches. ``refuses``: "new", the driver refuses any address but the captured ones;
    "all", every rewrite (each after the first buffer's nodes took their new address)."""

    def __init__(self, graph: Graph, buffers: list[Any]) -> None:
        self.graph, self.spans = graph, [(x.data.ptr, x.nbytes) for x in buffers]
        self.points: list[list[int]] = []
        self.refuses = ""

    @property
    def home(self) -> list[int]:
        return [start for start, _ in self.spans]

    def point(self, bases: Any) -> None:
        bases = list(bases)
        self.points.append(bases)
        moves = [(a, n, b) for (a, n), b in zip(self.spans, bases, strict=True) if a != b]
        if self.refuses == "all" or (self.refuses == "new" and moves):
            self.graph.moves = moves[:1]  # (the nodes rewritten before the refusal)
            raise RuntimeError("CUDA driver call failed with status 1")
        self.graph.moves = moves


class Binder:
    """``graph_operands.find`` in the stand-in: a ``Binding`` of every buffer in "in place"
    mode, None (calls copy) in "copies" mode."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.found: list[Binding] = []
        self.refuses = ""  # (what the bindings it makes refuse: ``Binding``)

    def find(self, graph: Graph, operands: Any, output: Any, bodies: Any = None) -> Any:
        if self.mode == "copies":
            return None
        outputs = list(output) if isinstance(output, (tuple, list)) else [output]
        binding = Binding(graph, [*operands, *outputs])
        binding.refuses = self.refuses
        self.found.append(binding)
        return binding


class MemoryPool:
    def __init__(self) -> None:
        self.total = 0

    def malloc(self, nbytes: int) -> Pointer:
        self.total += nbytes
        return new_memory(nbytes)

    def total_bytes(self) -> int:
        return self.total

    def free_all_blocks(self) -> None:
        pass


class Cublas:
    """CuPy's cuBLAS handle: the stream its calls left it on."""

    stream = 0

    @staticmethod
    def setStream(handle: int, stream: int) -> None:  # noqa: N802  (CuPy's name)
        Cublas.stream = stream

    @staticmethod
    def getStream(handle: int) -> int:  # noqa: N802
        return Cublas.stream


def graph_matmul(a: ndarray, b: ndarray) -> ndarray:
    """``graph_gemm.matmul``: cuBLAS's call, with the handle set on the current stream."""
    Cublas.setStream(1, cuda.get_current_stream().ptr)
    return matmul(a, b)


def memcpy(dst: int, src: int, size: int, kind: int, stream: int) -> None:
    enqueue(lambda: ctypes.memmove(dst, src, size))


def empty(shape: Any, dtype: Any = np.float32, order: str = "C") -> ndarray:
    return ndarray(shape if isinstance(shape, tuple) else (shape,), dtype, order=order)


def asarray(values: Any) -> ndarray:
    values = np.asarray(values)
    out = ndarray(values.shape, values.dtype)
    out.values[...] = values
    return out


def stack(arrays: list[ndarray]) -> ndarray:
    return computed(lambda: np.stack([a.values for a in arrays]))


def matmul(a: ndarray, b: ndarray) -> ndarray:
    return computed(lambda: a.values @ b.values)


null = Stream()
cuda = SimpleNamespace(
    Stream=Stream,
    MemoryPool=MemoryPool,
    alloc=alloc,
    using_allocator=using_allocator,
    get_current_stream=lambda: Stream.current[-1] if Stream.current else null,
    runtime=SimpleNamespace(memcpyAsync=memcpy, getDevice=lambda: 0),
    cublas=Cublas,
    device=SimpleNamespace(get_cublas_handle=lambda: 1),
)
cp = SimpleNamespace(
    ndarray=ndarray, cuda=cuda, empty=empty, asarray=asarray, stack=stack, matmul=matmul,
    ascontiguousarray=lambda x: x.copy(), uint8=np.uint8,
    may_share_memory=lambda a, b: np.may_share_memory(a.values, b.values),
)  # fmt: skip


@pytest.fixture(autouse=True, params=["copies", "in place"])
def stand_in(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Binder]:
    """The stand-in CuPy, and the stand-in ``graph_operands.find`` in the run's mode."""
    monkeypatch.setattr(device, "cupy_module", lambda: cp)
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(dispatch, "_cuda", lambda: SimpleNamespace(clear_plans=lambda: None))
    monkeypatch.setattr(cupy_sites, "_graph_gemm", lambda: SimpleNamespace(matmul=graph_matmul))
    monkeypatch.setattr(cupy_sites, "_backend", lambda: SimpleNamespace())  # (nothing replays)
    binder = Binder(request.param)
    monkeypatch.setattr(graph_operands, "find", binder.find)
    mixpert.clear_cache()
    yield binder
    mixpert.clear_cache()
    capture.ops = None


# --- the tests ----------------------------------------------------------------------------------

RNG = np.random.default_rng(46)


def gpu(*shape: int) -> ndarray:
    return asarray(RNG.standard_normal(shape).astype(np.float32))


def native_pair(func: Any) -> tuple[Any, Any]:
    direct = mixpert.jit(func)
    plan = dict.fromkeys(direct.ops, "fp32")
    return direct.with_plan(plan), mixpert.jit(func, replay=True).with_plan(plan)


def host(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(host(v) for v in x)
    return x.values.copy()


def same(x: Any, y: Any) -> bool:
    if isinstance(x, tuple):
        return isinstance(y, tuple) and len(x) == len(y) and all(map(same, x, y))
    return x.shape == y.shape and np.array_equal(x.view(np.uint8), y.view(np.uint8))


def graphs(f: Any) -> list[Any]:
    return [e for k, e in replay._calls._plans.items() if k[0] is f._replays]


# a test that needs calls reading in place where replay finds them safe
in_place_only = pytest.mark.parametrize("stand_in", ["in place"], indirect=True)


def mlp(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, np.float32(0))
    return h @ w2 + b2


def test_fresh_inputs_at_new_addresses_replay_the_direct_calls_results(stand_in) -> None:
    direct, replayed = native_pair(mlp)
    launches = Graph.launches
    for _ in range(4):
        args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
        before = host(args)
        assert same(host(replayed(*args)), host(direct(*args)))
        assert same(host(args), before)  # (read in place or not, never written)
    (graph,) = graphs(replayed)
    in_place = stand_in.mode == "in place"
    assert graph is not None and graph.reads_in_place == in_place
    # the check, the binding's trial where calls read in place, three replays
    assert Graph.launches - launches == 1 + in_place + 3


def test_a_planned_call_leaves_cublas_on_the_callers_stream() -> None:
    """The capture runs on a stream of the plan's, gone once the plan is made: CuPy's cuBLAS
    handle must come back on the caller's (a library using the handle as CuPy left it, without
    setting a stream, would crash)."""
    _, replayed = native_pair(mlp)
    with Stream() as stream:
        for _ in range(3):
            replayed(gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
    assert graphs(replayed) and Cublas.stream == stream.ptr


def test_views_and_offsets_keep_their_layout(stand_in) -> None:
    def scaled(x, w, s):
        return (x @ w) * s

    direct, replayed = native_pair(scaled)
    for view_of in (
        lambda big: big[2:10, 3:9],
        lambda big: big[1:7, 1:9].T,
        lambda big: big[::2, ::3][:, :6],  # (gaps: other arrays' memory, never read)
        lambda big: big[9:1:-1, 8:2:-1],  # (reversed: the span starts below the first element)
    ):
        for s in (0.5, -1.5, 0.5):
            big, w = gpu(20, 30), gpu(6, 4)  # (each call's arguments at new addresses)
            before = host(big)
            assert same(host(replayed(view_of(big), w, s)), host(direct(view_of(big), w, s)))
            assert same(host(big), before)
    assert len(graphs(replayed)) >= 4 and all(g is not None for g in graphs(replayed))
    assert all(g.reads_in_place == (stand_in.mode == "in place") for g in graphs(replayed))


def reversed_rows(x, w):
    return (x @ w)[::-1]


def test_a_result_that_fills_its_memory_in_neither_order_keeps_its_strides() -> None:
    """A reversed view fills its span but is neither C- nor F-ordered: copied out as bytes with
    its strides, not as a new array of some order (which would reverse its rows back)."""
    direct, replayed = native_pair(reversed_rows)
    for _ in range(3):
        x, w = gpu(5, 4), gpu(4, 3)
        assert same(host(replayed(x, w)), host(direct(x, w)))
    assert graphs(replayed)[0] is not None
    assert not graphs(replayed)[0].reads_in_place  # (a new array would be one of some order)


def step(x, w, out):
    out[...] = np.tanh(x @ w)
    x *= np.float32(0.5)
    return out, x, x.T


def test_arguments_written_into_come_back_and_results_may_be_arguments(stand_in) -> None:
    direct, replayed = native_pair(step)
    assert replayed.mutated_arguments == {0, 2}
    for _ in range(3):
        x, w = gpu(6, 6), gpu(6, 6)
        x2, out, out2 = asarray(host(x)), empty((6, 6)), empty((6, 6))
        got, want = replayed(x, w, out), direct(x2, w, out2)
        assert same(host(got), host(want)) and same(host(x), host(x2))
        assert got[0] is out and got[1] is x  # the caller's own arrays ...
        assert got[2].data.ptr == x.data.ptr and got[2].strides == x.T.strides  # ... a view
    assert graphs(replayed)[0] is not None
    assert not graphs(replayed)[0].reads_in_place and not stand_in.found  # (not even tried)


def shared(x, w):
    h = x @ w
    return h, h.T, h[1:], np.float32(2.0), (x.shape[0], None)


def test_results_sharing_memory_keep_sharing_it() -> None:
    direct, replayed = native_pair(shared)
    for _ in range(3):
        x, w = gpu(5, 4), gpu(4, 3)
        got, want = replayed(x, w), direct(x, w)
        assert same(host(got[:3]), host(want[:3])) and got[3:] == want[3:]
        assert got[1].data.ptr == got[0].data.ptr and got[2].data.ptr == got[0].data.ptr + 12
        got[0][...] = 7.0  # one memory, as the direct call's: writes show in the others
        assert np.all(host(got[1]) == 7.0) and np.all(host(got[2]) == 7.0)
    assert graphs(replayed)[0] is not None
    assert not graphs(replayed)[0].reads_in_place  # (results sharing memory)


def reads_back(x, w):
    y = x @ w
    if float(y.max()) > 0:  # a host read: no graph can hold it
        return y * np.float32(2)
    return y


def test_a_host_read_leaves_the_signature_to_the_direct_call(caplog) -> None:
    direct, replayed = native_pair(reads_back)
    with caplog.at_level(logging.DEBUG, logger="mixpert"):
        for _ in range(3):
            x, w = gpu(4, 4), gpu(4, 4)
            assert same(host(replayed(x, w)), host(direct(x, w)))
    assert graphs(replayed) == [None]
    (said,) = [r.getMessage() for r in caplog.records if "without replay" in r.getMessage()]
    assert "CaptureError" in said and "capturing" in said


CALLS = [0]


def counts(x, w):
    CALLS[0] += 1  # a host value that changes between the direct call and the capture
    return (x @ w) * np.float32(CALLS[0])


def test_a_graph_with_other_bits_than_the_direct_call_is_refused(caplog) -> None:
    direct, replayed = native_pair(counts)
    with caplog.at_level(logging.DEBUG, logger="mixpert"):
        replayed(gpu(4, 4), gpu(4, 4))
    assert graphs(replayed) == [None]
    assert any("differs from the direct call's" in r.getMessage() for r in caplog.records)


def test_release_then_capture_again() -> None:
    direct, replayed = native_pair(mlp)
    args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
    replayed(*args)
    (first,) = graphs(replayed)
    mixpert.clear_cache()
    assert first._graph is None and graphs(replayed) == []
    assert same(host(replayed(*args)), host(direct(*args)))  # captured again
    assert graphs(replayed)[0] is not None and graphs(replayed)[0] is not first


# --- reading in place ---------------------------------------------------------------------------


@in_place_only
def test_in_place_calls_point_the_graph_at_each_calls_arrays(stand_in) -> None:
    direct, replayed = native_pair(mlp)
    for _ in range(3):
        args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
        got = replayed(*args)
        assert same(host(got), host(direct(*args)))
    (graph,) = graphs(replayed)
    (binding,) = stand_in.found
    assert graph.reads_in_place and len(binding.spans) == len(args) + 1
    trial, back, *calls = binding.points  # (the first call ran directly and captured)
    assert trial != binding.home and back == binding.home and len(calls) == 2
    assert calls[-1] == [x.data.ptr for x in args] + [got.data.ptr]  # a new output each call


def through_a_copy(xs: tuple[Any, ...]) -> Any:
    """A body whose graph reads its first argument through a device copy made with plain
    addresses: the stand-in of a graph reaching an argument through a pointer no node holds
    (a pointer array in device memory, say)."""
    x, w = xs
    y = empty(x.shape, x.dtype)
    memcpy(y.data.ptr, x.data.ptr, x.nbytes, 3, cuda.get_current_stream().ptr)
    return matmul(y, w) * np.float32(2)


def replays_of(replays: replay.Replays) -> list[Any]:
    return [e for k, e in replay._calls._plans.items() if k[0] is replays]


@in_place_only
def test_a_graph_reaching_an_argument_past_its_nodes_keeps_copying(stand_in, caplog) -> None:
    """The binding's trial (arguments copied to new addresses, the replay's own buffers
    poisoned) shows the read the binding misses: calls copy, with the direct call's results."""
    replays = replay.Replays("through_a_copy", frozenset)  # (the body writes no argument)
    with caplog.at_level(logging.DEBUG, logger="mixpert"):
        for _ in range(3):
            x, w = gpu(4, 4), gpu(4, 3)
            before = host(x)
            got = replays.call((x, w), None, through_a_copy)
            assert same(host(got), host(through_a_copy((x, w)))) and same(host(x), before)
    (call,) = replays_of(replays)
    assert call is not None and not call.reads_in_place
    (binding,) = stand_in.found
    assert binding.points[-1] == binding.home  # (pointed back at its own buffers)
    assert any("other bits" in r.getMessage() for r in caplog.records)


def writes_back_through_a_copy(xs: tuple[Any, ...]) -> Any:
    """A body writing its first argument's own values back into it, read through a device
    copy made with plain addresses: a write the analysis does not see (the caller says none)
    and the check cannot (the same bits), which the caller's array would take once rebound."""
    x, w = xs
    y = empty(x.shape, x.dtype)
    memcpy(y.data.ptr, x.data.ptr, x.nbytes, 3, cuda.get_current_stream().ptr)
    x[...] = y
    return w * np.float32(2)


@in_place_only
def test_a_graph_writing_an_argument_keeps_copying(stand_in, caplog) -> None:
    replays = replay.Replays("writes_back", frozenset)
    with caplog.at_level(logging.DEBUG, logger="mixpert"):
        for _ in range(3):
            x, w = gpu(4, 4), gpu(4, 3)
            before = host(x)
            got = replays.call((x, w), None, writes_back_through_a_copy)
            assert same(host(got), host(w) * np.float32(2)) and same(host(x), before)
    (call,) = replays_of(replays)
    assert call is not None and not call.reads_in_place
    assert "wrote into them" in call.copying


@in_place_only
@pytest.mark.parametrize("refuses", ["new", "all"])
def test_a_rewrite_the_driver_refuses_at_the_trial_leaves_calls_copying(stand_in, refuses):
    stand_in.refuses = refuses
    direct, replayed = native_pair(mlp)
    for _ in range(3):
        args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
        assert same(host(replayed(*args)), host(direct(*args)))
    (graph,) = graphs(replayed)
    if refuses == "new":  # the graph back on its own buffers: calls copy
        assert graph is not None and not graph.reads_in_place
    else:  # not even that: the signature runs directly
        assert graph is None


@in_place_only
@pytest.mark.parametrize("refuses", ["new", "all"])
def test_a_rewrite_the_driver_refuses_at_a_call_turns_calls_to_copies(stand_in, refuses):
    direct, replayed = native_pair(mlp)
    args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
    replayed(*args)
    (graph,) = graphs(replayed)
    (binding,) = stand_in.found
    assert graph.reads_in_place
    binding.refuses = refuses
    for _ in range(3):
        args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
        assert same(host(replayed(*args)), host(direct(*args)))
    assert not graph.reads_in_place
    assert (graph._graph is None) == (refuses == "all")  # (dropped: calls run directly)


FILLED = gpu(5, 3)  # memory from before the capture, which the body fills


def fills_a_global(x, w):
    FILLED[...] = x @ w
    return FILLED


def a_view_of_a_larger_block(x, w):
    return (x @ w)[:-1]  # (the product's kernel writes a row past the result)


def an_empty_result(x, w):
    return (x @ w)[:0]


@in_place_only
@pytest.mark.parametrize("func", [fills_a_global, a_view_of_a_larger_block, an_empty_result])
def test_results_a_new_array_cannot_stand_for_keep_copying(stand_in, func) -> None:
    direct, replayed = native_pair(func)
    for _ in range(3):
        x, w = gpu(5, 4), gpu(4, 3)
        got = host(replayed(x, w))
        if func is fills_a_global:
            assert same(host(FILLED), got)  # (the graph filled it, as the body does)
        assert same(got, host(direct(x, w)))
    (graph,) = graphs(replayed)
    assert graph is not None and not graph.reads_in_place


def several(x, w, s):
    h = x @ w
    return {"h": h, "rest": (np.tanh(h) * s, x.T, s, [x[1:]])}


@in_place_only
def test_several_results_arguments_and_their_views_read_in_place(stand_in) -> None:
    direct, replayed = native_pair(several)
    for _ in range(3):
        x, w = gpu(5, 4), gpu(4, 3)
        got, want = replayed(x, w, 0.5), direct(x, w, 0.5)
        assert same(host(got["h"]), host(want["h"]))
        assert same(host(got["rest"][0]), host(want["rest"][0])) and got["rest"][2] == 0.5
        assert got["rest"][1].data.ptr == x.data.ptr and got["rest"][1].strides == x.T.strides
        assert got["rest"][3][0].data.ptr == x.data.ptr + 16  # (the caller's own arrays)
    (graph,) = graphs(replayed)
    (binding,) = stand_in.found
    assert graph.reads_in_place and len(binding.spans) == 2 + 2  # (x, w; two new arrays)
    assert binding.points[-1][2:] == [got["h"].data.ptr, got["rest"][0].data.ptr]


@in_place_only
def test_new_outputs_keep_the_captured_alignment(stand_in, monkeypatch) -> None:
    """An allocator whose blocks lie otherwise modulo 256 than the capture's: each output is
    taken at the captured alignment (cuBLAS picked its kernels by it)."""

    def shifted(shape: Any, dtype: Any = np.float32, order: str = "C") -> ndarray:
        shape = shape if isinstance(shape, tuple) else (shape,)
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return ndarray(shape, dtype, memptr=alloc(nbytes + 16) + 16, order=order)

    direct, replayed = native_pair(mlp)
    monkeypatch.setattr(cp, "empty", shifted)
    for _ in range(3):
        args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
        got = replayed(*args)
        assert same(host(got), host(direct(*args))) and got.data.ptr % 256 == 0
    assert graphs(replayed)[0].reads_in_place


def test_an_output_must_be_a_whole_block_no_scratch_ran_past() -> None:
    out = empty((4, 4))  # 64 bytes
    outputs = replay._Outputs(out, {})
    start = out.data.ptr
    assert outputs.why_not_fresh([(start, 64)]) is None
    assert outputs.why_not_fresh([(start, 64), (start + 16, 32), (start - 64, 64)]) is None
    assert "whole block" in outputs.why_not_fresh([(start, 128)])  # a view of a larger one
    assert "whole block" in outputs.why_not_fresh([])  # from before the capture
    ran_past = [(start, 64), (start + 32, 64)]  # a scratch freed before it, reaching past
    assert "ran past" in outputs.why_not_fresh(ran_past)
    assert "ran past" in outputs.why_not_fresh([(start - 16, 32), (start, 64)])

"""Whole-call replay (``mixpert.replay``) end to end without a GPU, over a stand-in CuPy whose
"device" memory is host memory at real addresses and whose stream capture records each
operation instead of running it (a graph launch runs the records in order, reading and writing
the memory they were captured on, as a CUDA graph does). What this checks is replay's own work:
buffers of the arguments' layout, the copies in and back, results that are arguments or views
of them or share memory, the check against the direct call, and the fallbacks. The real
kernels, copies and bits: tests/passes/test_replay_gpu.py (GPU)."""

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


def alloc(nbytes: int) -> Pointer:
    memory = Memory(nbytes)
    return Pointer(memory, memory.first)


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
        self.values = np.ndarray(shape, dtype, memptr.mem.bytes, offset, strides)

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

    def __init__(self, ops: list[Callable[[], None]]) -> None:
        self.ops = ops

    def launch(self, stream: Stream) -> None:
        Graph.launches += 1
        for run in self.ops:
            run()


class MemoryPool:
    def __init__(self) -> None:
        self.total = 0

    def malloc(self, nbytes: int) -> Pointer:
        self.total += nbytes
        return alloc(nbytes)

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
    using_allocator=lambda malloc: contextlib.nullcontext(),
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


@pytest.fixture(autouse=True)
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(device, "cupy_module", lambda: cp)
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(dispatch, "_cuda", lambda: SimpleNamespace(clear_plans=lambda: None))
    monkeypatch.setattr(cupy_sites, "_graph_gemm", lambda: SimpleNamespace(matmul=graph_matmul))
    monkeypatch.setattr(cupy_sites, "_backend", lambda: SimpleNamespace())  # (nothing replays)
    mixpert.clear_cache()
    yield
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


def mlp(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, np.float32(0))
    return h @ w2 + b2


def test_fresh_inputs_at_new_addresses_replay_the_direct_calls_results() -> None:
    direct, replayed = native_pair(mlp)
    launches = Graph.launches
    for _ in range(4):
        args = (gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
        assert same(host(replayed(*args)), host(direct(*args)))
    (graph,) = graphs(replayed)
    assert graph is not None and Graph.launches - launches == 1 + 3  # the check, three replays


def test_a_planned_call_leaves_cublas_on_the_callers_stream() -> None:
    """The capture runs on a stream of the plan's, gone once the plan is made: CuPy's cuBLAS
    handle must come back on the caller's (a library using the handle as CuPy left it, without
    setting a stream, would crash)."""
    _, replayed = native_pair(mlp)
    with Stream() as stream:
        for _ in range(3):
            replayed(gpu(8, 6), gpu(6, 5), gpu(5), gpu(5, 3), gpu(3))
    assert graphs(replayed) and Cublas.stream == stream.ptr


def test_views_and_offsets_keep_their_layout() -> None:
    def scaled(x, w, s):
        return (x @ w) * s

    direct, replayed = native_pair(scaled)
    big = gpu(20, 30)
    for view in (big[2:10, 3:9], big[1:7, 1:9].T, big[::2, ::3][:, :6]):
        for s in (0.5, -1.5, 0.5):
            w = gpu(6, 4)
            assert same(host(replayed(view, w, s)), host(direct(view, w, s)))
    assert len(graphs(replayed)) >= 3 and all(g is not None for g in graphs(replayed))


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


def step(x, w, out):
    out[...] = np.tanh(x @ w)
    x *= np.float32(0.5)
    return out, x, x.T


def test_arguments_written_into_come_back_and_results_may_be_arguments() -> None:
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

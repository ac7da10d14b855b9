"""Products captured once as CUDA graphs and replayed: the host cost of a call is a few driver
calls, whatever the level.

A ``CapturedProduct`` (an INT8 level) is made for one signature (m, k, n, level, device, stream).
It owns operand and output buffers and a memory pool of its own, runs the product once on them
uncaptured (so every first-use cost, kernel builds, the INT8 GEMMs' algorithm choice and the
pool's blocks, is paid outside the capture), then captures the same call into a graph. A call
points the graph at its operands and a new output (``graph_operands``: the addresses in the
nodes' parameters rewritten) and replays it, all on the stream, with no host synchronisation;
an operand laid out otherwise (not C-contiguous float32, not aligned) is copied into the plan's
buffer first, and a graph whose addresses cannot be rewritten (e.g. "auto"'s, on a driver that
will not rewrite the nodes of its conditional body) has both operands copied in and the output
copied out. The graph runs the very kernels the direct call runs, on the same data, so its bits
are the direct call's.
A ``CapturedSgemm`` is CuPy's own cuBLAS SGEMM captured and replayed the same way, for small
native products.

The pool is the plan's alone: the addresses the graph baked in stay the plan's until
``release``, and nothing else allocates from it. Under capture it gives every block once
(``capture_allocator``): a scratch freed mid-product never lies where the output then does.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import cupy as cp
import numpy as np
from cupy.cuda import cublas

from ..levels import Level
from . import auto_fallback, conditional, graph_gemm, graph_operands, sliced

if TYPE_CHECKING:  # (the rule comes with the route: this package never asks auto)
    from ..auto import Fallback

_FLOAT32 = np.dtype(np.float32)
_DEVICE_TO_DEVICE = 3  # cudaMemcpyDeviceToDevice
_ALIGNMENT = 256  # operands read where they lie start on this (as the plan's own buffers do)


def capturable(level: Level, fallback: Fallback | None = None) -> bool:
    """Whether the product runs as one graph: INT8 levels (their GEMMs are exact, so the
    algorithm chosen under capture changes no bit; an FP16 GEMM's sums depend on it), under
    "auto"'s fallback only where graphs have conditional nodes (``conditional_nodes``)."""
    return level.kind == "int8" and (fallback is None or conditional_nodes())


def conditional_nodes() -> bool:
    """Whether graphs here take "auto"'s conditional nodes (``conditional.usable``)."""
    return conditional.usable()


def capture_allocator(pool: cp.cuda.MemoryPool, held: list[Any]) -> Any:
    """An allocator from ``pool`` that keeps every block it gives in ``held``, so no two
    allocations of one capture share memory: ``graph_operands`` takes an address inside the
    output for the output, which a scratch freed before the output's allocation would break."""

    def malloc(size: int) -> cp.cuda.MemoryPointer:
        memory = pool.malloc(size)
        held.append(memory)
        return memory

    return malloc


@contextlib.contextmanager
def handing_back_cublas(stream: cp.cuda.Stream) -> Iterator[None]:
    """CuPy's cuBLAS handle set back on ``stream`` (the caller's) once the block ends, however:
    a plan's first run and capture leave it on a stream of the plan's, gone once the plan is
    made, where a library calling cuBLAS on CuPy's handle without setting a stream first
    (GEMMul8's does) would crash."""
    try:
        yield
    finally:
        cublas.setStream(cp.cuda.device.get_cublas_handle(), stream.ptr)


class _GraphPlan:
    """What both plans hold: a graph replayed on ``stream``, its operand binding, the memory pool
    its addresses live in, and the lock that keeps one caller at a time."""

    stream: cp.cuda.Stream
    _graph: Any
    _binding: graph_operands.Binding | None
    _pool: cp.cuda.MemoryPool
    _lock: threading.Lock
    _held: list[Any]  # the blocks its capture allocated (``capture_allocator``)
    _bodies: dict[int, list[int]]  # its conditional nodes' body graphs, by parent graph
    a: cp.ndarray
    b: cp.ndarray
    c: cp.ndarray

    @property
    def reads_in_place(self) -> bool:
        """Whether calls point the graph at their operands and output (no copies)."""
        return self._binding is not None

    def _capture(self, stream: cp.cuda.Stream, body: Callable[[], cp.ndarray]) -> cp.ndarray:
        """``body``'s work on ``stream`` (current, capturable) captured as the plan's graph, its
        allocations from the plan's pool with no reuse (``capture_allocator``); its result."""
        self._held = []
        stream.begin_capture()
        try:
            with (
                cp.cuda.using_allocator(capture_allocator(self._pool, self._held)),
                conditional.recording_bodies() as self._bodies,
            ):
                return body()
        finally:
            self._graph = stream.end_capture()

    def release(self) -> None:
        """Frees the graph and the plan's memory once the stream has run what it queued (a
        call enqueueing meanwhile finishes first)."""
        with self._lock:
            if self._graph is None:
                return
            self.stream.synchronize()
            self._graph = self._binding = None
            self.a = self.b = self.c = None  # type: ignore[assignment]
            self._held.clear()
            self._pool.free_all_blocks()


class CapturedProduct(_GraphPlan):
    """(m x k) @ (k x n) at ``level`` on the current device and stream, as one graph; with
    "auto"'s ``fallback``, decided on the GPU (``sliced.int8_product_deciding_on_gpu``); with
    ``count`` > 1, the pairs of two stacks (count, m, k) @ (count, k, n)
    (``sliced.int8_product_stack``: one strided-batched GEMM a weight class)."""

    def __init__(
        self,
        m: int,
        k: int,
        n: int,
        level: Level,
        fallback: Fallback | None = None,
        count: int = 1,
        read_in_place: bool = True,
    ):
        if count > 1 and fallback is not None:
            raise ValueError("stacks have no after-packing fallback to decide")
        self.shape, self.level, self.count = (m, k, n), level, count
        self.stream = cp.cuda.get_current_stream()  # where calls replay it
        self._pool = cp.cuda.MemoryPool()
        self._lock = threading.Lock()  # one caller at a time fills the buffers and replays
        capture = cp.cuda.Stream(non_blocking=True)  # (the legacy default stream cannot capture)
        self.stream.synchronize()
        stack = (count,) if count > 1 else ()
        self.out_shape = (*stack, m, n)
        with handing_back_cublas(self.stream), cp.cuda.using_allocator(self._pool.malloc), capture:
            self.a = cp.ones((*stack, m, k), dtype=cp.float32)  # finite: no line takes the bypass
            self.b = cp.ones((*stack, k, n), dtype=cp.float32)
            # first-use costs (builds, the GEMMs' algorithms, the pool's blocks) uncaptured
            if count > 1:
                sliced.int8_product_stack(self.a, self.b, level)
            else:
                sliced.int8_product(self.a, self.b, level, fallback=fallback)
            if fallback is not None:
                auto_fallback.warm_deciding(self.a, self.b)
            side = cp.cuda.Stream(non_blocking=True)  # B's packs beside A's (a fork in the graph)

            def product() -> cp.ndarray:
                if count > 1:
                    return sliced.int8_product_stack(self.a, self.b, level, side)
                if fallback is None:
                    return sliced.int8_product(self.a, self.b, level, side=side)
                return sliced.int8_product_deciding_on_gpu(self.a, self.b, level, fallback, side)

            self.c = self._capture(capture, product)
            capture.synchronize()
        self.nbytes = self._pool.total_bytes()  # the buffers and the pool's blocks
        # (the output read where the graph writes it: one C-contiguous array of the result)
        contiguous = self.c.flags.c_contiguous and self.c.shape == self.out_shape
        rebind = read_in_place and contiguous  # (False: copies always, as benchmarks compare)
        self._binding = (
            graph_operands.find(self._graph, (self.a, self.b), self.c, self._bodies)
            if rebind
            else None
        )

    def __call__(self, a: cp.ndarray, b: cp.ndarray) -> cp.ndarray | None:
        """a @ b (CuPy matrices, or stacks, of the plan's shape) as a new array; None once
        released (the caller runs the product uncaptured: the same bits)."""
        c = cp.empty(self.out_shape, dtype=cp.float32)  # the caller's pool
        with self._lock:
            if self._graph is None:
                return None
            if self._binding is None:
                _fill(self.a, a, self.stream)
                _fill(self.b, b, self.stream)
                self._graph.launch(self.stream)
                _copy(c, self.c, self.stream)
                return c
            sources = (self._source(a, self.a), self._source(b, self.b), c.data.ptr)
            self._binding.point(sources)
            self._graph.launch(self.stream)
        return c

    def _source(self, x: cp.ndarray, buffer: cp.ndarray) -> int:
        """Where the graph reads operand ``x``: where it lies, if it lies as the plan's
        ``buffer`` would (C-contiguous float32, aligned), else in ``buffer``, filled."""
        if x.flags.c_contiguous and x.dtype == _FLOAT32 and x.data.ptr % _ALIGNMENT == 0:
            return x.data.ptr
        _fill(buffer, x, self.stream)
        return buffer.data.ptr


class CapturedSgemm(_GraphPlan):
    """cuBLAS SGEMM of two float32 matrices as CuPy runs it (``graph_gemm.matmul``: CuPy's own
    call, so the same algorithm and bits), captured once for one signature (m, k, n, device,
    stream, compute type) and replayed reading C-contiguous operands where they lie
    (``graph_operands``). A small product's call then costs the host one graph launch where
    CuPy's own call costs several times that. Made only where the replay gives the direct
    call's bits on random operands and its operand addresses can be rewritten; else ValueError
    (the caller runs CuPy's product)."""

    def __init__(self, m: int, k: int, n: int):
        self.shape = (m, k, n)
        self.stream = cp.cuda.get_current_stream()
        self._pool = cp.cuda.MemoryPool()
        self._lock = threading.Lock()
        # all on a stream of its own, on buffers of its own: the caller's stream is never
        # waited for (the plan is made at a signature's second call, which must not wait)
        capture = cp.cuda.Stream(non_blocking=True)
        with handing_back_cublas(self.stream), cp.cuda.using_allocator(self._pool.malloc), capture:
            random = cp.random.default_rng(0)
            self.a = random.standard_normal((m, k), dtype=cp.float32)
            self.b = random.standard_normal((k, n), dtype=cp.float32)
            direct = self.a.dot(self.b)  # (also every first-use cost, outside the capture)
            self.c = self._capture(capture, lambda: graph_gemm.matmul(self.a, self.b))
            self._graph.launch(capture)
            capture.synchronize()
            faithful = bool(cp.array_equal(self.c.view(cp.uint32), direct.view(cp.uint32)))
        self._binding = graph_operands.find(self._graph, (self.a, self.b), self.c)
        if not faithful or self._binding is None:
            self._held.clear()
            self._pool.free_all_blocks()
            raise ValueError("not the direct call's bits" if not faithful else "not rebindable")
        self.nbytes = self._pool.total_bytes()

    def __call__(self, a: cp.ndarray, b: cp.ndarray) -> cp.ndarray | None:
        """a @ b (C-contiguous float32 CuPy matrices of the plan's shape, 256-byte aligned) as
        a new array; None once released."""
        m, _, n = self.shape
        c = cp.ndarray((m, n), dtype=_FLOAT32)  # (cupy.empty's own call, less one layer)
        with self._lock:
            if self._graph is None:
                return None
            self._binding.point((a.data.ptr, b.data.ptr, c.data.ptr))
            self._graph.launch(self.stream)
        return c


def _fill(buffer: cp.ndarray, x: cp.ndarray, stream: cp.cuda.Stream) -> None:
    """The operand ``x`` into the plan's C-contiguous ``buffer``: one copy of its bytes where
    it is C-contiguous float32, else CuPy's strided copy (views, offsets, other layouts)."""
    if x.flags.c_contiguous and x.dtype == _FLOAT32:
        _copy(buffer, x, stream)
    else:
        with stream:
            buffer[...] = x


def _copy(dst: cp.ndarray, src: cp.ndarray, stream: cp.cuda.Stream) -> None:
    cp.cuda.runtime.memcpyAsync(
        dst.data.ptr, src.data.ptr, dst.nbytes, _DEVICE_TO_DEVICE, stream.ptr
    )

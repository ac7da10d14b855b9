"""A captured graph pointed at each call's operands: the replayed product reads the caller's
arrays where they lie and writes its result straight into the new output, with no copies in
or out of the plan's buffers.

A graph bakes in the addresses it was captured with. ``find`` walks an instantiated graph's
nodes once and notes every parameter holding an address inside one of the plan's buffers:
kernel nodes' parameters, read with the kernel's own parameter layout (``cuFuncGetParamInfo``),
and memset nodes' destinations. ``Binding.point`` then rewrites those addresses in the
executable graph before a launch (``cuGraphExecKernelNodeSetParams``: launches already queued
keep the addresses they were given), those of nodes whose addresses moved since the last call
alone. Measured against copying into the buffers, this saves
the copies' GPU time for a few microseconds of host time (``benchmarks/replay_operands.py``).
The operands are the caller's own arrays then: the graph's kernels must only read them (the
backend's kernels take their inputs as const pointers), and a memset into one refuses.

The nodes of conditional bodies are read and rewritten the same way, given the bodies (the
capture records them, ``conditional.recording_bodies``: the driver lists a conditional node's
bodies only from 13.2, per cuda.core's docs), on drivers from BODIES_FROM (a 13.0 driver was
seen to apply such rewrites: tests/runtime/test_captured_products.py; older ones are untried,
and one that took a rewrite without applying it would go unnoticed). ``find`` gives None, and
the caller keeps its copies, where the graph has nodes whose addresses it does not read
(copies, child graphs, conditional nodes whose bodies it was not given or on older drivers),
where a buffer is not found among the parameters, where a memset writes an operand or runs
past the end of the buffer it starts in, where the driver refuses a rewrite (tried once, with
the captured addresses), where CuPy kept no template graph or the driver lacks the calls
(before 12.4).

An address inside a buffer is taken for that buffer, so the graph's scratch must never share
memory with the operands or an output: the plans' captures allocate without reuse
(``captured.capture_allocator``); whole-call replay (``mixpert.replay``, which may give
several outputs) allows a scratch only wholly inside an output. ``find`` sees the addresses
in the nodes' parameters alone: a graph that reaches a buffer otherwise (an array of pointers
in device memory, an address a kernel computes or reads from another buffer) keeps reaching
the old one once rebound. The plans' graphs run the backend's kernels, which take their
operands as parameters; whole-call replay, which captures any CuPy code, checks each binding
once with a launch on poisoned buffers before it uses it.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import libraries

if TYPE_CHECKING:  # (the module itself needs no CuPy: its tests run without one)
    import cupy as cp

# CUgraphNodeType (cuda.h): the nodes ``find`` reads, and those that hold no operand address
_KERNEL, _MEMSET, _CONDITIONAL = 0, 2, 13
_INERT = frozenset({5, 10, 11})  # empty, memory allocation and free (a GEMM's workspace)
BODIES_FROM = 13000  # the driver version from which conditional bodies are rebound
_MAX_PARAMS = 4096  # (a bound on the parameter walk, far above any kernel's count)
_INVALID_VALUE = 1  # CUDA_ERROR_INVALID_VALUE: a parameter index past the kernel's last

_P, _S = ctypes.c_void_p, ctypes.c_size_t


class _KernelParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [
        ("func", _P),
        *((name, ctypes.c_uint) for name in ("gx", "gy", "gz", "bx", "by", "bz", "shared")),
        ("kernelParams", ctypes.POINTER(_P)),
        ("extra", _P),
        ("kern", _P),
        ("ctx", _P),
    ]


class _MemsetParams(ctypes.Structure):  # CUDA_MEMSET_NODE_PARAMS
    _fields_ = [
        ("dst", ctypes.c_uint64),
        ("pitch", _S),
        ("value", ctypes.c_uint),
        ("elementSize", ctypes.c_uint),
        ("width", _S),
        ("height", _S),
    ]


_SIGNATURES: dict[str, list[Any]] = {
    "cuGraphGetNodes": [_P, _P, ctypes.POINTER(_S)],
    "cuGraphNodeGetType": [_P, ctypes.POINTER(ctypes.c_int)],
    "cuGraphKernelNodeGetParams_v2": [_P, ctypes.POINTER(_KernelParams)],
    "cuGraphMemsetNodeGetParams": [_P, ctypes.POINTER(_MemsetParams)],
    "cuFuncGetParamInfo": [_P, _S, ctypes.POINTER(_S), ctypes.POINTER(_S)],
    "cuKernelGetParamInfo": [_P, _S, ctypes.POINTER(_S), ctypes.POINTER(_S)],
    "cuGraphExecKernelNodeSetParams_v2": [_P, _P, ctypes.POINTER(_KernelParams)],
    "cuGraphExecMemsetNodeSetParams": [_P, _P, ctypes.POINTER(_MemsetParams), _P],
    "cuCtxGetCurrent": [ctypes.POINTER(_P)],
    "cuCtxSetCurrent": [_P],
    "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
}

# (parameter index, byte offset in it, buffer index, offset from the buffer's start)
_Hit = tuple[int, int, int, int]


class _KernelNode:
    """One kernel node's own copy of its arguments, and the words among them to rewrite."""

    def __init__(self, node: int, params: _KernelParams, sizes: list[int], hits: list[_Hit]):
        self.node, self.hits = _P(node), hits
        self.args = [ctypes.create_string_buffer(size) for size in sizes]
        for i, size in enumerate(sizes):
            ctypes.memmove(self.args[i], params.kernelParams[i], size)
        self._pointers = (_P * len(sizes))(*(ctypes.addressof(arg) for arg in self.args))
        self.params = _KernelParams.from_buffer_copy(params)
        self.params.kernelParams = ctypes.cast(self._pointers, ctypes.POINTER(_P))
        self.params.extra = None
        self._words = [ctypes.c_uint64.from_buffer(self.args[i], at) for i, at, _, _ in hits]

    def moved(self, bases: Sequence[int]) -> bool:
        """Whether ``bases`` put any of its words elsewhere than the graph holds them."""
        return any(
            word.value != bases[buffer] + delta
            for word, (_, _, buffer, delta) in zip(self._words, self.hits, strict=True)
        )

    def point(self, cuda: ctypes.CDLL, executable: _P, bases: Sequence[int]) -> None:
        for word, (_, _, buffer, delta) in zip(self._words, self.hits, strict=True):
            word.value = bases[buffer] + delta
        try:
            _check(cuda.cuGraphExecKernelNodeSetParams_v2(executable, self.node, self.params))
        except RuntimeError:
            for word in self._words:
                word.value = 0  # (what the graph holds is unknown now: the next call rewrites)
            raise


class _MemsetNode:
    """One memset node whose destination lies in buffer ``buffer``, ``delta`` bytes in."""

    def __init__(self, node: int, params: _MemsetParams, buffer: int, delta: int):
        self.node, self.params, self.buffer, self.delta = _P(node), params, buffer, delta

    def moved(self, bases: Sequence[int]) -> bool:
        return self.params.dst != bases[self.buffer] + self.delta

    def point(self, cuda: ctypes.CDLL, executable: _P, bases: Sequence[int], context: _P) -> None:
        self.params.dst = bases[self.buffer] + self.delta
        try:
            _check(cuda.cuGraphExecMemsetNodeSetParams(executable, self.node, self.params, context))
        except RuntimeError:
            self.params.dst = 0  # (unknown now: the next call rewrites)
            raise


class Binding:
    """Where an executable graph holds the addresses of its buffers; ``point`` moves them."""

    def __init__(
        self, graph: Any, kernels: list[_KernelNode], memsets: list[_MemsetNode], context: _P
    ):
        self._graph = graph  # (keeps the executable graph alive as long as the binding)
        self._executable = _P(graph.graphExec)
        self._kernels, self._memsets, self._context = kernels, memsets, context
        self._held: tuple[int, ...] | None = None  # the bases every node holds, where known

    def point(self, bases: Sequence[int], force: bool = False) -> None:
        """The graph's next launches use ``bases[i]`` where it used buffer i's address: the
        nodes whose addresses change are rewritten (all of them with ``force``; a loop whose
        operands and output stay where they were costs no driver call, and no node is even
        asked: the bases of the last call are compared whole)."""
        bases = tuple(bases)
        if bases == self._held and not force:
            return
        kernels = [k for k in self._kernels if force or k.moved(bases)]
        memsets = [m for m in self._memsets if force or m.moved(bases)]
        if kernels or memsets:  # (else the executable graph holds these addresses already)
            self._held = None  # (unknown while nodes are rewritten: a refusal leaves it so)
            cuda = _driver()
            # (a thread that made no runtime call yet has no current context: the driver
            # needs it)
            _check(cuda.cuCtxSetCurrent(self._context))
            for kernel in kernels:
                kernel.point(cuda, self._executable, bases)
            for memset in memsets:
                memset.point(cuda, self._executable, bases, self._context)
        self._held = bases


def find(
    graph: Any,
    operands: Sequence[cp.ndarray],
    output: cp.ndarray | Sequence[cp.ndarray],
    bodies: Mapping[int, Sequence[int]] | None = None,
) -> Binding | None:
    """The binding of a CuPy ``graph`` (captured, instantiated) to its ``operands`` and its
    ``output`` (one array, or a tuple or list of several), each found in some node
    (``Binding.point`` takes their new addresses in that order, the operands first), through
    the bodies of its conditional nodes (``bodies``: a graph's handle -> the bodies of its
    conditional nodes); None where the graph cannot be rebound (module docstring). A buffer is
    the ``x.nbytes`` bytes from ``x.data.ptr`` on (a C- or F-contiguous array, or a byte view
    of a strided one's span), and no two may share memory."""
    cuda = _driver()
    if cuda is None or not getattr(graph, "graph", 0) or not getattr(graph, "graphExec", 0):
        return None
    bodies = bodies or {}
    # (a CuPy array is no tuple or list: one output, as the product plans give it)
    outputs = tuple(output) if isinstance(output, (tuple, list)) else (output,)
    buffers = (*operands, *outputs)
    spans = [(x.data.ptr, x.data.ptr + x.nbytes) for x in buffers]

    def inside(address: int) -> tuple[int, int] | None:
        for index, (start, end) in enumerate(spans):
            if start <= address < end:
                return index, address - start
        return None

    kernels: list[_KernelNode] = []
    memsets: list[_MemsetNode] = []

    pending = [graph.graph]  # the graph, then the bodies of its conditional nodes (no
    while pending:  # recursive closure: a reference cycle would keep the plan's buffers alive)
        handle = pending.pop()
        conditionals = 0
        for node in _nodes(cuda, handle):
            kind = ctypes.c_int()
            _check(cuda.cuGraphNodeGetType(_P(node), ctypes.byref(kind)))
            if kind.value == _KERNEL:
                params = _KernelParams()
                _check(cuda.cuGraphKernelNodeGetParams_v2(_P(node), ctypes.byref(params)))
                sizes = _param_sizes(cuda, params)
                if sizes is None or (sizes and not params.kernelParams):
                    return None
                hits = [
                    (i, at, *found)
                    for i, size in enumerate(sizes)
                    for at in range(0, size - 7, 8)
                    if (found := inside(_word(params.kernelParams[i], at))) is not None
                ]
                if hits:
                    kernels.append(_KernelNode(node, params, sizes, hits))
            elif kind.value == _MEMSET:
                memset = _MemsetParams()
                _check(cuda.cuGraphMemsetNodeGetParams(_P(node), ctypes.byref(memset)))
                found = inside(memset.dst)
                if found is not None and found[0] < len(operands):
                    return None  # (it writes an operand: the caller's own array, once rebound)
                if found is not None:
                    if found[1] + _extent(memset) > buffers[found[0]].nbytes:
                        # (a scratch that began where an output now lies: rebound, it would
                        # write past the caller's output, or the driver refuses it)
                        return None
                    memsets.append(_MemsetNode(node, memset, *found))
            elif kind.value == _CONDITIONAL:
                if _version(cuda) < BODIES_FROM:
                    return None
                conditionals += 1
            elif kind.value not in _INERT:
                return None
        inner = bodies.get(handle, ())
        if conditionals != len(inner):  # (IF nodes of one body each: ``conditional.only_if``'s)
            return None
        pending += inner
    seen = {hit[2] for kernel in kernels for hit in kernel.hits} | {m.buffer for m in memsets}
    if seen != set(range(len(buffers))):
        return None
    context = _P()
    _check(cuda.cuCtxGetCurrent(ctypes.byref(context)))
    binding = Binding(graph, kernels, memsets, context)
    try:  # (the addresses it was captured with: a rewrite that changes nothing)
        binding.point([start for start, _ in spans], force=True)
    except RuntimeError:
        return None
    return binding


def _nodes(cuda: ctypes.CDLL, graph: int) -> list[int]:
    count = _S()
    _check(cuda.cuGraphGetNodes(_P(graph), None, ctypes.byref(count)))
    nodes = (_P * count.value)()
    _check(cuda.cuGraphGetNodes(_P(graph), nodes, ctypes.byref(count)))
    return [node or 0 for node in nodes]


def _param_sizes(cuda: ctypes.CDLL, params: _KernelParams) -> list[int] | None:
    """The byte size of each of the kernel's parameters (None where the driver cannot say)."""
    info, handle = (
        (cuda.cuFuncGetParamInfo, params.func) if params.func else
        (cuda.cuKernelGetParamInfo, params.kern)
    )  # fmt: skip
    if not handle:
        return None
    sizes = []
    for index in range(_MAX_PARAMS):
        offset, size = _S(), _S()
        status = info(_P(handle), index, ctypes.byref(offset), ctypes.byref(size))
        if status == _INVALID_VALUE:  # the first index past the last parameter
            return sizes
        if status != 0:
            return None
        sizes.append(size.value)
    return None


def _extent(memset: _MemsetParams) -> int:
    """The bytes from a memset's destination to the end of the last byte it writes."""
    row = memset.width * memset.elementSize
    return row if memset.height <= 1 else (memset.height - 1) * memset.pitch + row


def _version(cuda: ctypes.CDLL) -> int:
    version = ctypes.c_int()
    _check(cuda.cuDriverGetVersion(ctypes.byref(version)))
    return version.value


def _word(value: int | None, at: int) -> int:
    return ctypes.c_uint64.from_address((value or 0) + at).value


def _check(status: int) -> None:
    if status != 0:
        raise RuntimeError(f"CUDA driver call failed with status {status}")


@functools.cache
def _driver() -> ctypes.CDLL | None:
    """libcuda with the graph calls ``find`` needs; None where it lacks one (before 12.4)."""
    try:
        return libraries.load(["libcuda.so.1", "libcuda.so"], _SIGNATURES)
    except AttributeError:
        return None

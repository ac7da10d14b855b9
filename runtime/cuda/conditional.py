"""Conditional nodes in a CUDA graph being captured: work that runs only where a kernel of the
same graph set its handle (CUDA 12.5+), through the driver API of ``cuda.bindings``.

CuPy 14 captures graphs but cannot add conditional nodes, so this module adds them to the graph
CuPy's stream is capturing, the way ``cuda.core``'s graph builder does: a handle created on the
captured graph, an IF node appended after the stream's current dependencies, and the node's
body captured from a second stream (``cuStreamBeginCaptureToGraph``). A kernel sets the handle
with ``cudaGraphSetConditional`` (``decide.cu``); its value is the data's alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import cupy as cp

from . import build

# Conditional nodes need 12.3 (IF) and device-side handles under capture 12.4; the graph's
# context is read from its stream from 12.5.
MIN_CUDA = 12050
_log = logging.getLogger("mixpert")


@functools.cache
def available() -> bool:
    """cuda.bindings with conditional nodes, and a CUDA runtime and driver that run them."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return False
    if not hasattr(driver, "cuGraphConditionalHandleCreate"):
        return False
    runtime = cp.cuda.runtime
    return min(runtime.runtimeGetVersion(), runtime.driverGetVersion()) >= MIN_CUDA


@functools.cache
def usable() -> bool:
    """``available``, and the decide module (``decide.cu``) that sets "auto"'s handles builds
    and loads: where not, "auto" decides its fallback on the host."""
    if not available():
        return False
    try:
        build.decide_module().get_function("decide_sgemm")
    except Exception as error:
        _log.debug("no conditional nodes: decide.cu does not build or load (%s)", error)
        return False
    return True


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def _with_edges(name: str, versioned: str) -> Any:
    """The driver call ``name`` in its form with edge data: ``versioned`` in cuda.bindings 12
    (where ``name`` has none), ``name`` itself in 13 (where the versioned names are gone)."""
    driver = _driver()
    return getattr(driver, versioned, None) or getattr(driver, name)


def _checked(result: tuple[Any, ...]) -> tuple[Any, ...]:
    """The values of a driver call after its status, or a RuntimeError naming the status."""
    driver = _driver()
    status, *values = result
    if status != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {status!r}")
    return tuple(values)


def _capturing(stream: cp.cuda.Stream) -> tuple[Any, Any, Any, int]:
    """(graph, dependencies, their edge data, how many) of the capture ``stream`` is in."""
    driver = _driver()
    status, _, graph, dependencies, edges, count = _checked(
        _with_edges("cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v3")(
            driver.CUstream(stream.ptr)
        )
    )
    if status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        raise RuntimeError(f"stream {stream.ptr:#x} is not capturing a graph: no conditional node")
    return graph, dependencies, edges, count


def _context(stream: cp.cuda.Stream) -> Any:
    driver = _driver()
    return _checked(driver.cuStreamGetCtx(driver.CUstream(stream.ptr)))[0]


def handle(stream: cp.cuda.Stream) -> int:
    """A new conditional handle of the graph ``stream`` is capturing (a kernel of the graph
    sets it at each launch, before the node that reads it)."""
    graph = _capturing(stream)[0]
    created = _checked(_driver().cuGraphConditionalHandleCreate(graph, _context(stream), 0, 0))
    return int(created[0])


_recording = threading.local()


@contextlib.contextmanager
def recording_bodies() -> Iterator[dict[int, list[int]]]:
    """The body graphs of the IF nodes ``only_if`` adds in the block (on this thread), by the
    graph each node went into: what ``graph_operands.find`` walks to rebind their nodes."""
    bodies: dict[int, list[int]] = {}
    saved = getattr(_recording, "bodies", None)
    _recording.bodies = bodies
    try:
        yield bodies
    finally:
        _recording.bodies = saved


@contextlib.contextmanager
def only_if(stream: cp.cuda.Stream, condition: int) -> Iterator[None]:
    """Work enqueued in the block (on the current stream, a second one capturing) goes into an
    IF node of ``stream``'s graph, after what ``stream`` enqueued so far and before what it
    enqueues next; it runs where the handle ``condition`` is set."""
    driver = _driver()
    graph, dependencies, edges, count = _capturing(stream)
    params = driver.CUgraphNodeParams()
    params.type = driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = condition
    params.conditional.type = driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF
    params.conditional.size = 1
    params.conditional.ctx = _context(stream)
    add_node = _with_edges("cuGraphAddNode", "cuGraphAddNode_v2")
    (node,) = _checked(add_node(graph, dependencies, edges, count, params))
    _checked(
        _with_edges("cuStreamUpdateCaptureDependencies", "cuStreamUpdateCaptureDependencies_v2")(
            driver.CUstream(stream.ptr),
            [node],
            None,
            1,
            driver.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES,
        )
    )
    body = params.conditional.phGraph_out[0]
    recorded = getattr(_recording, "bodies", None)
    if recorded is not None:
        recorded.setdefault(int(graph), []).append(int(body))
    inner = cp.cuda.Stream(non_blocking=True)
    _checked(
        driver.cuStreamBeginCaptureToGraph(
            driver.CUstream(inner.ptr), body, None, None, 0, _relaxed()
        )
    )
    try:
        with inner:
            yield
    finally:
        _checked(driver.cuStreamEndCapture(driver.CUstream(inner.ptr)))


# Executable graphs of ``decided``, a few per key (device, the caller's kind and shape): each
# call captures its graph afresh (its kernels read the call's arrays) and updates in place one
# whose last launch has run, so no launch in flight is touched and two streams never queue
# behind one executable graph. Destroying an executable graph waits for the GPU, so none is
# destroyed while products run (clear_graphs does it).
_executables: dict[tuple[Any, ...], list[_Executable]] = {}
_executables_lock = threading.Lock()
EXECUTABLES_PER_KEY = 8  # launches of one shape in flight at once before one is updated anyway


@dataclasses.dataclass
class _Executable:
    handle: Any  # CUgraphExec
    launched: cp.cuda.Event | None = None  # recorded behind its last launch


def decided(
    key: tuple[Any, ...], decide: Callable[..., None], *branches: Callable[[], None]
) -> None:
    """On the current stream: ``decide(*handles)`` enqueues a kernel that sets one handle per
    branch, then each branch's work runs where its handle is set. Where the stream is
    capturing a graph, the nodes go into it; else into a small graph captured now and launched
    on the stream through an executable graph kept for ``key`` (the same kernels for every
    call of that key): no host synchronisation either way. In that small graph the branches
    must not allocate (their buffers come from the caller, before): a block freed once the
    capture ends could be handed out again before the graph runs."""
    stream = cp.cuda.get_current_stream()

    def enqueue(capturing: cp.cuda.Stream) -> None:
        handles = [handle(capturing) for _ in branches]
        decide(*handles)
        for condition, branch in zip(handles, branches, strict=True):
            with only_if(capturing, condition):
                branch()

    if stream.is_capturing():
        enqueue(stream)
        return
    driver = _driver()
    capture = cp.cuda.Stream(non_blocking=True)
    on_capture = driver.CUstream(capture.ptr)
    _checked(driver.cuStreamBeginCapture(on_capture, _relaxed()))
    try:
        with capture:
            enqueue(capture)
    except BaseException:
        status, graph = driver.cuStreamEndCapture(on_capture)  # (what was captured: dropped)
        if status == driver.CUresult.CUDA_SUCCESS and graph:
            driver.cuGraphDestroy(graph)
        raise
    (graph,) = _checked(driver.cuStreamEndCapture(on_capture))
    try:
        with _executables_lock:
            executable = _executable_for((cp.cuda.runtime.getDevice(), *key), graph)
            _checked(driver.cuGraphLaunch(executable.handle, driver.CUstream(stream.ptr)))
            executable.launched = stream.record(cp.cuda.Event(disable_timing=True))
    finally:
        _checked(driver.cuGraphDestroy(graph))  # (the template: the executable one is apart)


def _executable_for(key: tuple[Any, ...], graph: Any) -> _Executable:
    """An executable graph of ``key`` now running ``graph``'s parameters: one whose last launch
    has run, updated; else a new one (past EXECUTABLES_PER_KEY, the oldest, updated)."""
    pool = _executables.setdefault(key, [])
    idle = [e for e in pool if e.launched is None or e.launched.done]
    if idle and _updated(idle[0].handle, graph):
        return idle[0]
    if len(pool) >= EXECUTABLES_PER_KEY and not idle and _updated(pool[0].handle, graph):
        pool.append(pool.pop(0))  # (the next one asked is the next oldest)
        return pool[-1]
    (created,) = _checked(_driver().cuGraphInstantiate(graph, 0))
    pool.append(_Executable(created))
    return pool[-1]


def _updated(executable: Any, graph: Any) -> bool:
    """Whether ``executable`` now runs ``graph``'s parameters (same topology)."""
    status, *_ = _driver().cuGraphExecUpdate(executable, graph)
    return status == _driver().CUresult.CUDA_SUCCESS


def _relaxed() -> Any:  # (the mode CuPy captures in)
    return _driver().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED


def clear_graphs() -> None:
    """Destroys the executable graphs ``decided`` keeps, once the GPU has run them
    (``mixpert.clear_cache``)."""
    driver = _driver()
    with _executables_lock:
        if not _executables:
            return
        cp.cuda.Device().synchronize()
        for pool in _executables.values():
            for executable in pool:
                _checked(driver.cuGraphExecDestroy(executable.handle))
        _executables.clear()

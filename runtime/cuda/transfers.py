"""Host arrays to the GPU and back through pinned staging buffers.

A NumPy array lives in pageable memory, which the GPU's copy engines cannot read: CUDA copies
such an array through a driver buffer, synchronously, at a few GB/s. Here each thread keeps a
ring of ``SLOTS`` pinned (page-locked) buffers of ``SLOT_BYTES`` and an array moves in pieces:
the host copies piece i into a free slot (``np.copyto``, any strides) while the copy engine
moves piece i - 1 (``memcpyAsync`` on the current stream), and a slot is written again only
once the event recorded after its last copy has passed. The way back mirrors it: the engine
fills a slot while the host copies the previous one into the destination. So the host's copy
and the engine's overlap, and neither waits for the whole array.

Copies are ordered with the current stream's kernels: a device array made by ``to_device``
can be used at once, and ``to_host`` needs no synchronisation before it. A C- or F-contiguous
host array keeps its layout on the GPU (its bytes are mirrored one to one); any other is
gathered into C order. What uses this: a call of a jitted function that moves its body to the
GPU (``mixpert.one_trip``) and a compiled product's operands and result
(``mixpert.execution.hook``).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Iterator

import cupy as cp
import numpy as np

SLOT_BYTES = 8 << 20  # a piece: large enough that the per-piece calls cost ~1% of its copy
SLOTS = 2  # one filling while the other is in flight (``to_host`` needs at least two)
MEASURED_BYTES = 64 << 20  # the array ``bandwidth`` times
_runtime = cp.cuda.runtime


class _Ring:
    """One thread's pinned slots on one device, with the event of each slot's last copy."""

    def __init__(self) -> None:
        self._memory = [cp.cuda.alloc_pinned_memory(SLOT_BYTES) for _ in range(SLOTS)]
        self._bytes = [np.frombuffer(m, np.uint8, SLOT_BYTES) for m in self._memory]
        self._events = [cp.cuda.Event(disable_timing=True) for _ in range(SLOTS)]
        self._used = [False] * SLOTS
        self._next = 0

    def take(self) -> int:
        """The next slot, once the copy that last used it has passed."""
        index = self._next
        self._next = (index + 1) % SLOTS
        self.wait(index)
        return index

    def wait(self, index: int) -> None:
        if self._used[index]:
            self._events[index].synchronize()
            self._used[index] = False

    def used(self, index: int, stream: cp.cuda.Stream) -> None:
        """A copy through slot ``index`` was queued on ``stream``."""
        self._events[index].record(stream)
        self._used[index] = True

    def address(self, index: int) -> int:
        return int(self._memory[index].ptr)

    def view(self, index: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """Slot ``index`` as a C-contiguous array of ``shape`` (within ``SLOT_BYTES``)."""
        count = math.prod(shape) * dtype.itemsize
        return self._bytes[index][:count].view(dtype).reshape(shape)


class _Rings(threading.local):
    def __init__(self) -> None:
        self.by_device: dict[int, _Ring] = {}


_rings = _Rings()


def _ring() -> _Ring:
    device = _runtime.getDevice()
    ring = _rings.by_device.get(device)
    if ring is None:
        ring = _rings.by_device[device] = _Ring()
    return ring


def device_label() -> str:
    """The current device, as keys of copies made for it name it ("cuda:0")."""
    return f"cuda:{_runtime.getDevice()}"


def _slabs(array: np.ndarray) -> Iterator[tuple[int, int]]:
    """Ranges along the leading axis of ``array`` (ndim >= 1) of at most ``SLOT_BYTES`` each."""
    unit = math.prod(array.shape[1:]) * array.itemsize
    per = max(1, SLOT_BYTES // unit)
    for start in range(0, array.shape[0], per):
        yield start, min(start + per, array.shape[0])


def _pieces(host: np.ndarray) -> np.ndarray | None:
    """``host`` as an array whose leading-axis slabs are runs of C-order memory, each fitting a
    slot: a C-contiguous array flattened; another as it is, when one of its rows fits (None:
    gather it first)."""
    if host.flags.c_contiguous:
        return host.reshape(-1)  # a view
    if math.prod(host.shape[1:]) * host.itemsize <= SLOT_BYTES:
        return host
    return None


def to_device(host: np.ndarray) -> cp.ndarray:
    """A CuPy copy of ``host`` on the current device, queued on the current stream: the host
    array may change as soon as this returns (its bytes are staged already)."""
    if host.flags.f_contiguous and not host.flags.c_contiguous:
        return to_device(host.T).T  # the same bytes read transposed: the layout is kept
    device = cp.empty(host.shape, host.dtype)
    if host.size == 0:
        return device
    source = _pieces(host)
    if source is None:
        source = np.ascontiguousarray(host).reshape(-1)
    ring, stream = _ring(), cp.cuda.get_current_stream()
    unit = math.prod(source.shape[1:]) * source.itemsize
    for start, stop in _slabs(source):
        index = ring.take()
        staged = ring.view(index, source.dtype, (stop - start, *source.shape[1:]))
        np.copyto(staged, source[start:stop])
        _runtime.memcpyAsync(
            device.data.ptr + start * unit, ring.address(index), staged.nbytes,
            _runtime.memcpyHostToDevice, stream.ptr,
        )  # fmt: skip
        ring.used(index, stream)
    return device


def to_host(device: cp.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``device`` copied into ``out`` (a new NumPy array when None; else one of its shape and
    dtype, any strides), after the current stream's work so far; returns when it is there."""
    if out is None:
        out = np.empty(device.shape, device.dtype)
    elif out.shape != device.shape or out.dtype != device.dtype:
        raise ValueError(
            f"to_host: out is {out.dtype}{list(out.shape)}, the array {device.dtype}"
            f"{list(device.shape)}"
        )
    if out.size == 0:
        return out
    if out.flags.f_contiguous and not out.flags.c_contiguous:
        to_host(device.T, out.T)
        return out
    target = _pieces(out)
    if target is None:  # rows too long to stage one by one: through a contiguous array
        np.copyto(out, to_host(device))
        return out
    source = cp.ascontiguousarray(device)  # (a device copy only where it is not C order)
    ring, stream = _ring(), cp.cuda.get_current_stream()
    unit = math.prod(target.shape[1:]) * target.itemsize
    pending: tuple[int, int, int] | None = None  # (slot, start, stop) in flight

    def drain(index: int, start: int, stop: int) -> None:
        ring.wait(index)
        np.copyto(target[start:stop], ring.view(index, target.dtype, target[start:stop].shape))

    for start, stop in _slabs(target):
        index = ring.take()
        _runtime.memcpyAsync(
            ring.address(index), source.data.ptr + start * unit, (stop - start) * unit,
            _runtime.memcpyDeviceToHost, stream.ptr,
        )  # fmt: skip
        ring.used(index, stream)
        if pending is not None:
            drain(*pending)  # the previous piece, while this one is in flight
        pending = (index, start, stop)
    if pending is not None:
        drain(*pending)
    return out


@functools.cache
def bandwidth() -> float:
    """Bytes per second of a round trip through ``to_device`` and ``to_host`` on this machine
    (64 MiB of pageable memory each way, the best of three), measured once per process."""
    host = np.ones(MEASURED_BYTES // 4, np.float32)
    back = np.zeros_like(host)  # touched: the rate of the copies, not of first page faults
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        to_host(to_device(host), back)
        best = min(best, time.perf_counter() - start)
    return 2 * host.nbytes / best

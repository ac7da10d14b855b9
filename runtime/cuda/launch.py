"""What a launch works within on the current GPU: its multiprocessors, the shared memory a block
may ask for and how many blocks of a kernel run at once; the operand layouts the kernels read
(C-contiguous, 16-byte pieces); the device memory left; and counts read back to the host without
waiting for the whole stream; work forked onto a second stream and joined back."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import cupy as cp
import cupyx
import numpy as np

NULL = np.uint64(0)  # a kernel's null pointer argument


@contextlib.contextmanager
def forked(side: cp.cuda.Stream | None) -> Iterator[None]:
    """Work queued in the block runs on ``side``, after what the current stream has queued so
    far (a fork in a captured graph); with no ``side``, on the current stream. ``joined``
    joins it back."""
    if side is None:
        yield
        return
    side.wait_event(cp.cuda.get_current_stream().record())
    with side:
        yield


def joined(side: cp.cuda.Stream | None) -> None:
    """The current stream waits for what ``side`` has queued (nothing where ``side`` is None)."""
    if side is not None:
        cp.cuda.get_current_stream().wait_event(side.record())


def c_contiguous(x: cp.ndarray) -> cp.ndarray:
    return x if x.flags.c_contiguous else cp.ascontiguousarray(x)


def vector_suffix(arrays: tuple[cp.ndarray, ...], lines: tuple[int, ...]) -> str:
    """The suffix of a kernel variant that moves its operands 16 bytes at a time ("_vec"),
    where they allow it: every array 16-byte aligned and each one's line in memory (the floats
    from one stored row's start to the next) a multiple of 4, so that every row starts aligned
    too; else none."""
    aligned = all(x.data.ptr % 16 == 0 for x in arrays)
    return "_vec" if aligned and all(line % 4 == 0 for line in lines) else ""


@functools.cache
def multiprocessors(device: int) -> int:
    # (Device.attributes queries every attribute: ~100 us, longer than a small product.)
    return int(
        cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMultiProcessorCount, device)
    )


@functools.cache
def shared_limit(device: int) -> int:
    """The most dynamic shared memory a block of GPU ``device`` may ask for (227 KiB on an
    H100, 163 KiB on an A100, 64 KiB on a T4)."""
    attribute = cp.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin
    return cp.cuda.runtime.deviceGetAttribute(attribute, device)


def shared_fits(shared: int, device: int) -> bool:
    """Whether a block of GPU ``device`` (the current one) may ask for ``shared`` bytes of
    dynamic shared memory."""
    return shared <= shared_limit(device)


def refuse_unless_shared_fits(what: str, shared: int, device: int) -> None:
    """NotImplementedError, naming ``what``, where a block of GPU ``device`` cannot have
    ``shared`` bytes of shared memory (``fp32_ordered.ordered_product`` routes around such
    kernels)."""
    if not shared_fits(shared, device):
        raise NotImplementedError(
            f"{what} needs {shared} bytes of shared memory a block; GPU {device} allows fewer"
        )


@functools.cache
def resident_blocks(kernel: Any, threads: int, device: int, shared: int = 0) -> int:
    """How many blocks of ``threads`` of ``kernel`` GPU ``device`` (the current one) runs at
    once, each with ``shared`` bytes of dynamic shared memory. A kernel that takes any is
    allowed the device's whole opt-in limit (beyond the 48 KiB a kernel gets unasked; a
    permission, not a reservation): one allowance for every amount, so that this cache never
    leaves a kernel launched with several (``ordered_thin``: by k) allowed too few."""
    if shared:
        kernel.max_dynamic_shared_size_bytes = shared_limit(device)
    function = kernel.kernel  # (RawKernel: the Function of the current device)
    per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(function.ptr, threads, shared)
    return max(1, per_sm) * multiprocessors(device)


def free_bytes() -> int:
    """Device memory a product can take: free on the device, plus what CuPy's pool holds.
    (``cp.cuda.Device().mem_info`` took 0.1 ms of host time a call on an H100 machine; the
    runtime call itself 0.06.)"""
    return cp.cuda.runtime.memGetInfo()[0] + cp.get_default_memory_pool().free_bytes()


def flag_counts(a_flagged: cp.ndarray, b_flagged: cp.ndarray) -> Callable[[], tuple[int, int]]:
    """The lines flagged in A and B (NaN/Inf or unresolved: one int32 each, the pack kernels'
    counts), copied to pinned host memory behind the packs without waiting; the function
    returned waits for that copy alone. (Counting them with CuPy took 0.14 ms of host time a
    call.)"""
    host = cupyx.empty_pinned(2, np.int32)
    cp.asnumpy(a_flagged, out=host[:1], blocking=False)
    cp.asnumpy(b_flagged, out=host[1:], blocking=False)
    copied = cp.cuda.Event(disable_timing=True)
    copied.record()

    def wait() -> tuple[int, int]:
        copied.synchronize()
        return int(host[0]), int(host[1])

    return wait

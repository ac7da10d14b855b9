"""Proof that a call does not wait for the GPU, without timing it: the current stream is held
behind a kernel that spins until the host lets it go, the call runs on another thread, and it
must return while the kernel still spins (a call that synchronised would wait for it)."""

from __future__ import annotations

import ctypes
import faulthandler
import threading
from collections.abc import Callable

SPIN = r"""extern "C" __global__ void spin(volatile int* gate) { while (*gate == 0) {} }"""


def returns_while_gpu_is_held(call: Callable[[], object], timeout: float = 20.0) -> bool:
    """Whether ``call()`` returned while the current stream was still held (within ``timeout``
    seconds; after it the stream is released anyway and the result is False)."""
    import cupy

    runtime = cupy.cuda.runtime
    pointer = runtime.hostAlloc(4, runtime.hostAllocMapped)  # (one address on both sides)
    gate = ctypes.c_int32.from_address(pointer)
    gate.value = 0
    cupy.RawKernel(SPIN, "spin")((1,), (1,), (pointer,))
    stream = cupy.cuda.get_current_stream()
    done = threading.Event()

    def on_the_held_stream() -> None:
        with stream:
            call()
        done.set()

    worker = threading.Thread(target=on_the_held_stream)
    worker.start()
    try:
        returned = done.wait(timeout=timeout)
        if not returned:  # where the call waits: its thread's stack, in the test's output
            faulthandler.dump_traceback(all_threads=True)
    finally:
        gate.value = 1  # let the spinning kernel end, whatever happened
        worker.join()
        cupy.cuda.Device().synchronize()
        runtime.freeHost(pointer)
    return returned

"""Wall-clock timing that means something on a GPU: synchronise, warm up, keep the best run."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .runtime import device


def synchronizer(xp: Any) -> Callable[[], None]:
    """Waits for ``xp``'s queued work: the current CUDA device for cupy, nothing for numpy."""
    return xp.cuda.Device().synchronize if xp is not np else (lambda: None)


def synchronizer_for(args: Sequence[Any]) -> Callable[[], None]:
    """The synchronizer of the device the arguments live on (CuPy work is asynchronous)."""
    if any(device.is_cupy_array(a) for a in args):
        return synchronizer(device.cupy_module())
    return synchronizer(np)


def best_time(
    fn: Callable[[], Any], sync: Callable[[], None], repeats: int, *, warm_up: bool = True
) -> float:
    """Best of ``repeats`` synchronised calls, after one warm-up call unless the caller has
    just made one (compilation, handles, workspaces)."""
    if warm_up:
        fn()
        sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


LONG_CALL_FLOPS = 2 * 4096**3  # calls above this are timed one by one
BURST_SECONDS = 2e-3  # a burst of short calls lasts at least this long


def gpu_median_seconds(fn: Callable[[], Any], flops: float) -> float:
    """Median GPU time of one call of ``fn`` (CUDA events, after warm-up). Long calls (over
    LONG_CALL_FLOPS) take 5 repeats, one call each. Short ones run in bursts of back-to-back
    calls (at least BURST_SECONDS each, 15 bursts), each call's time the burst's over its
    calls: as a program that queues products runs them, so a call's time is its kernels' or
    its host work's, whichever is longer. (One call between two events also counts the host
    work before its first launch, ~20 us of Python on a 50 us call: cp.matmul and "auto" then
    varied by +-30% between runs.)"""
    if flops > LONG_CALL_FLOPS:
        from cupyx.profiler import benchmark

        times = sorted(benchmark(fn, n_repeat=5, n_warmup=2).gpu_times[0])
        return float(times[len(times) // 2])
    import cupy as cp

    start, stop = cp.cuda.Event(), cp.cuda.Event()

    def burst(calls: int) -> float:
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) * 1e-3 / calls

    one = min(burst(1) for _ in range(3))  # warm-up, and the burst length
    calls = max(1, min(1000, round(BURST_SECONDS / max(one, 1e-7))))
    times = sorted(burst(calls) for _ in range(15))
    return float(times[len(times) // 2])

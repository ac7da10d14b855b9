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


def gpu_median_seconds(fn: Callable[[], Any], flops: float) -> float:
    """Median GPU time of ``fn`` (CUDA events, after warm-up). Long calls (over 2 x 4096^3
    flops) take 5 repeats; short ones repeat for a quarter of a second (up to 1000 times):
    calls of tens of microseconds varied by +-30% between runs with 20 repeats."""
    from cupyx.profiler import benchmark

    if flops > 2 * 4096**3:
        result = benchmark(fn, n_repeat=5, n_warmup=2)
    else:
        result = benchmark(fn, n_repeat=1000, n_warmup=10, max_duration=0.25)
    times = sorted(result.gpu_times[0])
    return float(times[len(times) // 2])

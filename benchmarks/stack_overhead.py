"""Host time per call of each layer of a small stack product (no synchronisation inside the
loop: what Python costs before the GPU gets work), and the GPU time per launch of back-to-back
calls; a small stack's kernel takes ~10 us, so layers of that size decide the speed-up.

    python benchmarks/stack_overhead.py
"""

from __future__ import annotations

import time

import cupy as cp

from mixpert.runtime import LEVELS, device, dispatch
from mixpert.runtime.cuda import backend, fp32_ordered
from mixpert.testdata import gemmul8

CALLS = 400


def host_us(fn) -> float:
    fn()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for i in range(CALLS):
        fn()
        if i % 50 == 49:
            cp.cuda.Device().synchronize()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def gpu_us(fn) -> float:
    fn()
    begin, end = cp.cuda.Event(), cp.cuda.Event()
    begin.record()
    for _ in range(50):
        fn()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(begin, end) / 50 * 1e3


def probe(rng, count: int, m: int, k: int, n: int) -> None:
    a, b = gemmul8(cp, rng, (count, m, k), 0.5), gemmul8(cp, rng, (count, k, n), 0.5)
    ordered = LEVELS["fp32-ordered"]
    layers = {
        "cp.matmul": lambda: cp.matmul(a, b),
        "ordered kernel": lambda: fp32_ordered.ordered_product(a, b),
        "  tiles R = 1": lambda: fp32_ordered.ordered_product(a, b, 1),
        "  tiles R = 2": lambda: fp32_ordered.ordered_product(a, b, 2),
        "  tiles R = 4": lambda: fp32_ordered.ordered_product(a, b, 4),
        "stack_product_at_level": lambda: backend.stack_product_at_level(a, b, ordered),
        "dispatch auto": lambda: dispatch.np_matmul_at_level(a, b, "auto"),
        "resolve_level": lambda: dispatch.resolve_level("auto", a, b, "cuda"),
        "cupy_module": device.cupy_module,
    }
    print(f"{count} x {m}x{k}x{n}", flush=True)
    for name, fn in layers.items():
        host, gpu = host_us(fn), gpu_us(fn)
        print(f"  {name:16s} host {host:8.1f} us   back-to-back GPU {gpu:8.1f} us", flush=True)


def main() -> None:
    rng = cp.random.default_rng(3)
    for shape in (
        (4096, 16, 16, 16),
        (4096, 32, 32, 32),
        (1024, 64, 64, 64),
        (1024, 128, 128, 128),
    ):
        probe(rng, *shape)


if __name__ == "__main__":
    main()

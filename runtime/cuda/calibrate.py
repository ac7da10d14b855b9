"""The GPU half of ``calibration``: what identifies this GPU, and the timings "auto"'s
crossovers are derived from (a few seconds; ``calibration.shapes`` lists the products).

Each product runs on a stream of its own, after the device has finished what was queued, as
three calls timed in turns: cuBLAS SGEMM (``cupy.matmul``, what "auto" runs natively), level IV
replayed as one graph (what ``mixpert.matmul(a, b, level="IV")`` replays from the plan cache)
and "auto"'s level IV route as this GPU runs it (one graph deciding its fallback on the device
where it can, else the direct call). The graphs are plans of their own, released after: the
user's plan cache is left as it was. A call's time is a burst's over its calls (at least
BURST_MS of calls back to back), the median of ROUNDS bursts, as ``mixpert.timing`` times
short calls: a program that queues products pays its kernels' time or its host work's,
whichever is longer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

import cupy as cp
import numpy as np

from .. import calibration
from ..calibration import Calibration, Identity, Measurement, Row
from .captured import CapturedProduct, capturable
from .sliced import int8_product
from .tn_gemm import INT8, Gemm, gemm

if TYPE_CHECKING:  # (the route comes from auto: this package never asks it)
    from ..auto import Crossovers, Route

ROUNDS = 5  # bursts per call, taken in turns
BURST_MS = 2.0  # a burst lasts at least this long
PHI = 0.5  # the inputs' exponent spread (GEMMul8's generator, as the benchmarks use)

Call = Callable[[cp.ndarray, cp.ndarray], Any]


class Probe:
    """``calibration.Probe`` on the current CUDA device."""

    def identity(self, device: int) -> Identity:
        runtime = cp.cuda.runtime
        name = runtime.getDeviceProperties(device)["name"]
        try:
            version = metadata.version("mixpert")
        except metadata.PackageNotFoundError:  # (a source tree on sys.path)
            version = "unknown"
        return Identity(
            gpu=name.decode() if isinstance(name, bytes) else str(name),
            compute_capability=str(cp.cuda.Device(device).compute_capability),
            driver=int(runtime.driverGetVersion()),
            cuda_runtime=int(runtime.runtimeGetVersion()),
            cupy=cp.__version__,
            mixpert=f"{version}+{calibration.backend_digest()}",
        )

    def capturing(self) -> bool:
        return bool(cp.cuda.get_current_stream().is_capturing())

    def measure(self, route: Route) -> Measurement:
        return measure(route)


CALIBRATIONS = calibration.Calibrations(Probe())


def crossovers(shipped: Crossovers, route: Route) -> Crossovers:
    """ "auto"'s crossovers on the current device (``auto.Gpu.crossovers``)."""
    return CALIBRATIONS.crossovers(shipped, route, cp.cuda.runtime.getDevice())


def recalibrate(shipped: Crossovers, route: Route) -> Calibration:
    """Measures the current device now and saves it (``mixpert calibrate``)."""
    return CALIBRATIONS.recalibrate(shipped, route, cp.cuda.runtime.getDevice())


def saved() -> Calibration | None:
    """The calibration saved for the current device's model, if any."""
    return CALIBRATIONS.saved(cp.cuda.runtime.getDevice())


def measure(route: Route) -> Measurement:
    """The INT8 and float32 rates, then (where INT8 is fast enough to matter) the ladders."""
    began = time.perf_counter()
    cp.cuda.Device().synchronize()  # (the caller's queued work would count in our times)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        sgemm_ms, int8_ms = _rates()
        ratio = sgemm_ms / int8_ms if int8_ms > 0 else 0.0
        # (the plan cache's switch aside: a calibration is kept, and read with plans on or off)
        replays = capturable(route.level, route.fallback)
        rows: list[Row] = []
        if ratio >= calibration.MIN_INT8_RATIO:
            rows = [_row(m, k, n, route, replays) for m, k, n in calibration.shapes()]
    stream.synchronize()
    flops = 2.0 * calibration.RATE_SIDE**3
    return Measurement(
        int8_ratio=ratio,
        sgemm_tflops=flops / sgemm_ms * 1e-9,
        int8_tops=flops / int8_ms * 1e-9 if int8_ms > 0 else 0.0,
        rows=tuple(rows),
        auto_replays=replays,
        seconds=time.perf_counter() - began,
    )


def _rates() -> tuple[float, float]:
    """ms of one SGEMM and one INT8 GEMM (the INT8 levels' own, ``tn_gemm``) at RATE_SIDE^3;
    0 for the INT8 one where this GPU runs none."""
    side = calibration.RATE_SIDE
    a, b = _operands(side, side, side, 0)
    sgemm_ms = _times({"sgemm": lambda: cp.matmul(a, b)})["sgemm"]
    try:
        rng = cp.random.default_rng(1)
        a8, b8 = (rng.integers(-127, 128, (side, side)).astype(cp.int8) for _ in range(2))
        c32 = cp.empty((side, side), dtype=cp.int32)
        shape = Gemm(side, side, side, side, side)

        def int8() -> None:
            gemm(shape, b8.data.ptr, a8.data.ptr, c32.data.ptr, False, INT8)

        int8_ms = _times({"int8": int8})["int8"]
    except Exception:  # (no INT8 GEMM on this GPU: cuBLAS refuses it)
        int8_ms = 0.0
    return sgemm_ms, int8_ms


def _row(m: int, k: int, n: int, route: Route, replays: bool) -> Row:
    """One product's times; a level that fails here (memory) is not measured (None)."""
    a, b = _operands(m, k, n, m + k + n)
    calls: dict[str, Callable[[], Any]] = {"sgemm": lambda: cp.matmul(a, b)}
    plans: list[CapturedProduct] = []
    try:
        iv = _replayed(m, k, n, route.level, None, plans)
        calls["iv"] = _bound(iv or (lambda x, y: int8_product(x, y, route.level)), a, b)
        auto = _replayed(m, k, n, route.level, route.fallback, plans) if replays else None
        # (as dispatch runs it where it does not replay)
        direct = functools.partial(int8_product, level=route.level, fallback=route.fallback)
        calls["auto"] = _bound(auto or direct, a, b)
        if auto is not None:
            calls["direct"] = _bound(direct, a, b)
        times = _times(calls)
    except MemoryError:  # (cupy's OutOfMemoryError is one)
        times = _times({"sgemm": calls["sgemm"]})
    finally:
        for plan in plans:
            plan.release()
    return Row(m, k, n, times["sgemm"], times.get("iv"), times.get("auto"), times.get("direct"))


def _replayed(
    m: int, k: int, n: int, level: Any, fallback: Any, plans: list[CapturedProduct]
) -> Call | None:
    """A graph of the product (the plan cache's, made here and released by the caller)."""
    try:
        plan = CapturedProduct(m, k, n, level, fallback)
    except MemoryError:
        raise
    except Exception:  # (not capturable here: the direct call, as the plan cache would)
        return None
    plans.append(plan)
    return plan  # type: ignore[return-value]


def _bound(call: Call, a: cp.ndarray, b: cp.ndarray) -> Callable[[], Any]:
    return lambda: call(a, b)


def _operands(m: int, k: int, n: int, seed: int) -> tuple[cp.ndarray, cp.ndarray]:
    """GEMMul8's inputs, (U - 0.5) exp(PHI N(0, 1)), float32 (``mixpert.testdata``)."""
    rng = cp.random.default_rng(seed)

    def draw(shape: tuple[int, int]) -> cp.ndarray:
        spread = cp.exp(PHI * rng.standard_normal(shape, dtype=cp.float32))
        return ((rng.random(shape, dtype=cp.float32) - 0.5) * spread).astype(cp.float32)

    return draw((m, k)), draw((k, n))


def _times(calls: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """ms per call of each, the median of ROUNDS bursts, the calls taking turns burst by burst
    (a clock that drifts meanwhile moves them all alike)."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()

    def burst(call: Callable[[], Any], count: int) -> float:
        start.record()
        for _ in range(count):
            call()
        stop.record()
        stop.synchronize()
        return float(cp.cuda.get_elapsed_time(start, stop)) / count

    counts = {}
    for name, call in calls.items():
        call()  # (first use: builds, the GEMMs' algorithm choice, the pool's blocks)
        one = min(burst(call, 1) for _ in range(2))
        counts[name] = max(1, min(200, int(np.ceil(BURST_MS / max(one, 1e-4)))))
    bursts: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, call in calls.items():
            bursts[name].append(burst(call, counts[name]))
    return {name: float(np.median(times)) for name, times in bursts.items()}

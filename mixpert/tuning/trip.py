"""The trip a call with NumPy arguments makes to a GPU, and the host's own run it must beat.

A plan for the GPU tuned on NumPy arguments runs each call with a trip: in one trip where the
body moves (``mixpert.one_trip``: the array arguments over once, the results and the arguments
it writes back once), else each product's operands over and its result back
(``Profiler.product_bytes``). The trip costs its bytes over the host-device bandwidth, measured
once per process where a GPU is usable (``runtime.cuda.transfers.bandwidth``: pageable memory
through the pinned staging buffers, both ways), else ``BANDWIDTH_WITHOUT_GPU``. The greedy walk
is not changed by it (every plan of one function moves the same bytes); the plan's cost is:
``tuned_plan`` records the trip, and where the call is timed (on a GPU by default) compares the
call with it against the function run natively on the host (every op at native float32, Numba's
BLAS). A plan slower than that becomes that run (``Plan.on_host``), where native float32 meets
tol. Without a GPU the GPU's side is the cost model's products plus the trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime import device
from .profiling import Profiler

# Bytes per second of the trip where no GPU is here to measure it: the host's one-core copy of
# pageable memory into the pinned staging buffers bounds it (PCIe 4 and 5 links move 25-50
# GB/s), about 10 GB/s on a recent server. A measured figure replaces it on a GPU.
BANDWIDTH_WITHOUT_GPU = 10e9


@dataclass(frozen=True)
class Trip:
    """What one call moves to the GPU and back, and its predicted seconds."""

    nbytes: int
    seconds: float
    whole_body: bool  # the body moves in one trip (else product by product)


def bandwidth() -> float:
    """Bytes per second of the trip (module docstring); measured once per process."""
    if not device.gpu_available():
        return BANDWIDTH_WITHOUT_GPU
    from ..runtime.cuda import transfers  # (needs CuPy)

    return transfers.bandwidth()


def trip_of(jitted: Any, args: Sequence[Any], prof: Profiler) -> Trip | None:
    """The trip of a call of ``jitted`` with ``args``; None where nothing moves (arguments
    already on the GPU, Dask arrays, no NumPy array)."""
    if any(device.is_cupy_array(a) or device.is_dask_array(a) for a in args):
        return None
    if not any(isinstance(a, np.ndarray) for a in args):
        return None
    placement_for = getattr(jitted, "placement_for", None)
    whole = placement_for is not None and placement_for(*args).movable
    if whole:
        mutated = getattr(jitted, "mutated_arguments", frozenset())
        over = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
        back = sum(args[i].nbytes for i in mutated if isinstance(args[i], np.ndarray))
        moved = over + prof.result_bytes + back
    else:
        moved = prof.product_bytes
    return Trip(moved, moved / bandwidth(), whole)


def slower_than_host(gpu_seconds: float, host_seconds: float, trip: Trip, measured: bool) -> str:
    """Why a call of ``gpu_seconds`` (its trip included) should run natively on the host,
    which takes ``host_seconds``; "" where the GPU's is the faster."""
    if gpu_seconds <= host_seconds:
        return ""
    how = "measured" if measured else "predicted"
    return (
        f"the host's own run ({host_seconds * 1e3:.3g} ms) beats the GPU's "
        f"({gpu_seconds * 1e3:.3g} ms {how}, {trip.seconds * 1e3:.3g} ms of it the trip of "
        f"{trip.nbytes / 2**20:.3g} MiB)"
    )

"""The device a plan is for: the levels the walk weighs there, and what a plan costs there.

**Device-aware cost.** ``target`` "cuda" minimises the GPU's time by a cost model: an op's time
at a level is ``relative_cost(level) * 2*m*k*n / INT8_RATE`` summed over its calls (shapes
recorded in the first profiling run). ``INT8_RATE`` = 1.4e15 ops/s is one INT8 GEMM's throughput
on the H100: level IV sustains ~160 TFLOPS at n = 16384 in
``benchmarks/results/NVIDIA-H100-80GB-HBM3/gemm.json`` and its relative cost is 9, so
9 x 160e12 ~ 1.4e15. The tuner only compares times, so the constant only scales the predicted
seconds (the measured check of the model on a GPU: ``search``). On "cpu" (the default where no
GPU is usable) emulation is the exact oracle, never a speed-up, so the candidates are native
float32 and float64 (both BLAS at native speed): a tuned function runs native float32 wherever
that meets tol, and says so once.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Literal, get_args

from ..runtime import device
from ..runtime.levels import LADDER, NATIVE_LEVEL, Level, get_level

INT8_RATE = 1.4e15  # ops/s of one INT8 GEMM on the H100 (see module docstring)
BASELINE_LEVEL = NATIVE_LEVEL  # speedups are over every op at native float32
# Where a target has no GPU, emulation is the exact oracle, not a speed-up: native float32 where
# it meets tol, else float64 BLAS, both at native speed.
CPU_CANDIDATES = (NATIVE_LEVEL, "fp64")
Target = Literal["auto", "cpu", "cuda"]
TARGET_ENV = "MIXPERT_TUNE_TARGET"


class NativeOnCpuWarning(UserWarning):
    """No usable GPU: tuned functions run native float32 (or float64) where that meets tol."""


def pareto_levels(ladder: Iterable[Level] = LADDER) -> tuple[str, ...]:
    """Levels no other level beats on both cost and expected error (the default candidates)."""
    levels = sorted(ladder, key=lambda lv: (lv.relative_cost, lv.expected_error))
    front: list[str] = []
    best = float("inf")
    for level in levels:
        if level.expected_error < best:
            front.append(level.name)
            best = level.expected_error
    return tuple(front)


# The Pareto front: tf32, I, T6, IV, V, fp64. fp16 (k-blocked on the GPU: 1.3e-6 at cost 20) is
# dominated by V there, and the greedy walk needs error to fall as cost rises; pass it in
# ``candidates`` for data whose lines span more binades than V's 31 bits.
DEFAULT_CANDIDATES = pareto_levels()


def candidates_for(target: str) -> tuple[str, ...]:
    """The levels the walk weighs by default for a resolved target ("cuda" or "cpu")."""
    return DEFAULT_CANDIDATES if target == "cuda" else CPU_CANDIDATES


def resolve_target(target: str | None) -> str:
    """ "cpu" or "cuda": the device whose time the plan minimises. "auto" (or None, unless
    ``$MIXPERT_TUNE_TARGET`` names one) is the GPU when one is usable here, else the CPU."""
    target = target or os.environ.get(TARGET_ENV) or "auto"
    if target not in get_args(Target):
        raise ValueError(f"target={target!r}: it must be 'auto', 'cpu' or 'cuda'")
    if target == "auto":
        return "cuda" if device.gpu_available() else "cpu"
    return target


_told_native_on_cpu = False


def say_native_on_cpu(name: str) -> None:
    """Once per process: what a tol= plan means on a machine without a GPU."""
    global _told_native_on_cpu
    if _told_native_on_cpu:
        return
    _told_native_on_cpu = True
    warnings.warn(
        f"mixpert: no usable GPU ({device.unavailable_reason()}): {name} and other tuned "
        "functions run native float32 where it meets tol (float64 where it does not); "
        "pass target='cuda' (mixpert tune --target cuda) to make the GPU's plan here",
        NativeOnCpuWarning,
        stacklevel=4,
    )


def predicted_time(flops: Mapping[str, float], levels: Mapping[str, str]) -> float:
    """Seconds under the cost model (ops missing from ``levels`` count at native float32)."""
    return sum(
        get_level(levels.get(op, BASELINE_LEVEL)).relative_cost * f / INT8_RATE
        for op, f in flops.items()
    )

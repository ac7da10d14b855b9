"""Figures recorded on GPUs, shipped for machines without one (``mixpert demo`` on a CPU).

``recorded_gpu.json`` beside this module is written by ``benchmarks/recorded_figures.py`` from
the results files under ``benchmarks/results/<gpu>/``; every figure names its GPU, its date and
the file it came from, so a demo on a laptop can show the GPU's speed labelled as recorded there,
never a time taken here. It holds:

- ``speed``: per GPU, each sample end to end (``benchmarks/samples_e2e.py``'s ``samples.json``):
  native float32 and mixpert times, the speed-up, the levels and errors;
- ``demo_bits``: digests (``output_digest``) of the demo's outputs at every level as a GPU
  computed them (``benchmarks/demo_bits.py``), for the demo's sample, size and seed: the CPU
  demo computes the same digests on the exact backend and shows which levels agree bit for bit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .metrics import float_leaves
from .runtime import device

RECORDED_FILE = Path(__file__).resolve().parent / "recorded_gpu.json"


@dataclass(frozen=True)
class SampleSpeed:
    """One sample end to end on a GPU: times are best of 3 on held-out inputs, data resident."""

    sample: str
    size: int
    tol: float
    levels: tuple[str, ...]  # the tuned plan's levels, each once
    native_seconds: float
    mixpert_seconds: float
    error: float  # Eq. 10 against float64
    native_error: float

    @property
    def speedup(self) -> float:
        return self.native_seconds / self.mixpert_seconds


@dataclass(frozen=True)
class GpuSpeed:
    """The end-to-end samples as recorded on one GPU."""

    gpu: str
    date: str  # YYYY-MM-DD, when the results file was committed
    source: str  # the results file, relative to the repository
    samples: dict[str, SampleSpeed]

    @property
    def mean_speedup(self) -> float:
        return float(np.mean([s.speedup for s in self.samples.values()]))


@dataclass(frozen=True)
class DemoDigests:
    """Digests of one sample's outputs at each level (every op at that level), computed by a GPU
    on the inputs ``make_inputs(numpy, default_rng(seed), size)`` moved to the GPU."""

    gpu: str
    date: str
    source: str
    sample: str
    size: int
    seed: int
    digests: dict[str, str]  # level -> output_digest


@cache
def _recorded() -> dict[str, Any]:
    return json.loads(RECORDED_FILE.read_text())


def gpu_speeds() -> list[GpuSpeed]:
    """The recorded end-to-end runs, one per GPU, newest first."""
    return [
        GpuSpeed(
            gpu=run["gpu"],
            date=run["date"],
            source=run["source"],
            samples={
                name: SampleSpeed(sample=name, **{**row, "levels": tuple(row["levels"])})
                for name, row in run["samples"].items()
            },
        )
        for run in _recorded()["speed"]
    ]


def demo_digests(sample: str, size: int, seed: int) -> DemoDigests | None:
    """The GPU's digests for ``sample`` at ``size`` on inputs of ``seed``, if recorded."""
    for record in _recorded()["demo_bits"]:
        if (record["sample"], record["size"], record["seed"]) == (sample, size, seed):
            return DemoDigests(**record)
    return None


def output_digest(outputs: Any) -> str:
    """SHA-256 (first 20 hex digits) of a function's floating-point outputs: their bytes, dtypes
    and shapes, wherever they live (CuPy outputs are copied to the host)."""
    digest = hashlib.sha256()
    for leaf in float_leaves(outputs):
        array = np.ascontiguousarray(device.to_host(leaf))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.view(np.uint8).tobytes())
    return digest.hexdigest()[:20]


__all__ = [
    "DemoDigests",
    "GpuSpeed",
    "SampleSpeed",
    "demo_digests",
    "gpu_speeds",
    "output_digest",
]

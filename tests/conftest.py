"""Shared test set-up: hypothesis profiles, the ``gpu`` marker, input generators, the error metric.

Hypothesis profiles: "ci" (default; modest example counts, no deadline) and "thorough"; pick one
with ``HYPOTHESIS_PROFILE=thorough python -m pytest``.

Helpers (``gemmul8``, ``normal``, ``uniform``, ``binade_rows``, ``relative_error``,
``gpu_benchmark``) are plain functions: test modules import them with ``from conftest import ...``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from mixpert import metrics, testdata
from mixpert.runtime import device

# The suite routes "auto" by the shipped crossovers (its tests name them): a calibration measured
# on the GPU at hand would move them (runtime/calibration.py). Its own tests turn it back on.
os.environ["MIXPERT_CALIBRATE"] = "0"

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

Generator = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``@pytest.mark.gpu`` tests, saying why, where no CUDA GPU is usable."""
    if device.gpu_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {device.unavailable_reason()}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A subprocess run with ``check=True`` that fails shows what it printed: its exception
    names only the command and the exit status."""
    outcome = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, subprocess.CalledProcessError):
        report = outcome.get_result()
        for name, text in (("stderr", error.stderr), ("stdout", error.output)):
            if text:
                text = text.decode(errors="replace") if isinstance(text, bytes) else text
                report.sections.append((f"failed subprocess {name}", text))


# ---- input generators (mixpert.testdata; the error metric is mixpert.metrics) ---------------


def gemmul8(phi: float) -> Generator:
    """GEMMul8's test matrices a = (U - 0.5) * exp(phi * N(0, 1)); phi widens the spread."""

    def make(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        return testdata.gemmul8(np, rng, shape, phi)

    return make


def normal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def uniform(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Uniform [0, 1) (zeros are possible but have probability ~2^-24 per entry)."""
    return rng.random(shape).astype(np.float32)


def binade_rows(span: int = 64, centre: int = 0) -> Generator:
    """Signed entries whose exponents spread over ``span`` binades around 2^centre, per row."""

    def make(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        exponents = rng.integers(centre - span // 2, centre + span // 2 + 1, size=shape)
        mantissa = rng.uniform(0.5, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        return np.ldexp(mantissa, exponents).astype(np.float32)

    return make


GENERATORS: dict[str, Generator] = {
    "phi=0": gemmul8(0.0),
    "phi=0.5": gemmul8(0.5),
    "phi=1": gemmul8(1.0),
    "phi=1.5": gemmul8(1.5),
    "normal": normal,
    "uniform": uniform,
    "binades60": binade_rows(60),
}


relative_error = metrics.relative_error  # MixPert Eq. 10
oracle = metrics.float64_product  # the float64 product of the float32 inputs


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def gpu_benchmark(
    monkeypatch: pytest.MonkeyPatch, script: str, cupy: ModuleType | None = None
) -> ModuleType:
    """``benchmarks/<script>`` (a GPU-only script) loaded without a GPU, for its tables and
    plots: its GPU check passed over, CuPy ``cupy`` (else the real one where imported, or an
    empty placeholder), its sibling ``call_overhead`` imported afresh over the same."""
    monkeypatch.setattr(device, "exit_without_gpu", lambda what: None)
    if cupy is not None or "cupy" not in sys.modules:
        monkeypatch.setitem(sys.modules, "cupy", cupy or ModuleType("cupy"))
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.delitem(sys.modules, "call_overhead", raising=False)
    name = Path(script).stem
    spec = importlib.util.spec_from_file_location(f"{name}_script", BENCHMARKS / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""Samples: real workloads under ``samples/``, and one end-to-end run of one (``mixpert run``).

A sample module holds one plain NumPy function decorated with ``@mixpert.jit(tol=...)`` and a
``SAMPLE = Sample(...)`` describing how to feed and judge it. The same function body runs three
ways: compiled by Numba in nopython mode on NumPy arrays, through Numba's object mode on CuPy arrays
(NumPy calls dispatch to CuPy through ``__array_function__``/``__array_ufunc__``), and as plain
Python on float64 copies for the reference. So sample code:

- creates arrays only from arguments (``np.zeros_like(a)``, ``a.copy()``), never from shapes alone:
  ``np.zeros((n, n))`` would be a NumPy array beside CuPy operands;
- never hard-codes float32: the float64 reference runs the same code (use ``x.dtype``); Python
  literals are fine (``mixpert.jit`` keeps ``0.5 * x`` float32, as NumPy 2 does), Python float
  *arguments* are not (Numba makes them float64): type them (``t = x.dtype.type; t(alpha)``);
- avoids ``min``/``max``/``mean`` with ``axis=`` (Numba lacks them): ``argmin`` +
  ``take_along_axis`` and ``sum(axis=...) / n`` do the same.

``run_sample`` is the end-to-end path: tune on representative inputs, then on fresh held-out inputs
measure the error against a float64 run (MixPert Eq. 10), the sample's own checks (e.g. HPL's
scaled residual), and the time of the same code with native float32 and with mixpert.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .jit import MixpertFunction
from .metrics import output_error, reference_outputs
from .plans.plan import Plan
from .runtime import device
from .source_files import load_module
from .timing import best_time, synchronizer
from .tuning.tuner import tune

MODULE_PREFIX = "mixpert_sample_"  # sample modules import as mixpert_sample_<name>
# The samples ship inside the package: mixpert/sample_files is the top-level samples/ folder
# (a link in the source tree, a copy in a wheel).
SAMPLES_DIR = Path(__file__).resolve().parent / "sample_files"
MakeInputs = Callable[[Any, Any, int], tuple[Any, ...]]


@dataclass(frozen=True)
class Check:
    """A domain check beyond Eq. 10: passes when ``value <= limit``."""

    name: str
    value: float
    limit: float

    @property
    def ok(self) -> bool:
        return bool(self.value <= self.limit)  # NaN fails


ChecksFn = Callable[[tuple[Any, ...], Any, Any], Sequence[Check]]


@dataclass(frozen=True)
class Sample:
    """One workload. ``make_inputs(xp, rng, size)`` returns the arguments as float32 arrays of
    ``xp`` (numpy or cupy) drawn from ``rng = xp.random.default_rng(seed)``; ``sizes`` names
    sizes ("ci": seconds on the CPU oracle, the demo's without a GPU; "demo": ``mixpert run``'s
    default and the demo's on a GPU; "gpu": the end-to-end benchmark); ``checks(args, outputs,
    reference)`` returns domain checks."""

    func: MixpertFunction
    make_inputs: MakeInputs
    sizes: Mapping[str, int]
    size_doc: str  # what ``size`` means, e.g. "n: A and B are n x n"
    checks: ChecksFn | None = None

    @property
    def name(self) -> str:
        return self.func.py_func.__module__.removeprefix(MODULE_PREFIX)

    @property
    def tol(self) -> float:
        if self.func.tol is None:
            raise ValueError(f"sample {self.name}: decorate it with @mixpert.jit(tol=...)")
        return self.func.tol


def load_sample(path: str | Path) -> Sample:
    """Import a sample (a sample's name, or the path of a .py file defining ``SAMPLE``) once,
    from exactly that file (nothing is added to ``sys.path``), and return its ``SAMPLE``."""
    path = Path(path)
    if not path.suffix and path.parent == Path("."):
        path = SAMPLES_DIR / f"{path}.py"
    if path.suffix != ".py":
        raise ValueError(f"{str(path)!r} is not a Python file: samples are .py files")
    if not path.is_file():
        raise FileNotFoundError(f"sample file {path} does not exist")
    module = load_module(path, MODULE_PREFIX + path.stem)
    sample = getattr(module, "SAMPLE", None)
    if not isinstance(sample, Sample):
        raise TypeError(f"{path} defines no SAMPLE = mixpert.samples.Sample(...)")
    return sample


def sample_paths() -> list[Path]:
    """Every sample module in the repository's ``samples/`` folder."""
    return sorted(p for p in SAMPLES_DIR.glob("*.py") if not p.name.startswith("_"))


def array_module(backend: str) -> Any:
    """numpy for "cpu", cupy for "cuda", the GPU when usable for "auto"."""
    if backend == "cuda" or (backend == "auto" and device.gpu_available()):
        cp = device.cupy_module()
        if cp is None:
            raise RuntimeError(f"backend 'cuda' asked for: {device.unavailable_reason()}")
        return cp
    if backend not in ("cpu", "auto"):
        raise ValueError(f"backend={backend!r}: use 'auto', 'cpu' or 'cuda'")
    return np


@dataclass
class SampleRun:
    """What ``run_sample`` measured; errors are Eq. 10 against float64 on held-out inputs."""

    name: str
    size: int
    device: str
    tol: float
    plan: Plan
    error: float
    native_error: float
    native_seconds: float
    mixpert_seconds: float
    checks: list[Check]
    input_bytes: int = 0
    tune_seconds: float = 0.0
    compared: dict[str, tuple[float, float]] = field(default_factory=dict)  # error, seconds

    @property
    def speedup(self) -> float:
        return self.native_seconds / self.mixpert_seconds

    @property
    def ok(self) -> bool:
        return self.error <= self.tol and all(c.ok for c in self.checks)


def run_sample(
    sample: Sample,
    size: int,
    *,
    backend: str = "auto",
    tol: float | None = None,
    tune_size: int | None = None,
    plan: Plan | None = None,
    seed: int = 0,
    repeats: int = 3,
    on_run: Callable[[], None] | None = None,
    compare: Mapping[str, str] | None = None,
    target: str | None = None,
) -> SampleRun:
    """Tune (unless ``plan`` is given) at ``tune_size`` (default ``size``) with seed ``seed``,
    then measure error, checks and times at ``size`` on inputs drawn with seed ``seed + 1``.
    ``compare``: label -> level to also run every op at (e.g. {"TF32": "tf32"}); ``target``:
    the device the plan is for (``mixpert.tune``'s)."""
    xp = array_module(backend)
    tol = sample.tol if tol is None else tol
    start = time.perf_counter()
    if plan is None:
        tuning = sample.make_inputs(xp, xp.random.default_rng(seed), tune_size or size)
        plan = tune(sample.func, tuning, tol=tol, on_run=on_run, measure=False, target=target)
        del tuning
    tune_seconds = time.perf_counter() - start
    args = sample.make_inputs(xp, xp.random.default_rng(seed + 1), size)
    reference = reference_outputs(sample.func.py_func, args)
    tuned = sample.func.with_plan(plan)
    outputs = tuned(*args)  # each first call below doubles as its timing's warm-up
    native = sample.func.py_func(*args)
    checks = list(sample.checks(args, outputs, reference)) if sample.checks else []
    sync = synchronizer(xp)
    compared = {}
    for label, level in (compare or {}).items():
        variant = sample.func.with_plan(dict.fromkeys(sample.func.ops, level))
        compared[label] = (
            output_error(variant(*args), reference),
            best_time(lambda v=variant: v(*args), sync, repeats, warm_up=False),
        )
    return SampleRun(
        name=sample.name,
        size=size,
        device=plan.device,
        tol=tol,
        plan=plan,
        error=output_error(outputs, reference),
        native_error=output_error(native, reference),
        native_seconds=best_time(lambda: sample.func.py_func(*args), sync, repeats, warm_up=False),
        mixpert_seconds=best_time(lambda: tuned(*args), sync, repeats, warm_up=False),
        checks=checks,
        input_bytes=sum(int(getattr(a, "nbytes", 0)) for a in args),
        tune_seconds=tune_seconds,
        compared=compared,
    )


def to_host(x: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or CuPy array (for checks that compare on the host)."""
    return device.to_host(x)


def row_relative_errors(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """||y_i - ref_i|| / ||ref_i|| for every row i along the last axis (float64; leading axes
    are rows too, so a (batch, seq, d) output gives one error per token)."""
    ref = ref.astype(np.float64).reshape(-1, ref.shape[-1])
    diff = y.astype(np.float64).reshape(ref.shape) - ref
    return np.sqrt((diff * diff).sum(axis=1) / (ref * ref).sum(axis=1))


__all__ = [
    "Check",
    "Sample",
    "SampleRun",
    "array_module",
    "load_sample",
    "row_relative_errors",
    "run_sample",
    "sample_paths",
    "to_host",
]

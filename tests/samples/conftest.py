"""The samples' shared fixtures: one ``sample`` fixture, parametrised over the sample names.

- ``sample``: the ``Sample`` of ``samples/<name>.py``, its test id ``[<name>]``. A test in
  ``test_sample_<name>.py`` runs for that one sample; one in any other module here
  (``test_samples.py``) for every sample under ``samples/``.
- ``inputs(size, seed=0)``: the sample's inputs, ``make_inputs`` on NumPy with
  ``default_rng(seed)``; ``args``: ``inputs(SIZE, SEED)``, the test module's two constants.
- ``at_level(level)``: the sample's function with every op at ``level``.
- ``module``: the sample's own Python module (its helpers: ``blobs``, ``scaled_residual``, ...).

This folder is a package (``__init__.py``) so that this file does not replace ``tests/conftest.py``
as the module ``conftest`` that test modules elsewhere import their helpers from.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from mixpert.jit import MixpertFunction
from mixpert.samples import Sample, load_sample, sample_paths

SAMPLES = [p.stem for p in sample_paths()]
ONE_SAMPLE = "test_sample_"  # test_sample_<name>.py tests samples/<name>.py


def sample_names(module: ModuleType) -> list[str]:
    """The samples a test module is about: its own one, or all of them."""
    stem = Path(module.__file__ or "").stem
    if not stem.startswith(ONE_SAMPLE):
        return SAMPLES
    name = stem.removeprefix(ONE_SAMPLE)
    if name not in SAMPLES:
        pytest.fail(f"{stem}.py: there is no samples/{name}.py", pytrace=False)
    return [name]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``sample``: per module where a module is about one sample (its fixtures built
    once), per test where it runs every sample (they run in the module's order)."""
    if "sample" in metafunc.fixturenames:
        names = sample_names(metafunc.module)
        scope = "module" if len(names) == 1 else "function"
        metafunc.parametrize("sample", names, indirect=True, ids=names, scope=scope)


@pytest.fixture(scope="module")
def sample(request: pytest.FixtureRequest) -> Sample:
    return load_sample(request.param)  # loaded once per process


@pytest.fixture(scope="module")
def inputs(sample: Sample) -> Callable[..., tuple[Any, ...]]:
    def make(size: int, seed: int = 0) -> tuple[Any, ...]:
        return sample.make_inputs(np, np.random.default_rng(seed), size)

    return make


@pytest.fixture(scope="module")
def args(request: pytest.FixtureRequest, inputs: Callable[..., tuple[Any, ...]]) -> tuple[Any, ...]:
    return inputs(request.module.SIZE, request.module.SEED)


@pytest.fixture(scope="module")
def at_level(sample: Sample) -> Callable[[str], MixpertFunction]:
    def at(level: str) -> MixpertFunction:
        return sample.func.with_plan(dict.fromkeys(sample.func.ops, level))

    return at


@pytest.fixture(scope="module")
def module(sample: Sample) -> ModuleType:
    return sys.modules[sample.func.py_func.__module__]

"""Bit-determinism: the same inputs give the same bits in repeated calls, layouts and processes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import gemmul8
from test_matmul_accuracy import ALL_LEVELS, INT8_LEVELS, with_layout

import mixpert
from mixpert.runtime import equilibrate

# Every level but the native BLAS ones, whose bits depend on the BLAS build and thread count.
DETERMINISTIC = [*INT8_LEVELS, "fp16"]

SCRIPT = textwrap.dedent(
    """
    import hashlib, sys
    import numpy as np
    import mixpert
    rng = np.random.default_rng(20241)
    a = ((rng.random((70, 90)) - 0.5) * np.exp(rng.standard_normal((70, 90)))).astype(np.float32)
    b = ((rng.random((90, 50)) - 0.5) * np.exp(rng.standard_normal((90, 50)))).astype(np.float32)
    for name in sys.argv[1:]:
        c = mixpert.matmul(a, b, level=name)
        print(name, hashlib.sha256(c.tobytes()).hexdigest())
    """
)


def digests(names: list[str]) -> dict[str, str]:
    rng = np.random.default_rng(20241)
    a = ((rng.random((70, 90)) - 0.5) * np.exp(rng.standard_normal((70, 90)))).astype(np.float32)
    b = ((rng.random((90, 50)) - 0.5) * np.exp(rng.standard_normal((90, 50)))).astype(np.float32)
    return {
        name: hashlib.sha256(mixpert.matmul(a, b, level=name).tobytes()).hexdigest()
        for name in names
    }


def test_repeated_calls_give_the_same_bits() -> None:
    rng = np.random.default_rng(21)
    a, b = gemmul8(1.0)(rng, (33, 65)), gemmul8(1.0)(rng, (65, 17))
    for name in ALL_LEVELS:
        first = mixpert.matmul(a, b, level=name)
        for _ in range(3):
            assert np.array_equal(mixpert.matmul(a, b, level=name).view(np.uint32),
                                  first.view(np.uint32))  # fmt: skip


def test_a_fresh_process_gives_the_same_bits() -> None:
    here = digests(DETERMINISTIC)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *DETERMINISTIC],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    there = dict(line.split() for line in out.strip().splitlines())
    assert there == here
    assert len(set(here.values())) == len(here)  # the levels really differ


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_layout_does_not_change_the_bits(name: str) -> None:
    rng = np.random.default_rng(22)
    a, b = gemmul8(0.5)(rng, (19, 40)), gemmul8(0.5)(rng, (40, 23))
    want = mixpert.matmul(a, b, level=name).view(np.uint32)
    for la in ("C", "F", "T", "strided"):
        for lb in ("C", "F", "T", "strided"):
            got = mixpert.matmul(with_layout(a, la), with_layout(b, lb), level=name)
            assert np.array_equal(got.view(np.uint32), want), (la, lb)


@pytest.mark.parametrize("name", INT8_LEVELS)
def test_results_are_elementwise(name: str) -> None:
    """An entry depends on its row of A, its column of B and the k-exponents of equilibration
    (which no k-index of narrow-range data needs): no blocking or shape effects."""
    rng = np.random.default_rng(23)
    a, b = gemmul8(0.5)(rng, (120, 57)), gemmul8(0.5)(rng, (57, 90))
    assert (equilibrate.k_exponents(a, b) == 0).all()
    assert (equilibrate.k_exponents(a[20:80], b[:, ::3]) == 0).all()
    full = mixpert.matmul(a, b, level=name)
    part = mixpert.matmul(a[20:80], b[:, ::3], level=name)
    assert np.array_equal(full[20:80, ::3], part)


@pytest.mark.gpu
@pytest.mark.parametrize("name", INT8_LEVELS)
def test_cuda_backend_gives_the_cpu_bits(name: str) -> None:
    rng = np.random.default_rng(24)
    a, b = gemmul8(1.0)(rng, (130, 300)), gemmul8(1.0)(rng, (300, 70))
    a[3, 5] = np.nan
    cpu = mixpert.matmul(a, b, level=name, backend="cpu")
    gpu = mixpert.matmul(a, b, level=name, backend="cuda")
    assert np.array_equal(cpu.view(np.uint32), gpu.view(np.uint32))

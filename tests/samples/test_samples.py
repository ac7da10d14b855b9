"""Every sample in ``samples/`` end to end at its "ci" size: tuned plan within tol on held-out
inputs, its own checks pass, and on the GPU the same with CuPy inputs (``sample``: every one,
conftest.py)."""

from __future__ import annotations

import pytest

from mixpert.samples import Sample, load_sample, run_sample, sample_paths

SAMPLES = [p.stem for p in sample_paths()]


def test_the_eight_samples_are_there() -> None:
    expected = {"gemm", "mlp", "kmeans", "knn", "cholesky", "hpl_ai", "sparkler", "bert_ffn"}
    assert expected <= set(SAMPLES)


def assert_within_tol(run) -> None:
    assert run.error <= run.tol, f"{run.name}: error {run.error:.3e} > tol {run.tol:g}"
    for check in run.checks:
        assert check.ok, f"{run.name}: {check.name} = {check.value:.3g} > {check.limit:g}"
    assert set(run.plan.levels) == set(load_sample(run.name).func.ops)


def test_sample_on_the_cpu(sample: Sample) -> None:
    assert sample.func.ops, f"{sample.name}: the pass found no matmul"
    run = run_sample(sample, sample.sizes["ci"], backend="cpu", repeats=1)
    assert_within_tol(run)


@pytest.mark.gpu
def test_sample_on_the_gpu(sample: Sample) -> None:
    run = run_sample(sample, sample.sizes["ci"], backend="cuda", repeats=1)
    assert run.device != "cpu"
    assert_within_tol(run)

"""samples/hpl_ai.py: mixed-precision LU plus refinement passes HPL's residual test."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert
from mixpert.execution import record_calls
from mixpert.metrics import reference_outputs

pytestmark = pytest.mark.filterwarnings("ignore::numba.NumbaPerformanceWarning")


def gemm_ops(sample) -> list[str]:
    """The factorisation's two products (the solves and the residual are matrix-vector)."""
    return [op for op, info in sample.func.ops.items() if info.source.startswith("lu[")]


def test_inputs_are_hpl_ai_matrices(inputs) -> None:
    a_lo, a, b, nb = inputs(96)
    assert (a_lo.dtype, a.dtype, b.dtype, nb) == (np.float32, np.float64, np.float64, 12)
    assert np.array_equal(a_lo, a.astype(np.float32))
    off = np.abs(a).sum(axis=1) - np.abs(np.diagonal(a))
    assert np.allclose(np.diagonal(a), off)  # diagonal = off-diagonal absolute row sum
    assert np.abs(a - np.diag(np.diagonal(a))).max() <= 0.5
    assert np.abs(b).max() <= 0.5


def test_two_gemm_ops_the_rest_is_matrix_vector(sample, inputs, at_level) -> None:
    assert len(gemm_ops(sample)) == 2
    a_lo, a, b, nb = inputs(64)
    with record_calls() as calls:
        at_level("IV")(a_lo, a, b, nb)
    assert {call.op_id for call in calls} == set(gemm_ops(sample))


@pytest.mark.parametrize("level", ["tf32", "I", "IV", "fp32"])
@pytest.mark.parametrize("n", [192, 256])
def test_scaled_residual_below_16(module, inputs, at_level, level: str, n: int) -> None:
    a_lo, a, b, nb = inputs(n, seed=n)
    x, solves = at_level(level)(a_lo, a, b, nb)
    assert x.dtype == np.float64
    assert module.scaled_residual(a, b, x) < 16.0
    # one float32 solve is never enough: refinement is needed
    assert 2 <= solves < module.MAX_SOLVES
    assert np.linalg.norm(x - np.linalg.solve(a, b)) / np.linalg.norm(x) < 1e-12


@pytest.mark.parametrize("n", [192, 256])
def test_cheapest_levels_converge_with_more_refinement_than_fp32(
    module, inputs, at_level, n: int
) -> None:
    args = inputs(n, seed=1)
    _, fp32_solves = at_level("fp32")(*args)
    for level in ("tf32", "I"):
        x, solves = at_level(level)(*args)
        assert module.scaled_residual(args[1], args[2], x) < 16.0
        assert solves > fp32_solves, (level, solves, fp32_solves)


def test_float64_reference_runs_and_converges(sample, module, inputs) -> None:
    args = inputs(128)
    x, solves = reference_outputs(sample.func.py_func, args)
    assert x.dtype == np.float64 and solves == 2  # the float32 rounding of A still needs a step
    assert module.scaled_residual(args[1], args[2], x) < 1.0


def test_tuner_takes_the_cheapest_gemm_levels(sample, inputs) -> None:
    args = inputs(128)
    plan = mixpert.tune(sample.func, args, tol=sample.tol, target="cuda")
    assert plan.met_tol
    assert {plan.levels[op] for op in gemm_ops(sample)} == {"tf32"}


def test_checks_fail_on_an_inaccurate_or_unconverged_solution(
    sample, module, inputs, at_level
) -> None:
    args = inputs(128)
    x, solves = at_level("fp32")(*args)
    assert all(c.ok for c in sample.checks(args, (x, solves), None))
    bad = sample.checks(args, (x * (1 + 1e-9), solves), None)
    assert not bad[0].ok and bad[1].ok
    capped = sample.checks(args, (x, module.MAX_SOLVES), None)
    assert capped[0].ok and not capped[1].ok


@pytest.mark.parametrize(("n", "nb"), [(100, 16), (64, 0), (64, 48)])
def test_block_size_that_does_not_divide_n_raises(sample, inputs, n: int, nb: int) -> None:
    a_lo, a, b, _ = inputs(n)
    with pytest.raises(ValueError, match="nb must divide n"):
        sample.func(a_lo, a, b, nb)


def test_one_block_is_plain_lu(module, inputs, at_level) -> None:
    a_lo, a, b, _ = inputs(64)
    x, _ = at_level("fp32")(a_lo, a, b, 64)
    assert module.scaled_residual(a, b, x) < 16.0

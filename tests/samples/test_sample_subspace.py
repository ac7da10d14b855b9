"""The subspace sample: its float64 run finds the matrix's leading eigenvalues, its products
have the tall-and-skinny shapes it is there for, and its checks can fail."""

from __future__ import annotations

import numpy as np

from mixpert.metrics import reference_outputs

N = 128  # the ci size: A is 128 x 128, 4 starting vectors
SIZE, SEED = N, 3  # args (conftest.py)


def test_products_are_tall_and_skinny(sample, args) -> None:
    a, q, _ = args
    assert a.shape == (N, N) and q.shape == (N, 4)
    sources = [op.source for op in sample.func.ops.values()]
    assert any("a @ q" in s for s in sources) and any("q.T @ aq" in s for s in sources)


def test_float64_run_finds_the_leading_eigenvalues(sample, args) -> None:
    """Ritz values converge from the top (value j at the rate (lambda_{p+1} / lambda_j)^2 per
    iteration): the largest to 1e-6 and the next to 1e-4 within the sample's iterations."""
    values, _ = reference_outputs(sample.func.py_func, args)
    exact = np.linalg.eigvalsh(args[0].astype(np.float64))[::-1]
    np.testing.assert_allclose(values[0], exact[0], rtol=1e-6)
    np.testing.assert_allclose(values[1], exact[1], rtol=1e-4)


def test_checks_pass_on_the_float64_run_and_fail_on_wrong_results(sample, args) -> None:
    reference = reference_outputs(sample.func.py_func, args)
    assert all(check.ok for check in sample.checks(args, reference, reference))
    values, vectors = reference
    shifted = (values + 1e-3 * values[0], vectors)
    skewed = (values, vectors + 1e-2)
    for wrong in (shifted, skewed):
        assert not all(check.ok for check in sample.checks(args, wrong, reference))

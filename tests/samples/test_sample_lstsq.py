"""The least-squares sample: its products have the memory-bound shapes it is there for, its
float64 run is the least-squares solution, and its checks can fail."""

from __future__ import annotations

import numpy as np

from mixpert.metrics import reference_outputs

N = 4096  # the ci size: X is 4096 x 4, Y 4096 x 4
SIZE, SEED = N, 3  # args (conftest.py)


def test_products_are_the_long_k_and_thin_shapes(sample, args) -> None:
    x, y, _ = args
    assert x.shape == (N, 4) and y.shape == (N, 4)
    sources = [op.source for op in sample.func.ops.values()]
    assert any("x.T @ x" in s for s in sources) and any("x @ w" in s for s in sources)
    assert sum("x.T @ r" in s for s in sources) == 1  # the sweeps' correction, in the loop
    assert any("r.T @ r" in s for s in sources)  # the residual norms


def test_float64_run_is_numpys_least_squares_solution(sample) -> None:
    """The normal equations with refinement, run in float64, give NumPy's least-squares
    coefficients and their residual norms."""
    rng = np.random.default_rng(5)
    x, y, sweeps = sample.make_inputs(np, rng, N)
    w_true = np.linalg.lstsq(x.astype(np.float64), y.astype(np.float64), rcond=None)[0]
    w, norms = reference_outputs(sample.func.py_func, (x, y, sweeps))
    np.testing.assert_allclose(w, w_true, rtol=0, atol=1e-10)
    np.testing.assert_allclose(norms, np.linalg.norm(y - x @ w_true, axis=0), rtol=1e-10)


def test_checks_pass_on_the_float64_run_and_fail_on_wrong_results(sample, args) -> None:
    reference = reference_outputs(sample.func.py_func, args)
    assert all(check.ok for check in sample.checks(args, reference, reference))
    w, norms = reference
    for wrong in ((w + 1e-2, norms), (w, norms * 1.01)):
        assert not all(check.ok for check in sample.checks(args, wrong, reference))

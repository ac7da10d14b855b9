"""NumPy's scalar rules (NEP 50) under @mixpert.jit: Python literals do not widen float32."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert

RNG = np.random.default_rng(9)
X = RNG.standard_normal((12, 12)).astype(np.float32)
V = RNG.standard_normal(12).astype(np.float32)


def forms(x, v):
    return (
        np.maximum(x @ x, 0.0),
        x * 0.5,
        v + 1e-8,
        2 * (x @ x),
        -1.5 * x,
        x**2,
        x**0.5 * 0.0 + np.abs(x),
        np.where(x > 0, x, 0.0),
        np.clip(x, -1.0, 1.0),
        x / 3,
        1.0 - x,
        np.sqrt(x * x + 1),
        np.exp(-0.5 * x),
    )


def test_output_dtypes_and_values_equal_numpys() -> None:
    ours = mixpert.jit(forms)(X, V)
    ref = forms(X, V)
    for got, want in zip(ours, ref, strict=True):
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_the_readme_mlp_compiles_and_stays_float32() -> None:
    def mlp(x, w1, w2, w3):
        h = np.maximum(x @ w1, 0.0)
        h = np.maximum(h @ w2, 0.0)
        return h @ w3

    f = mixpert.jit(mlp)
    out = f(X, X, X, X[:, :4].copy())
    assert out.dtype == np.float32
    with mixpert.record() as calls:
        f(X, X, X, X[:, :4].copy())
    assert len(calls) == 3  # every product reached the runtime (none went float64)


def test_other_dtypes_keep_numbas_and_numpys_rules() -> None:
    def scale(x):
        return x * 0.5, x + 1

    x64, ints = X.astype(np.float64), np.arange(6)
    assert [r.dtype for r in mixpert.jit(scale)(x64)] == [np.float64, np.float64]
    assert [r.dtype for r in mixpert.jit(scale)(ints)] == [np.float64, np.int64]


def test_numbas_rules_on_request() -> None:
    def half(x):
        return x * 0.5

    assert mixpert.jit(half, scalar_rules="numba")(X).dtype == np.float64
    with pytest.raises(ValueError, match="scalar_rules"):
        mixpert.jit(half, scalar_rules="nep50")


def test_python_float_arguments_of_a_float32_function_stay_float32(tmp_path) -> None:
    def sgd(w, x, lr):
        return w - lr * (x.T @ (x @ w))

    w, x = X[:, :3].copy(), X
    assert mixpert.jit(sgd)(w, x, 0.1).dtype == np.float32 == sgd(w, x, 0.1).dtype
    assert mixpert.jit(sgd)(w.astype(np.float64), x.astype(np.float64), 0.1).dtype == np.float64
    path = tmp_path / "p.json"
    plan = mixpert.tune(sgd, (w, x, 0.1), tol=1e-4)
    plan.save(path)
    again = mixpert.jit(sgd, tol=1e-4, plan_file=path, on_missing="raise")
    assert again(w, x, 0.1).dtype == np.float32  # the plan matches the caller's arguments

"""A product Numba's types refuse fails the same way whether or not the function tunes: the
tuner's float64 run of the plain Python function comes after the function is compiled, so
NumPy's error for that run (``h @ 2.0``: "operand 1 does not have enough dimensions") is never
what the user sees, nor a tuning warning before it."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import mixpert

X = np.ones((4, 3), np.float32)
W = np.ones((3, 3), np.float32)


def scaled(x, w):
    h = x @ w
    return h @ 2.0  # meant: h * 2.0


def refusal(call) -> mixpert.ProductTypingError:
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with pytest.raises(mixpert.ProductTypingError) as caught:
            call()
    assert [str(w.message) for w in shown] == []  # nothing tuned, nothing to warn about
    return caught.value


def test_tol_gives_the_error_an_untuned_call_gives(tmp_path: Path) -> None:
    untuned = refusal(lambda: mixpert.jit(scaled)(X, W))
    plan_file = tmp_path / "scaled.plan.json"
    tuned = mixpert.jit(scaled, tol=1e-5, plan_file=plan_file)
    error = refusal(lambda: tuned(X, W))
    assert str(error) == str(untuned)
    message = str(error)
    assert "scaled:1" in message and "use *" in message and "enough dimensions" not in message
    assert tuned.plan_book.plans == [] and not plan_file.exists()  # no plan from a failed call


def test_mixpert_tune_and_inspect_give_it_too() -> None:
    untuned = refusal(lambda: mixpert.jit(scaled)(X, W))
    assert str(refusal(lambda: mixpert.tune(scaled, (X, W), tol=1e-5))) == str(untuned)
    tol_function = mixpert.jit(scaled, tol=1e-5)
    assert str(refusal(lambda: mixpert.inspect(tol_function, X, W))) == str(untuned)

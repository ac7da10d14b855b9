"""The mlp sample: the emulated network is the plain NumPy network, and its checks can fail."""

from __future__ import annotations

import numpy as np
import pytest

from mixpert.metrics import output_error, reference_outputs

WIDTH = 32
SIZE, SEED = WIDTH, 3  # args (conftest.py)


def forward(x, w1, b1, w2, b2, w3, b3):
    """The same network written independently, in float64."""
    x, w1, b1, w2, b2, w3, b3 = (
        np.asarray(a, dtype=np.float64) for a in (x, w1, b1, w2, b2, w3, b3)
    )
    h = np.dot(x, w1) + b1
    h[h < 0] = 0
    h = np.dot(h, w2) + b2
    h[h < 0] = 0
    return np.dot(h, w3) + b3


def test_inputs_have_the_documented_shapes(args) -> None:
    x, w1, b1, *_ = args
    assert x.shape == (4 * WIDTH, WIDTH) and w1.shape == (WIDTH, WIDTH) and b1.shape == (WIDTH,)
    assert all(a.dtype == np.float32 for a in args)


def test_all_fp32_plan_is_plain_numpy(sample, args, at_level) -> None:
    assert len(sample.func.ops) == 3  # one op per layer
    got = at_level("fp32")(*args)
    plain = sample.func.py_func(*args)  # plain NumPy on the float32 arrays
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)


def test_float64_reference_is_the_network(sample, args) -> None:
    np.testing.assert_allclose(
        reference_outputs(sample.func.py_func, args), forward(*args), rtol=1e-12, atol=1e-12
    )


def test_he_init_keeps_the_output_scale(sample) -> None:
    """He-initialised layers neither blow up nor vanish: logits stay O(1) even when wide."""
    args = sample.make_inputs(np, np.random.default_rng(4), 256)
    y = forward(*args)
    assert 0.3 < y.std() < 3.0
    assert 0.2 < (y > 0).mean() < 0.8


@pytest.mark.parametrize("level, bound", [("I", 1e-4 * 1.5), ("IV", 1e-6), ("V", 1e-7)])
def test_every_layer_at_one_level_is_as_accurate_as_the_level(args, at_level, level, bound) -> None:
    got = at_level(level)(*args)
    assert output_error(got, forward(*args)) < bound
    assert (got.argmax(axis=1) == forward(*args).argmax(axis=1)).all()


def test_checks_pass_on_the_reference_and_catch_damage(sample, args) -> None:
    ref = forward(*args)
    good = ref.astype(np.float32)
    assert all(c.ok for c in sample.checks(args, good, ref))
    nan = good.copy()
    nan[3, 5] = np.nan
    one_bad_row = good.copy()
    one_bad_row[7] *= 1.01  # one row 1% off: diluted in Eq. 10, caught per row
    shuffled = good[:, ::-1].copy()  # every row's top-1 moves
    for damaged, failing in [(nan, 0), (one_bad_row, 2), (shuffled, 1)]:
        results = sample.checks(args, damaged, ref)
        assert not results[failing].ok, results[failing]

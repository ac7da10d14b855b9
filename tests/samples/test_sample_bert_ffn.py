"""The bert_ffn sample: it is BERT's feed-forward block, tokens are independent, LayerNorm holds."""

from __future__ import annotations

import numpy as np
import pytest

from mixpert.metrics import output_error, reference_outputs

SIZE, SEED = 24, 5  # args (conftest.py): 24 tokens, a model 96 wide, 384 inside


def layer_norm(y, gamma, beta, eps=1e-12):
    return (
        gamma * (y - y.mean(axis=1, keepdims=True)) / np.sqrt(y.var(axis=1, keepdims=True) + eps)
        + beta
    )


def ffn(x, w1, b1, w2, b2, gamma, beta):
    """The block written independently in float64 (gelu_new of BERT / GPT-2)."""
    x, w1, b1, w2, b2, gamma, beta = (np.float64(a) for a in (x, w1, b1, w2, b2, gamma, beta))
    u = np.dot(x, w1) + b1
    h = 0.5 * u * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (u + 0.044715 * np.power(u, 3))))
    return layer_norm(np.dot(h, w2) + b2 + x, gamma, beta)


def test_bert_large_shapes_from_256_tokens(sample) -> None:
    x, w1, b1, w2, b2, gamma, beta = sample.make_inputs(np, np.random.default_rng(0), 256)
    assert (x.shape, w1.shape, w2.shape) == ((256, 1024), (1024, 4096), (4096, 1024))
    assert b1.shape == (4096,) and b2.shape == gamma.shape == beta.shape == (1024,)
    assert len(sample.func.ops) == 2  # up- and down-projection


def test_float64_reference_is_the_block(sample, args) -> None:
    np.testing.assert_allclose(
        reference_outputs(sample.func.py_func, args), ffn(*args), rtol=1e-10, atol=1e-10
    )


def test_all_fp32_plan_is_plain_numpy(sample, args, at_level) -> None:
    got = at_level("fp32")(*args)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, sample.func.py_func(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", ["I", "IV"])
def test_output_rows_are_layer_normalised(args, at_level, level) -> None:
    y = at_level(level)(*args).astype(np.float64)
    gamma, beta = args[5].astype(np.float64), args[6].astype(np.float64)
    z = (y - beta) / gamma
    np.testing.assert_allclose(z.mean(axis=1), 0.0, atol=1e-5)
    np.testing.assert_allclose(z.var(axis=1), 1.0, atol=1e-4)
    assert output_error(y, ffn(*args)) < {"I": 1e-4, "IV": 1e-6}[level]


def test_without_the_branch_it_is_layer_norm_of_the_residual(args, at_level) -> None:
    x, w1, b1, w2, b2, gamma, beta = args
    zero_w2, zero_b2 = np.zeros_like(w2), np.zeros_like(b2)
    y = at_level("IV")(x, w1, b1, zero_w2, zero_b2, gamma, beta)
    np.testing.assert_allclose(y, layer_norm(np.float64(x), gamma, beta), rtol=1e-5, atol=1e-5)


def test_the_branch_matters(sample, args) -> None:
    """The weights' scale makes the feed-forward branch as large as the residual."""
    x, w1, b1, w2, b2, gamma, beta = args
    without = layer_norm(np.float64(x), gamma, beta)
    assert output_error(without, ffn(*args)) > 0.3


def test_tokens_are_independent(args, at_level) -> None:
    """Permuting tokens permutes the output rows (the emulation scales per row: exact)."""
    x, *rest = args
    perm = np.random.default_rng(6).permutation(x.shape[0])
    f = at_level("IV")
    np.testing.assert_allclose(f(x[perm].copy(), *rest), f(x, *rest)[perm], rtol=1e-6, atol=1e-6)


def test_checks_pass_on_the_reference_and_catch_damage(sample, args) -> None:
    ref = ffn(*args)
    good = ref.astype(np.float32)
    assert all(c.ok for c in sample.checks(args, good, ref))
    nan = good.copy()
    nan[2, 3] = np.inf
    shifted = good.copy()
    shifted[4] += 0.01 * args[5]  # one token's normalised mean moves by 0.01
    stretched = good.copy()
    stretched[6] = args[6] + 1.01 * (stretched[6] - args[6])  # its variance by 2%
    for damaged, failing in [(nan, 0), (shifted, 1), (stretched, 2), (stretched, 3)]:
        results = sample.checks(args, damaged, ref)
        assert not results[failing].ok, results[failing]

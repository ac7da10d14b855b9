"""The attention sample: multi-head self-attention, heads batched through 4-D stack products."""

from __future__ import annotations

import numpy as np

import mixpert

SEQ = 16  # batch 2, d = 128, 4 heads of 32
SIZE, SEED = SEQ, 5  # args (conftest.py)


def multi_head(x, wq, wk, wv, wo, heads):
    """Self-attention written independently in float64, head by head, softmax row by row."""
    x, wq, wk, wv, wo = (np.float64(a) for a in (x, wq, wk, wv, wo))
    b, s, d = x.shape
    dh = d // heads
    out = np.empty_like(x)
    for i in range(b):
        q, k, v = x[i] @ wq, x[i] @ wk, x[i] @ wv
        parts = []
        for h in range(heads):
            cols = slice(h * dh, (h + 1) * dh)
            scores = q[:, cols] @ k[:, cols].T / np.sqrt(dh)
            p = np.exp(scores - scores.max(axis=1, keepdims=True))
            parts.append((p / p.sum(axis=1, keepdims=True)) @ v[:, cols])
        out[i] = np.concatenate(parts, axis=1) @ wo + x[i]
    return out


def test_shapes_and_the_six_ops(sample, args) -> None:
    x, wq, *_ = args
    assert x.shape == (2, SEQ, 128) and wq.shape == (128, 128)
    assert len(sample.func.ops) == 6
    x, *_ = sample.make_inputs(np, np.random.default_rng(0), 1024)
    assert x.shape == (16, 1024, 1024)


def test_float64_run_is_multi_head_attention(sample, args) -> None:
    got = sample.func.py_func(*(a.astype(np.float64) for a in args))
    np.testing.assert_allclose(got, multi_head(*args, heads=4), rtol=1e-12, atol=1e-12)


def test_every_op_runs_through_the_runtime_at_its_level(args, at_level) -> None:
    f = at_level("IV")
    with mixpert.record() as calls:
        y = f(*args)
    # 4 projections fold their stack into one product each; scores and contexts: all their
    # (batch, head) pairs in one call each
    assert len(calls) == 6 and {c.level for c in calls} == {"IV"}
    pairs = [c for c in calls if c.k in (32, SEQ) and c.m == 2 * 4 * SEQ]
    assert len(pairs) == 2
    ref = multi_head(*args, heads=4)
    assert y.dtype == np.float32
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-6

"""bert_ffn: the feed-forward block of a BERT-large encoder layer, with its residual LayerNorm.

    h = GELU(x W1 + b1)                    (tanh approximation, as BERT's gelu_new)
    y = LayerNorm(h W2 + b2 + x)           (per token over the 1024 features; eps = 1e-12)

x holds one 1024-feature hidden state per token; W1 is 1024 x 4096 and W2 4096 x 1024. Two ops:
the up- and the down-projection. The weights are scaled by 1 / sqrt(fan_in) (as trained BERT
weights roughly are), so the feed-forward branch and the residual are of one size and the output
depends on the products, not on x alone.

tol = 1e-4: hidden states feed the next layer; BERT is trained and served in bf16/fp16/tf32
(errors of 1e-3 to 1e-2) without loss of accuracy, so float32-grade products are not needed;
1e-4 keeps a tenfold margin below that.

size = tokens (e.g. sequences x sequence length): x is tokens x 1024. At the gpu size (131072
tokens, 256 sequences of 512) the GEMMs are 131072 x 1024 x 4096 and 131072 x 4096 x 1024.
Below 256 tokens (the ci size only) the model narrows to 4 x tokens features, 16 x tokens
inside, so that the CPU test runs in seconds.
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample, row_relative_errors, to_host

HIDDEN = 1024
GELU_C = float(np.sqrt(2.0 / np.pi))


@mixpert.jit(tol=1e-4)
def bert_ffn(x, w1, b1, w2, b2, gamma, beta):
    t = x.dtype.type  # typed constants: Python floats would make Numba compute in float64
    u = x @ w1 + b1
    h = t(0.5) * u * (t(1.0) + np.tanh(t(GELU_C) * (u + t(0.044715) * u * u * u)))
    y = h @ w2 + b2 + x
    n = y.shape[1]
    mean = y.sum(axis=1) / n
    d = y - mean[:, None]
    var = (d * d).sum(axis=1) / n
    return gamma * (d / np.sqrt(var + t(1e-12))[:, None]) + beta


def make_inputs(xp, rng, tokens):
    """Standard-normal hidden states, 1 / sqrt(fan_in) weights, small biases, gamma ~ 1."""
    hidden = min(HIDDEN, 4 * tokens)  # BERT-large from 256 tokens up; narrower only for ci
    inner = 4 * hidden

    def normal(shape, scale):
        return xp.float32(scale) * rng.standard_normal(shape, dtype=xp.float32)

    x = normal((tokens, hidden), 1.0)
    w1 = normal((hidden, inner), 1.0 / np.sqrt(hidden))
    b1 = normal((inner,), 0.1)
    w2 = normal((inner, hidden), 1.0 / np.sqrt(inner))
    b2 = normal((hidden,), 0.1)
    gamma = xp.float32(1.0) + normal((hidden,), 0.1)
    beta = normal((hidden,), 0.1)
    return x, w1, b1, w2, b2, gamma, beta


def normalized_rows(y: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """LayerNorm's output before its affine map, (y - beta) / gamma, in float64."""
    return (y.astype(np.float64) - beta) / gamma


def checks(args, outputs, reference):
    """Finite; every token normalised (mean 0, variance 1); no token far worse than average."""
    y, ref = to_host(outputs), to_host(reference).astype(np.float64)
    gamma, beta = to_host(args[5]).astype(np.float64), to_host(args[6]).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite outputs fail, quietly
        z = normalized_rows(y, gamma, beta)
        row_error = row_relative_errors(y, ref)
        mean, var = z.mean(axis=1), z.var(axis=1)
    return [
        Check("non-finite outputs (fraction)", float((~np.isfinite(y)).mean()), 0.0),
        Check("largest |token mean| after LayerNorm", float(np.abs(mean).max()), 1e-4),
        Check("largest |token variance - 1|", float(np.abs(var - 1.0).max()), 1e-3),
        Check("worst token's relative error / tol", float(row_error.max()) / bert_ffn.tol, 10.0),
    ]


SAMPLE = Sample(
    func=bert_ffn,
    make_inputs=make_inputs,
    sizes={"ci": 32, "demo": 256, "gpu": 131072},
    size_doc="tokens: x is tokens x 1024 float32, W1 1024 x 4096, W2 4096 x 1024 (gpu: 512 MiB x)",
    checks=checks,
)

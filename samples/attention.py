"""attention: multi-head self-attention with the heads batched, as a transformer layer runs it.

    Q, K, V = x Wq, x Wk, x Wv                 (batch x seq x d: a stack times shared weights)
    S = Q_h K_h^T / sqrt(d_h)                  (batch x heads stacks of seq x seq)
    P = softmax(S) along the keys, C_h = P V_h (batch x heads stacks of seq x d_h)
    y = concat_h(C_h) Wo + x                   (the output projection and the residual)

Six ops: the four projections fold each stack into one product (``runtime.batched``), the score
and context products are stacks of 4-D operands (batch x heads pairs), which Numba alone rejects
and ``@mixpert.jit`` compiles with NumPy's ``np.matmul`` semantics. The softmax subtracts the
largest score of the whole batch (Numba has no ``max(axis=)``): softmax does not change, and with
scores of order one no row underflows.

tol = 1e-5: attention outputs feed the next layer like bert_ffn's, but the softmax amplifies
score errors exponentially; 1e-5 keeps the probabilities to ~1e-6.

size = seq (tokens per sequence); batch 8, d = 512, 8 heads of 64 (gpu: seq 1024, batch 16,
d 1024, 16 heads); below 64 (the ci size) d = 8 seq and 4 heads, so that the CPU test runs in
seconds.
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample, row_relative_errors, to_host

HEAD_DIM = 64


@mixpert.jit(tol=1e-5)
def attention(x, wq, wk, wv, wo):
    t = x.dtype.type
    b, s, d = x.shape
    h = d // min(HEAD_DIM, d // 4)  # heads
    dh = d // h
    # .copy(): a C-contiguous copy in NumPy, Numba and CuPy alike (np.ascontiguousarray would
    # turn CuPy arrays into NumPy ones)
    q = (x @ wq).reshape((b, s, h, dh)).transpose((0, 2, 1, 3)).copy()
    k = (x @ wk).reshape((b, s, h, dh)).transpose((0, 2, 3, 1)).copy()
    v = (x @ wv).reshape((b, s, h, dh)).transpose((0, 2, 1, 3)).copy()
    scores = (q @ k) * t(1.0 / np.sqrt(dh))  # (b, h, s, s)
    e = np.exp(scores - scores.max())
    p = e / e.sum(axis=3).reshape((b, h, s, 1))
    context = (p @ v).transpose((0, 2, 1, 3)).copy().reshape((b, s, d))
    return context @ wo + x


def make_inputs(xp, rng, seq):
    """Standard-normal tokens, 1 / sqrt(d) projections (scores of order one)."""
    batch, d = (8, 512) if seq >= 64 else (2, 8 * seq)
    if seq >= 1024:
        batch, d = 16, 1024

    def normal(shape, scale):
        return xp.float32(scale) * rng.standard_normal(shape, dtype=xp.float32)

    x = normal((batch, seq, d), 1.0)
    wq, wk, wv, wo = (normal((d, d), 1.0 / np.sqrt(d)) for _ in range(4))
    return x, wq, wk, wv, wo


def checks(args, outputs, reference):
    """Finite; no token far worse than average."""
    y, ref = to_host(outputs), to_host(reference)
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite outputs fail, quietly
        token_error = row_relative_errors(y, ref)
    return [
        Check("non-finite outputs (fraction)", float((~np.isfinite(y)).mean()), 0.0),
        Check("worst token's relative error / tol", float(token_error.max()) / attention.tol, 10.0),
    ]


SAMPLE = Sample(
    func=attention,
    make_inputs=make_inputs,
    sizes={"ci": 16, "demo": 128, "gpu": 1024},
    size_doc="seq: x is batch x seq x d float32 (ci: 2 x 16 x 128; gpu: 16 x 1024 x 1024)",
    checks=checks,
)

"""lstsq: a multi-output linear least-squares fit on a tall design matrix, by the normal
equations with refinement sweeps.

    G = X^T X, W = G^-1 X^T Y            (p x n x p and p x n x q products: a very long k)
    R = Y - X W, W += G^-1 X^T R         (each sweep: an n x p x q product with k and n within
                                          a chunk, and a p x n x q one)
    W, sqrt(diag(R^T R))                 (the coefficients, each output's residual norm: a
                                          q x n x q product, summed by the runtime rather
                                          than by a float32 reduction over n rows)

Its products are the memory-bound shapes of the TSM2X seed: X is read once per product and
each read does only 2 p or 2 q flops per entry. On the GPU level "auto" runs X W on
fp32-ordered's thin kernel (k and n within a chunk), where cuBLAS leaves bandwidth unused, and
the p x n x p and p x n x q products on its split-k kernel (k of 2^18 and more); on the CPU the
ops are native float32.

tol = 1e-5: the coefficients W are the result. The normal equations square X's condition number
(below 4 here, so G's is below 16), and each sweep corrects W from the residual of the last, so
float32-grade products give W to a few units of float32 rounding times cond(G).

Data: X = Z M with Z standard normal and M a fixed p x p mixing of singular values 1..4 (features
correlated as real regressors are), W_true standard normal, Y = X W_true + 0.01 noise.

size = n rows: X is n x p, Y n x q, p = q = 16 (p = q = 4 below n = 65536), 2 sweeps; gpu
n = 2^21 (X and Y 128 MiB each), products 16 x 2097152 x 16 and 2097152 x 16 x 16.
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample, to_host

SWEEPS = 2
NOISE = 0.01


@mixpert.jit(tol=1e-5)
def lstsq(x, y, sweeps):
    gram = x.T @ x
    w = np.linalg.solve(gram, x.T @ y)
    for _ in range(sweeps):
        r = y - x @ w
        w = w + np.linalg.solve(gram, x.T @ r)
    r = y - x @ w
    return w, np.sqrt(np.diag(r.T @ r))  # the coefficients, each output's residual norm


def make_inputs(xp, rng, n):
    p = q = 16 if n >= 65536 else 4
    singular = np.linspace(1.0, 4.0, p)
    basis = np.linalg.qr(np.random.default_rng(p).standard_normal((p, p)))[0]
    mixing = xp.asarray((basis * singular) @ basis.T, dtype=xp.float32)
    x = rng.standard_normal((n, p), dtype=xp.float32) @ mixing
    w_true = rng.standard_normal((p, q), dtype=xp.float32)
    y = x @ w_true + xp.float32(NOISE) * rng.standard_normal((n, q), dtype=xp.float32)
    return x, y, SWEEPS


def checks(args, outputs, reference):
    """Coefficients close to float64's, the residual orthogonal to the features (the normal
    equations hold, residual recomputed in float64) and at the noise level, and the residual
    norms returned are that residual's."""
    x, y = to_host(args[0]).astype(np.float64), to_host(args[1]).astype(np.float64)
    w, norms = to_host(outputs[0]).astype(np.float64), to_host(outputs[1]).astype(np.float64)
    w64 = to_host(reference[0])
    r = y - x @ w
    scale = np.linalg.norm(x, axis=0).max() * np.linalg.norm(r, axis=0).max()
    rms = np.sqrt(np.mean(r**2))
    return [
        Check("worst coefficient error / largest", np.abs(w - w64).max() / np.abs(w64).max(), 1e-5),
        # (float32's rounding of an exact W alone gives ~5e-5: R is at the noise level)
        Check("normal equations: max |X^T R| / (|X| |R|)", np.abs(x.T @ r).max() / scale, 1e-3),
        Check("residual RMS / noise", float(rms / NOISE), 1.1),
        Check(
            "residual norms: worst relative error",
            float((np.abs(norms - np.linalg.norm(r, axis=0)) / np.linalg.norm(r, axis=0)).max()),
            1e-3,
        ),
    ]


SAMPLE = Sample(
    func=lstsq,
    make_inputs=make_inputs,
    sizes={"ci": 4096, "demo": 65536, "gpu": 1 << 21},
    size_doc="n: X is n x p, Y n x q float32, p = q = 16 (ci: 4096 rows, p = q = 4)",
    checks=checks,
)

"""subspace: the p largest eigenpairs of a symmetric matrix by subspace iteration.

    Y = A Q, Q R = qr(Y)         (iterations: an n x n x p product, tall-and-skinny)
    T = Q^T (A Q)                 (Rayleigh-Ritz: a p x n x p product, long k)
    eigenvalues of T, and Q V     (the Ritz values; the leading p / 4 Ritz vectors, signed)

Its products are the memory-bound shapes of the TSM2X seed: A is read once per iteration and
each read does only 2p flops per entry, so on the GPU they are where cuBLAS leaves bandwidth
unused rather than where INT8 tensor cores win.

tol = 1e-5: the eigenvalues and the subspace are the results; eigenvalue errors scale with the
product's error (Weyl), so float32-grade products keep them to about 1e-6 of the largest.

Data: A = U diag(0.8^j) U^T with random orthonormal U: a covariance whose variance decays
geometrically along its principal directions, as PCA sees it, so the leading eigenvalues are
well separated and converge in a dozen iterations.

size = n: A is n x n, p = 32 (p = 4 below n = 256), 12 iterations; gpu n = 16384 (A 1 GiB),
products 16384 x 16384 x 32.
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample, to_host

ITERATIONS = 12
DECAY = 0.8  # eigenvalue j of A: DECAY**j


@mixpert.jit(tol=1e-5)
def subspace(a, q, iterations):
    for _ in range(iterations):
        q = np.linalg.qr(a @ q)[0].copy()  # .copy(): C order, one array type across the loop
    aq = a @ q
    t = q.T @ aq
    t = (t + t.T) * t.dtype.type(0.5)  # symmetric in exact arithmetic; make it so in float32
    values, vectors = np.linalg.eigh(t)
    lead = max(1, q.shape[1] // 4)  # the converged Ritz vectors (the trailing ones still turn)
    ritz = q @ vectors[:, ::-1][:, :lead].copy()
    for j in range(lead):  # eigenvectors are defined up to sign: largest entry positive
        column = ritz[:, j]
        if column[np.argmax(np.abs(column))] < 0:
            ritz[:, j] = -column
    return values[::-1].copy(), ritz


def make_inputs(xp, rng, n):
    p = 32 if n >= 256 else 4
    u = xp.linalg.qr(rng.standard_normal((n, n), dtype=xp.float32))[0]  # random eigenvectors
    values = xp.asarray(DECAY ** np.arange(n), dtype=xp.float32)
    a = (u * values) @ u.T
    a = (a + a.T) * xp.float32(0.5)  # symmetric to the last bit
    q = rng.standard_normal((n, p), dtype=xp.float32)
    return a, q, ITERATIONS


def checks(args, outputs, reference):
    """Eigenvalues close to float64's, orthonormal Ritz vectors, converged leading pairs."""
    values, vectors = to_host(outputs[0]), to_host(outputs[1]).astype(np.float64)
    values64 = to_host(reference[0])
    a = to_host(args[0]).astype(np.float64)
    top = float(abs(values64).max())
    v, lam = vectors, values[: vectors.shape[1]].astype(np.float64)  # the leading pairs
    residual = float(np.linalg.norm(a @ v - v * lam, axis=0).max()) / top
    gram = vectors.T @ vectors - np.eye(vectors.shape[1])
    return [
        Check(
            "worst eigenvalue error / largest eigenvalue",
            float(abs(values - values64).max()) / top,
            1e-5,
        ),
        Check("orthonormality: max |V^T V - I|", float(abs(gram).max()), 1e-4),
        Check("leading residuals ||A v - lambda v|| / lambda_1", residual, 1e-3),
    ]


SAMPLE = Sample(
    func=subspace,
    make_inputs=make_inputs,
    sizes={"ci": 128, "demo": 1024, "gpu": 16384},
    size_doc="n: A is n x n float32, p = 32 starting vectors (ci: 128 x 128, p = 4)",
    checks=checks,
)

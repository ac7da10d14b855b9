"""Functions the tuner tests share: a ReLU MLP, a blocked Cholesky and a k-means step."""

from __future__ import annotations

import numpy as np


def mlp(x, w1, w2, w3):  # 3 ops, a chain
    h = np.maximum(x @ w1, np.float32(0))
    h = np.maximum(h @ w2, np.float32(0))
    return h @ w3


def mlp_inputs(rng: np.random.Generator, n: int = 64) -> tuple[np.ndarray, ...]:
    x = rng.standard_normal((n, n)).astype(np.float32)
    ws = [(rng.standard_normal((n, n)) * np.sqrt(2.0 / n)).astype(np.float32) for _ in range(3)]
    return (x, *ws)


def cholesky3(a, b):  # right-looking blocked Cholesky, 3 x 3 blocks of size b: 4 ops
    n = a.shape[0]
    l11 = np.linalg.cholesky(a[:b, :b])
    panel = a[b:, :b] @ np.linalg.inv(l11).T  # op 1: the column panel below l11
    s = a[b:, b:] - panel @ panel.T  # op 2: trailing update
    l22 = np.linalg.cholesky(s[:b, :b])
    l32 = s[b:, :b] @ np.linalg.inv(l22).T  # op 3
    s33 = s[b:, b:] - l32 @ l32.T  # op 4
    l33 = np.linalg.cholesky(s33)
    out = np.zeros_like(a)
    out[:b, :b] = l11
    out[b:, :b] = panel
    out[b : 2 * b, b : 2 * b] = l22
    out[2 * b :, b : 2 * b] = l32
    out[2 * b : n, 2 * b : n] = l33
    return out


def spd_inputs(rng: np.random.Generator, n: int = 96) -> tuple[np.ndarray, int]:
    m = rng.standard_normal((n, n))
    return (m @ m.T / n + np.eye(n)).astype(np.float32), n // 3


def subspace_iteration(a, q, steps):  # 2 ops in a loop: block power method with Rayleigh-Ritz
    for _ in range(steps):
        z = a @ q
        q, _ = np.linalg.qr(z)
    return q.T @ (a @ q)


def subspace_inputs(rng: np.random.Generator, n: int = 192, block: int = 8):
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    spectrum = np.exp(-np.arange(n) / (n / 8)) * rng.uniform(0.5, 1.5, n)
    a = ((u * spectrum) @ u.T).astype(np.float32)
    return a, rng.standard_normal((n, block)).astype(np.float32), 6


def rbf_predict(x, centres, weights, gamma):  # kernel regression: distances by GEMM
    t = x.dtype.type
    sq = (x * x).sum(axis=1).reshape(-1, 1) + (centres * centres).sum(axis=1).reshape(1, -1)
    d2 = np.maximum(sq - t(2) * (x @ centres.T), t(0))
    return np.exp(-t(gamma) * d2) @ weights


def rbf_inputs(rng: np.random.Generator, n: int = 256, d: int = 32, centres: int = 128):
    x = rng.standard_normal((n, d)).astype(np.float32)
    c = rng.standard_normal((centres, d)).astype(np.float32)
    w = rng.standard_normal((centres, 4)).astype(np.float32)
    return x, c, w, 1.0 / d


def kmeans_step(x, c):  # 1 op feeding a decision (argmin), then element loops
    """A k-means step: squared distances through x @ c.T, each point to the nearest centre
    (argmin), then each centre to the mean of its points."""
    d = (x * x).sum(axis=1).reshape(-1, 1) - 2.0 * (x @ c.T) + (c * c).sum(axis=1)
    labels = d.argmin(axis=1)
    new = np.zeros_like(c)
    counts = np.zeros(c.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        new[labels[i]] += x[i]
        counts[labels[i]] += 1
    for j in range(c.shape[0]):
        if counts[j] > 0:
            new[j] /= counts[j]
    return new

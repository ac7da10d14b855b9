"""kmeans: Lloyd's k-means clustering of Gaussian blobs, a fixed number of iterations.

Each iteration assigns every point to its nearest centroid through the distance GEMM,
||x||^2 - 2 x c^T + ||c||^2 (labels = argmin per row), then moves every centroid to the mean of
its points through a second GEMM, onehot^T x (onehot: the N x K assignment matrix, built from
the distances; a point exactly tied between two centroids would count in both); a cluster left
empty keeps its centroid. The GEMMs are N x d x K and K x N x d; the rest is elementwise work
and one argmin on the N x K distance matrix.

tol = 1e-4: what a k-means user keeps is the partition (checked: labels as float64's) and the
centroids as cluster summaries, which estimate the blob means only to the sampling error
spread / sqrt(points per cluster), a few percent here; GPU k-means (FAISS) offers fp16 for
that reason. 1e-4 keeps the centroids to four digits, and the inertia far closer (it is flat at
the optimum, so centroid errors enter it squared).

size = K: K clusters of 128 points each (N = 128 K) in d = K dimensions, started from one point
of each blob (the seeding k-means++ finds on well-separated blobs). gpu size K = 2048: x is
262144 x 2048 (2 GiB), the distance and one-hot matrices 262144 x 2048 (2 GiB each).
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample

ITERATIONS = 10
POINTS_PER_CLUSTER = 128
SPREAD = 0.5  # blob standard deviation per coordinate; the centres are N(0, 1)


@mixpert.jit(tol=1e-4)
def kmeans(x, centroids, iterations):
    two = x.dtype.type(2)  # a typed constant: a Python 2.0 would make Numba compute in float64
    c = centroids.copy()
    xx = (x * x).sum(axis=1)
    for _ in range(iterations):
        d = xx[:, None] - two * (x @ c.T) + (c * c).sum(axis=1)
        labels = np.argmin(d, axis=1)
        nearest = np.take_along_axis(d, labels[:, None], axis=1)
        onehot = (d <= nearest).astype(x.dtype)
        sums = onehot.T @ x
        counts = onehot.sum(axis=0)
        safe = counts + (counts == 0)  # 1 where a cluster is empty: no division by zero
        c = np.where(counts[:, None] > 0, sums / safe[:, None], c)
    return c, labels


def blobs(xp, rng, k: int, d: int, per_cluster: int, spread: float):
    """(x, true labels, centres): k blobs of per_cluster points; point i is in blob i % k."""
    centres = rng.standard_normal((k, d), dtype=xp.float32)
    labels = xp.arange(k * per_cluster) % k
    noise = rng.standard_normal((k * per_cluster, d), dtype=xp.float32)
    return centres[labels] + xp.float32(spread) * noise, labels, centres


def make_inputs(xp, rng, k):
    x, _, _ = blobs(xp, rng, k, k, POINTS_PER_CLUSTER, SPREAD)
    return x, x[:k].copy(), ITERATIONS  # the first k points: one from each blob


def inertia(x, centroids, labels) -> float:
    """Sum of squared distances of the points to their centroids, in float64."""
    diff = x.astype(np.float64) - centroids.astype(np.float64)[labels]
    return float((diff * diff).sum())


def checks(args, outputs, reference):
    """Labels as float64's (all but a few), inertia as float64's, finite centroids."""
    x = args[0]
    (c, labels), (c64, labels64) = outputs, reference
    ref_inertia = inertia(x, c64, labels64)
    return [
        Check("labels differing from float64 (fraction)", float((labels != labels64).mean()), 1e-3),
        Check(
            "inertia relative to float64's - 1",
            abs(inertia(x, c, labels) / ref_inertia - 1.0),
            1e-6,
        ),
        Check("non-finite centroids (fraction)", float((~np.isfinite(c)).mean()), 0.0),
    ]


SAMPLE = Sample(
    func=kmeans,
    make_inputs=make_inputs,
    sizes={"ci": 16, "demo": 96, "gpu": 2048},
    size_doc="K clusters: x is 128K x K float32 (gpu: 262144 x 2048, 2 GiB), K centroids",
    checks=checks,
)

"""sparkler: all-pairs Pearson correlations of two sets of long vectors, as CoMet/Sparkler do.

The vectors are the columns of A (k x m) and B (k x n), k much larger than m and n (e.g. k
samples of m and n features or SNPs). Each column is centred and scaled to unit variance (z-scores,
mean and variance over k), and one GEMM gives every correlation at once:

    C = Za^T Zb / k        (m x n, C[i, j] = Pearson correlation of A[:, i] and B[:, j])

One op, with a long inner dimension: the INT8 emulation cuts k into blocks whose INT32 sums
cannot overflow (about 44000 k-steps at levels T6 and IV, 66000 at I; ``combine.int32_k_block``)
and adds the blocks exactly in float64; the runtime does this by itself.

tol = 1e-5: correlations are numbers that get ranked and thresholded, and the centred data makes
the product a cancelling sum; 1e-5 relative to ||C|| keeps correlations to ~1e-6 rms and ~5e-6
at worst, far below what a threshold or a ranking looks at, and a little above float32's own
error here (~1e-6, mostly from the z-scores). Level I (~8e-6 at the ci size, ~5e-6 from
m = 256 up) just meets it; TF32 (2e-5 to 5e-5) does not.

Data: a few shared latent factors make the correlations structured (|C| up to ~0.5), columns get
random offsets and scales (which the centring and scaling must remove), and a few pairs are
planted: B[:, j] a noisy copy of A[:, i] (correlation ~0.98), which the checks look for.

size = m = n vectors per set; k = 48 m (gpu: m = n = 4096, k = 196608; A and B 3 GiB each).
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample, to_host

K_PER_VECTOR = 48  # k = 48 m
FACTORS = 8  # shared latent factors
LOADING = 0.3  # factor loadings' scale: background correlations up to ~0.5
PLANT_NOISE = 0.2  # a planted copy's noise, against the column's standard deviation ~1.3


@mixpert.jit(tol=1e-5)
def sparkler(a, b):
    k = a.shape[0]
    za = a - a.sum(axis=0) / k
    za /= np.sqrt((za * za).sum(axis=0) / k)
    zb = b - b.sum(axis=0) / k
    zb /= np.sqrt((zb * zb).sum(axis=0) / k)
    return za.T @ zb / k


def planted_pairs(m: int, n: int) -> list[tuple[int, int]]:
    """(column of A, column of B) of the planted pairs: 8 of them, spread over A's columns."""
    step = max(1, m // 8)
    return [(i, (37 * i + 11) % n) for i in range(0, m, step)][:8]


def make_inputs(xp, rng, m):
    """A and B with shared latent factors, per-column offsets and scales, planted pairs."""
    k, n = K_PER_VECTOR * m, m
    g = rng.standard_normal((k, FACTORS), dtype=xp.float32)
    sets = []
    for cols in (m, n):
        loadings = xp.float32(LOADING) * rng.standard_normal((FACTORS, cols), dtype=xp.float32)
        sets.append(g @ loadings + rng.standard_normal((k, cols), dtype=xp.float32))
    a, b = sets
    for i, j in planted_pairs(m, n):
        noise = rng.standard_normal(k, dtype=xp.float32)
        b[:, j] = a[:, i] + xp.float32(PLANT_NOISE) * noise
    for x in (a, b):  # offsets up to ~10 and scales over about two decades
        cols = x.shape[1]
        x *= xp.exp(rng.standard_normal(cols, dtype=xp.float32))
        x += xp.float32(5.0) * rng.standard_normal(cols, dtype=xp.float32)
    return a, b


def checks(args, outputs, reference):
    """Correlations within [-1, 1]; each planted pair found (> 0.9 and the top of its row);
    every correlation within 1e-4 of float64's (what thresholds and rankings need)."""
    c, ref = to_host(outputs).astype(np.float64), to_host(reference)
    m, n = c.shape
    pairs = planted_pairs(m, n)
    with np.errstate(invalid="ignore"):  # NaN correlations fail every check below
        outside = float(np.abs(c).max()) - 1.0
        weakest = min(float(c[i, j]) for i, j in pairs)
        missed = sum(int(np.argmax(c[i]) != j) for i, j in pairs) + int(np.isnan(c).any())
        worst = float(np.abs(c - ref).max())
    return [
        Check("largest |correlation| - 1", outside, 1e-5),
        Check("1 - weakest planted correlation", 1.0 - weakest, 0.1),
        Check("planted pairs not the top of their row", float(missed), 0.0),
        Check("largest |correlation error| vs float64", worst, 1e-4),
    ]


SAMPLE = Sample(
    func=sparkler,
    make_inputs=make_inputs,
    sizes={"ci": 32, "demo": 320, "gpu": 4096},
    size_doc="m: A is 48m x m, B is 48m x m float32 (gpu: m = 4096, k = 196608; 3 GiB each)",
    checks=checks,
)

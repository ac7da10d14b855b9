"""gemm: BLAS SGEMM, C = alpha * A @ B + beta * C, on GEMMul8's phi = 0.5 data.

The smallest sample: one op, so the tuner picks one level; the float32-grade tol (1e-6, about
cuBLAS SGEMM's own error at n = 4096) makes it choose between T6, IV and V by the data.
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample
from mixpert.testdata import gemmul8


@mixpert.jit(tol=1e-6)
def gemm(a, b, c, alpha, beta):
    t = a.dtype.type  # Python floats would make Numba compute the scaling in float64
    return t(alpha) * (a @ b) + t(beta) * c


def make_inputs(xp, rng, n):
    a, b, c = (gemmul8(xp, rng, (n, n)) for _ in range(3))
    return a, b, c, 1.5, -0.5


def checks(args, outputs, reference):
    """The result keeps float32's shape and dtype, and is finite."""
    finite = float(np.isfinite(outputs).all())
    return [Check("non-finite entries (1 = none)", 1.0 - finite, 0.0)]


SAMPLE = Sample(
    func=gemm,
    make_inputs=make_inputs,
    sizes={"ci": 96, "demo": 1024, "gpu": 16384},
    size_doc="n: A, B and C are n x n float32",
    checks=checks,
)

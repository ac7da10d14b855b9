"""hpl_ai: HPL-AI (HPL-MxP), a float64 solve of A x = b from a reduced-precision LU.

The problem is HPL-AI's: A (float64, n x n) uniform in [-0.5, 0.5) with the diagonal replaced by
the row's off-diagonal absolute sum (diagonally dominant: no pivoting), b uniform likewise. The
factorisation works on A's float32 copy: a block LU without pivoting (Golub & Van Loan's block LU,
stable on block diagonally dominant matrices; Demmel, Higham & Schreiber 1995), per block column k
of width nb: D_k = the current diagonal block, L_ik = A_ik inv(D_k) for the whole panel below (one
GEMM) and the trailing update A[k+1:, k+1:] -= L_panel A[k, k+1:] (the big GEMM). The diagonal
blocks are overwritten by their inverses. Iterative refinement then recovers float64 accuracy: the
residual r = b - A x in float64 (a native matrix-vector product), the correction by block forward
and back substitution with the float32 factors (matrix-vector products, native), until HPL's scaled
residual ||A x - b||_inf / (eps (||A||_inf ||x||_inf + ||b||_inf) n), eps = 2^-53, is below 16.

The output is x (float64) and the number of LU solves (an int, outside the error). At any plan
whose refinement converges, x is float64 accurate (the error vs the float64 run is about
cond(A) 16 n eps < 1e-10 at the gpu size, cond(A) ~ 1 here), so the tol is 1e-9: loose enough
for every converging plan, tight enough that a plan whose refinement stalls fails. The tuner is
then free to take the cheapest levels, because refinement absorbs the factorisation's error: more
solves (each a few matrix-vector products) instead of accurate GEMMs, the point of HPL-AI.

size: n, A is n x n, block size nb = n / 8 (HPL-AI's matrix in float32 and float64 are inputs).
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample, to_host

MAX_SOLVES = 50  # refinement gives up here (the error vs float64 then shows it)


@mixpert.jit(tol=1e-9)
def hpl_ai(a_lo, a, b, nb):
    n = a.shape[0]
    if nb <= 0 or n % nb != 0:
        raise ValueError("hpl_ai: the block size nb must divide n")
    # block LU without pivoting of the low-precision copy; D_k is replaced by inv(D_k)
    lu = a_lo.copy()
    for k in range(0, n, nb):
        e = k + nb
        dinv = np.linalg.inv(lu[k:e, k:e])
        lu[k:e, k:e] = dinv
        if e < n:
            lu[e:, k:e] = lu[e:, k:e] @ dinv  # L_ik for every block row i below
            lu[e:, e:] -= lu[e:, k:e] @ lu[k:e, e:]  # trailing update: the big GEMM

    # HPL's scaled residual needs ||A||_inf (by row blocks: no n x n temporary)
    eps = 2.0**-53
    a_norm = 0.0
    for k in range(0, n, nb):
        a_norm = max(a_norm, float(np.abs(a[k : k + nb]).sum(axis=1).max()))
    b_norm = float(np.abs(b).max())

    x = np.zeros_like(b)
    r = b.copy()  # the residual of x = 0
    solves = 0
    while solves < MAX_SOLVES:
        # correction d = inv(L U) r in the factorisation's precision
        d = r.astype(lu.dtype)
        for k in range(0, n - nb, nb):  # forward: L has unit diagonal blocks
            e = k + nb
            d[e:] -= lu[e:, k:e] @ d[k:e]
        for k in range(n - nb, -1, -nb):  # back: U's diagonal blocks are stored inverted
            e = k + nb
            if e < n:
                d[k:e] -= lu[k:e, e:] @ d[e:]
            d[k:e] = lu[k:e, k:e] @ d[k:e]
        x += d.astype(x.dtype)
        solves += 1
        r = b - a @ x  # float64
        x_norm = float(np.abs(x).max())
        scaled = float(np.abs(r).max()) / (eps * (a_norm * x_norm + b_norm) * n)
        if scaled < 16.0:
            break
    return x, solves


def make_inputs(xp, rng, n):
    """HPL-AI's matrix (hpl-ai reference matgen): U(-0.5, 0.5), diagonal = off-diagonal row
    sum of absolute values; b U(-0.5, 0.5); and A's float32 copy for the factorisation."""
    a = rng.random((n, n), dtype=xp.float64) - 0.5
    i = xp.arange(n)
    a[i, i] = 0.0
    a[i, i] = xp.abs(a).sum(axis=1)
    b = rng.random(n, dtype=xp.float64) - 0.5
    return a.astype(xp.float32), a, b, max(n // 8, 1)


def scaled_residual(a, b, x) -> float:
    """HPL's ||A x - b||_inf / (eps (||A||_inf ||x||_inf + ||b||_inf) n), eps = 2^-53."""
    n = a.shape[0]
    a_norm = max(float(np.abs(a[k : k + 1024]).sum(axis=1).max()) for k in range(0, n, 1024))
    r = float(np.abs(a @ x - b).max())
    return r / (2.0**-53 * (a_norm * float(np.abs(x).max()) + float(np.abs(b).max())) * n)


def checks(args, outputs, reference):
    """HPL's scaled residual below 16 (its pass mark) and the refinement within its cap; the
    number of LU solves is reported as a check too (limit MAX_SOLVES - 1: it converged)."""
    _, a, b, _ = args
    x, solves = outputs
    return [
        Check("HPL scaled residual", scaled_residual(a, b, x), 16.0),
        Check("LU solves (refinement steps + 1)", float(to_host(solves)), MAX_SOLVES - 1),
    ]


SAMPLE = Sample(
    func=hpl_ai,
    make_inputs=make_inputs,
    sizes={"ci": 256, "demo": 1024, "gpu": 32768},
    size_doc="n: A is n x n (float64 and its float32 copy), b has n entries, nb = n / 8",
    checks=checks,
)

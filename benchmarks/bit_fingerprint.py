"""Output bits of a fixed set of products and jitted calls, as SHA-256 digests (JSON).

For refactors that must not move a bit: run before and after, on the CPU and on a GPU, and
compare the files (``python benchmarks/bit_fingerprint.py --compare before.json after.json``).
Cases: every level on six input kinds (GEMMul8 phi = 0.5 and 2, wide binades, subnormals and
values near FLT_MAX, NaN/Inf lines, transposed views, a long k that needs k-blocking) on each
backend present, and jitted functions (products, chains, ``np.dot``/``.dot``) under all-one-level
plans. Only public API is used, so the script runs unchanged on any version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import mixpert
from mixpert.runtime import LADDER

LEVELS = [level.name for level in LADDER] + ["auto"]


def _digest(x: Any) -> str:
    x = np.ascontiguousarray(x.get() if hasattr(x, "get") else x)
    return hashlib.sha256(x.view(np.uint8).tobytes() + str(x.shape).encode()).hexdigest()[:20]


def _inputs(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    def gemmul8(shape: tuple[int, int], phi: float) -> np.ndarray:
        u = rng.random(shape) - 0.5
        return (u * np.exp(phi * rng.standard_normal(shape))).astype(np.float32)

    def binades(shape: tuple[int, int], low: int, high: int) -> np.ndarray:
        exponents = rng.integers(low, high, size=shape)
        signs = rng.choice([-1.0, 1.0], size=shape)
        return np.ldexp(rng.uniform(0.5, 1, size=shape) * signs, exponents).astype(np.float32)

    cases = {
        "phi0.5": (gemmul8((67, 129), 0.5), gemmul8((129, 45), 0.5)),
        "phi2": (gemmul8((64, 96), 2.0), gemmul8((96, 80), 2.0)),
        "binades": (binades((40, 70), -60, 60), binades((70, 33), -60, 60)),
        "subnormal": (binades((24, 50), -149, -120), binades((50, 20), -10, 10)),
        "near-max": (binades((24, 50), 100, 128), binades((50, 20), -5, 8)),
    }
    a, b = gemmul8((30, 40), 1.0), gemmul8((40, 25), 1.0)
    a[3, 5], a[7, 1], b[2, 4], b[9, 11] = np.nan, np.inf, -np.inf, np.nan
    cases["nonfinite"] = (a, b)
    cases["transposed"] = (gemmul8((50, 36), 0.5).T, gemmul8((28, 50), 0.5).T)
    cases["long-k"] = (gemmul8((8, 140000), 0.5), gemmul8((140000, 6), 0.5))
    return cases


def products(backends: list[str]) -> dict[str, str]:
    out = {}
    cases = _inputs(np.random.default_rng(20261122))
    for name, (a, b) in cases.items():
        for backend in backends:
            for level in LEVELS:
                if name == "long-k" and level in ("tf32", "fp32"):
                    continue  # native float32 sums depend on the BLAS's blocking, not on mixpert
                if backend == "cuda" and level == "fp16":
                    continue  # FP32 accumulation in the tensor cores: not the CPU's bits
                c = mixpert.matmul(a, b, level=level, backend=backend)
                out[f"matmul/{name}/{backend}/{level}"] = _digest(c)
    return out


def _chain(x, w1, w2):  # type: ignore[no-untyped-def]
    h = np.maximum(x @ w1, np.float32(0))
    return np.dot(h, w2) + x.dot(w1)[:, :1]


def _gram(a, b):  # type: ignore[no-untyped-def]
    return a.T @ b, a @ b.T


def jitted(cupy: Any | None) -> dict[str, str]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((33, 48)).astype(np.float32)
    w1 = rng.standard_normal((48, 40)).astype(np.float32)
    w2 = rng.standard_normal((40, 12)).astype(np.float32)
    a = rng.standard_normal((64, 20)).astype(np.float32)
    b = rng.standard_normal((64, 20)).astype(np.float32)
    calls: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
        ("chain", _chain, (x, w1, w2)),
        ("gram", _gram, (a, b)),
    ]
    if cupy is not None:
        calls += [(f"{n}-cupy", f, tuple(cupy.asarray(v) for v in args)) for n, f, args in calls]
    out = {}
    for name, func, args in calls:
        base = mixpert.jit(func)
        for level in ("I", "T6", "IV", "V", "fp64", "fp32", "auto", "tf32"):
            f = base.with_plan(dict.fromkeys(base.ops, level))
            result = f(*args)
            parts = result if isinstance(result, tuple) else (result,)
            out[f"jit/{name}/{level}"] = ",".join(_digest(p) for p in parts)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the digests here (JSON)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # overflow and NaN are among the cases
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        shared = sorted(set(before) & set(after))
        moved = [k for k in shared if before[k] != after[k]]
        print(f"{len(shared)} cases compared, {len(moved)} differ")
        for key in moved:
            print(f"  MOVED {key}")
        for key in sorted(set(before) ^ set(after)):
            print(f"  only in one file: {key}")
        return 1 if moved or set(before) != set(after) else 0
    from mixpert.runtime import device

    cupy = device.cupy_module()
    backends = ["cpu", "cuda"] if cupy is not None else ["cpu"]
    digests = {**products(backends), **jitted(cupy)}
    text = json.dumps(digests, indent=1, sort_keys=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(f"{len(digests)} digests" + (f" -> {args.out}" if args.out else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

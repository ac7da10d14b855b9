"""The fused INT8 kernel beside the Hopper alternatives, in one run on the same inputs: cuBLAS
SGEMM and TF32, mixpert's INT8 levels and "auto" as shipped (the fused kernel where it is the
faster; T6, IV, V and "auto" also with it everywhere, "(fused)", and nowhere, "(sums)": the
class-sum pipeline through cuBLAS), GEMMul8's float emulation (fast and
accurate, 6-9 moduli; where ``gemmul8/build.sh`` built its library) and JAX's presets
(BF16_BF16_F32_X3/X6/X9, TF32_TF32_F32_X3; where JAX is installed). Square n = 2048-16384,
a stack of 64 pairs of 1024^3 and thin outputs. phi = 0.5 inputs; errors against float64.

    python benchmarks/fused_anchors.py [--quick | --shapes 4096x4096x4096 ...] [--out DIR]
        [--wgmma IV T6 ...]  (GPU)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/fused_anchors.py")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX beside CuPy's pool

import cupy as cp

from mixpert.bench import family_report
from mixpert.bench.batched import BatchedRow as Row  # (batch, m, k, n) rows, as stacks have
from mixpert.bench.gemm import measure_calls, method_cells, method_fn, summary
from mixpert.runtime.cuda import fused, fused_wgmma
from mixpert.testdata import gemmul8 as phi_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent / "gemmul8"))

# (batch, m, k, n): the squares, a stack, and the thin outputs
SHAPES = (
    (1, 2048, 2048, 2048), (1, 3072, 3072, 3072), (1, 4096, 4096, 4096),
    (1, 8192, 8192, 8192), (1, 16384, 16384, 16384), (64, 1024, 1024, 1024),
    (1, 65536, 4096, 64), (1, 65536, 4096, 128), (1, 16384, 16384, 64),
)  # fmt: skip
QUICK = ((1, 2048, 2048, 2048), (1, 8192, 8192, 8192), (64, 1024, 1024, 1024))
LEVELS = ("I", "II", "III", "T6", "IV", "V", "auto")
COMPARED = ("T6", "IV", "V", "auto")
JAX_PRESETS = ("BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9", "TF32_TF32_F32_X3")


FAMILY = family_report.Family(
    name="fused-anchors",
    title="The fused INT8 kernel beside the Hopper alternatives",
    intro="Cells: throughput relative to cuBLAS SGEMM in the same run / error ||C - C64||_F / "
    "||C64||_F (phi = 0.5). '(fused)': the fused kernel wherever it can run; '(sums)': the "
    "class-sum pipeline through cuBLAS (the fused kernel off); GEMMul8 fast/accurate with its "
    "number of moduli; JAX: jnp.matmul with the preset.",
    shape_header="batch x (m x k x n)",
    shape=lambda r: (r.batch, r.m, r.k, r.n),
    label=lambda s: f"{s[0]}x{s[1]}x{s[2]}x{s[3]}" if s[0] > 1 else f"{s[1]}x{s[2]}x{s[3]}",
    cell=lambda r: f"{r.ratio_to_sgemm:.2f}x / {r.error:.1e}",
    panel=("||C - C64||_F / ||C64||_F", lambda r: r.error, True),
)

Calls = dict[str, tuple[Callable[[], Any], str]]


def switched(to: str, call: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with fused.switched(to):
            return call()

    return run


def mixpert_calls(a: cp.ndarray, b: cp.ndarray) -> Calls:
    """The levels as shipped (the fused kernel where it is faster), then IV, V and "auto" with
    it everywhere ("fused") and nowhere ("sums"): the crossovers' evidence."""
    calls = {name: method_fn(cp, name, a, b) for name in ("sgemm", "tf32", *LEVELS)}
    for to, label in (("always", "fused"), ("0", "sums")):
        for name in COMPARED:
            with fused.switched(to):
                call, routed = method_fn(cp, name, a, b)
            calls[f"{name} ({label})"] = (switched(to, call), routed)
    return calls


def jax_calls(a: cp.ndarray, b: cp.ndarray) -> Calls:
    if importlib.util.find_spec("jax") is None:
        return {}
    import jax
    import jax.numpy as jnp

    x, y = jax.dlpack.from_dlpack(a), jax.dlpack.from_dlpack(b)
    calls: Calls = {}
    for preset in JAX_PRESETS:
        algorithm = getattr(jax.lax.DotAlgorithmPreset, preset)
        product = jax.jit(
            lambda p, q, algorithm=algorithm: jnp.matmul(
                p, q, precision=algorithm, preferred_element_type=jnp.float32
            )
        )

        def call(product=product) -> cp.ndarray:  # waits: JAX runs on its own stream
            return cp.from_dlpack(product(x, y).block_until_ready())

        calls[f"jax {preset}"] = (call, preset)
    return calls


def gemmul8_calls(a: cp.ndarray, b: cp.ndarray) -> Calls:
    if a.ndim == 3 or not (Path(__file__).parent / "gemmul8" / "libmixpert_gemmul8.so").exists():
        return {}  # GEMMul8 has no batched products
    import compare

    return compare.gemmul8_calls(compare.load(), a, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--shapes", nargs="+", default=None, help="only these, as the table labels them"
    )
    parser.add_argument(
        "--wgmma",
        nargs="*",
        default=None,
        choices=sorted(fused_wgmma.FORMS),
        help="levels whose fused products run fused_wgmma's kernel at every size in this run "
        "(default: as fused_wgmma.ROUTED says; none given: no level): to measure a level's "
        "kernel against Triton's and the class sums",
    )
    args = parser.parse_args()
    if args.wgmma is not None:
        fused_wgmma.ROUTED = dict.fromkeys(args.wgmma)  # their kernel at every size
    gpu = device.device_name()
    rows: list[Row] = []
    shapes = QUICK if args.quick else SHAPES
    if args.shapes:
        shapes = tuple(s for s in SHAPES if FAMILY.label(s) in args.shapes)
    for seed, (batch, m, k, n) in enumerate(shapes):
        rng = cp.random.default_rng(seed)
        lead = (batch,) if batch > 1 else ()
        a = phi_matrix(cp, rng, (*lead, m, k), 0.5)
        b = phi_matrix(cp, rng, (*lead, k, n), 0.5)
        calls = mixpert_calls(a, b) | gemmul8_calls(a, b) | jax_calls(a, b)
        measured = measure_calls(cp, calls, a, b, 2.0 * batch * m * k * n)
        del calls
        rows += [Row(gpu, batch, m, k, n, *cells) for cells in method_cells(measured)]
        print(summary(f"{batch}x{m}x{k}x{n}", measured), flush=True)
        del a, b
        cp.get_default_memory_pool().free_all_blocks()
    print(family_report.markdown(FAMILY, rows))
    if args.out:
        family_report.write(FAMILY, rows, args.out)


if __name__ == "__main__":
    main()

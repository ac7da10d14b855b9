"""GEMMul8 (Ozaki scheme II on INT8) beside cuBLAS SGEMM, TF32 and mixpert, on the same inputs
in one run: its float32 emulation in fast and accurate mode with 6 to 9 moduli, at n = 4096,
8192 and 16384 (phi = 0.5 inputs, errors against float64). Needs the library that
``build.sh`` makes next to this file.

    GEMMUL8_SRC=/path/to/GEMMul8 bash benchmarks/gemmul8/build.sh
    python benchmarks/gemmul8/compare.py [--sizes 4096 8192] [--out DIR]
"""

from __future__ import annotations

import argparse
import ctypes
from dataclasses import dataclass
from pathlib import Path

import cupy as cp

from mixpert.bench import family_report
from mixpert.bench.gemm import measure_calls, method_cells, method_fn, summary
from mixpert.runtime import device
from mixpert.testdata import gemmul8 as phi_matrix

HERE = Path(__file__).resolve().parent
SIZES = (4096, 8192, 16384)
MODULI = (6, 7, 8, 9)
MIXPERT = ("sgemm", "tf32", "IV", "V", "auto")


@dataclass(frozen=True)
class Row:
    gpu: str
    n: int
    level: str
    time_ms: float
    ratio_to_sgemm: float
    error: float
    sgemm_error: float
    routed_to: str


FAMILY = family_report.Family(
    name="gemmul8",
    title="GEMMul8 beside mixpert",
    intro="Cells: throughput relative to cuBLAS SGEMM in the same run / error ||C - C64||_F / "
    "||C64||_F (phi = 0.5 inputs, n x n x n). GEMMul8 columns: fast or accurate mode and the "
    "number of moduli.",
    shape_header="n",
    shape=lambda r: (r.n,),
    label=lambda s: str(s[0]),
    cell=lambda r: f"{r.ratio_to_sgemm:.2f}x / {r.error:.1e}",
    panel=("||C - C64||_F / ||C64||_F", lambda r: r.error, True),
)


def load() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(HERE / "libmixpert_gemmul8.so"))
    size = ctypes.c_size_t
    lib.mixpert_gemmul8_work_bytes.argtypes = [size, size, size, ctypes.c_uint]
    lib.mixpert_gemmul8_work_bytes.restype = size
    lib.mixpert_gemmul8_sgemm.argtypes = [ctypes.c_void_p, size, size, size, ctypes.c_void_p,
                                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                                          ctypes.c_int, ctypes.c_void_p]  # fmt: skip
    lib.mixpert_gemmul8_sgemm.restype = ctypes.c_int
    return lib


def gemmul8_calls(lib: ctypes.CDLL, a: cp.ndarray, b: cp.ndarray) -> dict:
    """name -> (call, name) computing a @ b for each GEMMul8 setting, for ``measure_calls``.
    One workspace, sized for the most moduli, serves every setting; each setting writes its
    own NaN-filled output, so an entry it skips shows in its error."""
    (m, k), n = a.shape, b.shape[1]
    handle = cp.cuda.device.get_cublas_handle()
    work = cp.empty(lib.mixpert_gemmul8_work_bytes(m, n, k, max(MODULI)), dtype=cp.uint8)
    calls = {}
    for fast in (True, False):
        for moduli in MODULI:
            c = cp.full((m, n), cp.nan, dtype=cp.float32)

            def call(c=c, moduli=moduli, fast=fast) -> cp.ndarray:
                pointers = (a.data.ptr, b.data.ptr, c.data.ptr)
                status = lib.mixpert_gemmul8_sgemm(
                    handle, m, n, k, *pointers, moduli, int(fast), work.data.ptr
                )
                if status:
                    raise RuntimeError(f"GEMMul8 returned CUDA error {status}")
                return c

            name = f"gemmul8 {'fast' if fast else 'accurate'} {moduli}"
            calls[name] = (call, name)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lib = load()
    gpu = device.device_name()
    rows: list[Row] = []
    for seed, n in enumerate(args.sizes):
        rng = cp.random.default_rng(seed)
        a, b = phi_matrix(cp, rng, (n, n), 0.5), phi_matrix(cp, rng, (n, n), 0.5)
        calls = {name: method_fn(cp, name, a, b) for name in MIXPERT} | gemmul8_calls(lib, a, b)
        measured = measure_calls(cp, calls, a, b, 2.0 * n**3)
        del calls
        rows += [Row(gpu, n, *cells) for cells in method_cells(measured)]
        print(summary(f"n = {n}", measured), flush=True)
        del a, b
        cp.get_default_memory_pool().free_all_blocks()
    print(family_report.markdown(FAMILY, rows))
    if args.out:
        family_report.write(FAMILY, rows, args.out)


if __name__ == "__main__":
    main()

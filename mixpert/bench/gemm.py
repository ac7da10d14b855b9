"""The GPU benchmark: every level (but IV-blocks, for tall products: ``bench.skinny``) beside
cuBLAS SGEMM and TF32, timed in one run.

Absolute times drift between machines; ratios measured in one run do not, so every row carries
its ratio to the SGEMM of the same shape and inputs. Inputs are fresh random matrices (never
zeros); errors are MixPert's Equation 10 against a float64 product of the same float32 inputs.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..runtime import LADDER, get_level
from ..runtime.levels import AUTO
from ..testdata import gemmul8
from ..timing import gpu_median_seconds

SQUARE = (128, 256, 512, 1024, 2048, 3072, 4096, 8192, 16384)
DOUBLE_K = (4096, 8192)  # m = n, k = 2n
SKINNY = ((65536, 4096, 16), (65536, 4096, 64), (65536, 4096, 128), (16384, 16384, 64))
DISTRIBUTIONS = ("phi0.5", "normal")
# (IV-blocks serves tall products, ``bench.skinny``: on square ones its kernel reads A once
# per 64 columns of B.)
SQUARE_LEVELS = tuple(lv.name for lv in LADDER if lv.emulated and lv.kind != "blocks")
METHODS = ("sgemm", "tf32", *SQUARE_LEVELS, AUTO.name)


@dataclass(frozen=True)
class Row:
    gpu: str
    m: int
    k: int
    n: int
    shape: str
    dist: str
    level: str
    time_ms: float
    tflops: float
    ratio_to_sgemm: float
    error: float
    sgemm_error: float
    routed_to: str


def shapes(quick: bool) -> list[tuple[str, int, int, int]]:
    square = (1024, 4096, 8192) if quick else SQUARE
    out = [("square", n, n, n) for n in square]
    if not quick:
        out += [("n x n x 2n", n, 2 * n, n) for n in DOUBLE_K]
        out += [("tall-skinny", m, k, n) for m, k, n in SKINNY]
    return out


def random_inputs(cp: Any, m: int, k: int, n: int, dist: str, seed: int) -> tuple[Any, Any]:
    rng = cp.random.default_rng(seed)

    def one(shape: tuple[int, int]) -> Any:
        if dist == "normal":
            return rng.standard_normal(shape, dtype=cp.float32)
        return gemmul8(cp, rng, shape, float(dist.removeprefix("phi")))

    return one((m, k)), one((k, n))


def method_fn(cp: Any, name: str, a: Any, b: Any) -> tuple[Callable[[], Any], str]:
    """(call, what it runs) for a method of the tables: "sgemm" (``cp.matmul``: cuBLAS SGEMM,
    strided-batched for stacks), "tf32", "auto" or a level, on two matrices or two stacks."""
    from ..runtime import dispatch
    from ..runtime.cuda import native

    if name == "sgemm":
        return (lambda: cp.matmul(a, b)), "sgemm"
    if name == "tf32":
        return (lambda: native.tf32_product(a, b)), "tf32"
    if name == AUTO.name:  # as users call it: mixpert.matmul(a, b), backend "auto"
        chosen = dispatch.resolve_level(AUTO, a, b, "cuda")
        return (lambda: dispatch.np_matmul_at_level(a, b, AUTO)), chosen.name
    level = get_level(name)  # as users call it too: its plan replayed where one serves
    return (lambda: dispatch.np_matmul_at_level(a, b, level, backend="cuda")), name


def run(
    quick: bool = False,
    dists: Iterable[str] = DISTRIBUTIONS,
    progress: Callable[[str], None] = print,
) -> list[Row]:
    from ..runtime import device

    cp = device.cupy_module()
    if cp is None:
        raise RuntimeError(f"the GPU benchmark needs a GPU: {device.unavailable_reason()}")
    gpu = device.device_name()
    rows: list[Row] = []
    for shape_name, m, k, n in shapes(quick):
        for seed, dist in enumerate(dists):
            a, b = random_inputs(cp, m, k, n, dist, seed)
            flops = 2.0 * m * n * k
            timings = measure_methods(cp, METHODS, a, b, flops)
            sgemm_s, sgemm_err, _ = timings["sgemm"]
            for name, (seconds, error, routed) in timings.items():
                rows.append(
                    Row(
                        gpu,
                        m,
                        k,
                        n,
                        shape_name,
                        dist,
                        name,
                        seconds * 1e3,
                        flops / seconds / 1e12,
                        sgemm_s / seconds,
                        error,
                        sgemm_err,
                        routed,
                    )
                )
            progress(summary(f"{shape_name} {m}x{k}x{n} {dist}", timings))
            del a, b
            cp.get_default_memory_pool().free_all_blocks()
    return rows


def measure_methods(
    cp: Any, methods: Iterable[str], a: Any, b: Any, flops: float
) -> dict[str, tuple[float, float, str]]:
    """``measure_calls`` for methods of the tables (``method_fn``)."""
    return measure_calls(cp, {name: method_fn(cp, name, a, b) for name in methods}, a, b, flops)


ROUNDS = 3  # timing rounds over all methods; each method keeps its best median


def measure_calls(
    cp: Any, calls: Mapping[str, tuple[Callable[[], Any], str]], a: Any, b: Any, flops: float
) -> dict[str, tuple[float, float, str]]:
    """name -> (median seconds, error, what it ran) for each (call, what it runs) of ``calls``,
    each computing a @ b. The error is ||C - C64||_F / ||C64||_F against the float64 product of
    the same inputs; the memory pool is handed a NaN-filled block of the output's size first,
    so a result that skips an entry shows. Times: the best of ROUNDS medians, the methods
    taking turns in each round (timed one after another, a method that ran after slow
    emulated ones measured up to 27% below the same cuBLAS call timed first)."""
    reference = cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
    ref_norm = float(cp.linalg.norm(reference))
    errors = {}
    for name, (fn, _) in calls.items():
        poison = cp.full(reference.shape, cp.nan, dtype=cp.float32)
        del poison  # the pool hands this block to the next output of its size
        c = fn()
        errors[name] = float(cp.linalg.norm(c.astype(cp.float64) - reference)) / ref_norm
        del c
    seconds = dict.fromkeys(calls, float("inf"))
    for _ in range(ROUNDS):
        for name, (fn, _) in calls.items():
            seconds[name] = min(seconds[name], gpu_median_seconds(fn, flops))
    return {name: (seconds[name], errors[name], routed) for name, (_, routed) in calls.items()}


def method_cells(
    measured: Mapping[str, tuple[float, float, str]],
) -> list[tuple[str, float, float, float, float, str]]:
    """Per method of one ``measure_calls``: (name, time in ms, ratio to "sgemm"'s time, error,
    SGEMM's error, what it ran): the fields the family benchmarks' rows end with."""
    sgemm_s, sgemm_error, _ = measured["sgemm"]
    return [
        (name, seconds * 1e3, sgemm_s / seconds, error, sgemm_error, routed)
        for name, (seconds, error, routed) in measured.items()
    ]


def summary(label: str, timings: dict[str, tuple[float, float, str]]) -> str:
    """One progress line: each method's ratio to "sgemm" and its error."""
    sgemm_s = timings["sgemm"][0]
    cells = ", ".join(f"{name} {sgemm_s / t:.2f}x {e:.1e}" for name, (t, e, _) in timings.items())
    return f"{label}: {cells}"


def breakdown(n: int = 16384, level: str = "IV") -> dict[str, float]:
    """Milliseconds of each stage of one ``level`` call at n x n x n (phi = 0.5 inputs)."""
    from ..runtime import device
    from ..runtime.cuda import backend, sliced

    cp = device.cupy_module()
    chosen = get_level(level)
    a, b = random_inputs(cp, n, n, n, "phi0.5", 99)
    flops = 2.0 * n**3
    stages = sliced.staged_product(a, b, chosen)
    out = {name: gpu_median_seconds(fn, flops) * 1e3 for name, fn in stages.items()}
    whole = backend.PRODUCTS[chosen.kind]
    out["whole call"] = gpu_median_seconds(lambda: whole(a, b, chosen), flops) * 1e3
    return out


def results_folder(gpu: str, base: Path) -> Path:
    """Where a GPU's benchmark results live: ``base``/<its name, spaces as dashes>. ``base`` has
    no default: a folder relative to the working directory would scatter results."""
    return base / gpu.replace(" ", "-")


def write_results(rows: list[Row], extra: dict[str, Any], out_dir: Path) -> Path:
    """gemm.json in ``out_dir`` (made if missing); returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"machine": platform.node(), "rows": [asdict(r) for r in rows], **extra}
    path = out_dir / "gemm.json"
    path.write_text(json.dumps(payload, indent=1))
    return path

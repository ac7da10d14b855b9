"""The "auto" policy: which backend and level one product runs, decided once per call.

"auto" means float32-grade at the lowest time: native float32 on the CPU (where emulation is
the exact oracle, not a speed-up), and on the GPU native float32 (cuBLAS SGEMM) except where a
measured crossover (``CROSSOVERS``, each threshold naming the file of figures it was set from)
says another level wins. ``route`` gives one call's ``Route``: the backend, the concrete level
and, where "auto" took an INT8 level for two matrices, the ``Fallback`` the CUDA backend applies
once the operands are packed. Callers compute it once and pass it down (as nvmath-python's
``Matmul`` computes its traits once, then plans and executes) instead of deciding again.

The rules are pure functions of the shape (m, k, n and a stack's pair count) and of the
crossovers (``crossovers``). What only the GPU can tell (the kernels it runs, its free memory,
and the crossovers measured on its model: ``Gpu``, ``calibration``) is asked of the object the
caller passes, and only where a shape rule needs it. This module imports no backend (from the
CUDA package only ``geometry``'s constants, which need no CuPy), so no backend module's import
can close a circle through it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, Protocol

import numpy as np

from . import bypass, calibration, device, ordered
from .blocks import LEVEL as BLOCKS_LEVEL
from .cuda.geometry import THIN_MAX_N
from .levels import LEVELS, NATIVE_LEVEL, Level
from .validation import Backend

RESULTS = "benchmarks/results/NVIDIA-H100-80GB-HBM3/"  # the card the crossovers were set on


def _measured(value: float, figures: str | None, results: str = RESULTS) -> Any:
    """A threshold and the file under ``results`` whose figures set it (None: not measured)."""
    return field(default=value, metadata={"figures": figures and results + figures})


@dataclass(frozen=True, slots=True)
class Crossovers:
    """Where "auto" changes its choice (one H100's figures: ``figures`` names each one's file;
    on a GPU, those of square and large products as measured on its model: ``crossovers``).

    Each group is one rule of ``on_gpu``; the predicates below read these, nothing else."""

    # NumPy operands go to the GPU only from this many flops: the copies there and back must
    # be repaid. The first commit's estimate.
    offload_min_flops: int = _measured(2 * 512**3, None)
    # Level IV for two matrices with every dimension at least min_dim, or every dimension at
    # least large_min_dim with large_min_work multiply-adds: INT8 GEMMs with a small dimension
    # run far below peak, and packing reads every input once.
    min_dim: int = _measured(3072, "gemm.md")
    large_min_dim: int = _measured(2048, "auto-crossovers.txt")
    large_min_work: int = _measured(64 * 1024**3, "auto-crossovers.txt")
    # ... and from replayed_min_dim a side where the product replays one CUDA graph, its
    # fallback decided on the GPU (``Gpu.replays``): no host time left to repay.
    replayed_min_dim: int = _measured(2048, "call-overhead.md", "benchmarks/results/NVIDIA-H200/")
    # Stacks: fp32-ordered's small-stack kernel for pairs of at most ordered_max_dim a side,
    # its pairs kernel up to pairs_max_dim where it copies 16 bytes at a time (k, n % 4 == 0).
    ordered_max_dim: int = _measured(16, "batched.md")
    pairs_max_dim: int = _measured(32, "auto-crossovers.txt")
    # ... level IV for two pairs or more of at least stack_min_dim a side, stack_min_work
    # multiply-adds in all (one pair is a matrix product: the 2-D rule).
    stack_min_dim: int = _measured(1024, "auto-crossovers.txt")
    stack_min_work: int = _measured(32 * 1024**3, "auto-crossovers.txt")
    # fp32-ordered's split-k kernel (TSM2X's long-k case): m and n at most split_max_mn, k at
    # least split_min_k, never a matrix-vector product (cuBLAS's own kernels win those).
    split_max_mn: int = _measured(32, "split-k-rule.txt")
    split_min_k: int = _measured(196608, "split-k-rule.txt")
    # ... its tall kernel (TSM2R's case): rows enough to fill the GPU (a thread a row), few
    # columns (A is read once per 16), a k long enough to outweigh the slabs of B.
    tall_min_m: int = _measured(65536, "auto-crossovers.txt")
    tall_max_n: int = _measured(16, "auto-crossovers.txt")
    tall_min_k: int = _measured(1024, "auto-crossovers.txt")
    # ... its thin kernel (TSM2L's case), k within a chunk and n within THIN_MAX_N: from
    # thin_min_m rows where k n is at most thin_max_kn, any such k and n from thin_wide_min_m.
    thin_min_m: int = _measured(1 << 17, "auto-crossovers.txt")
    thin_max_kn: int = _measured(256, "auto-crossovers.txt")
    thin_wide_min_m: int = _measured(1 << 20, "auto-crossovers.txt")
    # Level IV-blocks, ahead of the tall kernel, for a large A (rows enough to fill the GPU, a
    # long k, A of at least 1 GiB) times a thin B: n at most blocks_max_n, blocks_wide_max_n
    # where k is at least blocks_wide_min_k ...
    blocks_min_m: int = _measured(16384, "auto-crossovers.txt")
    blocks_min_k: int = _measured(1024, "auto-crossovers.txt")
    blocks_min_mk: int = _measured(1 << 28, "auto-crossovers.txt")
    blocks_max_n: int = _measured(32, "auto-crossovers.txt")
    blocks_wide_min_k: int = _measured(16384, "auto-crossovers.txt")
    blocks_wide_max_n: int = _measured(64, "auto-crossovers.txt")
    # ... but n past blocks_few_rows_max_n (4 n-tiles a block, 3 blocks an SM) only from
    # blocks_fill_m rows: fewer leave the SMs part idle.
    blocks_few_rows_max_n: int = _measured(16, "auto-crossovers.txt")
    blocks_fill_m: int = _measured(32768, "auto-crossovers.txt")
    # After packing (``Fallback``): cuBLAS SGEMM, which meets the same componentwise bound,
    # where the lines recomputed exactly would cover more than exact_share of C (an entry
    # recomputed exactly costs about ten times its share of an IV call), and for IV-blocks also
    # where the unresolved rows' entries pass row_entries a row of A (each is a float64 chain k
    # long: many cost what streaming A does, and IV-blocks saves only 20-45% of SGEMM's time).
    exact_share: float = _measured(0.1, "bypass_cost.md")
    row_entries: float = _measured(0.5, "auto-crossovers.txt")


CROSSOVERS = Crossovers()  # as shipped: without a GPU, or where calibration is off or failed


def figures(name: str) -> str | None:
    """The repository file whose figures set threshold ``name`` (None: not measured)."""
    return next(f.metadata["figures"] for f in fields(Crossovers) if f.name == name)


# The levels "auto" chooses among.
NATIVE = LEVELS[NATIVE_LEVEL]
EMULATED = LEVELS["IV"]  # float32-grade INT8 emulation
BLOCKS = LEVELS[BLOCKS_LEVEL]
ORDERED = LEVELS["fp32-ordered"]  # the small-stack, pairs, split-k, tall and thin kernels

DASK: Final = "dask"  # the backend of Dask operands' routes: each chunk routes itself
Routed = Literal["cpu", "cuda", "dask"]
# Two matrices, two stacks (s, m, k) and (s, k, n), or anything else (a stack beside a matrix).
Form = Literal["matrix", "stack", "other"]


@dataclass(frozen=True, slots=True)
class Fallback:
    """What "auto" runs after packing instead of its INT8 level: cuBLAS SGEMM where the lines
    to recompute exactly would cost more than the level saves (``takes_sgemm``). The CUDA
    backend applies it: level IV to its packs' unresolved lines (NaN/Inf lines left out),
    IV-blocks to B's flagged columns (NaN/Inf included) and A's unresolved rows estimated from
    a sample (its rows kernel gives up by the same bounds)."""

    exact_share: float  # SGEMM where those lines would cover more than this share of C ...
    row_entries: float = math.inf  # ... or their rows' entries pass this many a row of A

    def takes_sgemm(self, rows: float, cols: int, m: int, n: int) -> bool:
        """Whether an m x n product with ``rows`` rows of A and ``cols`` columns of B to
        recompute exactly runs SGEMM instead. (B's columns count only towards the share: the
        columns kernel walks them a thread a row of A, m chains at once.)"""
        return bypass.exact_share(rows, cols, m, n) > self.exact_share or (
            rows * n > self.row_entries * m
        )


@dataclass(frozen=True, slots=True)
class Route:
    """One call's route: the backend, the level it runs (concrete; for Dask operands the level
    asked for, which each chunk routes), and what "auto" runs instead after packing, if
    anything."""

    backend: Routed
    level: Level
    fallback: Fallback | None = None


EMULATED_FALLBACK = Fallback(CROSSOVERS.exact_share)
BLOCKS_FALLBACK = Fallback(CROSSOVERS.exact_share, CROSSOVERS.row_entries)
# "auto"'s routes, built once: a small product's call takes ~10-35 us.
NATIVE_ON_CPU = Route("cpu", NATIVE)
NATIVE_ON_GPU = Route("cuda", NATIVE)
ORDERED_ON_GPU = Route("cuda", ORDERED)
EMULATED_ON_GPU = Route("cuda", EMULATED, EMULATED_FALLBACK)  # two matrices
EMULATED_STACK_ON_GPU = Route("cuda", EMULATED)  # stacks have no fallback after packing
BLOCKS_ON_GPU = Route("cuda", BLOCKS, BLOCKS_FALLBACK)


class Gpu(Protocol):
    """What the rules ask of the GPU at hand (the CUDA backend module answers)."""

    def blocks_supported(self) -> bool: ...

    def thin_fits(self, k: int, n: int) -> bool: ...

    def workspace_bytes(self, level: Level, m: int, k: int, n: int, count: int = 1) -> int: ...

    def free_bytes(self) -> int: ...

    def replays(self, m: int, k: int, n: int) -> bool: ...

    def crossovers(self, shipped: Crossovers, route: Route) -> Crossovers: ...


def crossovers(gpu: Gpu | None) -> Crossovers:
    """The crossovers "auto" uses on ``gpu``: ``CROSSOVERS`` with the thresholds measured on
    its model where calibration is on (``calibration``: measured at the first product that asks,
    then kept in the user's cache folder; ``mixpert calibrate``); as shipped without a GPU."""
    return CROSSOVERS if gpu is None else gpu.crossovers(CROSSOVERS, EMULATED_ON_GPU)


def route(a: Any, b: Any, level: Level, backend: Backend, gpu: Callable[[], Gpu | None]) -> Route:
    """The route of a @ b (two matrices, or all pairs of two stacks) at ``level`` on
    ``backend``, operands and names already checked. ``gpu`` gives the GPU to ask, or None where
    none is usable; it is called only where "auto" runs on the GPU."""
    if device.is_dask_array(a) or device.is_dask_array(b):
        return Route(DASK, level)
    chosen = choose_backend(a, b, backend)
    if level.kind != "policy":
        return Route(chosen, level)
    if chosen != "cuda":
        return NATIVE_ON_CPU
    return on_gpu(*shape(a, b), gpu())


def resolve(level: Level, a: Any, b: Any, backend: str, gpu: Callable[[], Gpu | None]) -> Level:
    """The level a @ b runs at on ``backend``: ``level`` itself, or what "auto" resolves to."""
    if level.kind != "policy":
        return level
    if backend != "cuda":
        return NATIVE
    return on_gpu(*shape(a, b), gpu()).level


def shape(a: Any, b: Any) -> tuple[int, int, int, int, Form]:
    """(m, k, n, pairs, form) of a @ b for the rules: pairs is 1 for two matrices, the
    broadcast stack's size otherwise."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if a.ndim == 2 and b.ndim == 2:
        return m, k, n, 1, "matrix"
    if a.shape[:-2] == b.shape[:-2]:  # (the common case, without broadcasting)
        count = math.prod(a.shape[:-2])
    else:
        count = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return m, k, n, count, "stack" if a.ndim >= 3 and b.ndim >= 3 else "other"


def on_gpu(m: int, k: int, n: int, count: int, form: Form, gpu: Gpu | None) -> Route:
    """The route "auto" takes on the GPU for ``count`` m x k x n products of this ``form``: the
    first rule that holds, in this order, else native float32."""
    c = crossovers(gpu) if _calibration_matters(m, k, n) else CROSSOVERS
    if form == "stack" and small_pairs_kernel_wins(m, k, n, c):
        return ORDERED_ON_GPU
    stack_wins = form == "stack" and stack_emulation_wins(m, k, n, count, c)
    wins = (
        stack_wins or emulation_wins(m, k, n, c) or _replayed_emulation_wins(gpu, m, k, n, form, c)
    )
    if wins and _emulation_fits(gpu, m, k, n, count):
        return EMULATED_ON_GPU if form == "matrix" else EMULATED_STACK_ON_GPU
    if form != "matrix":
        return NATIVE_ON_GPU
    if blocks_kernel_wins(m, k, n, c) and _blocks_supported(gpu):
        return BLOCKS_ON_GPU
    kernel = ordered_kernel_wins(m, k, n, c)
    if kernel is not None and (kernel != "thin" or _thin_kernel_fits(gpu, k, n)):
        return ORDERED_ON_GPU
    return NATIVE_ON_GPU


@functools.lru_cache(maxsize=4096)
def native_by_shape(m: int, k: int, n: int) -> bool:
    """Whether "auto" leaves two m x k x n matrices to cuBLAS SGEMM on every GPU: the shape is
    below the calibrated thresholds and no rule of ``on_gpu`` holds for it under the shipped
    crossovers. Cached per shape: where the product itself is a ~20 us cuBLAS call, asking the
    rules each time would cost 5% of it."""
    if _calibration_matters(m, k, n):
        return False
    c = CROSSOVERS
    return not (
        emulation_wins(m, k, n, c)
        or min(m, k, n) >= c.replayed_min_dim
        or blocks_kernel_wins(m, k, n, c)
        or ordered_kernel_wins(m, k, n, c) is not None
    )


def _calibration_matters(m: int, k: int, n: int) -> bool:
    """Whether a measured threshold could change this product's route: those of level IV need
    every side at least CALIBRATED_FROM, and IV-blocks's (turned off where INT8 is slow) a
    shape it takes. Other products never ask for, nor wait for, a calibration."""
    return min(m, k, n) >= calibration.CALIBRATED_FROM or blocks_kernel_wins(m, k, n)


def choose_backend(a: Any, b: Any, backend: Backend) -> Literal["cpu", "cuda"]:
    """The backend that runs a @ b: ``backend`` itself (RuntimeError for "cuda" without a GPU),
    or for "auto" the operands' own, NumPy ones going to a usable GPU from
    ``offload_min_flops`` (a stack's pairs decide one by one: each must repay its copies)."""
    on_device = device.is_cupy_array(a) or device.is_cupy_array(b)
    if backend != "auto":
        if backend == "cuda" and not device.gpu_available():
            raise RuntimeError(f"backend='cuda' asked for, but {device.unavailable_reason()}")
        return backend
    if on_device:
        return "cuda"
    m, k = a.shape[-2:]
    large = 2 * m * k * b.shape[-1] >= CROSSOVERS.offload_min_flops
    return "cuda" if large and device.gpu_available() else "cpu"


def emulation_wins(m: int, k: int, n: int, c: Crossovers = CROSSOVERS) -> bool:
    """Level IV beats cuBLAS SGEMM on one m x k x n product (or on each pair of a stack)."""
    least = min(m, k, n)
    large = least >= c.large_min_dim and m * k * n >= c.large_min_work
    return least >= c.min_dim or large


def _replayed_emulation_wins(
    gpu: Gpu | None, m: int, k: int, n: int, form: Form, c: Crossovers = CROSSOVERS
) -> bool:
    """Level IV beats cuBLAS SGEMM on two matrices whose product replays one graph."""
    big = form == "matrix" and min(m, k, n) >= c.replayed_min_dim
    return big and gpu is not None and gpu.replays(m, k, n)


def stack_emulation_wins(m: int, k: int, n: int, count: int, c: Crossovers = CROSSOVERS) -> bool:
    """Level IV beats cuBLAS's batched SGEMM on ``count`` m x k x n pairs."""
    if min(m, k, n) < c.stack_min_dim:
        return False
    return count > 1 and count * m * k * n >= c.stack_min_work


def small_pairs_kernel_wins(m: int, k: int, n: int, c: Crossovers = CROSSOVERS) -> bool:
    """fp32-ordered's small-stack or pairs kernel beats cuBLAS's batched SGEMM on a stack of
    m x k x n pairs."""
    if max(m, k, n) <= c.ordered_max_dim:
        return True
    return max(m, k, n) <= c.pairs_max_dim and k % 4 == 0 and n % 4 == 0


def blocks_kernel_wins(m: int, k: int, n: int, c: Crossovers = CROSSOVERS) -> bool:
    """Level IV-blocks beats cuBLAS SGEMM on one m x k x n product, on a GPU that runs it."""
    if m < c.blocks_min_m or k < c.blocks_min_k or m * k < c.blocks_min_mk:
        return False
    if m < c.blocks_fill_m and c.blocks_few_rows_max_n < n <= c.blocks_max_n:
        return False
    return 0 < n <= (c.blocks_wide_max_n if k >= c.blocks_wide_min_k else c.blocks_max_n)


def ordered_kernel_wins(
    m: int, k: int, n: int, c: Crossovers = CROSSOVERS
) -> Literal["split-k", "tall", "thin"] | None:
    """The fp32-ordered kernel that beats cuBLAS SGEMM on one m x k x n product, if any (the
    thin one only where the GPU's blocks can have its shared memory: elsewhere its stand-in
    was never measured against SGEMM)."""
    if m <= 0 or k <= 0 or n <= 0:
        return None
    matrix_vector = min(m, n) == 1 < max(m, n)
    if max(m, n) <= c.split_max_mn and k >= c.split_min_k and not matrix_vector:
        return "split-k"
    if m >= c.tall_min_m and n <= c.tall_max_n and k >= c.tall_min_k:
        return "tall"
    thin = m >= c.thin_wide_min_m or (m >= c.thin_min_m and k * n <= c.thin_max_kn)
    return "thin" if thin and k <= ordered.CHUNK and n <= THIN_MAX_N else None


def _emulation_fits(gpu: Gpu | None, m: int, k: int, n: int, count: int) -> bool:
    """Whether the GPU has room for level IV's workspace (all pairs at once): where it has not,
    "auto" runs native float32, which needs none, rather than raise MemoryError. (No GPU, as
    when routing is asked about shapes alone: True.)"""
    return gpu is None or gpu.workspace_bytes(EMULATED, m, k, n, count) <= gpu.free_bytes()


def _blocks_supported(gpu: Gpu | None) -> bool:
    """Whether the GPU runs level IV-blocks (INT8 mma.sync: compute capability 8.0 or later)."""
    return gpu is not None and gpu.blocks_supported()


def _thin_kernel_fits(gpu: Gpu | None, k: int, n: int) -> bool:
    """Whether the GPU's blocks can have fp32-ordered's thin kernel's shared memory."""
    return gpu is not None and gpu.thin_fits(k, n)

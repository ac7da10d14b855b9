"""The fused INT8 product: one kernel per call runs every slice product of a level and the
combine (``fused_kernel``), in place of one cuBLAS INT8 GEMM per weight class, INT32 class sums
written to memory and read back, and an elementwise combine (``sliced``).

On Hopper, levels T6, IV and V run hand-written wgmma kernels (``fused_wgmma``). Every other
case runs Triton's: Triton's compiler turns it into a cubin for the GPU at hand at first use
(cached on disk by Triton), and CuPy launches it on the caller's stream, like every other kernel
of this backend (Triton's own launcher would need PyTorch). Triton is optional, in the CUDA extras:
without it, or on a GPU older than Ampere, ``serves`` says no and the class-sum pipeline runs.
The bits are the same on every path (``combine``'s formula on exact class sums).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import cupy as cp
import numpy as np

from .. import switches
from ..combine import int32_k_block, overflow_slack
from ..levels import LEVELS, Level, triangle
from ..packer import pair_exponent
from . import fused_wgmma
from .geometry import batch_chunks, chunk_length
from .packs import PackedOperand

# MIXPERT_FUSED: "0" turns the fused kernel off (the class-sum pipeline runs), "always" runs it
# wherever it can, even where the pipeline is faster; unset (or "1"): where it is faster.
SWITCH = "MIXPERT_FUSED"
MIN_CAPABILITY = 80  # INT8 mma.sync (Ampere) or wgmma (Hopper) under Triton's tl.dot
MAX_CLASSES = 4  # the kernel's INT32 accumulators: weight classes 0..3
# Crossovers with the class-sum pipeline (``pipeline_wins``), measured on an H100 in one run:
# benchmarks/results/NVIDIA-H100-80GB-HBM3/fused-anchors.md, columns "(fused)" and "(sums)".
PIPELINE_MIN_SIDE = 4096
MANY_PAIRS = 8
PIPELINE_MIN_SIDE_MANY_PAIRS = 3072


@dataclasses.dataclass(frozen=True)
class Tile:
    """A launch configuration: output tile BM x BN, BK k-steps a stage, warps, pipeline stages,
    row tiles per L2 group."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int
    group_m: int = 8


# Chosen by measurement among the candidates of benchmarks/fused_tiles.py (square products on an
# H100: benchmarks/results/NVIDIA-H100-80GB-HBM3/fused-tiles.log): four INT32 class accumulators
# of BM x BN a tile leave room for 128 x 64 outputs at 8 warps.
TILE = Tile(128, 64, 128, 8, 3)


def mode() -> str:
    """``SWITCH``'s value: "0", "always", or anything else for the default (read at each
    product: ``switches``)."""
    return switches.read(SWITCH, "1")


@contextlib.contextmanager
def switched(to: str) -> Iterator[None]:
    """``SWITCH`` set to ``to`` ("0", "1", "always") inside the block, as it was after it."""
    saved = os.environ.get(SWITCH)
    os.environ[SWITCH] = to
    try:
        yield
    finally:
        if saved is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = saved


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def serves(level: Level, m: int, n: int, k_pad: int) -> bool:
    """Whether a fused kernel computes ``level``'s (m x k_pad) @ (k_pad x n) products here, k
    within one INT32 block (longer k runs the class-sum pipeline, which blocks k), on an output
    where it beats the class sums (or everywhere, with ``SWITCH`` "always"): on Hopper the
    levels ``fused_wgmma`` routes (``fused_wgmma.pipeline_wins``); else Triton's, installed, on
    an Ampere or newer GPU, for a triangle of pairs with at most MAX_CLASSES classes
    (``pipeline_wins``)."""
    switch = mode()
    if switch == "0" or k_pad > int32_k_block(level):
        return False
    if on_wgmma(level):
        return switch == "always" or not fused_wgmma.pipeline_wins(level, m, n)
    return _kernel_takes(level) and (switch == "always" or not pipeline_wins(level, m, n))


def on_wgmma(level: Level) -> bool:
    """Whether ``level``'s fused products run ``fused_wgmma``'s kernel here (the levels of
    ``fused_wgmma.ROUTED``, on Hopper): faster than Triton's kernel at every size measured
    (benchmarks/results/NVIDIA-H200/wgmma-*.json)."""
    return fused_wgmma.routed(level)


@functools.cache
def _kernel_takes(level: Level) -> bool:
    """Triton installed, an Ampere or newer GPU, and a level of the kernel's form: INT8, a
    triangle of pairs, at most MAX_CLASSES classes."""
    return (
        level.kind == "int8"
        and triton_installed()
        and _capability() >= MIN_CAPABILITY
        and len(level.groups) <= MAX_CLASSES
        and level.pairs == triangle(level.a_slices, level.b_slices, len(level.groups) - 1)
    )


def status() -> str:
    """One line for ``mixpert show-config``: whether the fused kernel runs here, and if not, why."""
    if mode() == "0":
        return f"off: {SWITCH}=0"
    wgmma = ", ".join(n for n in sorted(fused_wgmma.ROUTED) if on_wgmma(LEVELS[n]))
    if not triton_installed() or _capability() < MIN_CAPABILITY:
        why = (
            "Triton is not installed (the CUDA extras bring it)" if not triton_installed()
            else f"compute capability {_capability()} < {MIN_CAPABILITY}"
        )  # fmt: skip
        if wgmma:
            return f"levels {wgmma} only (fused_wgmma); other levels off: {why}"
        return f"off: {why}"
    where = "where it beats the class-sum pipeline"
    if mode() == "always":
        where = f"wherever it can run ({SWITCH}=always)"
    if wgmma:
        return f"on {where}; levels {wgmma} on their wgmma kernel (fused_wgmma)"
    return f"on {where}"


def pipeline_wins(level: Level, m: int, n: int) -> bool:
    """Where cuBLAS's tuned INT8 GEMMs, class sums through memory and all, beat this kernel:
    outputs whose both sides reach PIPELINE_MIN_SIDE (lower for levels of many pairs). Below
    it (small and thin outputs, stacks of small pairs) the fused kernel wins by saving the
    class sums' round trip and the launches."""
    side = PIPELINE_MIN_SIDE if len(level.pairs) <= MANY_PAIRS else PIPELINE_MIN_SIDE_MANY_PAIRS
    return min(m, n) >= side


def product(
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    level: Level,
    c: cp.ndarray,
    tile: Tile | None = None,
) -> None:
    """C (s, m, n) from the packs of two stacks of s pairs (s = 1: two matrices): every entry
    gets ``combine``'s value, flagged lines included (``sliced``'s bypass overwrites those).
    ``fused_wgmma``'s kernel where it serves, unless a Triton ``tile`` is asked for."""
    if tile is None and on_wgmma(level):
        fused_wgmma.product(a_pack, b_pack, level, c)
        return
    count, m, n = c.shape
    tile = tile or TILE
    kernel = _kernel(level, b_pack.slots, tile, cp.cuda.Device().id)
    k_pad = a_pack.k_pad
    tiles = -(-m // tile.bm) * -(-n // tile.bn)
    slack = np.float64(k_pad * overflow_slack(level))  # the CPU's k_slack, as its double
    for first in batch_chunks(count):
        pairs = chunk_length(first, count)
        a_lines, b_lines = first * m, first * n
        kernel(
            (tiles, pairs),
            (
                a_pack.data[a_lines:], b_pack.data[b_lines:],
                a_pack.exponents[a_lines:], b_pack.exponents[b_lines:], c[first:],
                np.int32(m), np.int32(n), np.int32(k_pad), np.int32(a_pack.ld),
                np.int32(b_pack.ld), slack,
            ),
        )  # fmt: skip


class _Launcher:
    """A compiled kernel: its CuPy function, threads and shared memory."""

    def __init__(self, compiled: Any) -> None:
        meta = compiled.metadata
        if meta.global_scratch_size or meta.profile_scratch_size:
            raise RuntimeError("the fused kernel asks for scratch memory, which is not passed")
        self._module = cp.cuda.function.Module()
        self._module.load(compiled.asm["cubin"])
        self.function = self._module.get_function(compiled.name)
        self.threads = 32 * meta.num_warps
        self.shared = meta.shared
        if self.shared > 48 * 1024:  # above the default a launch may take
            cp.cuda.driver.funcSetAttribute(
                self.function.ptr,
                cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                self.shared,
            )

    def __call__(self, grid: tuple[int, int], args: tuple[Any, ...]) -> None:
        null = np.uint64(0)  # Triton's global and profile scratch pointers (none asked for)
        self.function((*grid, 1), (self.threads, 1, 1), (*args, null, null), shared_mem=self.shared)


SIGNATURE = {
    "a_ptr": "*i8", "b_ptr": "*i8", "a_exp": "*i32", "b_exp": "*i32", "c_ptr": "*fp32",
    "m": "i32", "n": "i32", "k_pad": "i32", "ld_a": "i32", "ld_b": "i32", "k_slack": "fp64",
}  # fmt: skip
# 16-byte aligned pointers and multiples of 16 (packs.K_ALIGN): vector loads of the packs
ALIGNED = ("a_ptr", "b_ptr", "k_pad", "ld_a", "ld_b")


@functools.cache
def _kernel(level: Level, b_slots: int, tile: Tile, device: int) -> _Launcher:
    """The kernel for ``level`` and ``tile``, loaded on ``device`` (a module is per device)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .fused_kernel import fused_int8

    constants = {
        "A_SLICES": level.a_slices, "B_SLICES": level.b_slices, "B_SLOTS": b_slots,
        "MAX_SUM": len(level.groups) - 1, "W0": pair_exponent(0),
        "STEP": pair_exponent(1) - pair_exponent(0),
        "BM": tile.bm, "BN": tile.bn, "BK": tile.bk, "GROUP_M": tile.group_m,
    }  # fmt: skip
    names = fused_int8.arg_names
    source = ASTSource(
        fn=fused_int8,
        signature={**SIGNATURE, **dict.fromkeys(constants, "constexpr")},
        constexprs=constants,
        attrs={(names.index(x),): [["tt.divisibility", 16]] for x in ALIGNED},
    )
    target = GPUTarget("cuda", _capability(), 32)
    # as many pipeline stages as the tile asks and the SM's shared memory holds
    stage_bytes = (level.a_slices * tile.bm + level.b_slices * tile.bn) * tile.bk
    room = cp.cuda.Device(device).attributes["MaxSharedMemoryPerBlockOptin"]
    options = {"num_warps": tile.warps, "num_stages": max(1, min(tile.stages, room // stage_bytes))}
    return _Launcher(triton.compile(source, target=target, options=options))


@functools.cache
def _capability() -> int:
    return int(cp.cuda.Device().compute_capability)

"""Level IV's fused product on Hopper through the hand-written kernel ``kernels/fused_iv.cu``:
the contract and bits of ``fused.product`` (Triton's kernel) for level IV, at the INT8 tensor
cores' rate. Every slice product on wgmma (TMA loads into a 3-stage ring fed by a producer
warpgroup, two consumer warpgroups with the four INT32 class sums in registers), ``combine``'s
formula in the epilogue, float32 C, a persistent grid over output tiles of all pairs.

Built, loaded and launched as ``hopper`` says. The packs are read through 3-D tensor maps
{k_pad, slots, lines} (innermost first), boxes of one slot's 128-byte k-block of a tile's
lines, zeros past k_pad (not the next slot's digits).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import cupy as cp
import numpy as np

from ..combine import int32_k_block, overflow_slack
from ..levels import Level, triangle
from ..packer import pair_exponent
from . import hopper
from .hopper import MAX_INT32, MAX_TMA_STRIDE, TMA_ALIGNMENT
from .packs import PackedOperand

SOURCE, KERNEL = "fused_iv.cu", "fused_iv"
# The launch configuration fused_iv.cu is written for (its constants; the kernel traps on a
# block or dynamic smem that differs, rather than deadlock or overrun)
THREADS = 384
SMEM_BYTES = 222_256  # 3 stages x (48 + 24) KB + barriers + 1 KB for aligning the base
BLOCK_M, BLOCK_N = 128, 64  # output tile; TMA boxes of 128 B x 1 slot x BLOCK_M | BLOCK_N lines
BLOCK_K = 128  # k bytes per stage: the box's inner dimension, one 128-byte swizzle row
SLICES = 3  # level IV: 3 slices of A and of B, 3 slots a line
RASTER_GROUP = 16  # tile-rows along m visited together (L2 reuse of B)
MAP_CACHE = 4096  # tensor maps kept (a few hundred bytes each)


class _Args(ctypes.Structure):
    """The kernel's scalar parameters, after its two tensor maps, in its order."""

    _fields_ = [
        ("a_exp", ctypes.c_uint64),
        ("b_exp", ctypes.c_uint64),
        ("c", ctypes.c_uint64),
        ("k_slack", ctypes.c_double),
        ("m", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("k_pad", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("w0", ctypes.c_int32),
        ("step", ctypes.c_int32),
        ("raster_group", ctypes.c_int32),
    ]


def takes(level: Level) -> bool:
    """Whether ``level`` is the kernel's: INT8, 3 x 3 slices, the pairs i + j <= 3 in 4 classes."""
    return (
        level.kind == "int8"
        and level.a_slices == SLICES
        and level.b_slices == SLICES
        and tuple(level.pairs) == triangle(SLICES, SLICES, 3)
    )


def available() -> bool:
    """Whether the current device runs the kernel (compute capability 9.0, built and loaded)."""
    try:
        return _available(cp.cuda.runtime.getDevice())
    except cp.cuda.runtime.CUDARuntimeError:
        return False


@functools.cache
def _available(device: int) -> bool:
    return hopper.available(SOURCE, KERNEL, SMEM_BYTES)


def product(a_pack: PackedOperand, b_pack: PackedOperand, level: Level, c: cp.ndarray) -> None:
    """C (s, m, n) from the packs of two stacks of s pairs (s = 1: two matrices), as
    ``fused.product``: every entry gets ``combine``'s value, flagged lines included (``sliced``'s
    bypass overwrites those). ValueError on anything the kernel cannot take."""
    count, m, n = _validate(a_pack, b_pack, level, c)
    if count == 0 or m == 0 or n == 0:
        return
    k_pad = a_pack.k_pad
    kernel = hopper.kernel(SOURCE, KERNEL, SMEM_BYTES, cp.cuda.runtime.getDevice())
    map_a = _tensor_map(a_pack.data.data.ptr, k_pad, count * m, BLOCK_M)
    map_b = _tensor_map(b_pack.data.data.ptr, k_pad, count * n, BLOCK_N)
    w0, step = pair_exponent(0), pair_exponent(1) - pair_exponent(0)
    slack = float(np.float64(k_pad * overflow_slack(level)))  # the CPU's k_slack, as its double
    args = _Args(a_pack.exponents.data.ptr, b_pack.exponents.data.ptr, c.data.ptr, slack, m, n,
                 k_pad, count, w0, step, RASTER_GROUP)  # fmt: skip
    tiles = count * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    hopper.launch(kernel, tiles, THREADS, (map_a, map_b), args, cp.cuda.get_current_stream().ptr)


def _validate(
    a_pack: PackedOperand, b_pack: PackedOperand, level: Level, c: cp.ndarray
) -> tuple[int, int, int]:
    """(count, m, n) of C, or ValueError naming the rule broken."""

    def need(ok: bool, what: str, rule: str) -> None:
        if not ok:
            raise ValueError(f"fused_iv: {what}: {rule}")

    need(takes(level), f"level {level.name!r}",
         "only level IV is implemented (INT8, 3 x 3 slices, pairs i + j <= 3)")  # fmt: skip
    need(c.ndim == 3 and c.dtype == cp.float32 and c.flags.c_contiguous, f"c {c.shape} {c.dtype}",
         "must be a C-contiguous float32 (s, m, n) array")  # fmt: skip
    count, m, n = c.shape
    need(count * max(m, n) + BLOCK_M <= MAX_INT32, f"c {c.shape}",
         "s * m and s * n (+ one tile) must fit in int32 (TMA line coordinates)")  # fmt: skip
    tiles = count * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    need(tiles <= MAX_INT32, f"c {c.shape}", f"gives {tiles} output tiles, more than int32 holds")
    need(c.data.ptr % 4 == 0, "c's pointer", "must be 4-byte aligned")
    k_block = int32_k_block(level)
    rule = f"must be <= combine.int32_k_block(level) = {k_block} (class sums stay in INT32)"
    need(a_pack.k_pad <= k_block, f"k_pad = {a_pack.k_pad}", rule)
    for name, pack, lines in (("a_pack", a_pack, count * m), ("b_pack", b_pack, count * n)):
        data = pack.data
        need(data.dtype == cp.int8 and data.ndim == 3 and data.flags.c_contiguous,
             f"{name}.data {data.shape} {data.dtype}",
             "must be a C-contiguous int8 (lines, slots, k_pad) array")  # fmt: skip
        need(pack.slots == SLICES and data.shape[1] == SLICES, f"{name}.slots = {pack.slots}",
             f"must be {SLICES} (level IV's slices)")  # fmt: skip
        need(data.shape[0] >= lines, f"{name} lines = {data.shape[0]}",
             f"must be >= {lines} (the stack's lines)")  # fmt: skip
        need(data.shape[2] == pack.k_pad, f"{name}.k_pad = {pack.k_pad}",
             f"must equal data.shape[2] = {data.shape[2]}")  # fmt: skip
        need(pack.k_pad > 0 and pack.k_pad % TMA_ALIGNMENT == 0, f"{name}.k_pad = {pack.k_pad}",
             f"must be a positive multiple of {TMA_ALIGNMENT} (TMA strides)")  # fmt: skip
        need(pack.ld < MAX_TMA_STRIDE, f"{name}.ld = {pack.ld}", "must be < 2^40")
        need(data.data.ptr % TMA_ALIGNMENT == 0, f"{name}.data pointer",
             f"must be a multiple of {TMA_ALIGNMENT} (TMA base address)")  # fmt: skip
        exps = pack.exponents
        need(exps.dtype == cp.int32 and exps.ndim == 1 and exps.shape[0] >= lines
             and exps.flags.c_contiguous, f"{name}.exponents {exps.shape} {exps.dtype}",
             f"must be a contiguous int32 vector of >= {lines} entries")  # fmt: skip
    need(a_pack.k_pad == b_pack.k_pad, f"k_pad {a_pack.k_pad} / {b_pack.k_pad}",
         "A's and B's packs must have the same k_pad")  # fmt: skip
    return count, m, n


@functools.lru_cache(maxsize=MAP_CACHE)
def _tensor_map(ptr: int, k_pad: int, lines: int, box: int) -> Any:
    """The TMA map of a pack of ``lines`` lines of SLICES slots of ``k_pad`` int8: boxes of
    128 B x 1 slot x ``box`` lines, zeros past k_pad or the last line."""
    return hopper.int8_tensor_map(
        ptr, (k_pad, SLICES, lines), (k_pad, SLICES * k_pad), (BLOCK_K, 1, box)
    )

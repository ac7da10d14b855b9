"""The fused INT8 product on Hopper through the hand-written kernels of ``kernels/fused_wgmma.cu``,
one a level of equal slices on both sides (I, T6, IV, V): the contract and bits of
``fused.product`` (Triton's kernel) at the INT8 tensor cores' rate. Every slice product on wgmma
(TMA loads into a shared-memory ring fed by a producer warpgroup, two consumer warpgroups with
the level's INT32 class sums in registers), ``combine``'s formula in the epilogue, float32 C,
a persistent grid over output tiles of all pairs.

Built, loaded and launched as ``hopper`` says. The packs are read through 3-D tensor maps
{k_pad, slots, lines} (innermost first), boxes of one slot's k-block (128 or 64 bytes, one row
of that swizzle) of a tile's lines, zeros past k_pad (not the next slot's digits).

A level's kernel is routed to (``routed``) once it has given the oracle's bits and its speed
on a GPU (``ROUTED``, with the output side from which the class-sum pipeline beats it); the
others are built and tested (``product``), not used by ``fused``. ``VARIANTS`` are other builds
of a level's kernel (the same pairs and bits, another k-block or schedule), launched only when
asked for by name (``product(..., variant=VARIANTS[name])``): candidates measured against the
level's own.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..combine import int32_k_block, overflow_slack
from ..levels import Level, triangle
from ..packer import pair_exponent
from . import hopper
from .hopper import MAX_INT32, MAX_TMA_STRIDE, TMA_ALIGNMENT

if TYPE_CHECKING:  # (the forms need no CuPy: their tests run on any machine)
    import cupy as cp

    from .packs import PackedOperand

SOURCE = "fused_wgmma.cu"
# The launch configuration fused_wgmma.cu is written for (its constants; a kernel traps on a
# block or dynamic smem that differs, rather than deadlock or overrun)
THREADS = 384
BLOCK_N = 64  # output tile columns; TMA boxes of k_block B x 1 slot x tile_m | BLOCK_N lines
# A kernel's schedule, by its output tile's rows (the kernel's TILE_M): both consumer
# warpgroups on one 128-row tile, or each on its own 64-row tiles in turn (ping-pong: one
# consumer's main loop runs while the other's epilogue does)
COOPERATIVE, PINGPONG = 128, 64
BLOCK_M = COOPERATIVE  # the largest tile's rows (the int32 line-coordinate check)
BLOCK_K = 128  # k bytes per stage (a Form's default): the box's inner dimension, one swizzle row
K_BLOCKS = (128, 64)  # the k-blocks the kernel builds: a 128B or 64B swizzle row each
RASTER_ROWS = 2048  # rows of A whose tiles are visited together (L2 reuse of B)
MAP_CACHE = 4096  # tensor maps kept (a few hundred bytes each)
SMEM_LIMIT = 227 * 1024  # dynamic shared memory a block may opt in to on sm_90
SMEM_ALIGN = 1024  # slack the kernel aligns its ring's base with (the swizzle patterns repeat)
BARRIERS = 2 * 8  # bytes of a stage's two mbarriers (full, empty)
TURNS = 2 * 8  # bytes of the ping-pong consumers' two turn mbarriers
EXPONENTS = 2 * 2 * 128 * 4  # bytes of the consumers' tile exponents (2 tiles x 2 x 128 int32)
# The macro that builds the variants' kernels too: a build of their own, so that the module
# every process builds at first use holds the levels' kernels alone
VARIANT_BUILD = ("FUSED_WGMMA_VARIANTS",)
# The levels whose kernel has given the oracle's bits and beaten Triton's on a GPU, each with
# the side (of both output sides) from which cuBLAS's class sums beat it, None for never:
# ``fused`` routes their fused products here (measured: wgmma-*.json, fused-anchors.md)
ROUTED: dict[str, int | None] = {"T6": None, "IV": None, "V": 16384}


class Form(NamedTuple):
    """A level's kernel: its name in the module, the level's pairs (compiled into it), its
    slices a side (one slot a slice in each pack line), its k-block in bytes (a stage's k,
    the TMA box's inner size and the swizzle's width), its output tile's rows (its
    schedule: COOPERATIVE or PINGPONG) and the macros of the build that holds it."""

    kernel: str
    pairs: tuple[tuple[int, int], ...]
    slices: int
    k_block: int = BLOCK_K
    tile_m: int = COOPERATIVE
    defines: tuple[str, ...] = ()

    @property
    def stage_bytes(self) -> int:
        """One k-block of the slices of a tile_m-line tile of A and a 64-line tile of B."""
        return self.slices * (self.tile_m + BLOCK_N) * self.k_block

    @property
    def turns(self) -> int:
        """Bytes of the schedule's turn barriers (ping-pong's two)."""
        return TURNS if self.tile_m == PINGPONG else 0

    @property
    def stages(self) -> int:
        """The ring's stages: as many as fit in shared memory (the kernel's Level::STAGES)."""
        rest = SMEM_ALIGN + self.turns + EXPONENTS
        return (SMEM_LIMIT - rest) // (self.stage_bytes + BARRIERS)

    @property
    def smem(self) -> int:
        """Dynamic shared memory: the ring, its barriers, the turn barriers, the tile exponents
        and 1 KB to align the ring's base."""
        return self.stages * (self.stage_bytes + BARRIERS) + self.turns + EXPONENTS + SMEM_ALIGN

    def tiles(self, count: int, m: int, n: int) -> int:
        """Output tiles of a stack of ``count`` m x n products."""
        return count * -(-m // self.tile_m) * -(-n // BLOCK_N)

    def blocks_wanted(self, tiles: int) -> int:
        """Blocks that give every consumer a tile: one a tile, or one a pair of tiles."""
        return tiles if self.tile_m == COOPERATIVE else -(-tiles // 2)


FORMS = {
    "I": Form("fused_wgmma_I", triangle(2, 2, 2), 2),
    "T6": Form("fused_wgmma_T6", triangle(3, 3, 2), 3),
    "IV": Form("fused_wgmma_IV", triangle(3, 3, 3), 3),
    # V on 64-byte k-blocks: 4 stages of 48 KB, where 128-byte ones leave room for 2 of 96 KB
    # (the same bytes in flight, refilled twice as often; measured: wgmma-fused-V_k64.json)
    "V": Form("fused_wgmma_V", triangle(4, 4, 3), 4, 64),
}
# Builds of a level's kernel not routed to, each a level's pairs and slices on another k-block
# or schedule, measured against the level's own (``check_gpu.py --variant``, ``kernel_times.py``):
# V on 128-byte k-blocks, the ring of 2 its kernel had; the ping-pong schedule, 0.70-1.03x its
# level's kernel on stacks and from 2048 up (epilogue-56/). (I, T6 and IV on 64-byte k-blocks,
# rings of 9, 6, 6, ran 0.81-0.94x their kernels at 4096 and 8192: wgmma-fused-*_k64.json.)
VARIANTS = {
    name: Form(f"fused_wgmma_{name}", triangle(s, s, g), s, k_block, tile_m, VARIANT_BUILD)
    for name, s, g, k_block, tile_m in (
        ("V_k128", 4, 3, 128, COOPERATIVE),
        # the ping-pong schedule: 64-row tiles, a consumer's epilogue beside the other's main loop
        ("T6_pingpong", 3, 2, 128, PINGPONG),
        ("IV_pingpong", 3, 3, 128, PINGPONG),
        ("V_pingpong", 4, 3, 64, PINGPONG),
    )
}


class _Args(ctypes.Structure):
    """A kernel's scalar parameters, after its two tensor maps, in its order."""

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


def form(level: Level) -> Form | None:
    """The kernel of ``level``'s form: an INT8 level of this module with its very pairs."""
    found = FORMS.get(level.name)
    return found if found is not None and computes(found, level) else None


def computes(found: Form, level: Level) -> bool:
    """Whether kernel ``found`` computes ``level``'s products: an INT8 level of its slices and
    its very pairs (a level's form, or a variant of it)."""
    return (
        level.kind == "int8"
        and level.a_slices == level.b_slices == found.slices
        and tuple(level.pairs) == found.pairs
    )


def level_of(found: Form) -> str:
    """The name of the level whose products kernel ``found`` computes (a variant's level)."""
    return next(
        name for name, f in FORMS.items() if (f.pairs, f.slices) == (found.pairs, found.slices)
    )


def routed(level: Level) -> bool:
    """Whether ``fused`` runs ``level``'s products here: a kernel run on a GPU before
    (``ROUTED``) and this device runs it."""
    return level.name in ROUTED and available(level)


def pipeline_wins(level: Level, m: int, n: int) -> bool:
    """Whether the class-sum pipeline beats a routed ``level``'s kernel on an m x n output:
    both sides at least the level's side in ``ROUTED``."""
    side = ROUTED.get(level.name)
    return side is not None and min(m, n) >= side


def available(level: Level) -> bool:
    """Whether the current device runs ``level``'s kernel (compute capability 9.0, built and
    loaded)."""
    found = form(level)
    if found is None:
        return False
    try:
        import cupy as cp

        return _available(cp.cuda.runtime.getDevice(), found)
    except Exception:  # no CuPy, no device
        return False


@functools.cache
def _available(device: int, found: Form) -> bool:
    return hopper.available(SOURCE, found.kernel, found.smem, found.defines)


def product(
    a_pack: PackedOperand, b_pack: PackedOperand, level: Level, c: cp.ndarray,
    variant: Form | None = None,
) -> None:  # fmt: skip
    """C (s, m, n) from the packs of two stacks of s pairs (s = 1: two matrices), as
    ``fused.product``: every entry gets ``combine``'s value, flagged lines included (``sliced``'s
    bypass overwrites those). By ``level``'s kernel, or by ``variant``, another build of it (e.g.
    ``VARIANTS["V_k128"]``: the same bits). ValueError on anything the kernel cannot take."""
    import cupy as cp

    found, (count, m, n) = _validate(a_pack, b_pack, level, c, variant)
    if count == 0 or m == 0 or n == 0:
        return
    k_pad, k_block = a_pack.k_pad, found.k_block
    kernel = hopper.kernel(
        SOURCE, found.kernel, found.smem, cp.cuda.runtime.getDevice(), found.defines
    )
    map_a = _tensor_map(a_pack.data.data.ptr, k_pad, found.slices, count * m, found.tile_m,
                        k_block)  # fmt: skip
    map_b = _tensor_map(b_pack.data.data.ptr, k_pad, found.slices, count * n, BLOCK_N, k_block)
    w0, step = pair_exponent(0), pair_exponent(1) - pair_exponent(0)
    slack = float(np.float64(k_pad * overflow_slack(level)))  # the CPU's k_slack, as its double
    args = _Args(a_pack.exponents.data.ptr, b_pack.exponents.data.ptr, c.data.ptr, slack, m, n,
                 k_pad, count, w0, step, RASTER_ROWS // found.tile_m)  # fmt: skip
    blocks = found.blocks_wanted(found.tiles(count, m, n))
    hopper.launch(kernel, blocks, THREADS, (map_a, map_b), args, cp.cuda.get_current_stream().ptr)


def _validate(
    a_pack: PackedOperand, b_pack: PackedOperand, level: Level, c: cp.ndarray,
    asked: Form | None = None,
) -> tuple[Form, tuple[int, int, int]]:  # fmt: skip
    """The kernel (``asked``, else the level's) and (count, m, n) of C, or ValueError naming
    the rule broken."""
    import cupy as cp

    def need(ok: bool, what: str, rule: str) -> None:
        if not ok:
            raise ValueError(f"fused_wgmma: {what}: {rule}")

    found = form(level) if asked is None else asked
    if found is None:
        kernels = ", ".join(FORMS)
        raise ValueError(f"fused_wgmma: level {level.name!r}: has no kernel (only {kernels})")
    need(computes(found, level), f"kernel {found.kernel}",
         f"does not compute level {level.name}'s pairs")  # fmt: skip
    need(found.k_block in K_BLOCKS, f"kernel {found.kernel}'s k_block = {found.k_block}",
         f"must be one of {K_BLOCKS}")  # fmt: skip
    need(c.ndim == 3 and c.dtype == cp.float32 and c.flags.c_contiguous, f"c {c.shape} {c.dtype}",
         "must be a C-contiguous float32 (s, m, n) array")  # fmt: skip
    count, m, n = c.shape
    need(count * max(m, n) + BLOCK_M <= MAX_INT32, f"c {c.shape}",
         "s * m and s * n (+ one tile) must fit in int32 (TMA line coordinates)")  # fmt: skip
    tiles = found.tiles(count, m, n)
    need(tiles <= MAX_INT32, f"c {c.shape}", f"gives {tiles} output tiles, more than int32 holds")
    need(c.data.ptr % 4 == 0, "c's pointer", "must be 4-byte aligned")
    k_block = int32_k_block(level)
    rule = f"must be <= combine.int32_k_block(level) = {k_block} (class sums stay in INT32)"
    need(a_pack.k_pad <= k_block, f"k_pad = {a_pack.k_pad}", rule)
    slices = found.slices
    for name, pack, lines in (("a_pack", a_pack, count * m), ("b_pack", b_pack, count * n)):
        data = pack.data
        need(data.dtype == cp.int8 and data.ndim == 3 and data.flags.c_contiguous,
             f"{name}.data {data.shape} {data.dtype}",
             "must be a C-contiguous int8 (lines, slots, k_pad) array")  # fmt: skip
        need(pack.slots == slices and data.shape[1] == slices, f"{name}.slots = {pack.slots}",
             f"must be {slices} (level {level.name}'s slices)")  # fmt: skip
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
    return found, (count, m, n)


@functools.lru_cache(maxsize=MAP_CACHE)
def _tensor_map(
    ptr: int, k_pad: int, slices: int, lines: int, box: int, k_block: int = BLOCK_K
) -> Any:
    """The TMA map of a pack of ``lines`` lines of ``slices`` slots of ``k_pad`` int8: boxes of
    ``k_block`` B x 1 slot x ``box`` lines, swizzled by ``k_block`` bytes (one swizzle row a
    box line: the kernel's descriptors), zeros past k_pad or the last line."""
    return hopper.int8_tensor_map(
        ptr, (k_pad, slices, lines), (k_pad, slices * k_pad), (k_block, 1, box), swizzle=k_block
    )

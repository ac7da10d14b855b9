#!/usr/bin/env python3
"""CPU model (numpy) of fused_wgmma.cu's index logic and epilogue arithmetic, for each of its
levels (I, T6, IV, V) and variants (V_k128: level V on 128-byte k-blocks), end to end on small
shapes, against mixpert's own combine (runtime/combine.py) on class sums taken straight from the
packs:

  0. the kernel's level table: fused_wgmma_<name> is built for the level's S slices and G
     classes and its k-block BK (read from the source), its pairs are the level's in the level's
     order, the stages are the most that fit and the dynamic smem (SMEM_BYTES, what the launcher
     passes) fits in 227 KB;
  1. tile enumeration over batch x tiles_m x tiles_n (each tile once, persistent grid);
  2. the 3-D TMA boxes of the launcher's maps, dims {k_pad, S, lines}, box {BK, 1, rows}: zero
     fill past k_pad and past the last line; B's slice j from slot S - 1 - j;
  3. TMA SWIZZLE_<BK>B placement into the stage (slice s of A at 128 BK * s, of B at 64 BK * s)
     and the wgmma K-major descriptor reads (start + 32 B per k-step, consumer cw's A rows
     64 BK in): BK = 128: SW128, SBO 1024, the model of ../wgmma/check_layout.py, verified on
     the H200 for wgmma_gemm; BK = 64: SW64 (16-byte chunks XORed with address bits 7-8, as
     CUTLASS's Swizzle<2,4,3>), SBO 512, layout type 2 -- the same model for 64-byte rows,
     level V's on the H200; a control reads the 64-byte tiles with SW128 descriptors and must
     fail;
  4. the pair table (class i + j) and scale_d (first pair of a class overwrites at kb = 0,
     kk = 0): a stale accumulator from the previous tile would show;
  5. the accumulator fragment (row 16 warp + lane/4 (+8), col 8 i + 2 (lane%4) (+1)), the
     masked epilogue (each in-window output written once, nothing outside), the exponent
     indexing (z*m + row, z*n + col);
  6. the combine formula as the kernel writes it (pow2 from bits, v + S_g w_g from g = G - 1
     down, round_to_float, saturate) against combine.combine, including saturation, overflow to
     inf and subnormal results;
  7. the mbarrier / wait_group(1) pipeline protocol with the level's STAGES and 2 S loads a
     stage (../wgmma/check_layout.py's simulation, parameterised).

    PYTHONPATH=/work/main python3 check_model.py [--level IV ...]   # exits non-zero on a failure

It transcribes the kernel's formulas, so it checks the logic, not the transcription; the
fragment layout and descriptor encoding are the ones verified on hardware for wgmma_gemm.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mixpert.runtime
from mixpert.runtime.combine import combine, int32_k_block, overflow_slack
from mixpert.runtime.levels import LEVELS, Level
from mixpert.runtime.packer import pair_exponent

KERNEL_SOURCE = Path(mixpert.runtime.__file__).parent / "cuda" / "kernels" / "fused_wgmma.cu"
# fused_wgmma.FORMS and VARIANTS: name -> (level, k-block bytes)
KERNEL_LEVELS = {"I": ("I", 128), "T6": ("T6", 128), "IV": ("IV", 128), "V": ("V", 64)}
VARIANTS = {"V_k128": ("V", 128)}
KERNELS = (*KERNEL_LEVELS, *VARIANTS)
BM, BN, WK = 128, 64, 32
# the kernel's Level<S, G, BK>::STAGES (its static_assert), the most that fit
STAGES_BY_SLICES = {(2, 128): 4, (3, 128): 3, (4, 64): 4, (4, 128): 2}
SMEM_LIMIT = 227 * 1024
# The launcher's dynamic smem: STAGES x 192 BK x S + 2 STAGES mbarriers + 1 KB
SMEM_BYTES = {"I": 197_696, "T6": 222_256, "IV": 222_256, "V": 197_696, "V_k128": 197_664}
W0, STEP = pair_exponent(0), pair_exponent(1) - pair_exponent(0)
OVERFLOW_THRESHOLD = 2.0**128 - 2.0**103
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("  FAIL:", msg)
    return cond


def triangle(s, classes):
    """The kernel's triangle(s, classes): pairs (i, j), i + j < classes, by class, then i; and
    whether each is the first of its class (it overwrites at the tile's first k-step)."""
    pairs, first = [], []
    for g in range(classes):
        members = [(i, g - i) for i in range(s) if 0 <= g - i < s]
        pairs += members
        first += [True] + [False] * (len(members) - 1)
    return pairs, first


@dataclass(frozen=True)
class Kernel:
    """One level's kernel: its constants as fused_wgmma.cu derives them from (S, G)."""

    name: str
    level: Level
    slices: int
    classes: int
    pairs: tuple
    first: tuple
    stages: int
    k_block: int = 128

    @property
    def a_slice(self):
        return BM * self.k_block

    @property
    def b_slice(self):
        return BN * self.k_block

    @property
    def a_stage(self):
        return self.slices * self.a_slice

    @property
    def b_stage(self):
        return self.slices * self.b_slice

    @property
    def smem_bytes(self):
        return self.stages * (self.a_stage + self.b_stage) + 2 * self.stages * 8 + 1024


def kernel_of(name):
    level_name, k_block = {**KERNEL_LEVELS, **VARIANTS}[name]
    level = LEVELS[level_name]
    slices, classes = level.a_slices, len(level.groups)
    pairs, first = triangle(slices, classes)
    return Kernel(name, level, slices, classes, tuple(pairs), tuple(first),
                  STAGES_BY_SLICES[slices, k_block], k_block)  # fmt: skip


def source_levels():
    """{C name: (S, G, BK)} of the kernel source's FUSED_WGMMA_KERNEL(NAME, S, G, BK) entry
    points."""
    text = KERNEL_SOURCE.read_text()
    found = re.findall(r"^FUSED_WGMMA_KERNEL\((\w+), (\d+), (\d+), (\d+)\)", text, re.MULTILINE)
    return {name: (int(s), int(g), int(bk)) for name, s, g, bk in found}


def check_table(kern, built):
    level = kern.level
    check(level.kind == "int8" and level.a_slices == level.b_slices, "level has S x S slices")
    want = (kern.slices, kern.classes, kern.k_block)
    check(built.get(f"fused_wgmma_{kern.name}") == want,
          f"fused_wgmma_{kern.name} is built for {built.get(f'fused_wgmma_{kern.name}')}, "
          f"the level has S = {kern.slices}, G = {kern.classes}, BK = {kern.k_block}")  # fmt: skip
    check(kern.pairs == tuple(level.pairs), f"pair table {kern.pairs} is not {level.pairs}")
    check(level.groups == tuple(range(kern.classes)), "classes are not 0..G-1")
    check([i + j for (i, j), f in zip(kern.pairs, kern.first, strict=True) if f]
          == list(range(kern.classes)), "first-of-class marks")  # fmt: skip
    check(kern.smem_bytes == SMEM_BYTES[kern.name] and kern.smem_bytes <= SMEM_LIMIT,
          f"SMEM_BYTES {kern.smem_bytes} (launcher: {SMEM_BYTES[kern.name]})")  # fmt: skip
    check(kern.smem_bytes + kern.a_stage + kern.b_stage + 16 > SMEM_LIMIT,
          f"{kern.stages} stages: another would fit")  # fmt: skip
    check((kern.stages * kern.a_stage) % 1024 == 0, "B's stages not 1024-byte aligned")
    check(kern.a_slice % 1024 == 0 and kern.b_slice % 1024 == 0, "slices not 1024-byte aligned")
    check(kern.a_stage + kern.b_stage < 2**20, "stage bytes exceed the mbarrier tx-count")


# ------------------------------------------------------------------ kernel formulas
def tile_coords(tile, tiles_m, tiles_n, group):
    per_problem = tiles_m * tiles_n
    tb = tile // per_problem
    t = tile - tb * per_problem
    per_group = group * tiles_n
    g = t // per_group
    first_m = g * group
    gsize = min(tiles_m - first_m, group)
    local = t - g * per_group
    return tb, first_m + local % gsize, local // gsize


def swizzle(addr, width):
    """TMA's SWIZZLE_<width>B (= CUTLASS Swizzle<3,4,3> | <2,4,3>): the 16-byte chunk of a
    byte address XORed with its bits 7-9 (128) or 7-8 (64), a pattern of 8 rows of ``width``."""
    addr = np.asarray(addr, dtype=np.int64)
    return addr ^ (((addr >> 7) & (width // 16 - 1)) << 4)


def tma_box(flat, slots, k_pad, lines, k0, slot, line0, rows, bk):
    """cp.async.bulk.tensor.3d on the map {k_pad, slots, lines}, strides {k_pad, slots k_pad},
    box {bk, 1, rows}: a rows x bk tile, zeros outside the tensor."""
    out = np.zeros((rows, bk), np.int16)
    ld = slots * k_pad
    for y in range(rows):
        line = line0 + y
        if line >= lines:
            continue
        x1 = min(k0 + bk, k_pad)
        if x1 > k0:
            start = line * ld + slot * k_pad + k0
            out[y, : x1 - k0] = flat[start : start + x1 - k0]
    return out


def tma_place(smem, base, tile):
    """The box's rows of bk bytes at base, swizzled by bk bytes (the map's swizzle)."""
    rows, bk = tile.shape
    r, b = np.meshgrid(np.arange(rows), np.arange(bk), indexing="ij")
    smem[swizzle(base + r * bk + b, bk).ravel()] = tile.ravel()


# layout type (bits 62-63) and SBO (8 rows) of the K-major descriptors: make_smem_desc_k<BK>
DESC_LAYOUT = {128: (1, 1024), 64: (2, 512)}
SWIZZLE_OF_LAYOUT = {1: 128, 2: 64}


def make_desc(addr, bk):  # hopper.cuh make_smem_desc_k<bk>
    layout, sbo = DESC_LAYOUT[bk]
    return ((addr & 0x3FFFF) >> 4) | (1 << 16) | ((sbo >> 4) << 32) | (layout << 62)


def wgmma_read(smem, desc, rows):
    """Bytes a K-major swizzled descriptor names: rows x 32 k-bytes (decoded from the desc: rows
    of the swizzle's width, 8 of them then SBO, the swizzle on the byte address)."""
    start = (desc & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    width = SWIZZLE_OF_LAYOUT[(desc >> 62) & 3]
    assert (desc >> 49) & 7 == 0
    r, j = np.meshgrid(np.arange(rows), np.arange(WK), indexing="ij")
    return smem[swizzle(start + (r // 8) * sbo + (r % 8) * width + j, width)].astype(np.int64)


def check_descriptors(bk):
    """One tile of 128 rows x bk bytes placed by TMA, read back by each k-step's descriptor
    (both consumers' 64 rows): the tile; and, as a control, other swizzles' descriptors (or
    SBO) do not read it back."""
    rng = np.random.default_rng(bk)
    tile = rng.integers(-128, 128, (BM, bk)).astype(np.int16)
    smem = np.full(4 * BM * bk, -999, np.int16)
    base = 2 * BM * bk  # a 1024-byte aligned slice further in
    tma_place(smem, base, tile)

    def read_back(make):
        got = np.zeros((BM, bk), np.int64)
        for cw in range(2):
            for kk in range(bk // WK):
                desc = make(base + cw * 64 * bk) + ((kk * WK) >> 4)
                got[64 * cw : 64 * cw + 64, kk * WK : (kk + 1) * WK] = wgmma_read(smem, desc, 64)
        return got

    check(np.array_equal(read_back(lambda a: make_desc(a, bk)), tile),
          f"BK = {bk}: the descriptors do not read back TMA's tile")  # fmt: skip
    other = 64 if bk == 128 else 128
    for what, make in (
        (f"layout and SBO of SW{other}", lambda a: make_desc(a, other)),
        (f"SBO of SW{other}", lambda a: make_desc(a, bk) & ~(0x3FFF << 32)
         | ((DESC_LAYOUT[other][1] >> 4) << 32)),
    ):  # fmt: skip
        try:
            wrong = read_back(make)
        except IndexError:  # read past the model's smem: wrong too
            wrong = None
        check(wrong is None or not np.array_equal(wrong, tile),
              f"control: BK = {bk} read with the {what} still gives the tile")  # fmt: skip
    print(f"  BK = {bk}: {bk // WK} k-steps x 2 consumers read TMA's tile back; SW{other}'s "
          "descriptors do not")  # fmt: skip


def pow2(e):
    """__longlong_as_double(((long long)e + 1023) << 52) (kernel), vectorised."""
    bits = (np.asarray(e, np.int64) + 1023).astype(np.uint64) << np.uint64(52)
    return bits.view(np.float64)


def round_to_float(d):
    d = np.asarray(d, np.float64)
    tiny = np.abs(d) < pow2(-126)
    with np.errstate(over="ignore"):
        normal = d.astype(np.float32)
    frac = np.rint(np.where(tiny, np.abs(d), 0.0) * pow2(149)).astype(np.int64)  # __double2int_rn
    sub = (np.where(d < 0, 0x80000000, 0) | frac).astype(np.uint32).view(np.float32)
    return np.where(tiny, sub, normal)


def saturate(v, scale, k_slack):
    near = np.abs(v) >= OVERFLOW_THRESHOLD
    within = near & (np.abs(v) - k_slack * pow2(scale) < OVERFLOW_THRESHOLD)
    fmax = (np.where(v < 0, 0x80000000, 0) | 0x7F7FFFFF).astype(np.uint32).view(np.float32)
    return np.where(within, fmax, round_to_float(v))


def combine_one(s, scale, k_slack):
    """s: G int32 class sums (arrays); the kernel's combine_one (set_weights, add_classes)."""
    w = [pow2(-(W0 + STEP * g)) for g in range(len(s))]
    v = np.zeros(np.shape(s[0]), np.float64)
    for g in reversed(range(len(s))):
        v = v + s[g].astype(np.int32).astype(np.float64) * w[g]
    v = v * pow2(scale)
    return saturate(v, scale, k_slack)


# ------------------------------------------------------------------ the kernel, modelled
def emulate(kern, a_data, a_exp, b_data, b_exp, batch, m, n, k_pad, grid, group=16):
    """C bits (batch*m*n + margin) and per-entry write counts, as the kernel computes them."""
    k_slack = float(np.float64(k_pad * overflow_slack(kern.level)))
    slices, a_stage, b_stage = kern.slices, kern.a_stage, kern.b_stage
    bk, a_slice, b_slice = kern.k_block, kern.a_slice, kern.b_slice
    a_flat, b_flat = a_data.ravel(), b_data.ravel()
    tiles_m, tiles_n = -(-m // BM), -(-n // BN)
    num_tiles = batch * tiles_m * tiles_n
    num_kb = -(-k_pad // bk)
    margin = 37
    c = np.full(batch * m * n + margin, 0x7FBADBAD, np.uint32)
    writes = np.zeros(c.size, np.int64)
    smem = np.full(kern.stages * (a_stage + b_stage), -999, np.int16)  # base 0: 1024-aligned
    sA, sB = 0, kern.stages * a_stage
    stage = 0
    seen = np.zeros(num_tiles, np.int64)
    stale = np.full((64, BN), 0x5A5A5A5A, np.int64)  # what a previous tile would leave
    acc = [[stale] * kern.classes for _ in range(2)]
    for cta in range(grid):
        for tile in range(cta, num_tiles, grid):
            tb, tm, tn = tile_coords(tile, tiles_m, tiles_n, group)
            seen[tb * tiles_m * tiles_n + tm * tiles_n + tn] += 1
            a_line, b_line = tb * m + tm * BM, tb * n + tn * BN
            for kb in range(num_kb):
                for s in range(slices):  # producer
                    a_box = tma_box(a_flat, slices, k_pad, batch * m, kb * bk, s, a_line, BM, bk)
                    tma_place(smem, sA + stage * a_stage + s * a_slice, a_box)
                    b_box = tma_box(
                        b_flat, slices, k_pad, batch * n, kb * bk, slices - 1 - s, b_line, BN, bk
                    )
                    tma_place(smem, sB + stage * b_stage + s * b_slice, b_box)
                for cw in range(2):  # consumers
                    a_base = sA + stage * a_stage + cw * 64 * bk
                    b_base = sB + stage * b_stage
                    for kk in range(bk // WK):
                        off = (kk * WK) >> 4
                        for p, (i, j) in enumerate(kern.pairs):
                            da = make_desc(a_base + i * a_slice, bk) + off
                            db = make_desc(b_base + j * b_slice, bk) + off
                            scale_d = kb > 0 or kk > 0 or not kern.first[p]
                            prod = wgmma_read(smem, da, 64) @ wgmma_read(smem, db, BN).T
                            g = i + j
                            acc[cw][g] = (acc[cw][g] if scale_d else 0) + prod
                stage = (stage + 1) % kern.stages
            # epilogue, per consumer / thread / register
            for cw in range(2):
                s32 = [((x + 2**31) % 2**32 - 2**31) for x in acc[cw]]  # int32 wrap
                for t in range(128):
                    warp, lane = t // 32, t % 32
                    row0 = tm * BM + cw * 64 + warp * 16 + lane // 4
                    col0 = tn * BN + 2 * (lane % 4)
                    lo_ok, hi_ok = row0 < m, row0 + 8 < m
                    ea = [
                        a_exp[tb * m + row0] if lo_ok else 0,
                        a_exp[tb * m + row0 + 8] if hi_ok else 0,
                    ]
                    for i in range(BN // 8):
                        col = col0 + 8 * i
                        c0_ok, c1_ok = col < n, col + 1 < n
                        eb = [
                            b_exp[tb * n + col] if c0_ok else 0,
                            b_exp[tb * n + col + 1] if c1_ok else 0,
                        ]
                        for h in range(2):
                            if not (lo_ok if h == 0 else hi_ok) or not c0_ok:
                                continue
                            for e in range(2 if c1_ok else 1):
                                r = 4 * i + 2 * h + e
                                # fragment: register r of thread t -> (row, col) in the 64 x 64
                                lr = 16 * warp + lane // 4 + (8 if (r % 4) >= 2 else 0)
                                lc = 8 * (r // 4) + 2 * (lane % 4) + (r % 2)
                                assert (
                                    cw * 64 + lr == row0 - tm * BM + 8 * h
                                    and lc == col + e - tn * BN
                                )
                                s = [np.int64(s32[g][lr, lc]) for g in range(kern.classes)]
                                v = combine_one(s, ea[h] + eb[e], k_slack)
                                idx = tb * m * n + (row0 + 8 * h) * n + col + e
                                c[idx] = np.float32(v).view(np.uint32)
                                writes[idx] += 1
    check(np.all(seen == 1), "tile enumeration does not visit every tile once")
    return c, writes


def oracle(kern, a_data, a_exp, b_data, b_exp, batch, m, n, k_pad):
    """combine() on the level's class sums, B's slice j read from slot S - 1 - j."""
    k_slack = k_pad * overflow_slack(kern.level)
    last = kern.slices - 1
    out = []
    for z in range(batch):
        A = a_data[z * m : (z + 1) * m].astype(np.float64)
        B = b_data[z * n : (z + 1) * n].astype(np.float64)
        sums = {
            g: sum(A[:, i, :] @ B[:, last - j, :].T for i, j in kern.level.pairs if i + j == g)
            for g in kern.level.groups
        }
        out.append(combine(sums, a_exp[z * m : (z + 1) * m], b_exp[z * n : (z + 1) * n], k_slack))
    return np.stack(out).astype(np.float32).view(np.uint32).ravel()


def case(kern, rng, batch, m, n, k, grid, group=16, special=False):
    k_pad = max(16, -(-k // 16) * 16)
    slices = kern.slices
    a = np.zeros((batch * m, slices, k_pad), np.int8)
    b = np.zeros((batch * n, slices, k_pad), np.int8)
    a[:, :, :k] = rng.integers(-127, 128, (batch * m, slices, k))  # k_pad tail: zero digits
    b[:, :, :k] = rng.integers(-127, 128, (batch * n, slices, k))
    a_exp = rng.integers(-20, 20, batch * m).astype(np.int32)
    b_exp = rng.integers(-20, 20, batch * n).astype(np.int32)
    if special:  # rows near the float32 top (saturation / inf) and subnormal-producing rows
        a[0] = 127
        b[:3] = 127
        a_exp[0] = 127 - 2 * 7 + 14 - int(np.log2(k))  # v ~ 2^128: saturation zone
        a_exp[1], a_exp[2] = -140, -150  # subnormal results
        a_exp[3] = 200  # overflow to inf beyond slack
        b_exp[:3] = [0, 1, -1]
    c, writes = emulate(kern, a, a_exp, b, b_exp, batch, m, n, k_pad, grid, group)
    want = oracle(kern, a, a_exp, b, b_exp, batch, m, n, k_pad)
    window = slice(0, batch * m * n)
    ok = check(
        np.array_equal(c[window], want),
        f"{kern.name}: C bits differ from combine() at b={batch} m={m} n={n} k={k}",
    )
    ok &= check(
        np.all(writes[window] == 1) and np.all(writes[batch * m * n :] == 0),
        f"{kern.name}: writes not exactly once in the window / outside it written (m={m} n={n})",
    )
    kinds = ""
    if special:
        f = want.view(np.float32)
        kinds = (
            f" [FLT_MAX {int(np.sum(np.abs(f) == np.finfo(np.float32).max))}, "
            f"inf {int(np.sum(np.isinf(f)))}, subnormal "
            f"{int(np.sum((f != 0) & (np.abs(f) < np.finfo(np.float32).tiny)))}]"
        )
    print(
        f"  {'PASS' if ok else 'FAIL'} batch={batch} m={m} n={n} k={k} (k_pad {k_pad}) "
        f"grid={grid}{kinds}"
    )


# ------------------------------------------------------------------ pipeline protocol
class MBar:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.completed = count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def arrive(self, expect_tx=0):
        assert self.pending > 0
        self.tx += expect_tx
        self.pending -= 1
        self._maybe_complete()

    def complete_tx(self, b):
        self.tx -= b
        assert self.tx >= 0
        self._maybe_complete()

    def try_wait_parity(self, parity):
        return (self.completed & 1) != parity


def simulate(num_tiles, num_kb, seed, stages, loads, bug=None):
    """The kernel's protocol with ``stages`` stages and ``loads`` TMA loads a stage (S of A, S
    of B)."""
    rnd = random.Random(seed)
    full = [MBar(1) for _ in range(stages)]
    empty = [MBar(8) for _ in range(stages)]
    content = [None] * stages
    reads = [0] * stages
    tma_inflight = []

    def producer():
        stage, phase = 0, 0
        for tile in range(num_tiles):
            for kb in range(num_kb):
                par = phase if bug == "empty_parity" else phase ^ 1
                while not empty[stage].try_wait_parity(par):
                    yield
                full[stage].arrive(expect_tx=loads)
                assert reads[stage] == 0, f"producer overwrote stage {stage} while a wgmma reads it"
                content[stage] = "W"
                tma_inflight.append([stage, (tile, kb), loads])
                stage += 1
                if stage == stages:
                    stage, phase = 0, phase ^ 1
                yield

    def consumer(cw):
        stage, phase = 0, 0
        groups = []

        def retire(keep):
            while len(groups) > keep:
                s, tag = groups.pop(0)
                assert content[s] == tag, f"stage {s} overwritten while wgmma read it"
                reads[s] -= 1

        for tile in range(num_tiles):
            prev = -1
            for kb in range(num_kb):
                while not full[stage].try_wait_parity(phase):
                    yield
                assert content[stage] == (tile, kb), f"consumer {cw} saw {content[stage]}"
                groups.append((stage, (tile, kb)))
                reads[stage] += 1
                yield
                if bug == "release_early":
                    for _w in range(4):
                        empty[stage].arrive()
                        yield
                    retire(1)
                    stage += 1
                    if stage == stages:
                        stage, phase = 0, phase ^ 1
                    continue
                retire(1)
                if prev >= 0:
                    for _w in range(4):
                        empty[prev].arrive()
                        yield
                prev = stage
                stage += 1
                if stage == stages:
                    stage, phase = 0, phase ^ 1
            retire(0)
            if bug != "release_early":
                for _w in range(4):
                    empty[prev].arrive()
                    yield
            for _ in range(rnd.randint(0, 6)):
                yield

    agents = {"P": producer(), "C0": consumer(0), "C1": consumer(1)}
    done = set()
    steps = 0
    while len(done) < 3 or tma_inflight:
        steps += 1
        if steps > 200000:
            raise AssertionError("deadlock")
        choices = [a for a in agents if a not in done] + (["TMA"] * 2 if tma_inflight else [])
        pick = rnd.choice(choices)
        if pick == "TMA":
            item = rnd.choice(tma_inflight)
            item[2] -= 1
            if item[2] == 0:
                content[item[0]] = item[1]
                tma_inflight.remove(item)
            full[item[0]].complete_tx(1)
            continue
        try:
            next(agents[pick])
        except StopIteration:
            done.add(pick)
    return steps


def sim_sweep(stages, loads, bug=None):
    for num_tiles in (1, 2, 3, 5):
        for num_kb in (1, 2, 3, 4, 5, 7):
            for seed in range(15):
                try:
                    simulate(
                        num_tiles, num_kb, seed * 1000 + num_tiles * 10 + num_kb, stages, loads, bug
                    )
                except AssertionError as e:
                    return f"tiles={num_tiles} kb={num_kb} seed={seed}: {e}"
    return None


def combine_edges(kern):
    """The kernel's scalar combine against combine.combine on hand-made class sums: the
    saturation boundary, overflow, subnormal ties, signs, zero."""
    rng = np.random.default_rng(7)
    classes = kern.classes
    k_pad = 1008
    k_slack = float(np.float64(k_pad * overflow_slack(kern.level)))
    cases = []
    for _ in range(4000):
        s = rng.integers(-(2**31), 2**31, classes)
        s[rng.random(classes) < 0.3] = 0
        # scales around overflow (v ~ 2^31 * 2^-14 * 2^scale ~ 2^128) and underflow
        scale = int(
            rng.choice([rng.integers(105, 115), rng.integers(-170, -140), rng.integers(-30, 30)])
        )
        cases.append((s, scale))

    def only(s0, s1=0):
        return np.array([s0, s1] + [0] * (classes - 2))

    # exact boundary: v = OVERFLOW_THRESHOLD and just around it (S_0 * 2^-14 * 2^scale)
    for s0, scale in (
        (2**24 - 1, 118),
        ((2**24 - 1) * 2**6, 112),
        (2**30, 112),
        (-(2**30), 112),
        (2**30 - 1, 112),
        ((2**25 - 1) * 2**6, 111),
        (3, -165),
        (1, -164),
        (-3, -165),
    ):
        cases.append((only(s0), scale))
    # the saturation window at scale 112: v = S_0 2^98, OVERFLOW_THRESHOLD = (2^30 - 32) 2^98,
    # the bound k_slack 2^112 = width 2^98 (width = k_slack 2^14: ~4 at IV, ~1000 at I, ~0.03
    # at V): S_0 in [2^30 - 32, 2^30 - 32 + width) saturates, above it overflows
    width = int(np.ceil(k_slack * 2**14))
    for s0 in range(2**30 - 40, 2**30 - 32 + width + 8):
        cases.append((only(s0), 112))
        cases.append((only(-s0), 112))
        cases.append((only(s0 - 1, 2**8 - 1), 112))  # class 1 adds < one unit
    s = np.array([c[0] for c in cases]).T
    scale = np.array([c[1] for c in cases])
    got = combine_one(list(s), scale, k_slack).astype(np.float32).view(np.uint32)
    want = np.concatenate(
        [
            combine(
                {g: np.array([[float(s[g, t])]]) for g in range(classes)},
                np.array([scale[t]]),
                np.array([0]),
                k_slack,
            ).ravel()
            for t in range(len(cases))
        ]
    ).view(np.uint32)
    f = want.view(np.float32)
    check(
        np.array_equal(got, want),
        f"{kern.name}: combine formula: {int(np.sum(got != want))} of {len(cases)} differ",
    )
    print(
        f"  {len(cases)} hand-made outputs: "
        f"FLT_MAX {int(np.sum(np.abs(f) == np.finfo(np.float32).max))}, "
        f"inf {int(np.sum(np.isinf(f)))}, "
        f"subnormal {int(np.sum((f != 0) & (np.abs(f) < 2**-126)))}: "
        f"{'same bits' if np.array_equal(got, want) else 'DIFFER'}"
    )


def check_level(kern, built):
    level = kern.level
    print(
        f"== {kern.name} (level {level.name}): S = {kern.slices}, G = {kern.classes}, "
        f"{len(kern.pairs)} pairs, BK = {kern.k_block}, STAGES = {kern.stages}, "
        f"SMEM_BYTES = {kern.smem_bytes:,}; W0 = {W0}, STEP = {STEP}, "
        f"int32_k_block = {int32_k_block(level)}, overflow_slack = {overflow_slack(level)!r}"
    )
    print("[0] level table (kernel source, pairs, stages, smem), descriptors")
    check_table(kern, built)
    check_descriptors(kern.k_block)
    print("[1] combine formula (kernel's order and rounding) vs combine.combine")
    combine_edges(kern)
    print(
        "[2] tiles, TMA boxes, swizzle, descriptors, pairs, fragment, masked epilogue vs combine()"
    )
    rng = np.random.default_rng(0)
    case(kern, rng, 1, 1, 1, 16, grid=1)
    case(kern, rng, 1, 7, 300, 48, grid=3)
    case(kern, rng, 1, 129, 257, 144, grid=5, group=2)
    case(kern, rng, 1, 130, 70, 272, grid=2, special=True)
    case(kern, rng, 3, 70, 65, 160, grid=4, group=1)
    case(kern, rng, 2, 200, 130, 300, grid=7, group=3)
    loads = 2 * kern.slices
    print(
        f"[3] pipeline protocol, STAGES = {kern.stages}, {loads} loads (randomised interleavings)"
    )
    err = sim_sweep(kern.stages, loads)
    check(err is None, f"{kern.name}: pipeline simulation: {err}")
    for bug in ("release_early", "empty_parity"):
        check(sim_sweep(kern.stages, loads, bug) is not None, f"control: bug '{bug}' not detected")
    print("  no deadlock, no stage read early or overwritten while read; controls detected")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", nargs="+", choices=KERNELS, default=list(KERNELS),
                    help="levels and variants (V_k128)")  # fmt: skip
    args = ap.parse_args()
    built = source_levels()
    check(sorted(built) == sorted(f"fused_wgmma_{name}" for name in KERNELS),
          f"kernel source's entry points {sorted(built)}")  # fmt: skip
    for name in args.level:
        check_level(kernel_of(name), built)
    if failures:
        print(f"check_model: {len(failures)} FAILURE(S)")
        sys.exit(1)
    print(f"check_model: all checks passed ({', '.join(args.level)})")


if __name__ == "__main__":
    main()

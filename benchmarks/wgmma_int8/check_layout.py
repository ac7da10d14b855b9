#!/usr/bin/env python3
"""CPU-side model checks for the wgmma INT8 GEMM's layout (pure numpy, no GPU); written for its
first version (wgmma_int8.cu, commit 4dc20f9), whose swizzle, descriptors, fragments and
barriers runtime/cuda/kernels/wgmma_gemm.cu keeps.

What is modelled (and what is assumed, so a pass means "self-consistent with
the documented hardware behaviour", not "proven on silicon"):

1. TMA SWIZZLE_128B placement. For a box whose inner extent is 128 bytes,
   written to a 1024-byte aligned smem tile, TMA puts byte (row r, col b) at
       lin  = r * 128 + b
       phys = lin ^ (((lin >> 7) & 7) << 4)
   i.e. the 16-byte chunk index (address bits 4-6) is XORed with the row index
   mod 8 (address bits 7-9). (CUDA programming guide, TMA swizzle section;
   CUTLASS Swizzle<3,4,3>.)

2. wgmma shared-memory descriptor addressing, K-major, SWIZZLE_128B
   (PTX ISA "matrix descriptor", CUTLASS canonical GMMA layout
   Sw<3,4,3> o ((8,n),(8,k)):((8T,SBO),(1,LBO)), T = 128 B):
   for instruction row r (0..M-1) and k-byte j (0..31):
       addr = start + (r // 8) * SBO + (r % 8) * 128 + j
       phys = addr ^ (((addr >> 7) & 7) << 4)
   The swizzle XOR is applied to the final address, which is why advancing
   the start address by 32 B per k-step (DeepGEMM / CUTLASS DescriptorIterator)
   works, and why tiles must be 1024-byte aligned (base_offset = 0).
   LBO is not used for swizzled K-major layouts (K per instruction = 32 B fits
   inside one 128 B swizzle row).

   Check: every (row, k) the four k-steps read, for both consumers' A slices
   and for the 256-row B tile, equals the global element the math needs.
   Negative controls show the check would catch a wrong advance (128 B),
   a missing swizzle, or a wrong SBO. (Tile alignment is an assumption of the
   model, not something it can test: see the note in the code.)

3. Descriptor bit packing: decode the 64-bit value the kernel builds.

4. Accumulator fragment layout of wgmma m64nNk32 .s32 (PTX ISA figure,
   CUTLASS CLayout_64xN) and the epilogue addressing in the kernel: the
   128 threads x 128 registers of each consumer cover the 64 x 256 slice
   exactly once, and consumer 1 / consumer 2 cover disjoint row halves.
   The fragment formula itself is taken from the PTX ISA / CUTLASS; here it is
   cross-checked against CUTLASS's CLayout_64xN (an independent encoding).

5. Raster order: tile_coords visits every output tile exactly once.

6. Pipeline protocol: a randomized interleaving simulation of the full/empty
   mbarriers (parity semantics of mbarrier.try_wait.parity), TMA completion,
   and wgmma groups retiring under wait_group(1), across several tiles so the
   phase bits wrap. Checks no deadlock, consumers never read a stage before
   its TMA landed, and the producer never overwrites a stage an in-flight
   wgmma may still read.
"""

import random
import sys

import numpy as np

BLOCK_M, BLOCK_N, BLOCK_K, WGMMA_K, STAGES = 128, 256, 128, 32, 4
A_STAGE, B_STAGE = BLOCK_M * BLOCK_K, BLOCK_N * BLOCK_K
SBO = 1024

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("  FAIL:", msg)
    return cond


def swz128(addr):
    addr = np.asarray(addr, dtype=np.int64)
    return addr ^ (((addr >> 7) & 7) << 4)


# ----------------------------------------------------------------- 1 + 2
def tma_place(smem, base, tile, swizzle=True):
    """Write tile (rows x 128 bytes) into smem the way TMA SWIZZLE_128B does."""
    rows, cols = tile.shape
    assert cols == 128
    r, b = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    lin = base + r * 128 + b
    phys = swz128(lin) if swizzle else lin
    smem[phys.ravel()] = tile.ravel()


def wgmma_read(smem, start, rows, swizzle=True, sbo=SBO):
    """Bytes a wgmma K-major SW128 operand descriptor reads: rows x 32 k-bytes."""
    r, j = np.meshgrid(np.arange(rows), np.arange(WGMMA_K), indexing="ij")
    addr = start + (r // 8) * sbo + (r % 8) * 128 + j
    phys = swz128(addr) if swizzle else addr
    return smem[phys]


def check_operand_addressing(k_advance=WGMMA_K, read_swizzle=True, sbo=SBO):
    rng = np.random.default_rng(0)
    smem = np.zeros(256 * 1024, dtype=np.int16) - 1
    base = 3 * 1024  # any 1024-aligned base (the kernel aligns it)
    ok = True
    for stage in range(STAGES):
        a_tile = rng.integers(-128, 128, size=(BLOCK_M, BLOCK_K), dtype=np.int16)
        b_tile = rng.integers(-128, 128, size=(BLOCK_N, BLOCK_K), dtype=np.int16)
        sA = base + stage * A_STAGE
        sB = base + STAGES * A_STAGE + stage * B_STAGE
        tma_place(smem, sA, a_tile)
        tma_place(smem, sB, b_tile)
        for kk in range(BLOCK_K // WGMMA_K):
            for cw in range(2):  # consumer warpgroup: rows 64*cw .. 64*cw+63 of A
                got = wgmma_read(
                    smem, sA + cw * 64 * BLOCK_K + kk * k_advance, 64, read_swizzle, sbo
                )
                want = a_tile[64 * cw : 64 * cw + 64, 32 * kk : 32 * kk + 32]
                ok &= np.array_equal(got, want)
            got = wgmma_read(smem, sB + kk * k_advance, BLOCK_N, read_swizzle, sbo)
            want = b_tile[:, 32 * kk : 32 * kk + 32]
            ok &= np.array_equal(got, want)
    return bool(ok)


print("[1-2] TMA 128B-swizzle placement vs descriptor addressing with +32 B k-advance")
check(check_operand_addressing(), "A/B k-step reads do not match global data")
print("  k-steps read the right 32 bytes of every row (A: both 64-row halves, B: 256 rows)")
# Negative controls: the checker must notice these mistakes.
check(not check_operand_addressing(k_advance=128), "control: 128 B advance not detected")
check(not check_operand_addressing(read_swizzle=False), "control: missing swizzle not detected")
check(not check_operand_addressing(sbo=2048), "control: SBO 2048 not detected")
check(not check_operand_addressing(sbo=128), "control: SBO 128 not detected")
print("  negative controls (128 B advance / no swizzle / SBO 2048 or 128) are detected")
# Note: the model applies the XOR to absolute address bits for both TMA and wgmma, so it
# cannot judge a tile that is not 1024 B aligned; the kernel aligns every tile to 1024 B
# (and sets base_offset = 0), where tile-relative and absolute patterns coincide.

# ----------------------------------------------------------------- 3
print("[3] descriptor bit packing")


def make_desc(addr):  # mirror of make_smem_desc_k128b in wgmma_int8.cu
    d = (addr & 0x3FFFF) >> 4
    d |= 1 << 16
    d |= (1024 >> 4) << 32
    d |= 1 << 62
    return d


for addr in (0x0, 0x2000, 0x10000 + 3 * B_STAGE, 0x30000 - 1024):
    d = make_desc(addr)
    for kk in range(4):
        dk = d + ((kk * WGMMA_K) >> 4)
        start = (dk & 0x3FFF) << 4
        lbo = ((dk >> 16) & 0x3FFF) << 4
        sbo = ((dk >> 32) & 0x3FFF) << 4
        base_off = (dk >> 49) & 7
        layout = (dk >> 62) & 3
        check(start == addr + 32 * kk, f"start field {start:#x} != {addr + 32 * kk:#x}")
        check(
            lbo == 16 and sbo == 1024 and base_off == 0 and layout == 1,
            f"fields lbo={lbo} sbo={sbo} base={base_off} layout={layout}",
        )
        check((dk >> 14) & 3 == 0, "start address overflowed into reserved bits")
# shared::cta addresses on sm_90 are < 228 KB, so (addr >> 4) + 6 (last k-step) stays
# below 2^14 and the +2-per-k-step advance never carries into the LBO field.
check(((228 * 1024 - 1) >> 4) + 6 < (1 << 14), "start address field could overflow")
print("  start>>4 in bits 0-13, LBO=1 (16 B), SBO=64 (1024 B), base_offset=0, layout=1 (128B)")
print(f"  example desc(0x2000) = {make_desc(0x2000):#018x}")

# ----------------------------------------------------------------- 4
print("[4] accumulator fragment layout + epilogue addressing")


def frag_kernel(t, v):
    """(thread t in warpgroup, register v) -> (row, col) as written in wgmma_int8.cu."""
    warp, lane = t // 32, t % 32
    i, rem = v // 4, v % 4
    row = 16 * warp + lane // 4 + (8 if rem >= 2 else 0)
    col = 8 * i + 2 * (lane % 4) + (rem % 2)
    return row, col


def frag_cutlass(t, v, N=256):
    """CUTLASS CLayout_64xN = ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)), column-major 64 x N."""
    t0, t1, t2 = t % 4, (t // 4) % 8, t // 32
    v0, v1, v2 = v % 2, (v // 2) % 2, v // 4
    idx = t0 * 128 + t1 * 1 + t2 * 16 + v0 * 64 + v1 * 8 + v2 * 512
    return idx % 64, idx // 64


cover = np.zeros((BLOCK_M, BLOCK_N), dtype=np.int32)
agree = True
for cw in range(2):
    for t in range(128):
        for v in range(128):
            r, c = frag_kernel(t, v)
            agree &= (r, c) == frag_cutlass(t, v)
            # kernel epilogue: row0 = cw*64 + warp*16 + lane/4 (+8 via c_hi),
            # col0 = 2*(lane%4) (+8i, +0/1)
            warp, lane = t // 32, t % 32
            i, rem = v // 4, v % 4
            row = cw * 64 + warp * 16 + lane // 4 + (8 if rem >= 2 else 0)
            col = 2 * (lane % 4) + 8 * i + (rem % 2)
            assert row == cw * 64 + r and col == c
            cover[row, col] += 1
check(agree, "kernel fragment formula disagrees with CUTLASS CLayout_64xN")
check(np.all(cover == 1), "epilogue does not cover the 128 x 256 tile exactly once")
print(
    "  formula == CUTLASS CLayout_64xN for all 128 x 128 (thread, reg); tile covered exactly once"
)
# int2 store alignment: col0 is even and n % 256 == 0 -> 8-byte aligned addresses.
check(all((2 * (lane % 4)) % 2 == 0 for lane in range(32)), "int2 store misaligned")

# ----------------------------------------------------------------- 5
print("[5] raster order")


def tile_coords(tile, tiles_m, tiles_n, group):
    per_group = group * tiles_n
    g = tile // per_group
    first_m = g * group
    gsize = min(tiles_m - first_m, group)
    local = tile - g * per_group
    return first_m + local % gsize, local // gsize


for tiles_m, tiles_n in ((1, 1), (2, 2), (8, 4), (10, 9), (64, 32), (32, 16), (128, 64), (7, 3)):
    for group in (1, 3, 8, 16, 1000):
        seen = set()
        for tile in range(tiles_m * tiles_n):
            tm, tn = tile_coords(tile, tiles_m, tiles_n, group)
            check(0 <= tm < tiles_m and 0 <= tn < tiles_n, f"out of range {tm},{tn}")
            seen.add((tm, tn))
        check(
            len(seen) == tiles_m * tiles_n,
            f"raster {tiles_m}x{tiles_n} g={group} not a permutation",
        )
print("  tile_coords is a permutation of all tiles for every tested grid / group size")

# ----------------------------------------------------------------- 6
print("[6] pipeline protocol simulation (mbarrier parity, TMA, wgmma wait_group(1))")


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
        # PTX: true once the phase with this parity has completed, i.e. the
        # current (incomplete) phase has the other parity.
        return (self.completed & 1) != parity


def simulate(num_tiles, num_kb, seed, bug=None):
    """bug: None (kernel protocol), or a deliberate mistake the checker must catch:
    'release_early'  consumer releases the stage it just issued on (not the previous one),
    'empty_parity'   producer waits on empty with `phase` instead of `phase ^ 1`."""
    rnd = random.Random(seed)
    full = [MBar(1) for _ in range(STAGES)]
    empty = [MBar(8) for _ in range(STAGES)]
    content = [None] * STAGES  # (tile, kb) the stage holds; "W" while TMA writes it
    reads = [0] * STAGES  # wgmma groups (both consumers) that may still read the stage
    tma_inflight = []  # [stage, tag, chunks left]

    def producer():
        stage, phase = 0, 0
        for tile in range(num_tiles):
            for kb in range(num_kb):
                par = phase if bug == "empty_parity" else phase ^ 1
                while not empty[stage].try_wait_parity(par):
                    yield
                full[stage].arrive(expect_tx=2)  # two TMA loads (A, B)
                assert reads[stage] == 0, f"producer overwrote stage {stage} while a wgmma reads it"
                content[stage] = "W"
                tma_inflight.append([stage, (tile, kb), 2])
                stage += 1
                if stage == STAGES:
                    stage, phase = 0, phase ^ 1
                yield

    def consumer(cw):
        stage, phase = 0, 0
        groups = []  # in-flight wgmma groups: (stage, tag)

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
                assert content[stage] == (tile, kb), (
                    f"consumer {cw} saw {content[stage]} want {(tile, kb)}"
                )
                groups.append((stage, (tile, kb)))
                reads[stage] += 1
                yield
                if bug == "release_early":
                    for _w in range(4):
                        empty[stage].arrive()
                        yield
                    retire(1)
                    stage += 1
                    if stage == STAGES:
                        stage, phase = 0, phase ^ 1
                    continue
                retire(1)  # wgmma.wait_group 1
                if prev >= 0:
                    for _w in range(4):  # one arrive per consumer warp
                        empty[prev].arrive()
                        yield
                prev = stage
                stage += 1
                if stage == STAGES:
                    stage, phase = 0, phase ^ 1
            retire(0)  # wgmma.wait_group 0
            if bug != "release_early":
                for _w in range(4):
                    empty[prev].arrive()
                    yield
            for _ in range(rnd.randint(0, 6)):  # epilogue takes a while
                yield

    agents = {"P": producer(), "C0": consumer(0), "C1": consumer(1)}
    done = set()
    steps = 0
    while len(done) < 3 or tma_inflight:
        steps += 1
        if steps > 100000:
            raise AssertionError("deadlock")
        choices = [a for a in agents if a not in done] + (["TMA"] * 2 if tma_inflight else [])
        pick = rnd.choice(choices)
        if pick == "TMA":
            item = rnd.choice(tma_inflight)
            item[2] -= 1
            if item[2] == 0:
                content[item[0]] = item[1]  # all bytes landed before the last complete_tx
                tma_inflight.remove(item)
            full[item[0]].complete_tx(1)
            continue
        try:
            next(agents[pick])
        except StopIteration:
            done.add(pick)
    return steps


def sim_sweep(bug=None):
    for num_tiles in (1, 2, 3, 5):
        for num_kb in (1, 2, 3, 4, 5, 7, 9):
            for seed in range(20):
                try:
                    simulate(num_tiles, num_kb, seed * 1000 + num_tiles * 10 + num_kb, bug)
                except AssertionError as e:
                    return f"tiles={num_tiles} kb={num_kb} seed={seed}: {e}"
    return None


err = sim_sweep()
check(err is None, f"pipeline simulation: {err}")
for bug in ("release_early", "empty_parity"):
    check(sim_sweep(bug) is not None, f"control: bug '{bug}' not detected")
print("  negative controls (early release, wrong empty parity) are detected")
print(
    "  no deadlock; consumers always saw the right (tile, k-block); no stage overwritten while read"
)
print("  (tiles 1-5, k-blocks 1-9 incl. non-multiples of STAGES, 20 random interleavings each)")

print()
if failures:
    print(f"check_layout: {len(failures)} FAILURE(S)")
    sys.exit(1)
print("check_layout: all checks passed")

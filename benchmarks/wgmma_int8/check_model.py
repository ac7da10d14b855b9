#!/usr/bin/env python3
"""CPU model (numpy) of wgmma_gemm.cu's new index logic: tile enumeration over
batch x tiles_m x tiles_n, the 3-D TMA boxes with zero fill past depth / rows (the tensor
maps wgmma_gemm.py builds), and the masked epilogue (interior / pair / scalar paths,
accumulate). The wgmma fragment layout is the probe's (verified on the H200); the model
transcribes the kernel's formulas, so it checks the logic, not the transcription.

    python3 check_model.py      # exits non-zero on a failure
"""

import itertools
import sys

import numpy as np

BM, BN, BK = 128, 256, 128
POISON = 0x7F7F7F7F


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


def tma_box(buf, base, dims, strides, coords, box):
    """3-D TMA tiled load (int8, element strides 1): elements outside dims read as zero."""
    out = np.zeros((box[2], box[1], box[0]), np.int64)
    for z in range(box[2]):
        for y in range(box[1]):
            cz, cy = coords[2] + z, coords[1] + y
            if not (0 <= cz < dims[2] and 0 <= cy < dims[1]):
                continue
            x0, x1 = coords[0], min(coords[0] + box[0], dims[0])
            if x1 > x0:
                start = base + cz * strides[1] + cy * strides[0] + x0
                out[z, y, : x1 - x0] = buf[start : start + x1 - x0]
    return out[0]


def emulate(
    a,
    a_off,
    lda,
    sa,
    b,
    b_off,
    ldb,
    sb,
    c,
    c_off,
    ldc,
    sc,
    m,
    n,
    depth,
    batch,
    accumulate,
    grid,
    group,
    c_align8,
):
    tiles_m, tiles_n = -(-m // BM), -(-n // BN)
    num_tiles = batch * tiles_m * tiles_n
    num_kb = -(-depth // BK)
    sa_map = sa if batch > 1 else m * lda
    sb_map = sb if batch > 1 else n * ldb
    sc_k = sc if batch > 1 else 0
    writes = np.zeros(c.shape, np.int64)
    pairs_aligned = c_align8 and ldc % 2 == 0 and sc_k % 2 == 0
    lane = np.arange(32)
    for cta in range(grid):
        for tile in range(cta, num_tiles, grid):
            tb, tm, tn = tile_coords(tile, tiles_m, tiles_n, group)
            acc_tile = np.zeros((BM, BN), np.int64)
            for kb in range(num_kb):
                ta = tma_box(
                    a, a_off, (depth, m, batch), (lda, sa_map), (kb * BK, tm * BM, tb), (BK, BM, 1)
                )
                tbx = tma_box(
                    b, b_off, (depth, n, batch), (ldb, sb_map), (kb * BK, tn * BN, tb), (BK, BN, 1)
                )
                acc_tile += ta @ tbx.T
            for cw, warp in itertools.product(range(2), range(4)):
                accu = acc_tile[cw * 64 : (cw + 1) * 64]
                row0 = tm * BM + cw * 64 + warp * 16 + lane // 4
                col0 = tn * BN + 2 * (lane % 4)
                lrow = warp * 16 + lane // 4
                interior = pairs_aligned and (tm + 1) * BM <= m and (tn + 1) * BN <= n
                lo_ok, hi_ok = row0 < m, row0 + 8 < m
                for i in range(BN // 8):
                    col = col0 + 8 * i
                    c0_ok, c1_ok = col < n, col + 1 < n
                    for half, row_ok in ((0, lo_ok), (1, hi_ok)):
                        row = row0 + 8 * half
                        vals = [accu[lrow + 8 * half, 8 * i + 2 * (lane % 4) + e] for e in range(2)]
                        idx = c_off + tb * sc_k + row * ldc + col
                        if interior:  # int2 store of both columns, every lane
                            mask = [np.ones(32, bool)] * 2
                            pair = np.ones(32, bool)
                        else:  # pair path where pairs_aligned && c1_ok, else scalars
                            pair = pairs_aligned & c1_ok
                            mask = [
                                row_ok & np.where(pair, True, c0_ok),
                                row_ok & np.where(pair, True, c1_ok),
                            ]
                        # every int2 store is 8-byte aligned (C's base counted by c_align8)
                        assert np.all((idx % 2 == 0) | ~pair | ~(mask[0] & mask[1])), (
                            "misaligned int2"
                        )
                        for e in range(2):
                            for j in np.nonzero(mask[e])[0]:
                                k = idx[j] + e
                                old = int(c[k]) if accumulate else 0
                                c[k] = np.uint32((int(vals[e][j]) + old) & 0xFFFFFFFF).view(
                                    np.int32
                                )
                                writes[k] += 1
    return writes


def case(
    rng,
    m,
    n,
    depth,
    batch=1,
    accumulate=False,
    lda_pad=0,
    a_off=0,
    ldb_pad=0,
    b_off=0,
    ldc_pad=0,
    c_off=0,
    grid=None,
    group=16,
    stride_pad=0,
):
    lda, ldb, ldc = depth + lda_pad, depth + ldb_pad, n + ldc_pad
    sa, sb = m * lda + stride_pad, n * ldb + stride_pad
    sc = m * ldc + 3 if batch > 1 else 0
    a = rng.integers(-128, 128, a_off + batch * sa + 64).astype(np.int64)
    b = rng.integers(-128, 128, b_off + batch * sb + 64).astype(np.int64)
    csize = c_off + (batch - 1) * sc + m * ldc + 17
    c = np.full(csize, POISON, np.int32)
    want = c.copy()
    window = np.zeros(csize, bool)
    for t in range(batch):
        A = np.array([[a[a_off + t * sa + i * lda + p] for p in range(depth)] for i in range(m)])
        B = np.array([[b[b_off + t * sb + j * ldb + p] for p in range(depth)] for j in range(n)])
        idx = c_off + t * sc + np.arange(m)[:, None] * ldc + np.arange(n)[None, :]
        window[idx] = True
        if accumulate:
            c[idx] = rng.integers(-(2**31), 2**31, (m, n)).astype(np.int32)
        want[idx] = (
            ((A @ B.T + c[idx].astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
            if accumulate
            else (A @ B.T).astype(np.int32)
        )
    tiles = batch * -(-m // BM) * -(-n // BN)
    writes = emulate(
        a,
        a_off,
        lda,
        sa,
        b,
        b_off,
        ldb,
        sb,
        c,
        c_off,
        ldc,
        sc,
        m,
        n,
        depth,
        batch,
        accumulate,
        grid or min(7, tiles),
        group,
        c_align8=(c_off % 2 == 0),
    )
    ok = np.array_equal(c, want) and np.all(writes[window] == 1) and np.all(writes[~window] == 0)
    print(
        f"{'PASS' if ok else 'FAIL'} m={m} n={n} depth={depth} batch={batch} acc={accumulate} "
        f"lda+{lda_pad} ldc+{ldc_pad} c_off={c_off} grid={grid}"
    )
    return ok


def main():
    rng = np.random.default_rng(0)
    results = [
        case(rng, 1, 1, 16),
        case(rng, 7, 300, 48),
        case(rng, 129, 257, 144, accumulate=True),
        case(rng, 130, 260, 272, lda_pad=32, a_off=16, ldb_pad=48, b_off=48, ldc_pad=5),
        case(rng, 70, 300, 160, batch=3, accumulate=True, stride_pad=64, c_off=1, grid=2, group=1),
        case(rng, 300, 513, 32, batch=2, grid=3, group=2),
    ]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()

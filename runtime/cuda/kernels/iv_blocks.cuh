// Level IV-blocks (``blocks``; launched from iv_blocks.py): B's packer and the kernel that
// slices A in registers as it streams it, computing every output entry in the level's arithmetic
// (``blocks.blocks_product`` is their CPU model), beside the packer helpers they share.
//
// Fragments of the m16n8k32 INT8 MMA (PTX ISA, "Matrix Fragments for mma.m16n8k32"): lane
// (g, t) = (lane / 4, lane % 4) holds A's rows g and g + 8 at k-steps 4 t .. 4 t + 3 (words a0,
// a1) and 16 + 4 t .. (a2, a3), B's column g at k-steps 4 t .. (b0) and 16 + 4 t .. (b1), and
// C's rows g and g + 8 at columns 2 t and 2 t + 1 (c0, c1; c2, c3); a word holds 4 INT8 entries,
// the lowest k-step in the lowest byte.

#include "device.cuh"
#include "packs.cuh"

#define BK BLOCKS_K
#define BSL BLOCKS_SLICES
#define MAX_SUM BLOCKS_MAX_SUM
#define STEPS (BK / 32)  // m16n8k32 k-steps per scale block
#define ROW_STRIDE (BK + BLOCKS_ROW_PAD)
#define TILE_ROWS BLOCKS_TILE_ROWS
#define FRAGMENT_WORDS (BSL * STEPS * 64)  // one n-tile's B fragments for one block

__device__ __forceinline__ void mma_s8(int (&d)[4], const unsigned int (&a)[4], unsigned int b0,
                                       unsigned int b1)
{
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // the host refuses the level below compute capability 8.0
#endif
}

// 2^e (-1022 <= e <= 1023) as a double, built from its high word.
__device__ __forceinline__ double pow2_hi(int e)
{
    return __hiloint2double((e + 1023) << 20, 0);
}

__device__ __forceinline__ unsigned int quad_max(unsigned int x)
{
    x = max(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ int quad_sum(int x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Largest finite magnitude (as bits) of four values into *top; NaN/Inf into *bad.
__device__ __forceinline__ void top4(const float (&v)[4], unsigned int* top, int* bad)
{
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const unsigned int m = magnitude_bits(v[i]);
        if (m < 0x7f800000u) *top = max(*top, m); else *bad = 1;
    }
}

// How one block of a line becomes packer integers: x 2^shift in float32 and F2I (round half to
// even, like rint) where 2^shift is a normal float32 and shift <= 125, so that a subnormal x,
// which -ftz flushes, has |x 2^shift| < 1/2 and rint gives its 0 anyway; else the exact way on
// the bits (scaled_integer, kept out of line: the blocks that need it have a tiny scale).
// Deep entries: 0 < |x| < 2^(e - deep - 1), the bits of that bound being floor_bits (>= 1).
struct BlockScale {
    float scale;
    int shift;
    bool quick;
    unsigned int floor_bits;
};

__device__ __forceinline__ BlockScale block_scale(int e, int deep)
{
    const LineScale line = line_scale(e, BSL, deep, false);
    BlockScale s;
    s.shift = line.shift;
    s.quick = line.shift >= -126 && line.shift <= 125;
    s.scale = s.quick ? line.scale : 1.0f;
    s.floor_bits = max(line.floor_bits, 1u);
    return s;
}

__device__ __noinline__ int exact_packer_integer(float x, int shift)
{
    return scaled_integer(x, 0, 1, shift);
}

// Slice j's word of four entries' digits, for each slice j; deep entries counted.
// (QUICK: every entry the quick way, NaN and Inf already zeroed; else the exact way.)
template <bool QUICK>
__device__ __forceinline__ void block_words(const float4& x4, const BlockScale& s, int* deep_count,
                                            unsigned int (&words)[BSL])
{
    const float x[4] = {x4.x, x4.y, x4.z, x4.w};
    unsigned int biased[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const unsigned int m = magnitude_bits(x[i]);
        *deep_count += m - 1u < s.floor_bits - 1u;  // 0 < m < floor_bits (NaN/Inf: never)
        const int integer = QUICK ? __float2int_rn(x[i] * s.scale)
                                  : exact_packer_integer(x[i], s.shift);
        biased[i] = (unsigned int)integer + digit_bias(BSL);
    }
#pragma unroll
    for (int j = 0; j < BSL; ++j) words[j] = slot_word(biased, j, BSL);
}

// NaN and Inf read as 0 (their lines are recomputed), before the quick way.
__device__ __forceinline__ void zero_nonfinite(float4& v)
{
    v.x = finite_bits(v.x) ? v.x : 0.0f;
    v.y = finite_bits(v.y) ? v.y : 0.0f;
    v.z = finite_bits(v.z) ? v.z : 0.0f;
    v.w = finite_bits(v.w) ? v.w : 0.0f;
}

// B's digits per (block of BK k-steps, column), scaled per (block, column), in B-fragment
// order: block kb, n-tile nt (8 columns), slice j and k-step h: 64 words, lane (g, t)'s two
// (column 8 nt + g, k-steps 32 h + 4 t .. and 32 h + 16 + 4 t .. of the block) side by side.
// One warp per (block, n-tile), warp w of the grid taking block w / n_tiles and n-tile
// w % n_tiles; exps[kb n_pad + column] (n_pad = 8 n_tiles). Per column: its largest block
// exponent goes into col_top (plus TOP_BIAS: col_top starts at 0), its deep entries are added
// into col_deep, and col_bad is set when the column holds a NaN or Inf, or when its count
// crosses the unresolved threshold (the addition that crosses it sets it); the columns set are
// listed in flagged_cols, *flagged their count.
#define TOP_BIAS 1024  // block exponents lie in [-148, 129]
extern "C" __global__ void blocks_pack_b(
    const float* __restrict__ b, int k, int n, int n_tiles, int deep,
    unsigned int* __restrict__ fragments, int* __restrict__ exps, int* __restrict__ col_deep,
    int* __restrict__ col_bad, int* __restrict__ col_top, int* __restrict__ flagged_cols,
    int* __restrict__ flagged)
{
    const int kb = blockIdx.x / n_tiles, nt = blockIdx.x % n_tiles;
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const int col = nt * 8 + g;
    float v[STEPS][2][4];
    unsigned int top = 0u;
    int bad = 0;
#pragma unroll
    for (int h = 0; h < STEPS; ++h)
#pragma unroll
        for (int p = 0; p < 2; ++p) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int q = kb * BK + 32 * h + 16 * p + 4 * t + i;
                v[h][p][i] = (q < k && col < n) ? b[(long long)q * n + col] : 0.0f;
            }
            top4(v[h][p], &top, &bad);
        }
    const int e = scale_exponent(exact_double(__uint_as_float(quad_max(top))));
    const BlockScale scale = block_scale(e, deep);
    int count = 0;
    unsigned int* out = fragments + ((long long)kb * n_tiles + nt) * FRAGMENT_WORDS + 2 * lane;
#pragma unroll
    for (int h = 0; h < STEPS; ++h) {
        unsigned int words[2][BSL];
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            float4 x = make_float4(v[h][p][0], v[h][p][1], v[h][p][2], v[h][p][3]);
            if (scale.quick) {
                zero_nonfinite(x);
                block_words<true>(x, scale, &count, words[p]);
            } else {
                block_words<false>(x, scale, &count, words[p]);
            }
        }
#pragma unroll
        for (int j = 0; j < BSL; ++j)
            *reinterpret_cast<uint2*>(out + (j * STEPS + h) * 64) =
                make_uint2(words[0][j], words[1][j]);
    }
    count = quad_sum(count);
    bad = quad_sum(bad);
    if (t == 0) {
        exps[(long long)kb * n_tiles * 8 + col] = e;
        if (col < n) atomicMax(col_top + col, e + TOP_BIAS);
        bool flag = col < n && bad;
        if (col < n && count) {
            const int before = atomicAdd(col_deep + col, count);
            flag |= !unresolved(before, k) && unresolved(before + count, k);
        }
        if (flag && atomicOr(col_bad + col, 1) == 0)  // (listed once)
            flagged_cols[atomicAdd(flagged, 1)] = col;
    }
}

// The copies of one walk step (row tile from row0, block kb) into one stage slot: each warp its
// 16 rows of A's tile (16-byte copies when VEC: k % 4 == 0 and A aligned; else 4-byte ones),
// the block B's fragments and exponents for its NT n-tiles; zeros past m, k and the n-tiles.
// Always commits a group (an empty one past the walk), so every thread's waits count the same.
// Each thread's share is fixed at compile time: a VEC lane copies columns q .. q + 3 of rows
// r0, r0 + RPP, ...; B's 16-byte chunks tid, tid + THREADS, ...
template <int NT, bool VEC>
__device__ __forceinline__ void blocks_stage(
    const float* __restrict__ a, long long m, int k, int n_tiles, int nt0,
    const unsigned int* __restrict__ fragments, const int* __restrict__ exps, long long row0,
    int kb, bool inside_walk, float* a_s, unsigned int* b_s, int* e_s)
{
    constexpr int THREADS = BLOCKS_THREADS, B_CHUNKS = NT * FRAGMENT_WORDS / 4;
    if (inside_walk) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const long long first = row0 + warp * 16;
        const long long rows_left = m - first;  // rows of the warp's 16 that exist
        float* a_dst = a_s + warp * 16 * ROW_STRIDE;
        const int q0 = kb * BK;
        if constexpr (VEC) {
            constexpr int CPR = BK / 4, RPP = 32 / CPR;  // 16-byte chunks a row; rows a pass
            const int r0 = lane / CPR, q = 4 * (lane % CPR);
            const bool k_inside = q0 + q < k;
            const float* src = a + (first + r0) * k + q0 + q;
            const long long stride = (long long)RPP * k;
#pragma unroll
            for (int i = 0; i < 16 / RPP; ++i, src += stride) {
                const bool inside = k_inside && r0 + RPP * i < rows_left;
                copy_async<16>(a_dst + (r0 + RPP * i) * ROW_STRIDE + q, inside ? src : a, inside);
            }
        } else {
            constexpr int PASSES_PER_ROW = BK / 32;
            const float* src = a + first * k + q0 + lane;
#pragma unroll 8
            for (int i = 0; i < 16 * PASSES_PER_ROW; ++i) {
                const int r = i / PASSES_PER_ROW, q = lane + 32 * (i % PASSES_PER_ROW);
                const bool inside = q0 + q < k && r < rows_left;
                const float* at = src + (long long)r * k + (q - lane);
                copy_async<4>(a_dst + r * ROW_STRIDE + q, inside ? at : a, inside);
            }
        }
        const unsigned int* b_src = fragments + ((long long)kb * n_tiles + nt0) * FRAGMENT_WORDS;
        const int tiles_here = n_tiles - nt0;  // n-tiles of this column group that exist
#pragma unroll
        for (int j = 0; j < (B_CHUNKS + THREADS - 1) / THREADS; ++j) {
            const int c = threadIdx.x + THREADS * j;
            if (B_CHUNKS % THREADS == 0 || c < B_CHUNKS) {
                const bool inside = c / (FRAGMENT_WORDS / 4) < tiles_here;
                copy_async<16>(b_s + 4 * c, inside ? b_src + 4 * c : b_src, inside);
            }
        }
        if (threadIdx.x < NT * 2) {
            const int* e_src = exps + (long long)kb * n_tiles * 8 + nt0 * 8;
            const bool inside = (int)threadIdx.x / 2 < tiles_here;
            copy_async<16>(e_s + 4 * threadIdx.x, inside ? e_src + 4 * threadIdx.x : e_src, inside);
        }
    }
    copies_commit();
}

// The scale exponent of a block's line (packer.scale_exponents) from its largest finite
// magnitude as bits: for a normal top 1.f 2^(E - 127), frexp's exponent is E - 126, one more
// where top >= (127/128) 2^(E - 126), i.e. where f >= 0x7e0000 / 2^23; zero and subnormal tops
// the double way.
__device__ __forceinline__ int block_exponent(unsigned int top)
{
    if (top < 0x800000u) return scale_exponent(exact_double(__uint_as_float(top)));
    return (int)(top >> 23) - 126 + ((top & 0x7fffffu) >= 0x7e0000u);
}

// A's fragments ([k-step][slice][a0..a3]) of the warp's block from its entries x ([k-step][k
// half][row g, g + 8]), each row at its own scale.
template <bool QUICK>
__device__ __forceinline__ void block_fragments(const float4 (&x)[STEPS][2][2],
                                                const BlockScale (&scale)[2], int (&deep_count)[2],
                                                unsigned int (&fa)[STEPS][BSL][4])
{
#pragma unroll
    for (int h = 0; h < STEPS; ++h)
#pragma unroll
        for (int p = 0; p < 2; ++p)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                unsigned int words[BSL];
                block_words<QUICK>(x[h][p][r], scale[r], &deep_count[r], words);
#pragma unroll
                for (int j = 0; j < BSL; ++j) fa[h][j][r + 2 * p] = words[j];
            }
}

// One block of k for the warp's 16 rows: each row's scale over the block, A's digits in
// fragments (from the staged tile), then per n-tile the class pairs' MMAs (int32), combined
// exactly in float64 and added into the totals (module docstring of blocks.py).
template <int NT>
__device__ __forceinline__ void blocks_step(
    const float* a_s, const unsigned int* b_s, const int* e_s, int deep, double (&total)[NT][4],
    int (&deep_count)[2], int (&bad)[2], int (&row_top)[2])
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float* rows = a_s + (warp * 16 + g) * ROW_STRIDE + 4 * t;
    float4 x[STEPS][2][2];  // [k-step][k half: 4 t.., 16 + 4 t..][row g, g + 8]
    unsigned int top[2] = {0u, 0u};
#pragma unroll
    for (int h = 0; h < STEPS; ++h)
#pragma unroll
        for (int p = 0; p < 2; ++p)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                x[h][p][r] = *reinterpret_cast<const float4*>(
                    rows + 8 * r * ROW_STRIDE + 32 * h + 16 * p);
                top[r] = max(top[r], max(max(magnitude_bits(x[h][p][r].x),
                                             magnitude_bits(x[h][p][r].y)),
                                         max(magnitude_bits(x[h][p][r].z),
                                             magnitude_bits(x[h][p][r].w))));
            }
    BlockScale scale[2];
    int row_hi[2];  // per row: the high word of 2^(ea - place + ...) (see the terms below)
    constexpr int PLACE = 2 * FIRST_SLICE_BITS + LATER_SLICE_BITS * MAX_SUM;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (top[r] >= 0x7f800000u) {  // a NaN or Inf: the row is recomputed; the finite top
            bad[r] = 1;
            top[r] = 0u;
#pragma unroll
            for (int h = 0; h < STEPS; ++h)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const float v[4] = {x[h][p][r].x, x[h][p][r].y, x[h][p][r].z, x[h][p][r].w};
                    int ignored = 0;
                    top4(v, &top[r], &ignored);
                }
        }
        const int e = block_exponent(quad_max(top[r]));
        row_top[r] = max(row_top[r], e);
        scale[r] = block_scale(e, deep);
        row_hi[r] = (e - PLACE + 1023) << 20;
    }
    unsigned int fa[STEPS][BSL][4];  // A's fragments: [k-step][slice][a0..a3]
    if (scale[0].quick && scale[1].quick) {  // (one branch for all 32 entries)
        if (bad[0] | bad[1]) {
#pragma unroll
            for (int h = 0; h < STEPS; ++h)
#pragma unroll
                for (int p = 0; p < 2; ++p)
#pragma unroll
                    for (int r = 0; r < 2; ++r) zero_nonfinite(x[h][p][r]);
        }
        block_fragments<true>(x, scale, deep_count, fa);
    } else {
        block_fragments<false>(x, scale, deep_count, fa);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int2 eb = *reinterpret_cast<const int2*>(e_s + nt * 8 + 2 * t);
        unsigned int fb[BSL][STEPS][2];
#pragma unroll
        for (int j = 0; j < BSL; ++j)
#pragma unroll
            for (int h = 0; h < STEPS; ++h) {
                const uint2 w = *reinterpret_cast<const uint2*>(
                    b_s + nt * FRAGMENT_WORDS + (j * STEPS + h) * 64 + 2 * lane);
                fb[j][h][0] = w.x;
                fb[j][h][1] = w.y;
            }
        double block[4];  // T = sum_g S_g 2^(8 (MAX_SUM - g)), exact
#pragma unroll
        for (int g0 = 0; g0 <= MAX_SUM; g0 += 2) {  // classes g0, g0 + 1 in int32: S_g0 2^8 + S_g1
            const int last = min(g0 + 1, MAX_SUM);
            int acc[4] = {0, 0, 0, 0};
#pragma unroll
            for (int cls = g0; cls <= last; ++cls) {
                if (cls != g0) {
#pragma unroll
                    for (int q = 0; q < 4; ++q) acc[q] *= 1 << LATER_SLICE_BITS;
                }
#pragma unroll
                for (int i = 0; i < BSL; ++i) {
                    const int j = cls - i;
                    if (j < 0 || j >= BSL) continue;
#pragma unroll
                    for (int h = 0; h < STEPS; ++h) mma_s8(acc, fa[h][i], fb[j][h][0], fb[j][h][1]);
                }
            }
            // (int -> double by I2F.F64, a quarter of the FP64 rate, issues one instruction
            // where building the double from its bits took three: H100, 680 -> 672 us at
            // 65536 x 4096 x 64, 459 -> 445 at 262144 x 1024 x 32.)
            const double up = (double)(1 << (LATER_SLICE_BITS * (last - g0 + 1)));
#pragma unroll
            for (int q = 0; q < 4; ++q)
                block[q] = g0 == 0 ? (double)acc[q] : fma(block[q], up, (double)acc[q]);
        }
        const int col_hi[2] = {eb.x * (1 << 20), eb.y * (1 << 20)};  // (eb may be negative)
#pragma unroll
        for (int q = 0; q < 4; ++q)  // + T 2^(ea + eb - place): T and the weight exact
            total[nt][q] = fma(block[q], __hiloint2double(row_hi[q >> 1] + col_hi[q & 1], 0),
                               total[nt][q]);
    }
}

// Level IV-blocks for a tall A (m x k, row-major) and B packed by blocks_pack_b: a block of
// threads takes tiles of TILE_ROWS rows (grid y, striding) and NT n-tiles (grid x), and walks
// k one block at a time, the next STAGES - 1 blocks' copies in flight (cp.async), so A is read
// from DRAM once, at its own pace, and never written back. C gets the rounded totals; the rows
// to recompute (NaN/Inf, or unresolved) are listed in flagged_rows, counts[0] their count.
// Under "auto" (give_up_share >= 0) every block returns at once where the share of C that
// B's flagged columns (counts[1]) and the rows estimated from the sample (counts[2] sampled
// rows, rows_per_sample each) would recompute passes give_up_share, or those rows' entries
// (rows x n) pass give_up_entries x m: the host, reading the same counts, runs SGEMM instead
// (auto.Fallback.takes_sgemm; its bounds are a hair lower, so this never gives up where
// the host goes on).
template <int NT, bool VEC, int STAGES>
__device__ __forceinline__ void blocks_rows_impl(
    const float* __restrict__ a, long long m, int k, int n, int n_tiles,
    const unsigned int* __restrict__ fragments, const int* __restrict__ exps,
    const int* __restrict__ col_top, int deep, double k_slack, float* __restrict__ c,
    int* __restrict__ flagged_rows, int* __restrict__ counts, double give_up_share,
    double give_up_entries, double rows_per_sample)
{
    if (give_up_share >= 0.0) {
        const double rows = counts[2] * rows_per_sample, cols = counts[1];
        if (rows * n + cols * m - rows * cols > give_up_share * ((double)m * n)) return;
        if (rows * n > give_up_entries * m) return;
    }
    constexpr int A_FLOATS = TILE_ROWS * ROW_STRIDE, B_WORDS = NT * FRAGMENT_WORDS;
    extern __shared__ __align__(16) unsigned char shared[];
    float* a_s = reinterpret_cast<float*>(shared);
    unsigned int* b_s = reinterpret_cast<unsigned int*>(a_s + STAGES * A_FLOATS);
    int* e_s = reinterpret_cast<int*>(b_s + STAGES * B_WORDS);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int nt0 = blockIdx.x * NT, blocks = (k + BK - 1) / BK;
    const long long tiles = (m + TILE_ROWS - 1) / TILE_ROWS;
    // The walk: steps (tile, kb), kb = 0 .. blocks - 1 for tile = blockIdx.y, + gridDim.y, ...
    // Copies run STAGES - 1 steps ahead ("ahead"), into slot step % STAGES.
    long long tile = blockIdx.y, tile_ahead = blockIdx.y;
    int kb = 0, kb_ahead = 0, slot = 0, slot_ahead = 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        blocks_stage<NT, VEC>(a, m, k, n_tiles, nt0, fragments, exps, tile_ahead * TILE_ROWS,
                              kb_ahead, tile_ahead < tiles, a_s + slot_ahead * A_FLOATS,
                              b_s + slot_ahead * B_WORDS, e_s + slot_ahead * NT * 8);
        if (++kb_ahead == blocks) { kb_ahead = 0; tile_ahead += gridDim.y; }
        ++slot_ahead;
    }
    double total[NT][4];
    int deep_count[2] = {0, 0}, bad[2] = {0, 0}, row_top[2] = {-TOP_BIAS, -TOP_BIAS};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) total[nt][q] = 0.0;
    while (tile < tiles) {
        copies_wait<STAGES - 2>();  // this thread's copies of this step have landed
        __syncthreads();  // ... everyone's; and the previous step's slot is free again
        blocks_stage<NT, VEC>(a, m, k, n_tiles, nt0, fragments, exps, tile_ahead * TILE_ROWS,
                              kb_ahead, tile_ahead < tiles, a_s + slot_ahead * A_FLOATS,
                              b_s + slot_ahead * B_WORDS, e_s + slot_ahead * NT * 8);
        if (++kb_ahead == blocks) { kb_ahead = 0; tile_ahead += gridDim.y; }
        if (++slot_ahead == STAGES) slot_ahead = 0;
        blocks_step<NT>(a_s + slot * A_FLOATS, b_s + slot * B_WORDS, e_s + slot * NT * 8, deep,
                        total, deep_count, bad, row_top);
        if (++slot == STAGES) slot = 0;
        if (++kb == blocks) {  // the tile's last block: its outputs and row flags
            const long long row = tile * TILE_ROWS + warp * 16 + g;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const long long r = row + 8 * (q >> 1);
                    const int col = (nt0 + nt) * 8 + 2 * t + (q & 1);
                    if (r < m && col < n) {
                        const int top = row_top[q >> 1] + col_top[col] - TOP_BIAS;
                        c[r * n + col] = saturate(total[nt][q], top, k_slack);
                    }
                    total[nt][q] = 0.0;
                }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int count = quad_sum(deep_count[r]), flag = quad_sum(bad[r]);
                const int bad_row = (flag != 0) | unresolved(count, k);
                if (bad_row && t == 0 && row + 8 * r < m && blockIdx.x == 0)  // (once a row)
                    flagged_rows[atomicAdd(counts, 1)] = (int)(row + 8 * r);
                deep_count[r] = 0;
                bad[r] = 0;
                row_top[r] = -TOP_BIAS;
            }
            kb = 0;
            tile += gridDim.y;
        }
    }
    copies_wait<0>();
}

// float32 -> float64 in one instruction: cvt without .ftz keeps subnormals, so it is exact.
// (Inline PTX: CuPy compiles with -ftz=true, under which a plain cast is cvt.ftz.f64.f32.
// exact_double's bit assembly also keeps NaN payloads, which in-order sums, written as the
// canonical NaN, never show.)
__device__ __forceinline__ double widen(float x)
{
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(x));
    return d;
}

// bypass.recompute_lines for the rows blocks_rows listed: each entry the float64 sum over k in
// order (each product exact, each sum rounded once: bypass.in_order's sums), NaN canonical.
// Warp w of block b takes items w * blocks + b, ... (striding), so a few items land on as many
// SMs. Two ways, chosen on the device from the count listed:
// * few entries (at most half the grid's warps): a warp per entry, lane j forming
//   the exact product of k-step q + j, staged in shared memory, and the sum taking them in
//   turn (a chain of one add a step; the operands come PREFETCH chunks ahead, as each chunk's
//   chain is shorter than a load);
// * else a warp per (listed row, 32 columns), lane l summing column l: B's entries come
//   straight from global memory (L2), a chunk of 32 k-steps loaded while the previous chunk is
//   summed, the row's entries read a lane each and shuffled out. Its pace: two float32 ->
//   float64 conversions a k-step and lane, for 32 entries at a time.
// H100, two listed rows at 16384 x 16384 x 64: 299 us the second way alone (a block's warps on
// one SM), 125 us now (7.6 ns a k-step); 16 rows 359 -> 158 us; 4096 x 65536 x 64, two rows,
// 1176 -> 482 us; 256 rows (the second way) 353 us either way. On an H200, a warp per entry
// with the products shuffled out took 140 us (the chain waited on each shuffle), 126 staged;
// 16 rows 250 us a warp per entry against 293 the second way spread over SMs.
// (A block per 8 listed rows, staging B in shared memory a load at a time, took 0.6 ms at
// 65536 x 4096 x 64 and 11 ms at 4096 x 65536 x 64 for two listed rows, on an H100: one block
// did it all, waiting on each load.)
__device__ __forceinline__ void bypass_entry(
    const float* __restrict__ row, const float* __restrict__ column, int n, int k,
    float* __restrict__ out, double* __restrict__ slot)  // (slot: the warp's 32 doubles)
{
    constexpr int CHUNK = 32, PREFETCH = 8;
    const int lane = threadIdx.x & 31;
    float x[PREFETCH], y[PREFETCH];  // chunk q0 / CHUNK + d's operands, this lane's k-step
#pragma unroll
    for (int d = 0; d < PREFETCH; ++d) {
        const int q = d * CHUNK + lane;
        x[d] = q < k ? row[q] : 0.0f;
        y[d] = q < k ? column[(long long)q * n] : 0.0f;
    }
    double acc = 0.0;
    for (int q0 = 0; q0 < k; q0 += PREFETCH * CHUNK) {
#pragma unroll
        for (int d = 0; d < PREFETCH; ++d) {
            const int first = q0 + d * CHUNK, ahead = first + PREFETCH * CHUNK + lane;
            const double product = widen(x[d]) * widen(y[d]);  // (exact)
            x[d] = ahead < k ? row[ahead] : 0.0f;
            y[d] = ahead < k ? column[(long long)ahead * n] : 0.0f;
            __syncwarp();
            slot[lane] = product;
            __syncwarp();
            if (first + CHUNK <= k) {
#pragma unroll
                for (int j = 0; j < CHUNK; ++j) acc += slot[j];
            } else {
                for (int j = 0; first + j < k; ++j) acc += slot[j];
            }
        }
    }
    if (lane == 0) *out = canonical(acc);
}

__device__ __forceinline__ void bypass_row_columns(
    const float* __restrict__ row, const float* __restrict__ b, int n, int k, int col,
    float* __restrict__ out_row)
{
    constexpr int CHUNK = 32;
    const int lane = threadIdx.x & 31, whole = k / CHUNK * CHUNK;
    const float* column = b + min(col, n - 1);  // (lanes past n sum a real column, unused)
    float y[CHUNK], x = 0.0f;  // the next whole chunk's B entries (this lane's column), A's
    if (whole) {
#pragma unroll
        for (int j = 0; j < CHUNK; ++j) y[j] = column[(long long)j * n];
        x = row[lane];
    }
    double acc = 0.0;
    for (int q0 = 0; q0 < whole; q0 += CHUNK) {
        float y_here[CHUNK];
#pragma unroll
        for (int j = 0; j < CHUNK; ++j) y_here[j] = y[j];
        const float x_here = x;
        if (q0 + CHUNK < whole) {
#pragma unroll
            for (int j = 0; j < CHUNK; ++j) y[j] = column[(long long)(q0 + CHUNK + j) * n];
            x = row[q0 + CHUNK + lane];
        }
#pragma unroll
        for (int j = 0; j < CHUNK; ++j)
            acc = fma(widen(__shfl_sync(0xffffffffu, x_here, j)), widen(y_here[j]), acc);
    }
    x = whole + lane < k ? row[whole + lane] : 0.0f;
    for (int j = 0; whole + j < k; ++j)  // (the last k % 32 steps)
        acc = fma(widen(__shfl_sync(0xffffffffu, x, j)),
                  widen(column[(long long)(whole + j) * n]), acc);
    if (col < n) out_row[col] = canonical(acc);
}

extern "C" __global__ void __launch_bounds__(BLOCKS_BYPASS_THREADS) blocks_bypass_rows(
    const int* __restrict__ rows, const int* __restrict__ count, const float* __restrict__ a,
    const float* __restrict__ b, int n, int k, float* __restrict__ c)
{
    constexpr int WARPS = BLOCKS_BYPASS_THREADS / 32;
    const long long warps = (long long)gridDim.x * WARPS, listed = *count;
    const long long warp = (threadIdx.x >> 5) * gridDim.x + blockIdx.x;  // (items over SMs first)
    __shared__ double staged[WARPS][32];
    if (listed * n * 2 <= warps) {  // (uniform over the grid)
        for (long long item = warp; item < listed * n; item += warps) {
            const long long r = rows[item / n];
            const int col = (int)(item % n);
            bypass_entry(a + r * k, b + col, n, k, c + r * n + col, staged[threadIdx.x >> 5]);
        }
        return;
    }
    const int groups = (n + 31) / 32;
    for (long long item = warp; item < listed * groups; item += warps) {
        const long long r = rows[item / groups];  // (uniform over the warp: shuffles below)
        bypass_row_columns(a + r * k, b, n, k, (int)(item % groups) * 32 + (threadIdx.x & 31),
                           c + r * n);
    }
}

// "auto"'s early look at A (iv_blocks.blocks_product): a block of threads per sampled row
// (one row in each run of stride rows, the last maybe shorter, at a hashed offset: evenly
// spaced rows would see only the wide rows of data with that period, or none), its warps
// taking every eighth block of 64 k-steps, two entries a lane, counts into *unresolved_rows
// the sampled rows whose deep entries (each against its block's scale, as the rows kernel
// counts them) make them unresolved; NaN/Inf entries count as 0, as in the packers. (A warp
// per row, walking k alone, took 0.15 ms at k = 16384.)
extern "C" __global__ void __launch_bounds__(256) blocks_sample_rows(
    const float* __restrict__ a, long long m, int k, long long stride, int deep,
    int* __restrict__ unresolved_rows)
{
    static_assert(BK == 64, "a warp's 32 lanes take a block two entries each");
    __shared__ int warp_count[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long start = blockIdx.x * stride, run = min(stride, m - start);
    unsigned long long hash = (blockIdx.x + 1ull) * 0x9e3779b97f4a7c15ull;  // (sampled_rows)
    hash ^= hash >> 29;
    const float* row = a + (start + (long long)(hash % (unsigned long long)run)) * k;
    int count = 0;
    for (int q0 = warp * BK; q0 < k; q0 += 8 * BK) {
        float v[2];
        unsigned int top = 0u;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int q = q0 + lane + 32 * i;
            v[i] = q < k ? row[q] : 0.0f;
            const unsigned int bits = magnitude_bits(v[i]);
            if (bits < 0x7f800000u) top = max(top, bits); else v[i] = 0.0f;
        }
        for (int offset = 16; offset > 0; offset >>= 1)
            top = max(top, __shfl_xor_sync(0xffffffffu, top, offset));
        const BlockScale scale = block_scale(block_exponent(top), deep);
#pragma unroll
        for (int i = 0; i < 2; ++i) count += magnitude_bits(v[i]) - 1u < scale.floor_bits - 1u;
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        count += __shfl_xor_sync(0xffffffffu, count, offset);
    if (lane == 0) warp_count[warp] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int w = 0; w < 8; ++w) total += warp_count[w];
        if (unresolved(total, k)) atomicAdd(unresolved_rows, 1);
    }
}

// ... and for the columns blocks_pack_b listed: a thread per row of A walks k in order for
// COLUMNS listed columns at a time, its warp's 32 rows staged a chunk of k at a time (coalesced
// copies), the chunk of B's listed columns as doubles. A flagged column costs m k products,
// where bypass_lines would compute the 64 columns of its tile.
__device__ __forceinline__ void bypass_columns_impl(
    const int* __restrict__ columns, const int* __restrict__ count, const float* __restrict__ a,
    const float* __restrict__ b, long long m, int n, int k, float* __restrict__ c)
{
    constexpr int CHUNK = 32, COLUMNS = 8, WARPS = BLOCKS_BYPASS_THREADS / 32;
    __shared__ float a_s[WARPS][32][CHUNK + 1];  // [warp][row][k]: a lane reads its own row
    __shared__ double b_s[CHUNK][COLUMNS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, listed = *count;
    for (long long row0 = blockIdx.x * 32LL * WARPS; row0 < m; row0 += gridDim.x * 32LL * WARPS) {
        const long long first = row0 + 32 * warp, r = first + lane;  // (uniform loop bounds)
        for (int g0 = 0; g0 < listed; g0 += COLUMNS) {
            const int live = min(COLUMNS, listed - g0);
            double acc[COLUMNS];
#pragma unroll
            for (int j = 0; j < COLUMNS; ++j) acc[j] = 0.0;
            for (int q0 = 0; q0 < k; q0 += CHUNK) {
                __syncthreads();  // the previous chunk is read
                if (threadIdx.x < CHUNK * COLUMNS) {
                    const int q = q0 + threadIdx.x / COLUMNS, j = threadIdx.x % COLUMNS;
                    const bool inside = q < k && j < live;
                    b_s[threadIdx.x / COLUMNS][j] =
                        inside ? exact_double(b[(long long)q * n + columns[g0 + j]]) : 0.0;
                }
#pragma unroll 8
                for (int i = 0; i < 32; ++i)
                    a_s[warp][i][lane] =
                        first + i < m && q0 + lane < k ? a[(first + i) * k + q0 + lane] : 0.0f;
                __syncthreads();
                const int depth = min(CHUNK, k - q0);  // (no padded steps)
                for (int q = 0; q < depth; ++q) {
                    const double x = exact_double(a_s[warp][lane][q]);
#pragma unroll
                    for (int j = 0; j < COLUMNS; ++j)
                        if (j < live) acc[j] = fma(x, b_s[q][j], acc[j]);
                }
            }
            if (r < m)
#pragma unroll
                for (int j = 0; j < COLUMNS; ++j)
                    if (j < live) c[r * n + columns[g0 + j]] = canonical(acc[j]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(BLOCKS_BYPASS_THREADS) blocks_bypass_columns(
    const int* columns, const int* count, const float* a, const float* b, long long m, int n,
    int k, float* c)
{
    bypass_columns_impl(columns, count, a, b, m, n, k, c);
}

// The rows kernels, one per shape of BLOCKS_SHAPES and BLOCKS_BUSY_SHAPES (the launchers' tables,
// from geometry.py: n-tiles a block, stages, blocks an SM), each with 4- and 16-byte copies of A
// (_vec). CuPy's RawModule looks kernels up by name.
#define BLOCKS_ROWS_ENTRY(NT, BUSY, STAGES, MIN_BLOCKS, SUFFIX, VEC)                               \
extern "C" __global__ void __launch_bounds__(BLOCKS_THREADS, MIN_BLOCKS)                           \
blocks_rows_##NT##BUSY##SUFFIX(                                                                    \
    const float* a, long long m, int k, int n, int n_tiles, const unsigned int* fragments,         \
    const int* exps, const int* col_top, int deep, double k_slack, float* c, int* flagged_rows,    \
    int* counts, double give_up_share, double give_up_entries, double rows_per_sample)             \
{                                                                                                  \
    blocks_rows_impl<NT, VEC, STAGES>(a, m, k, n, n_tiles, fragments, exps, col_top, deep,         \
                                      k_slack, c, flagged_rows, counts, give_up_share,             \
                                      give_up_entries, rows_per_sample);                           \
}
#define BLOCKS_ROWS(NT, STAGES, MIN_BLOCKS)                                                        \
    BLOCKS_ROWS_ENTRY(NT, , STAGES, MIN_BLOCKS, , false)                                           \
    BLOCKS_ROWS_ENTRY(NT, , STAGES, MIN_BLOCKS, _vec, true)
#define BLOCKS_ROWS_BUSY(NT, STAGES, MIN_BLOCKS)                                                   \
    BLOCKS_ROWS_ENTRY(NT, _busy, STAGES, MIN_BLOCKS, , false)                                      \
    BLOCKS_ROWS_ENTRY(NT, _busy, STAGES, MIN_BLOCKS, _vec, true)
BLOCKS_SHAPES(BLOCKS_ROWS)
BLOCKS_BUSY_SHAPES(BLOCKS_ROWS_BUSY)
#undef BLOCKS_ROWS_ENTRY
#undef BLOCKS_ROWS
#undef BLOCKS_ROWS_BUSY

#undef BK
#undef BSL
#undef MAX_SUM
#undef STEPS
#undef ROW_STRIDE
#undef TILE_ROWS
#undef FRAGMENT_WORDS
#undef TOP_BIAS

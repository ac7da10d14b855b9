// Tall products in level fp32-ordered's order (TSM2R's shape: many rows of A, few columns of
// B; launched from fp32_ordered.py): one thread per (row of A, group of G columns) runs the row's
// G dot products as G FMA chains in k order. Each warp copies its next tile of 32 rows x one chunk
// of A into shared memory asynchronously (cp.async; 16-byte copies where k is a multiple of 4 and
// A is aligned) while it works on the current tile, whose rows its lanes read 4 steps at a time; a
// slab of B's rows sits in shared memory and every thread reads the same address (broadcast).
// Blocks of one row block run their column groups one after another (grid x = group), so A comes
// from DRAM once for n <= G and from L2 for the other groups. (Two threads per row, halving each
// one's registers, measured slower in a probe: 0.91x against 1.32x SGEMM at 65536 x 4096 x 16.)

#include "device.cuh"
#include "ordered.cuh"

template <int G>
__device__ __forceinline__ void rows_step(float x, const float* b_row, float (&acc)[G])
{
#pragma unroll
    for (int j = 0; j < G; j += 4) {
        const float4 y = *reinterpret_cast<const float4*>(b_row + j);
        acc[j] = fma_ieee(x, y.x, acc[j]);
        acc[j + 1] = fma_ieee(x, y.y, acc[j + 1]);
        acc[j + 2] = fma_ieee(x, y.z, acc[j + 2]);
        acc[j + 3] = fma_ieee(x, y.w, acc[j + 3]);
    }
}

template <int G>
__device__ __forceinline__ void rows_flush(float (&acc)[G], double (&total)[G])
{
#pragma unroll
    for (int j = 0; j < G; ++j) {
        total[j] = total[j] + widen_ieee(acc[j]);
        acc[j] = 0.0f;
    }
}

// The warp's tile of rows row0.. row0 + 31 and k-steps q0.. q0 + 31, copied asynchronously
// (cp.async: no registers held) into tile[row][q], zeros past m and k. VEC: lane l copies 16
// bytes (4 steps) of rows 4 i + l / 8 (k % 4 == 0, A 16-byte aligned); else lane l copies
// step q0 + l of every row.
template <bool VEC, int W>
__device__ __forceinline__ void rows_copy(const float* __restrict__ a, long long m, int k,
                                          long long row0, int q0, int lane, float (*tile)[W])
{
    if constexpr (VEC) {
        const int q = (lane & 7) * 4;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = 4 * i + (lane >> 3);
            const bool inside = row0 + r < m && q0 + q < k;
            copy_async<16>(&tile[r][q], inside ? a + (row0 + r) * k + q0 + q : a, inside);
        }
    } else {
        const bool step_inside = q0 + lane < k;
#pragma unroll 8
        for (int r = 0; r < 32; ++r) {
            const bool inside = row0 + r < m && step_inside;
            copy_async<4>(&tile[r][lane], inside ? a + (row0 + r) * k + q0 + lane : a, inside);
        }
    }
    copies_commit();
}

template <int G, bool SEGMENTS, bool VEC>
__device__ __forceinline__ void ordered_rows_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k,
    float* __restrict__ c)
{
    constexpr int KS = 128, CH = ORDERED_CHUNK, W = CH + 4;  // B's k-steps per slab
    static_assert(CH == 32, "a tile is 32 rows x one chunk");
    static_assert(ORDERED_SEGMENT % KS == 0 && KS % CH == 0, "segments end with a slab");
    constexpr int WARPS = ROWS_THREADS / 32;
    __shared__ __align__(16) float b_s[KS][G];
    // [warp][buffer][row][q]: two tiles per warp, the next one arriving while the warp works
    // on this one. Rows of W = 36 floats keep 16-byte copies aligned, and each quarter warp's
    // 16-byte reads of its own rows (stride 36 words) on distinct banks.
    __shared__ __align__(16) float a_s[WARPS][2][32][W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c0 = blockIdx.x * G;
    for (long long block_row = (long long)blockIdx.y * ROWS_THREADS; block_row < m;
         block_row += (long long)gridDim.y * ROWS_THREADS) {  // grid y: at most 65535
        const long long row0 = block_row + warp * 32;
        float acc[G];
        double total[G], segment[G];  // segment: SEGMENTS only (k may exceed a segment)
#pragma unroll
        for (int j = 0; j < G; ++j) { acc[j] = 0.0f; total[j] = 0.0; segment[j] = 0.0; }
        __syncwarp();  // the previous row block's last tile is read
        rows_copy<VEC, W>(a, m, k, row0, 0, lane, a_s[warp][0]);
        int chunk = 0;
        for (int s0 = 0; s0 < k; s0 += KS) {
            const int depth = min(KS, k - s0);
            __syncthreads();  // the previous slab is read
            for (int i = threadIdx.x; i < KS * G; i += blockDim.x) {
                const int q = i / G, j = i % G;
                b_s[q][j] = (q < depth && c0 + j < n) ? b[(long long)(s0 + q) * n + c0 + j] : 0.0f;
            }
            __syncthreads();
            for (int t0 = 0; t0 < depth; t0 += CH, ++chunk) {  // a tile of 32 rows x CH steps
                const int steps = min(CH, depth - t0);
                __syncwarp();  // the other buffer's tile is read: it may be overwritten
                if (s0 + t0 + CH < k)
                    rows_copy<VEC, W>(a, m, k, row0, s0 + t0 + CH, lane,
                                      a_s[warp][(chunk + 1) & 1]);
                else
                    copies_commit();  // (an empty group: the same waits)
                copies_wait<1>();  // this chunk's tile has landed
                __syncwarp();  // ... for every lane's copies
                const float* a_row = a_s[warp][chunk & 1][lane];
                const float* b_chunk = b_s[t0];
                if (steps == CH) {  // a whole chunk: 16-byte reads of 4 steps, unrolled
#pragma unroll 2
                    for (int t = 0; t < CH; t += 4) {
                        const float4 x = *reinterpret_cast<const float4*>(a_row + t);
                        rows_step<G>(x.x, b_chunk + t * G, acc);
                        rows_step<G>(x.y, b_chunk + (t + 1) * G, acc);
                        rows_step<G>(x.z, b_chunk + (t + 2) * G, acc);
                        rows_step<G>(x.w, b_chunk + (t + 3) * G, acc);
                    }
                } else {
                    for (int t = 0; t < steps; ++t) rows_step<G>(a_row[t], b_chunk + t * G, acc);
                }
                rows_flush<G>(acc, SEGMENTS ? segment : total);  // each tile is one chunk
            }
            if (SEGMENTS && ((s0 + KS) % ORDERED_SEGMENT == 0 || s0 + KS >= k)) {
#pragma unroll
                for (int j = 0; j < G; ++j) {  // a segment ends: its total joins, in order
                    total[j] = total[j] + segment[j];
                    segment[j] = 0.0;
                }
            }
        }
        copies_wait<0>();
        if (row0 + lane < m) {
#pragma unroll
            for (int j = 0; j < G; ++j)
                if (c0 + j < n) c[(row0 + lane) * n + c0 + j] = canonical(total[j]);
        }
    }
}
// The exported kernels, one per column group G (4, 8 or 16: ROWS_MAX_GROUP is the widest), k
// within one segment or not, 4- or 16-byte copies of A (_vec):
#define ORDERED_ROWS_ENTRY(G, MIN_BLOCKS, SUFFIX, SEGMENTS, VEC_SUFFIX, VEC)                       \
extern "C" __global__ void __launch_bounds__(ROWS_THREADS, MIN_BLOCKS)                             \
ordered_rows_##G##SUFFIX##VEC_SUFFIX(                                                              \
    const float* a, const float* b, int m, int n, int k, float* c)                                 \
{                                                                                                  \
    ordered_rows_impl<G, SEGMENTS, VEC>(a, b, m, n, k, c);                                         \
}
#define ORDERED_ROWS(G, MIN_BLOCKS)                                                                \
    ORDERED_ROWS_ENTRY(G, MIN_BLOCKS, , false, , false)                                            \
    ORDERED_ROWS_ENTRY(G, MIN_BLOCKS, , false, _vec, true)                                         \
    ORDERED_ROWS_ENTRY(G, MIN_BLOCKS, _segments, true, , false)                                    \
    ORDERED_ROWS_ENTRY(G, MIN_BLOCKS, _segments, true, _vec, true)
ORDERED_ROWS(4, 4)
ORDERED_ROWS(8, 4)
ORDERED_ROWS(16, 4)
#undef ORDERED_ROWS_ENTRY
#undef ORDERED_ROWS
